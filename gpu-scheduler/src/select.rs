//! Device selection: gpuselect's filters plus free memory and a custom predicate, with a report
//! that says which filter rejected each device.

use std::fmt;
use std::sync::Arc;

use crate::units::format_bytes;
use crate::{DeviceId, DeviceInfo, Result, SchedulerError};

/// A user-supplied device test, with a name for reports.
#[derive(Clone)]
pub(crate) struct Predicate {
    name: String,
    test: Arc<dyn Fn(&DeviceInfo) -> bool + Send + Sync>,
}

impl fmt::Debug for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Predicate({})", self.name)
    }
}

/// Which devices may be chosen. Every set field must hold; unset fields accept every device.
///
/// ```
/// use accelsql_gpu_scheduler::{DeviceFilter, Inventory};
///
/// let devices = Inventory::simulated(4).devices().unwrap();
/// let chosen = DeviceFilter::new()
///     .min_free_memory(4 << 30)
///     .max_utilization(50)
///     .select(&devices, 2)
///     .unwrap();
/// assert_eq!(chosen.len(), 2);
/// ```
#[derive(Debug, Clone, Default)]
pub struct DeviceFilter {
    name: Option<String>,
    ids: Option<Vec<DeviceId>>,
    max_utilization: Option<u32>,
    max_memory_utilization: Option<u32>,
    max_processes: Option<u32>,
    min_free_memory: Option<u64>,
    predicate: Option<Predicate>,
}

impl DeviceFilter {
    /// A filter that accepts every device.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only devices whose name contains `needle` (case-insensitive), e.g. `"H100"`.
    pub fn name_contains(mut self, needle: impl Into<String>) -> Self {
        self.name = Some(needle.into());
        self
    }

    /// Only the devices named here (indices or UUID prefixes).
    pub fn ids(mut self, ids: impl IntoIterator<Item = DeviceId>) -> Self {
        self.ids = Some(ids.into_iter().collect());
        self
    }

    /// Only devices at or under this GPU utilization, percent.
    pub fn max_utilization(mut self, percent: u32) -> Self {
        self.max_utilization = Some(percent);
        self
    }

    /// Only devices at or under this memory-controller utilization, percent.
    pub fn max_memory_utilization(mut self, percent: u32) -> Self {
        self.max_memory_utilization = Some(percent);
        self
    }

    /// Only devices running at most this many compute processes.
    pub fn max_processes(mut self, count: u32) -> Self {
        self.max_processes = Some(count);
        self
    }

    /// Only devices with at least this many bytes of free memory.
    pub fn min_free_memory(mut self, bytes: u64) -> Self {
        self.min_free_memory = Some(bytes);
        self
    }

    /// Only devices for which `test` returns true; `name` appears in rejection reports.
    pub fn predicate(
        mut self,
        name: impl Into<String>,
        test: impl Fn(&DeviceInfo) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.predicate = Some(Predicate {
            name: name.into(),
            test: Arc::new(test),
        });
        self
    }

    /// `Ok(())` if `device` passes every filter, else the first filter that rejects it, in words.
    pub fn check(&self, device: &DeviceInfo) -> std::result::Result<(), String> {
        if let Some(needle) = &self.name
            && !device.name.to_lowercase().contains(&needle.to_lowercase())
        {
            return Err(format!(
                "name {:?} does not contain {needle:?}",
                device.name
            ));
        }
        if let Some(ids) = &self.ids
            && !ids.iter().any(|id| id.matches(device))
        {
            let names: Vec<String> = ids.iter().map(ToString::to_string).collect();
            return Err(format!(
                "not among the requested ids [{}]",
                names.join(", ")
            ));
        }
        bound("utilization", device.utilization, self.max_utilization, "%")?;
        bound(
            "memory utilization",
            device.memory_utilization,
            self.max_memory_utilization,
            "%",
        )?;
        bound(
            "compute processes",
            device.processes,
            self.max_processes,
            "",
        )?;
        if let Some(min) = self.min_free_memory
            && device.memory_free < min
        {
            let (free, min) = (format_bytes(device.memory_free), format_bytes(min));
            return Err(format!("free memory {free} < min {min}"));
        }
        if let Some(p) = &self.predicate
            && !(p.test)(device)
        {
            return Err(format!("rejected by predicate {:?}", p.name));
        }
        Ok(())
    }

    /// The devices that pass, in inventory order.
    pub fn matching(&self, devices: &[DeviceInfo]) -> Vec<DeviceInfo> {
        devices
            .iter()
            .filter(|d| self.check(d).is_ok())
            .cloned()
            .collect()
    }

    /// The first `count` devices that pass, or [`SchedulerError::NotEnoughDevices`] with one line
    /// per device saying whether it matched or which filter rejected it.
    pub fn select(&self, devices: &[DeviceInfo], count: usize) -> Result<Vec<DeviceInfo>> {
        let matching = self.matching(devices);
        if matching.len() >= count {
            return Ok(matching.into_iter().take(count).collect());
        }
        Err(SchedulerError::NotEnoughDevices {
            requested: count,
            matched: matching.len(),
            present: devices.len(),
            report: self.report(devices),
        })
    }

