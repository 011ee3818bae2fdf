//! accelsql as a measured engine: on the CPU (an engine with zero devices, so every
//! `GpuNvidia|None` call falls back) and on real GPUs (an engine over NVML's devices, present only
//! where the machine has some; simulated devices run CPU code and never count as a GPU).

use accelsql_engine::gpu_scheduler::InventoryReport;
use accelsql_engine::{Engine, SchedulerConfig, Session};

use super::Runner;
use crate::error::Result;

/// The accelsql engines of a run.
#[derive(Debug, Clone)]
pub struct AccelsqlEngines {
    /// Zero devices: every optional GPU call runs its CPU implementation.
    pub cpu: Engine,
    /// Real GPUs (NVML), or why there are none.
    pub gpu: std::result::Result<Engine, String>,
    /// The real inventory as read at start (for the machine facts), or why it could not be read.
    pub inventory: std::result::Result<InventoryReport, String>,
}

impl AccelsqlEngines {
    /// Opens the CPU engine and, if the machine has real GPUs, the GPU engine.
    ///
    /// `ACCELSQL_SIMULATED_GPUS` is ignored here: simulated devices run the CPU implementation,
    /// so figures taken on them are CPU figures and must not fill a GPU column.
    pub fn open() -> Result<Self> {
        let cpu = Engine::with_config(SchedulerConfig::default().with_simulated_gpus(0))?;
        let real = SchedulerConfig::from_env().map(|c| SchedulerConfig {
            simulated_gpus: None,
            ..c
        });
        let (gpu, inventory) = match real {
            Err(e) => (Err(e.to_string()), Err(e.to_string())),
            Ok(config) => match Engine::with_config(config) {
                Err(e) => (Err(e.to_string()), Err(e.to_string())),
                Ok(engine) => {
                    let report = engine.inventory().report().map_err(|e| e.to_string());
                    let real = !engine.devices().is_empty()
                        && engine.devices().iter().all(|d| d.is_hardware());
                    let gpu = if real {
                        Ok(engine)
                    } else {
                        Err(report
                            .as_ref()
                            .ok()
                            .and_then(|r| r.note.clone())
                            .unwrap_or_else(|| "no GPU".to_string()))
                    };
                    (gpu, report)
                }
            },
        };
        Ok(Self {
            cpu,
            gpu,
            inventory,
        })
    }
}

/// A session of `engine` with `partitions` target partitions.
pub async fn session(engine: &Engine, partitions: usize) -> Result<Runner> {
    let session: Session = engine.session();
    session
        .sql(&format!(
            "SET datafusion.execution.target_partitions = {partitions}"
        ))
        .await?;
    Ok(Runner::Accelsql(std::sync::Arc::new(session)))
}

/// Whether the last call `engine` finished ran on the GPU with its GPU implementation, and if
/// not, why (so a GPU column never shows a CPU figure unlabelled).
pub fn last_call_on_gpu(engine: &Engine) -> std::result::Result<(), String> {
    let Some(call) = engine.recent_calls().pop() else {
        return Err("no UDF call was recorded".into());
    };
    match (call.decision.placement, call.gpu_batches) {
        (accelsql_engine::Placement::Gpu, n) if n > 0 => Ok(()),
        (accelsql_engine::Placement::Gpu, _) => Err(format!(
            "{}() was placed on the GPU but ran its CPU implementation (no GPU kernel)",
            call.decision.udf
        )),
        (accelsql_engine::Placement::Cpu, _) => Err(format!(
            "{}() ran on the CPU: {}",
            call.decision.udf, call.decision.reason
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_engine_has_no_devices_and_no_gpu_is_reported_without_nvml() {
        let engines = AccelsqlEngines::open().unwrap();
        assert!(engines.cpu.devices().is_empty());
        if let Ok(gpu) = &engines.gpu {
            assert!(gpu.devices().iter().all(|d| !d.simulated));
        }
    }
}
