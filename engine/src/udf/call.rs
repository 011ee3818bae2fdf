//! One placed call of a UDF in one statement (where it runs, its instance pool, its counters:
//! [`PlacedCall`], [`CallStats`]), and running an implementation on one of its instances.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use accelsql_udf_runtime::{
    AcceleratorRequest, DeviceMemoryLimit, InstanceContext, InstancePool, RuntimeError,
    StatementInfo,
};
use datafusion::error::DataFusionError;

use accelsql_gpu_scheduler::DeviceDemand;

use crate::core::calls::{Placement, PlacementDecision};
use crate::core::error::EngineError;
pub(crate) use crate::core::lease_grant::{CallDemand, LeaseGrant};

/// What the statement's lease gave its calls, set once when the lease is granted.
pub(crate) type LeaseDevices = OnceLock<LeaseGrant>;

/// What a statement's GPU-placed `calls` ask of the node lease: memory per instance when every
/// one declares it (`%perInstanceRequiredAcceleratorMemory`; the built-ins estimate theirs),
/// else every device; and, for a memory demand, how its instances map back to the calls.
pub(crate) fn statement_demand(calls: &[Arc<PlacedCall>]) -> (DeviceDemand, Vec<CallDemand>) {
    let gpu: Vec<&Arc<PlacedCall>> = calls
        .iter()
        .filter(|c| c.decision.placement == Placement::Gpu)
        .collect();
    let mut layout = Vec::with_capacity(gpu.len());
    for c in &gpu {
        match c.device_memory {
            Some(bytes) => layout.push(CallDemand {
                call_id: c.decision.call_id,
                instances: c.instances.max(1),
                bytes,
            }),
            None => return (DeviceDemand::Whole, Vec::new()),
        }
    }
    if layout.is_empty() {
        return (DeviceDemand::Whole, layout);
    }
    let per_instance = layout
        .iter()
        .flat_map(|c| std::iter::repeat_n(c.bytes, c.instances))
        .collect();
    (DeviceDemand::Memory(per_instance), layout)
}

/// One placed call of a UDF in one statement.
#[derive(Debug)]
pub(crate) struct PlacedCall {
    pub(crate) decision: PlacementDecision,
    pub(crate) devices: Arc<LeaseDevices>,
    pub(crate) node_id: usize,
    /// Parallel instances: `min(target_partitions, %perNodeAndCallInstanceLimit)`.
    pub(crate) instances: usize,
    /// `%perInstanceRequiredAcceleratorMemory` of the UDF (a built-in's estimate), if any.
    pub(crate) device_memory: Option<u64>,
    pub(crate) pool: OnceLock<InstancePool>,
    /// The statement's id and run timeout, for the instances.
    pub(crate) statement: StatementInfo,
    pub(crate) stats: CallStats,
    /// The engine that placed the call (`EngineInner::id`).
    pub(crate) client: u64,
    /// How the statement waits for a node's GPU lease (its consumer group's class), if its
    /// user has a group.
    pub(crate) gpu_class: Option<crate::core::groups::GpuClass>,
    /// The placing engine's bound on holding the GPU lease (`serve --max-lease-hold`), which a
    /// cluster's nodes apply beside their own.
    pub(crate) client_hold: Option<std::time::Duration>,
    /// Which copy of the call this is: 0 where it was placed; on a cluster's node, a number of
    /// its own for each copy decoded there (tasks launched together share one).
    pub(crate) copy: u64,
}

impl PlacedCall {
    /// A call placed as `decision` says, on the devices of `devices` once its lease is
    /// granted: one instance, node 0, no statement bounds (callers set what they know).
    pub(crate) fn new(decision: PlacementDecision, devices: Arc<LeaseDevices>) -> Self {
        Self {
            decision,
            devices,
            node_id: 0,
            instances: 1,
            device_memory: None,
            pool: OnceLock::new(),
            statement: StatementInfo::default(),
            stats: CallStats::default(),
            client: 0,
            gpu_class: None,
            client_hold: None,
            copy: 0,
        }
    }

    /// The call's instance pool, built on first use from the lease's devices (read once).
    fn pool(&self) -> crate::Result<&InstancePool> {
        if let Some(pool) = self.pool.get() {
            return Ok(pool);
        }
        let (devices, reserved) = match self.decision.placement {
            Placement::Gpu => self
                .devices
                .get()
                .ok_or_else(|| {
                    EngineError::Sql(DataFusionError::Internal(format!(
                        "GPU call of {} ran without the statement's lease",
                        self.decision.udf
                    )))
                })?
                .for_call(self.decision.call_id),
            Placement::Cpu => (Vec::new(), None),
        };
        let limit = reserved.map(|bytes| DeviceMemoryLimit {
            bytes,
            probe: crate::core::device_memory::probe(),
        });
        Ok(self.pool.get_or_init(|| {
            InstancePool::for_statement(
                self.instances,
                devices,
                self.node_id,
                self.statement.clone(),
            )
            .with_device_memory(limit)
        }))
    }
}

