//! The [`Engine`]: one per process; owns the engine's state (devices, the node lease queue, the
//! recent-call log), the UDF registry and the script catalog, and opens
//! [`Session`](crate::Session)s (`Engine::session` and the users sessions run as are
//! [`accounts`](super::accounts)'). It is the handle an embedding program holds; the layers
//! below are handed the parts they need.

use std::sync::Arc;

use accelsql_gpu_scheduler::{DeviceInfo, Inventory, LeaseQueue, SchedulerConfig};
use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::node_rows::{self, NodeRowsParts};
use crate::catalog::scripts::ScriptCatalog;
use crate::catalog::system::SystemContext;
use crate::core::EngineState;
use crate::core::calls::UdfCallRecord;
use crate::core::engine_options::EngineOptions;
use crate::core::error::Result;
use crate::exec::remote::{NodeLease, NodeSide, UdfCallParts};
use crate::udf::builtins::{builtin_set_udfs, builtin_udfs};
use crate::udf::registry::UdfRegistry;
use crate::udf::{ScalarUdf, SetUdf};

/// The embedded engine: devices, GPU lease queue, UDF registry.
///
/// ```
/// use accelsql_engine::{Engine, SchedulerConfig};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let engine = Engine::with_config(SchedulerConfig::default().with_simulated_gpus(2)).unwrap();
/// let session = engine.session();
/// let batches = session.sql("SELECT iproc(), nproc()").await.unwrap();
/// assert_eq!(batches[0].num_rows(), 1);
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

#[derive(Debug)]
struct EngineInner {
    state: Arc<EngineState>,
    udfs: UdfRegistry,
    /// The scripts created with `CREATE … SCRIPT` (kept in the data directory, if any).
    scripts: Arc<ScriptCatalog>,
}

impl Engine {
    /// An engine configured from the environment (`ACCELSQL_SIMULATED_GPUS`, `CUDA_VISIBLE_DEVICES`,
    /// `ACCELSQL_DEVICE_LOCK_DIR`, `ACCELSQL_GPU_WAIT_TIMEOUT`).
    pub fn new() -> Result<Self> {
        Self::with_config(SchedulerConfig::from_env()?)
    }

    /// An engine with an explicit device configuration.
    pub fn with_config(config: SchedulerConfig) -> Result<Self> {
        Self::with_options(EngineOptions {
            scheduler: config,
            ..EngineOptions::default()
        })
    }

    /// An engine with the devices of `options.scheduler`, the script catalog of
    /// `options.data_dir` (in memory without one; a damaged catalog file is an error), script
    /// DDL allowed or not, and files as tables or not.
    pub fn with_options(options: EngineOptions) -> Result<Self> {
        options.node.check()?;
        let scripts = match &options.data_dir {
            Some(dir) => ScriptCatalog::open(dir)?,
            None => ScriptCatalog::in_memory(),
        };
        let state = EngineState::new(&options)?;
        // Scripts run user code as this process's user: the data directory (the catalog, the
        // users' password hashes, a server's token, the tables' files) is out of their reach.
        if let Some(dir) = &options.data_dir {
            accelsql_udf_runtime::script::sandbox::deny_paths([dir]);
        }
        let udfs = UdfRegistry::new(builtin_udfs()?, builtin_set_udfs()?);
        Ok(Self {
            inner: Arc::new(EngineInner {
                state: Arc::new(state),
                udfs,
                scripts: Arc::new(scripts),
            }),
        })
    }

    /// Registers a scalar (RETURNS) Rust UDF; sessions created afterwards can call it.
    ///
    /// Fails with 42E01 if a UDF of that name exists.
    pub fn register_scalar_udf(&self, udf: ScalarUdf) -> Result<()> {
        self.inner.udfs.register_scalar(udf)
    }

    /// Registers a SET (RETURNS or EMITS) or SCALAR EMITS Rust UDF; sessions created afterwards
    /// can call it.
    ///
    /// Fails with 42E01 if a UDF of that name exists.
    pub fn register_set_udf(&self, udf: SetUdf) -> Result<()> {
        self.inner.udfs.register_set(udf)
    }

