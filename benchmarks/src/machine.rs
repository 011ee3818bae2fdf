//! Facts about the machine a run measured: cores, CPU, memory, OS, GPUs and driver, and the
//! versions of every engine and peer.

use std::collections::BTreeMap;

use accelsql_engine::gpu_scheduler::InventoryReport;
use serde::{Deserialize, Serialize};

/// One real GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuFact {
    /// Product name.
    pub name: String,
    /// Installed memory, GiB.
    pub memory_gib: f64,
}

/// The machine a run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// One line for headings, e.g. `CPU-only machine (2 cores), no GPU`.
    pub label: String,
    /// Logical cores this process may use.
    pub cores: usize,
    /// CPU model (`/proc/cpuinfo`).
    pub cpu_model: String,
    /// Installed memory, GiB (`/proc/meminfo`).
    pub memory_gib: Option<f64>,
    /// Operating system and kernel.
    pub os: String,
    /// Real GPUs (never simulated ones).
    pub gpus: Vec<GpuFact>,
    /// NVIDIA driver version, where there is one.
    pub gpu_driver: Option<String>,
    /// Why there are no GPUs, where known.
    pub gpu_note: Option<String>,
    /// Versions: rustc, accelsql, DataFusion, arrow, and each peer that ran (DuckDB, Python…).
    pub versions: BTreeMap<String, String>,
}

impl Machine {
    /// Probes this machine; `gpus` is the real (NVML) inventory, or why it could not be read.
    pub fn probe(gpus: Result<InventoryReport, String>) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (key, value) = l.split_once(':')?;
                (key.trim() == "model name").then(|| value.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let memory_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| mem_total_gib(&m));
        let os = os_description();
        let (gpus, gpu_driver, gpu_note) = match gpus {
            Ok(report) => {
                let real: Vec<GpuFact> = report
                    .devices
                    .iter()
                    .filter(|d| d.is_hardware())
                    .map(|d| GpuFact {
                        name: d.name.clone(),
                        memory_gib: d.memory_total as f64 / (1u64 << 30) as f64,
                    })
                    .collect();
                (real, report.driver_version, report.note)
            }
            Err(e) => (Vec::new(), None, Some(e)),
        };
        let mut versions = BTreeMap::new();
        versions.insert("rustc".into(), env!("ACCELSQL_BENCH_RUSTC").to_string());
        versions.insert("accelsql".into(), env!("CARGO_PKG_VERSION").to_string());
        for pair in env!("ACCELSQL_BENCH_LOCKED").split(';') {
            if let Some((name, version)) = pair.split_once('=') {
                versions.insert(name.to_string(), version.to_string());
            }
        }
        let label = machine_label(cores, &gpus);
        Self {
            label,
            cores,
            cpu_model,
            memory_gib,
            os,
            gpus,
            gpu_driver,
            gpu_note,
            versions,
        }
    }

    /// Whether a real GPU is present.
    pub fn has_gpu(&self) -> bool {
        !self.gpus.is_empty()
    }
}

/// `CPU-only machine (2 cores), no GPU` or `16 cores, 1 × NVIDIA H100 80GB HBM3`.
pub fn machine_label(cores: usize, gpus: &[GpuFact]) -> String {
    if gpus.is_empty() {
        return format!("CPU-only machine ({cores} cores), no GPU");
    }
    let mut names: Vec<(String, usize)> = Vec::new();
    for g in gpus {
        match names.iter_mut().find(|(n, _)| *n == g.name) {
            Some((_, count)) => *count += 1,
            None => names.push((g.name.clone(), 1)),
        }
    }
    let gpus: Vec<String> = names
        .into_iter()
        .map(|(name, count)| format!("{count} × {name}"))
        .collect();
    format!("{cores} cores, {}", gpus.join(", "))
}

fn mem_total_gib(meminfo: &str) -> Option<f64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / (1024.0 * 1024.0))
}

fn os_description() -> String {
    let pretty = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    match std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        Ok(kernel) => format!(
            "{pretty}, kernel {} ({})",
            kernel.trim(),
            std::env::consts::ARCH
        ),
        Err(_) => format!("{pretty} ({})", std::env::consts::ARCH),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_say_cpu_only_or_name_the_gpus() {
        assert_eq!(machine_label(2, &[]), "CPU-only machine (2 cores), no GPU");
        let h100 = GpuFact {
            name: "NVIDIA H100".into(),
            memory_gib: 80.0,
        };
        assert_eq!(
            machine_label(16, &[h100.clone(), h100]),
            "16 cores, 2 × NVIDIA H100"
        );
    }

    #[test]
    fn memory_from_meminfo() {
        let m = mem_total_gib("MemTotal:       24576000 kB\nMemFree: 1 kB\n").unwrap();
        assert!((m - 23.4375).abs() < 1e-9);
    }

    #[test]
    fn probe_records_versions_and_no_simulated_gpus() {
        let m = Machine::probe(Err("NVML not loaded".into()));
        assert!(m.cores >= 1);
        assert!(!m.has_gpu());
        assert!(m.versions["rustc"].starts_with('1'));
        assert!(m.versions.contains_key("datafusion"));
    }
}