/// Counters of one call, updated by its instances.
#[derive(Debug, Default)]
pub(crate) struct CallStats {
    pub(crate) rows_in: AtomicU64,
    pub(crate) rows_out: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) nanos: AtomicU64,
    pub(crate) gpu_impl_batches: AtomicU64,
    /// Batches whose GPU implementation failed for want of a usable GPU (driver gone, out of
    /// device memory) and that then ran the CPU implementation (optional calls only).
    pub(crate) cpu_fallback_batches: AtomicU64,
    /// Why the last such batch fell back.
    pub(crate) fallback_reason: Mutex<Option<String>>,
    pub(crate) instances: Mutex<BTreeSet<usize>>,
}

impl CallStats {
    /// Notes one batch that fell back from the GPU implementation to the CPU one, and why.
    pub(crate) fn record_fallback(&self, reason: String) {
        self.cpu_fallback_batches.fetch_add(1, Ordering::Relaxed);
        *self
            .fallback_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(reason);
    }

    pub(crate) fn record(
        &self,
        rows_in: usize,
        rows_out: usize,
        elapsed: Duration,
        instance: usize,
        gpu_impl: bool,
    ) {
        self.rows_in.fetch_add(rows_in as u64, Ordering::Relaxed);
        self.rows_out.fetch_add(rows_out as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.nanos
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
        if gpu_impl {
            self.gpu_impl_batches.fetch_add(1, Ordering::Relaxed);
        }
        self.instances
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(instance);
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
/// When the GPU implementation fails because no GPU is usable after all (the CUDA driver cannot
/// be loaded or initialised: 58U21; the batch does not fit in device memory even split: 53U23),
/// an optional (`GpuNvidia|None`) call runs the batch with the CPU implementation instead and
/// records why; a required call fails with that error.
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
    f: impl Fn(&K, &InstanceContext) -> datafusion::error::Result<T>,
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
    let Some(gpu_kernel) = kernel else {
        let value = f(cpu, context)?;
        return Ok(Ran {
            value,
            elapsed: start.elapsed(),
            instance: context.instance_id,
            used_gpu_impl: false,
        });
    };
    // Under memory sharing, the instance's GPU runs stay within its reservation.
    let ran = match &context.device_memory {
        Some(limit) => accelsql_udf_runtime::gpu::with_device_memory_limit(limit.bytes, || {
            f(gpu_kernel, context)
        }),
        None => f(gpu_kernel, context),
    };
    match ran {
        Ok(value) => Ok(Ran {
            value,
            elapsed: start.elapsed(),
            instance: context.instance_id,
            used_gpu_impl: true,
        }),
        Err(e) => match gpu_unusable(&e) {
            Some(reason) if request == AcceleratorRequest::Preferred => {
                call.stats.record_fallback(reason);
                let value = f(cpu, context)?;
                Ok(Ran {
                    value,
                    elapsed: start.elapsed(),
                    instance: context.instance_id,
                    used_gpu_impl: false,
                })
            }
            _ => Err(e.into()),
        },
    }
}

/// The message of `e` when it says that no GPU is usable for this batch (so an optional call
/// may run it on the CPU): the CUDA libraries or device cannot be used, or the batch does not
/// fit in device memory. Other errors (a bug in the kernel, bad input) are not hidden this way.
fn gpu_unusable(e: &DataFusionError) -> Option<String> {
    let runtime = match e {
        DataFusionError::External(boxed) => match boxed.downcast_ref::<EngineError>() {
            Some(EngineError::Runtime(r)) => Some(r),
            Some(_) => None,
            None => boxed.downcast_ref::<RuntimeError>(),
        },
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            return gpu_unusable(inner);
        }
        DataFusionError::Shared(inner) => return gpu_unusable(inner),
        _ => None,
    }?;
    matches!(
        runtime,
        RuntimeError::GpuUnavailable { .. } | RuntimeError::GpuOutOfMemory { .. }
    )
    .then(|| runtime.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use accelsql_gpu_scheduler::DeviceInfo;
    use std::sync::atomic::Ordering;

    /// A call placed on one device that is not simulated, so its GPU implementation is chosen.
    fn gpu_call(request: AcceleratorRequest) -> PlacedCall {
        let device = DeviceInfo {
            uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
            name: "test device".into(),
            simulated: false,
            ..DeviceInfo::simulated(0)
        };
        let devices = Arc::new(LeaseDevices::new());
        devices.set(LeaseGrant::whole(vec![device])).unwrap();
        PlacedCall::new(
            PlacementDecision {
                call_id: 1,
                block: 1,
                udf: "f".into(),
                request,
                placement: Placement::Gpu,
                reason: "test".into(),
            },
            devices,
        )
    }

    #[tokio::test]
    async fn a_memory_lease_gives_each_call_its_instances_devices_in_order() {
        use accelsql_gpu_scheduler::{GpuSharing, Inventory, LeaseQueue, LeaseRequest};
        const G: u64 = 1 << 30;
        let queue = LeaseQueue::new(Inventory::simulated(2).devices().unwrap())
            .with_sharing(GpuSharing::Memory, 10);
        let layout = [
            CallDemand {
                call_id: 1,
                instances: 3,
                bytes: 10 * G,
            },
            CallDemand {
                call_id: 2,
                instances: 1,
                bytes: 20 * G,
            },
        ];
        let demand = DeviceDemand::Memory(vec![10 * G, 10 * G, 10 * G, 20 * G]);
        let lease = queue
            .acquire(LeaseRequest::new("s").demand(demand))
            .await
            .unwrap();
        let grant = LeaseGrant::of_lease(&lease, &layout);
        // Largest first: the 20 GiB instance on device 0, then 10s where the most room is.
        assert_eq!(grant.call_device_indices(2), vec![0]);
        assert_eq!(grant.call_device_indices(1), vec![1, 1, 0]);
        assert_eq!(grant.for_call(1).1, Some(10 * G));
        // A call the lease did not plan for gets the lease's devices and no reservation.
        assert_eq!(grant.for_call(9), (lease.devices(), None));
    }

    type Kernel = dyn Fn(&InstanceContext) -> datafusion::error::Result<&'static str>;

    fn run(call: &PlacedCall, gpu: &Kernel) -> crate::Result<Ran<&'static str>> {
        let cpu: &Kernel = &|_| Ok("cpu");
        on_instance(
            Some(call),
            None,
            "f",
            call.decision.request,
            cpu,
            Some(gpu),
            |k, c| k(c),
        )
    }

    fn unavailable() -> DataFusionError {
        EngineError::Runtime(RuntimeError::GpuUnavailable {
            message: "libcuda.so cannot be loaded".into(),
        })
        .into_datafusion()
    }

    #[test]
    fn gpu_implementation_runs_on_a_real_device() {
        let call = gpu_call(AcceleratorRequest::Required);
        let ran = run(&call, &|c| {
            assert!(c.device.is_some());
            Ok("gpu")
        })
        .unwrap();
        assert_eq!((ran.value, ran.used_gpu_impl), ("gpu", true));
    }

    #[test]
    fn optional_call_falls_back_to_cpu_when_no_gpu_is_usable() {
        let call = gpu_call(AcceleratorRequest::Preferred);
        let ran = run(&call, &|_| Err(unavailable())).unwrap();
        assert_eq!((ran.value, ran.used_gpu_impl), ("cpu", false));
        assert_eq!(call.stats.cpu_fallback_batches.load(Ordering::Relaxed), 1);
        let reason = call.stats.fallback_reason.lock().unwrap().clone().unwrap();
        assert!(reason.contains("58U21"), "{reason}");
        // Out of device memory (a bare runtime error, as a kernel may return it) also falls back.
        let ran = run(&call, &|_| {
            Err(DataFusionError::External(Box::new(
                RuntimeError::GpuOutOfMemory {
                    device: "0".into(),
                    message: "1 row needs 2 GiB".into(),
                },
            )))
        })
        .unwrap();
        assert_eq!(ran.value, "cpu");
        assert_eq!(call.stats.cpu_fallback_batches.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn required_call_and_other_errors_do_not_fall_back() {
        let call = gpu_call(AcceleratorRequest::Required);
        let err = run(&call, &|_| Err(unavailable())).err().unwrap();
        assert_eq!(err.code(), RuntimeError::GPU_UNAVAILABLE);
        // A kernel failure that is not about GPU availability is the statement's error.
        let call = gpu_call(AcceleratorRequest::Preferred);
        let err = run(&call, &|_| {
            Err(DataFusionError::Execution("kernel bug".into()))
        })
        .err()
        .unwrap();
        assert!(err.to_string().contains("kernel bug"), "{err}");
        assert_eq!(call.stats.cpu_fallback_batches.load(Ordering::Relaxed), 0);
    }
}