    /// The devices the engine's lease hands out.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.inner.state.devices
    }

    /// The bytes every session has spilled to disk now (their spill files), within
    /// [`EngineOptions::spill_limit`](crate::EngineOptions::spill_limit).
    pub fn spilled_bytes(&self) -> u64 {
        self.inner.state.spill.used()
    }

    /// The longest a statement may hold the node's GPU lease
    /// ([`EngineOptions::max_lease_hold`](crate::EngineOptions::max_lease_hold)).
    pub fn max_lease_hold(&self) -> Option<std::time::Duration> {
        self.inner.state.max_lease_hold
    }

    /// The longest a cluster task's statement may hold this node's GPU lease: the engine's
    /// bound, or the consumer group's `GPU_LEASE_HOLD_LIMIT` its placed calls carry, if smaller.
    pub fn max_lease_hold_for(&self, plan: &Arc<dyn ExecutionPlan>) -> Option<std::time::Duration> {
        crate::exec::remote::hold_limit_for_plan(self.inner.state.max_lease_hold, plan)
    }

    /// The node lease queue (for introspection).
    pub fn lease_queue(&self) -> &LeaseQueue {
        &self.inner.state.queue
    }

    /// The inventory (fresh readings for `accelsql.gpu_devices`).
    pub fn inventory(&self) -> &Inventory {
        &self.inner.state.inventory
    }

    /// Finished UDF calls by placement and reason
    /// ([`UdfCallRecord::metric_labels`](crate::UdfCallRecord::metric_labels)) since the engine
    /// started, for metrics.
    pub fn udf_call_totals(&self) -> Vec<((&'static str, &'static str), u64)> {
        self.inner.state.call_totals()
    }

    /// This engine's node number on a cluster (`0` alone).
    pub fn node_id(&self) -> usize {
        self.inner.state.node.id
    }

    /// The engine's memory pool: bytes its sessions have reserved now, and its limit (`None`:
    /// unbounded).
    pub fn memory_pool_usage(&self) -> (usize, Option<usize>) {
        let pool = &self.inner.state.runtime.memory_pool;
        let limit = match pool.memory_limit() {
            datafusion::execution::memory_pool::MemoryLimit::Finite(n) => Some(n),
            _ => None,
        };
        (pool.reserved(), limit)
    }

    /// The last [`RECENT_CALLS`](crate::RECENT_CALLS) finished UDF calls, oldest first.
    pub fn recent_calls(&self) -> Vec<UdfCallRecord> {
        self.inner.state.recent_calls()
    }

    /// The recent calls of statement `statement_id` (its id in `accelsql.udf_calls`), oldest
    /// first: what [`Engine::recent_calls`] holds of it, without copying the rest.
    pub fn calls_of(&self, statement_id: u64) -> Vec<UdfCallRecord> {
        self.inner.state.calls_of(statement_id)
    }

    /// The engine's shared state, which the layers below the front end are handed.
    pub(crate) fn state(&self) -> &Arc<EngineState> {
        &self.inner.state
    }

    /// The registered Rust UDFs.
    pub(crate) fn udfs(&self) -> &UdfRegistry {
        &self.inner.udfs
    }

    /// The script and connection catalog.
    pub(crate) fn scripts(&self) -> &Arc<ScriptCatalog> {
        &self.inner.scripts
    }

    /// What the system tables read: the state and the script catalog.
    pub(crate) fn system_context(&self) -> SystemContext {
        SystemContext {
            state: Arc::clone(&self.inner.state),
            scripts: Arc::clone(&self.inner.scripts),
            dialect: crate::core::options::SqlDialect::default(),
        }
    }

    /// This engine as a cluster node that runs placed calls.
    fn node_side(&self) -> NodeSide<'_> {
        NodeSide {
            state: &self.inner.state,
            udfs: &self.inner.udfs,
        }
    }

    /// This node's copy of a placed call that arrived as `bytes` (from
    /// [`encode_placement`](crate::encode_placement)): the script it carries, or the UDF
    /// registered here under `name`, placed as the client decided, on this node's devices once
    /// [`lease_for_plan`](Self::lease_for_plan) gives them. `Ok(None)` when the bytes are not a
    /// placement or no UDF of that name is registered here.
    pub fn decode_placed_udf(&self, name: &str, bytes: &[u8]) -> Result<Option<ScalarUDF>> {
        self.node_side().decode_placed_udf(name, bytes)
    }

    /// [`decode_placed_udf`](Self::decode_placed_udf) for a SET RETURNS call (from
    /// [`encode_aggregate_placement`](crate::encode_aggregate_placement)).
    pub fn decode_placed_udaf(&self, name: &str, bytes: &[u8]) -> Result<Option<AggregateUDF>> {
        self.node_side().decode_placed_udaf(name, bytes)
    }

    /// The EMITS call's operator that `parts` describe, over `input`, on this node: the script
    /// the call carries, or the SET/EMITS UDF registered here under its name.
    pub fn udf_call_exec(
        &self,
        parts: UdfCallParts,
        input: Arc<dyn ExecutionPlan>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.node_side().udf_call_exec(parts, input)
    }

    /// Gives the GPU-placed calls of a task's `plan` this node's devices: waits (in FIFO order,
    /// as statements do on one node) for the node lease of the task's statement (`statement`:
    /// a key unique to it, such as its cluster job's id) and hands its devices to them. Every
    /// task of one statement on this node shares that lease — they run side by side, on the
    /// same devices — and it is held until the last of their guards is dropped. A plan without
    /// GPU-placed calls takes nothing. On a node without GPUs, a required call fails with
    /// 22069 naming the node, and optional ones run on the CPU.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future before it completes leaves the queue as if it had
    /// never asked (the lease queue's `acquire` is cancel-safe); a lease already shared with
    /// another task of the statement stays with that task.
    pub async fn lease_for_plan(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        statement: &str,
        label: String,
    ) -> Result<NodeLease> {
        self.node_side()
            .lease_for_plan(plan, statement, label)
            .await
    }

    /// Records in `accelsql.udf_calls` what the placed calls of a task's `plan` have done on
    /// this node so far, for the job `job` (Ballista's job id); call it when the task ends. The
    /// job's tasks here make one row per call: a copy of a call that several tasks share is
    /// counted once, by its latest reading.
    pub fn record_task_calls(&self, plan: &Arc<dyn ExecutionPlan>, job: &str, lease: &NodeLease) {
        self.node_side().record_task_calls(plan, job, lease)
    }

    /// Kills the script workers of the placed calls of a task's `plan` on this node (and any
    /// they start from now on): a task stopped from outside (cancelled, past its timeout)
    /// while a script runs ends at once, though the run blocks its thread.
    pub fn kill_plan_workers(&self, plan: &Arc<dyn ExecutionPlan>) {
        self.node_side().kill_plan_workers(plan)
    }

    /// The scan [`node_rows_parts`](crate::node_rows_parts) took apart, over `nodes` (its
    /// input), producing this process's rows.
    pub fn node_rows_exec(
        &self,
        parts: NodeRowsParts,
        nodes: Arc<dyn ExecutionPlan>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        node_rows::node_rows_exec(&self.inner.state, parts, nodes)
    }
}