    /// One line per device: `  GPU 0 (name, uuid): matches` or `…: rejected: <reason>`.
    pub fn report(&self, devices: &[DeviceInfo]) -> String {
        if devices.is_empty() {
            return "  (no devices present)".into();
        }
        devices
            .iter()
            .map(|d| match self.check(d) {
                Ok(()) => format!("  {}: matches", d.label()),
                Err(why) => format!("  {}: rejected: {why}", d.label()),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn bound(
    what: &str,
    value: Option<u32>,
    max: Option<u32>,
    unit: &str,
) -> std::result::Result<(), String> {
    match (value, max) {
        (_, None) => Ok(()),
        (None, Some(max)) => Err(format!("{what} unknown (max {max}{unit} requested)")),
        (Some(v), Some(max)) if v > max => Err(format!("{what} {v}{unit} > max {max}{unit}")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::simulated_device;

    fn fleet() -> Vec<DeviceInfo> {
        let mut d: Vec<DeviceInfo> = (0..4).map(simulated_device).collect();
        d[0].name = "NVIDIA A100".into();
        d[1].utilization = Some(95);
        d[2].memory_free = 1 << 30;
        d[3].processes = Some(3);
        d[3].memory_utilization = Some(70);
        d
    }

    fn indices(v: &[DeviceInfo]) -> Vec<u32> {
        v.iter().map(|d| d.index).collect()
    }

    #[test]
    fn each_filter_rejects_what_it_should() {
        let d = fleet();
        assert_eq!(indices(&DeviceFilter::new().matching(&d)), vec![0, 1, 2, 3]);
        assert_eq!(
            indices(&DeviceFilter::new().name_contains("a100").matching(&d)),
            vec![0]
        );
        assert_eq!(
            indices(&DeviceFilter::new().max_utilization(50).matching(&d)),
            vec![0, 2, 3]
        );
        assert_eq!(
            indices(&DeviceFilter::new().min_free_memory(4 << 30).matching(&d)),
            vec![0, 1, 3]
        );
        assert_eq!(
            indices(&DeviceFilter::new().max_processes(0).matching(&d)),
            vec![0, 1, 2]
        );
        assert_eq!(
            indices(&DeviceFilter::new().max_memory_utilization(50).matching(&d)),
            vec![0, 1, 2]
        );
        let by_id =
            DeviceFilter::new().ids([DeviceId::Index(2), DeviceId::Uuid(d[3].uuid.clone())]);
        assert_eq!(indices(&by_id.matching(&d)), vec![2, 3]);
        let even = DeviceFilter::new().predicate("even index", |d| d.index % 2 == 0);
        assert_eq!(indices(&even.matching(&d)), vec![0, 2]);
    }

    #[test]
    fn filters_combine() {
        let f = DeviceFilter::new()
            .max_utilization(50)
            .min_free_memory(4 << 30)
            .max_processes(1);
        assert_eq!(indices(&f.select(&fleet(), 1).unwrap()), vec![0]);
    }

    #[test]
    fn unknown_readings_fail_bounds() {
        let mut d = fleet();
        d[0].utilization = None;
        let reason = DeviceFilter::new()
            .max_utilization(50)
            .check(&d[0])
            .unwrap_err();
        assert!(reason.contains("utilization unknown"), "{reason}");
    }

    #[test]
    fn too_few_matches_report_every_device_and_its_filter() {
        let f = DeviceFilter::new()
            .max_utilization(50)
            .min_free_memory(4 << 30);
        let e = f.select(&fleet(), 3).unwrap_err();
        assert_eq!(e.code(), "53G01");
        let text = e.to_string();
        assert!(
            text.contains("3 GPU(s) requested but 2 of 4 matched"),
            "{text}"
        );
        assert!(text.contains("GPU 0 (NVIDIA A100"), "{text}");
        assert!(text.contains("GPU 1 (accelsql simulated GPU"), "{text}");
        assert!(
            text.contains("rejected: utilization 95% > max 50%"),
            "{text}"
        );
        assert!(
            text.contains("rejected: free memory 1.0 GiB < min 4.0 GiB"),
            "{text}"
        );
        assert_eq!(text.matches(": matches").count(), 2, "{text}");
    }

    #[test]
    fn no_devices_at_all_is_said_plainly() {
        let e = DeviceFilter::new().select(&[], 1).unwrap_err();
        assert!(e.to_string().contains("0 of 0 matched"), "{e}");
        assert!(e.to_string().contains("no devices present"), "{e}");
    }

    #[test]
    fn count_zero_selects_nothing() {
        assert!(DeviceFilter::new().select(&fleet(), 0).unwrap().is_empty());
    }
}
