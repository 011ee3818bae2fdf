//! `CUDA_VISIBLE_DEVICES`: parsing, and limiting and ordering an inventory the way CUDA does.

use std::fmt;

use crate::{DeviceId, DeviceInfo, Result, invalid_value_err};

const WHAT: &str = "CUDA_VISIBLE_DEVICES";

/// A parsed `CUDA_VISIBLE_DEVICES`: a list of NVML indices and/or UUIDs (unique prefixes are
/// enough), in the order the process should see them.
///
/// Unlike CUDA, which silently truncates the list at the first entry it cannot resolve, a bad
/// entry is an error that names it: a GPU engine that quietly sees fewer devices than its
/// operator meant is worse than one that refuses to start. `""` and `-1` hide every device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisibleDevices {
    entries: Vec<DeviceId>,
}

impl VisibleDevices {
    /// Parses the variable's value.
    pub fn parse(text: &str) -> Result<Self> {
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed == "-1" {
            return Ok(Self {
                entries: Vec::new(),
            });
        }
        let mut entries: Vec<DeviceId> = Vec::new();
        for raw in trimmed.split(',') {
            let entry = raw.trim();
            if entry.starts_with("MIG-") {
                return Err(invalid_value_err!(
                    WHAT,
                    "{entry:?} is a MIG instance; accelsql schedules whole GPUs, so name the GPU by index or GPU-UUID"
                ));
            }
            let id = DeviceId::parse(entry).ok_or_else(|| {
                invalid_value_err!(
                    WHAT,
                    "{entry:?} in {text:?} is neither a device index nor a GPU UUID; \
                     write e.g. CUDA_VISIBLE_DEVICES=0,2 or CUDA_VISIBLE_DEVICES=GPU-6f3c1b2a"
                )
            })?;
            if entries.contains(&id) {
                return Err(invalid_value_err!(
                    WHAT,
                    "{entry:?} is listed twice in {text:?}"
                ));
            }
            entries.push(id);
        }
        Ok(Self { entries })
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[DeviceId] {
        &self.entries
    }

    /// Keeps the devices the entries name, in the entries' order. An entry that names no device,
    /// or a UUID prefix that names several, is an error.
    pub fn apply(&self, devices: Vec<DeviceInfo>) -> Result<Vec<DeviceInfo>> {
        let mut visible: Vec<DeviceInfo> = Vec::with_capacity(self.entries.len());
        for id in &self.entries {
            let mut hits = devices.iter().filter(|d| id.matches(d));
            let device = hits.next().ok_or_else(|| {
                let present: Vec<String> = devices
                    .iter()
                    .map(|d| format!("{} {}", d.index, d.uuid))
                    .collect();
                invalid_value_err!(
                    WHAT,
                    "{id} names no device; present: {}",
                    if present.is_empty() {
                        "none".to_string()
                    } else {
                        present.join(", ")
                    }
                )
            })?;
            if hits.next().is_some() {
                return Err(invalid_value_err!(
                    WHAT,
                    "{id} matches several devices; give more of the UUID"
                ));
            }
            if visible.iter().any(|v| v.uuid == device.uuid) {
                return Err(invalid_value_err!(
                    WHAT,
                    "{id} names GPU {} a second time",
                    device.index
                ));
            }
            visible.push(device.clone());
        }
        Ok(visible)
    }
}

impl fmt::Display for VisibleDevices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.entries.iter().map(ToString::to_string).collect();
        write!(f, "{}", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::simulated_device;

    fn four() -> Vec<DeviceInfo> {
        (0..4).map(simulated_device).collect()
    }

    fn indices(v: &[DeviceInfo]) -> Vec<u32> {
        v.iter().map(|d| d.index).collect()
    }

    #[test]
    fn indices_limit_and_order() {
        let v = VisibleDevices::parse("3, 1").unwrap();
        assert_eq!(indices(&v.apply(four()).unwrap()), vec![3, 1]);
        assert_eq!(v.to_string(), "3,1");
    }

    #[test]
    fn uuids_and_prefixes_work_and_mix_with_indices() {
        let d = four();
        let text = format!("{},0,{}", d[2].uuid, &d[3].uuid[4..]);
        let v = VisibleDevices::parse(&text).unwrap();
        assert_eq!(indices(&v.apply(four()).unwrap()), vec![2, 0, 3]);
    }

    #[test]
    fn empty_and_minus_one_hide_everything() {
        for text in ["", "  ", "-1"] {
            assert!(
                VisibleDevices::parse(text)
                    .unwrap()
                    .apply(four())
                    .unwrap()
                    .is_empty()
            );
        }
    }

    #[test]
    fn bad_values_are_clear_errors() {
        for (text, needle) in [
            ("0,zero", "neither a device index nor a GPU UUID"),
            ("1,1", "listed twice"),
            ("0,,1", "neither"),
            ("MIG-1234", "MIG instance"),
            ("-2", "neither"),
        ] {
            let e = VisibleDevices::parse(text).unwrap_err();
            assert_eq!(e.code(), "22G01");
            assert!(e.to_string().contains(needle), "{text}: {e}");
            assert!(e.to_string().contains("CUDA_VISIBLE_DEVICES"), "{e}");
        }
    }

    #[test]
    fn entries_that_name_no_device_are_errors() {
        let e = VisibleDevices::parse("7")
            .unwrap()
            .apply(four())
            .unwrap_err();
        assert!(e.to_string().contains("7 names no device"), "{e}");
        // A prefix shared by all simulated UUIDs is ambiguous.
        let e = VisibleDevices::parse("GPU-5131a7ed")
            .unwrap()
            .apply(four())
            .unwrap_err();
        assert!(e.to_string().contains("several devices"), "{e}");
        // An index and the same device's UUID.
        let text = format!("0,{}", four()[0].uuid);
        let e = VisibleDevices::parse(&text)
            .unwrap()
            .apply(four())
            .unwrap_err();
        assert!(e.to_string().contains("a second time"), "{e}");
    }
}
