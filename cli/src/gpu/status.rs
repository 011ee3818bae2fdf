//! `accelsql gpu status`: the inventory as a table (like gpuselect's `gpustatus`) or as JSON.

use std::fmt::Write as _;

use accelsql_gpu_scheduler::units::format_bytes;
use accelsql_gpu_scheduler::{DeviceLockDir, Inventory, InventoryReport, SchedulerConfig};
use clap::Args;

use super::args::LockDirArg;
use crate::error::CliError;

/// Options of `accelsql gpu status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    lock_dir: LockDirArg,
}

/// Prints the inventory.
pub(crate) fn status(config: &SchedulerConfig, args: &StatusArgs) -> Result<(), CliError> {
    let report = Inventory::from_config(config)?.report()?;
    let lock_path = args.lock_dir.resolve(config);
    // Only look at locks where the directory exists: status never creates it.
    let locks = lock_path
        .is_dir()
        .then(|| DeviceLockDir::open(&lock_path))
        .transpose()?;
    let locked_by: Vec<Option<String>> = report
        .devices
        .iter()
        .map(|d| {
            locks
                .as_ref()
                .map(|l| l.locked_by(&d.uuid))
                .transpose()
                .map(Option::flatten)
        })
        .collect::<Result<_, _>>()?;
    let text = if args.json {
        to_json(&report, &locked_by, locks.as_ref())?
    } else {
        to_table(&report, &locked_by)
    };
    print!("{text}");
    Ok(())
}

fn to_json(
    report: &InventoryReport,
    locked_by: &[Option<String>],
    locks: Option<&DeviceLockDir>,
) -> Result<String, CliError> {
    let mut value = serde_json::to_value(report).map_err(|e| CliError::Output(e.to_string()))?;
    if let Some(devices) = value.get_mut("devices").and_then(|d| d.as_array_mut()) {
        for (device, holder) in devices.iter_mut().zip(locked_by) {
            if let Some(obj) = device.as_object_mut() {
                obj.insert("locked_by".into(), holder.clone().into());
            }
        }
    }
    if let Some(obj) = value.as_object_mut() {
        obj.insert(
            "lock_dir".into(),
            locks.map(|l| l.path().display().to_string()).into(),
        );
    }
    let mut text =
        serde_json::to_string_pretty(&value).map_err(|e| CliError::Output(e.to_string()))?;
    text.push('\n');
    Ok(text)
}

fn to_table(report: &InventoryReport, locked_by: &[Option<String>]) -> String {
    let mut out = String::new();
    let driver = report.driver_version.as_deref().unwrap_or("unknown");
    let _ = write!(out, "backend: {}, driver: {driver}", report.backend);
    if let Some(v) = &report.visible_devices {
        let _ = write!(out, ", CUDA_VISIBLE_DEVICES={v}");
    }
    let _ = writeln!(out, ", {} GPU(s)", report.devices.len());
    if let Some(note) = &report.note {
        let _ = writeln!(out, "note: {note}");
    }
    if report.devices.is_empty() {
        return out;
    }
    let header = [
        "IDX",
        "NAME",
        "UUID",
        "MEMORY USED/TOTAL",
        "UTIL",
        "MEM UTIL",
        "PROCS",
        "TEMP",
        "POWER",
        "LOCKED BY",
    ];
    let opt =
        |v: Option<u32>, unit: &str| v.map_or_else(|| "-".to_string(), |v| format!("{v}{unit}"));
    let rows: Vec<Vec<String>> = report
        .devices
        .iter()
        .zip(locked_by)
        .map(|(d, holder)| {
            vec![
                d.index.to_string(),
                d.name.clone(),
                d.uuid.clone(),
                format!(
                    "{} / {}",
                    format_bytes(d.memory_used()),
                    format_bytes(d.memory_total)
                ),
                opt(d.utilization, "%"),
                opt(d.memory_utilization, "%"),
                opt(d.processes, ""),
                opt(d.temperature_c, "C"),
                d.power_w
                    .map_or_else(|| "-".to_string(), |w| format!("{w:.0}W")),
                holder.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for row in &rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(n: usize) -> InventoryReport {
        Inventory::simulated(n).report().unwrap()
    }

    #[test]
    fn table_has_a_row_per_device_and_shows_lock_holders() {
        let table = to_table(&report(2), &[None, Some("pid 7 statement 3".into())]);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("backend: simulated"), "{table}");
        assert!(lines[1].starts_with("IDX  NAME"), "{table}");
        assert_eq!(lines.len(), 4, "{table}");
        assert!(
            lines[2].starts_with("0    accelsql simulated GPU"),
            "{table}"
        );
        assert!(lines[3].ends_with("pid 7 statement 3"), "{table}");
        assert!(lines[2].contains("0 B / 80.0 GiB"), "{table}");
    }

    #[test]
    fn zero_devices_print_the_reason() {
        let table = to_table(&report(0), &[]);
        assert!(
            table.contains("0 GPU(s)") && table.contains("note:"),
            "{table}"
        );
    }

    #[test]
    fn json_carries_every_reading() {
        let text = to_json(&report(1), &[None], None).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["backend"], "simulated");
        let d = &v["devices"][0];
        for key in [
            "index",
            "uuid",
            "name",
            "memory_total",
            "memory_free",
            "utilization",
            "memory_utilization",
            "processes",
            "temperature_c",
            "power_w",
            "locked_by",
        ] {
            assert!(d.get(key).is_some(), "missing {key}: {text}");
        }
    }
}
