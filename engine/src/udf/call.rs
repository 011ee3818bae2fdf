//! One placed call of a UDF in one statement (where it runs, its instance pool, its counters),
//! and running an implementation on one of its instances.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use accelsql_udf_runtime::{AcceleratorRequest, InstanceContext, InstancePool, StatementInfo};
use datafusion::error::DataFusionError;

use crate::EngineError;
use crate::placement::{CallStats, Placement, PlacementDecision};
use crate::statement::LeaseDevices;

/// One placed call of a UDF in one statement.
#[derive(Debug)]
pub(crate) struct PlacedCall {
    pub(crate) decision: PlacementDecision,
    pub(crate) devices: Arc<LeaseDevices>,
    pub(crate) node_id: usize,
    /// Parallel instances: `min(target_partitions, %perNodeAndCallInstanceLimit)`.
    pub(crate) instances: usize,
    pub(crate) pool: OnceLock<InstancePool>,
    /// The statement's id and run timeout, for the instances.
    pub(crate) statement: StatementInfo,
    pub(crate) stats: CallStats,
}

impl PlacedCall {
    /// The call's instance pool, built on first use from the lease's devices (read once).
    fn pool(&self) -> crate::Result<&InstancePool> {
        if let Some(pool) = self.pool.get() {
            return Ok(pool);
        }
        let devices = match self.decision.placement {
            Placement::Gpu => self.devices.get().ok_or_else(|| {
                EngineError::Sql(DataFusionError::Internal(format!(
                    "GPU call of {} ran without the statement's lease",
                    self.decision.udf
                )))
            })?,
            Placement::Cpu => &Vec::new(),
        };
        Ok(self.pool.get_or_init(|| {
            InstancePool::for_statement(
                self.instances,
                devices.clone(),
                self.node_id,
                self.statement.clone(),
            )
        }))
    }
}

/// Whether two (un)placed copies of a call are the same call: both unplaced, or placed by the
/// same decision.
pub(crate) fn same_placement(a: &Option<Arc<PlacedCall>>, b: &Option<Arc<PlacedCall>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

/// What running an implementation on an instance gave.
pub(crate) struct Ran<T> {
    pub(crate) value: T,
    pub(crate) elapsed: Duration,
    pub(crate) instance: usize,
    pub(crate) used_gpu_impl: bool,
}

/// Runs `f` on an instance of `call` — the instance of input partition `partition` when given
/// (so each partition keeps to one instance), else any free one — with the GPU implementation
/// when the instance is pinned to a real device and one exists, else with the CPU implementation;
/// simulated devices have no CUDA behind them, so their instances run the CPU implementation
/// (and the call statistics say so).
///
/// Without a placement (a plan built outside `Session::sql`) the call runs on the CPU, and a
/// required call fails: nothing leased a GPU for it.
pub(crate) fn on_instance<K: ?Sized, T>(
    call: Option<&PlacedCall>,
    partition: Option<usize>,
    udf: &str,
    request: AcceleratorRequest,
    cpu: &K,
    gpu: Option<&K>,
    f: impl FnOnce(&K, &InstanceContext) -> datafusion::error::Result<T>,
) -> crate::Result<Ran<T>> {
    let Some(call) = call else {
        if request == AcceleratorRequest::Required {
            return Err(EngineError::NoGpuPresent {
                udf: udf.to_string(),
            });
        }
        let context = InstanceContext::default();
        let start = Instant::now();
        let value = f(cpu, &context)?;
        return Ok(Ran {
            value,
            elapsed: start.elapsed(),
            instance: 0,
            used_gpu_impl: false,
        });
    };
    let pool = call.pool()?;
    let slot = match partition {
        Some(p) => pool.checkout_slot(p),
        None => pool.checkout(),
    };
    let context = slot.context();
    let kernel = match (gpu, &context.device) {
        (Some(kernel), Some(device)) if !device.simulated => Some(kernel),
        _ => None,
    };
    let start = Instant::now();
    let value = f(kernel.unwrap_or(cpu), context)?;
    Ok(Ran {
        value,
        elapsed: start.elapsed(),
        instance: context.instance_id,
        used_gpu_impl: kernel.is_some(),
    })
}
