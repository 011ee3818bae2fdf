//! The engine's side of running placed UDF calls in another process (a cluster's executor):
//! what travels with a placed call, how a node rebuilds it with its own UDF, and the node lease
//! a task takes for the GPU-placed calls in its plan.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use accelsql_udf_runtime::{AcceleratorRequest, StatementInfo};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::exec_datafusion_err;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use serde::{Deserialize, Serialize};

use super::emits::{CallSpec, UdfCallExec};
use super::stream::call_record;
use crate::core::EngineState;
use crate::core::calls::{NodeRun, Placement, PlacementDecision, UdfCallRecord};
use crate::core::error::{EngineError, Result};
use crate::core::node_leases::SharedLease;
use crate::core::options::SetGrouping;
use crate::udf::call::{CallStats, LeaseDevices, LeaseGrant, PlacedCall, statement_demand};
use crate::udf::registry::UdfRegistry;
use crate::udf::script::origin::ScriptOrigin;
use crate::udf::script::udf::ScriptUdf;
use crate::udf::{AccelAggregateUdf, AccelScalarUdf, as_accel_aggregate, as_accel_udf};

/// What starts an encoded placement (and tells it from other encodings).
const MAGIC: &[u8] = b"accelsql-placement-v1\n";

/// A placed call as it travels: the client's decision and the call's instance count.
#[derive(Debug, Serialize, Deserialize)]
struct WirePlacement {
    udf: String,
    call_id: usize,
    block: usize,
    gpu: bool,
    request: String,
    reason: String,
    instances: usize,
    statement_id: u64,
    run_timeout_ms: Option<u64>,
    /// The session's memory budget, bounding each script worker on the node.
    #[serde(default)]
    memory_limit: Option<u64>,
    /// The session's user (`exa.meta.current_user`), its consumer group and the group's GPU
    /// queue settings, which the node's lease queue applies.
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    gpu_class: Option<crate::core::groups::GpuClass>,
    /// The placing engine's lease-hold bound, in milliseconds.
    #[serde(default)]
    client_hold_ms: Option<u64>,
    /// A script's definition ([`ScriptOrigin`]); absent for Rust UDFs, which the receiving
    /// process has registered under the same name.
    #[serde(default)]
    script: Option<serde_json::Value>,
    /// The engine that placed the call, whose `accelsql.udf_calls` shows the nodes' records.
    #[serde(default)]
    client: u64,
    /// `%perInstanceRequiredAcceleratorMemory` (a built-in's estimate), for nodes that share
    /// their GPUs by memory.
    #[serde(default)]
    device_memory: Option<u64>,
}

/// Numbers the copies of placed calls that this process decodes.
static NEXT_COPY: AtomicU64 = AtomicU64::new(1);

fn request_name(r: AcceleratorRequest) -> &'static str {
    match r {
        AcceleratorRequest::None => "none",
        AcceleratorRequest::Required => "required",
        AcceleratorRequest::Preferred => "preferred",
    }
}

fn request_from(name: &str) -> AcceleratorRequest {
    match name {
        "required" => AcceleratorRequest::Required,
        "preferred" => AcceleratorRequest::Preferred,
        _ => AcceleratorRequest::None,
    }
}

/// The placement of `udf` to send with a plan, when it is an accelsql UDF call the placement
/// rule placed; `None` for anything else (DataFusion's functions, unplaced calls). A script's
/// call carries the script.
pub fn encode_placement(udf: &ScalarUDF) -> Option<Vec<u8>> {
    let accel = as_accel_udf(udf.inner().as_ref())?;
    wire_bytes(accel.placed_call()?, accel.definition().origin())
}

/// [`encode_placement`] for a SET RETURNS UDF's call (an aggregate function).
pub fn encode_aggregate_placement(udf: &AggregateUDF) -> Option<Vec<u8>> {
    let accel = as_accel_aggregate(udf.inner().as_ref())?;
    wire_bytes(accel.placed_call()?, accel.definition().origin())
}

fn wire_bytes(call: &PlacedCall, origin: Option<&Arc<ScriptOrigin>>) -> Option<Vec<u8>> {
    let script = match origin {
        Some(origin) => Some(origin.to_json().ok()?),
        None => None,
    };
    let wire = WirePlacement {
        udf: call.decision.udf.clone(),
        call_id: call.decision.call_id,
        block: call.decision.block,
        gpu: call.decision.placement == Placement::Gpu,
        request: request_name(call.decision.request).into(),
        reason: call.decision.reason.clone(),
        instances: call.instances,
        statement_id: call.statement.statement_id,
        run_timeout_ms: call
            .statement
            .run_timeout
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        memory_limit: call.statement.memory_limit,
        user: call.statement.user.clone(),
        gpu_class: call.gpu_class.clone(),
        client_hold_ms: call
            .client_hold
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        script,
        client: call.client,
        device_memory: call.device_memory,
    };
    let mut out = MAGIC.to_vec();
    serde_json::to_writer(&mut out, &wire).ok()?;
    Some(out)
}

/// An EMITS call's operator (`UdfCallExec`) taken apart to travel: its function and placement
/// (as [`encode_placement`] writes them) and its expressions, which the caller encodes (they
/// refer to the operator's input). [`Engine::udf_call_exec`](crate::Engine::udf_call_exec) puts
/// it together again.
#[derive(Debug, Clone)]
pub struct UdfCallParts {
    /// The function's name.
    pub name: String,
    /// The placement and, for a script, its definition.
    pub placement: Vec<u8>,
    /// The GROUP BY keys of a SET call.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Which keys the output shows, before the EMITS columns.
    pub output_keys: Vec<usize>,
    /// The call's arguments.
    pub args: Vec<Arc<dyn PhysicalExpr>>,
    /// A SCALAR EMITS call's other select items.
    pub carried: Vec<Arc<dyn PhysicalExpr>>,
    /// The operator's output.
    pub schema: SchemaRef,
    /// How a grouped SET call gets each group's rows together.
    pub grouping: SetGrouping,
    /// A partial run per partition of a call split by its top-k merge.
    pub partial: bool,
}

/// `plan` taken apart when it is an EMITS call's operator; `None` for any other plan, and for
/// a call of a script that cannot travel (a call site's `EMITS (...)`).
pub fn udf_call_parts(plan: &dyn ExecutionPlan) -> Option<UdfCallParts> {
    let exec = plan.downcast_ref::<UdfCallExec>()?;
    let call = exec.call();
    if call.def.is_local() && call.def.origin().is_none() {
        return None;
    }
    let placement = match &call.placed {
        Some(placed) => wire_bytes(placed, call.def.origin())?,
        None => wire_bytes(&unplaced_call(call.def.name()), call.def.origin())?,
    };
    Some(UdfCallParts {
        name: call.def.name().to_string(),
        placement,
        keys: call.keys.clone(),
        output_keys: call.output_keys.clone(),
        args: call.args.clone(),
        carried: call.carried.clone(),
        schema: Arc::clone(&call.schema),
        grouping: call.grouping,
        partial: call.partial,
    })
}

/// A CPU placement for a call the placement rule left alone.
fn unplaced_call(name: &str) -> PlacedCall {
    PlacedCall::new(
        PlacementDecision {
            call_id: 0,
            block: 0,
            udf: name.to_string(),
            request: AcceleratorRequest::None,
            placement: Placement::Cpu,
            reason: "unplaced".into(),
        },
        Arc::new(LeaseDevices::new()),
    )
}

/// A task's share of its statement's node lease: the node's GPUs stay with the statement while
/// any of its tasks here holds one; dropping the last gives them to the next statement in line.
#[derive(Debug)]
pub struct NodeLease {
    _shared: Option<Arc<SharedLease>>,
    /// How long the task waited for it (`None` when its plan has no GPU-placed call).
    waited: Option<Duration>,
}

impl NodeLease {
    /// Whether the task holds a share of the node's GPUs (its plan has a GPU-placed call).
    pub fn holds_devices(&self) -> bool {
        self._shared.is_some()
    }
}

/// A cluster node's side of placed calls: its engine's state and UDFs, which the calls that
/// arrive with a task's plan run on. [`Engine`](crate::Engine)'s methods of the same names
/// (`decode_placed_udf`, `lease_for_plan`, …) are the public face of these, and say more.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeSide<'a> {
    /// The node's engine state (devices, lease queue, node number, call log).
    pub(crate) state: &'a EngineState,
    /// The node's registered UDFs.
    pub(crate) udfs: &'a UdfRegistry,
}

impl NodeSide<'_> {
    /// This node's copy of a placed call that arrived as `bytes` (from [`encode_placement`]).
    pub(crate) fn decode_placed_udf(&self, name: &str, bytes: &[u8]) -> Result<Option<ScalarUDF>> {
        let Some((wire, script)) = self.read_wire(name, bytes)? else {
            return Ok(None);
        };
        let def = match script {
            Some(ScriptUdf::Scalar(def)) => Arc::new(def),
            Some(ScriptUdf::Set(_)) => return Err(damaged(name, "a SET script in a scalar call")),
            None => match self.udfs.scalar(name) {
                Some(def) => def,
                None => return Ok(None),
            },
        };
        Ok(Some(ScalarUDF::new_from_impl(
            AccelScalarUdf::new(def).placed(self.wire_call(wire)),
        )))
    }

    /// [`decode_placed_udf`](Self::decode_placed_udf) for a SET RETURNS call (from
    /// [`encode_aggregate_placement`]).
    pub(crate) fn decode_placed_udaf(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<Option<AggregateUDF>> {
        let Some((wire, script)) = self.read_wire(name, bytes)? else {
            return Ok(None);
        };
        let def = match script {
            Some(ScriptUdf::Set(def)) => Arc::new(def),
            Some(ScriptUdf::Scalar(_)) => {
                return Err(damaged(name, "a scalar script in an aggregate call"));
            }
            None => match self.udfs.set(name) {
                Some(def) => def,
                None => return Ok(None),
            },
        };
        Ok(Some(AggregateUDF::new_from_impl(
            AccelAggregateUdf::new(def)?.placed(self.wire_call(wire)),
        )))
    }

    /// The EMITS call's operator that `parts` describe, over `input`, on this node.
    pub(crate) fn udf_call_exec(
        &self,
        parts: UdfCallParts,
        input: Arc<dyn ExecutionPlan>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let name = parts.name.as_str();
        let Some((wire, script)) = self.read_wire(name, &parts.placement)? else {
            return Err(damaged(name, "no placement"));
        };
        let def = match script {
            Some(ScriptUdf::Set(def)) => Arc::new(def),
            Some(ScriptUdf::Scalar(_)) => {
                return Err(damaged(name, "a RETURNS script in an EMITS call"));
            }
            None => match self.udfs.set(name) {
                Some(def) => def,
                None => {
                    return Err(EngineError::Sql(exec_datafusion_err!(
                        "[42883] the function {name} is not known to node {}: register \
                                 it on every node of the cluster (NodeOptions::configure)",
                        self.state.node.id
                    )));
                }
            },
        };
        let spec = CallSpec {
            def,
            keys: parts.keys,
            output_keys: parts.output_keys,
            args: parts.args,
            carried: parts.carried,
            schema: parts.schema,
            placed: Some(self.wire_call(wire)),
            grouping: parts.grouping,
            partial: parts.partial,
        };
        Ok(Arc::new(UdfCallExec::new(spec, input)))
    }

    /// The placement in `bytes` and the script it carries, rebuilt for this node.
    fn read_wire(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<Option<(WirePlacement, Option<ScriptUdf>)>> {
        let Some(json) = bytes.strip_prefix(MAGIC) else {
            return Ok(None);
        };
        let mut wire: WirePlacement = serde_json::from_slice(json).map_err(|e| damaged(name, e))?;
        let script = match wire.script.take() {
            Some(value) => {
                let origin = ScriptOrigin::from_json(value).map_err(|e| damaged(name, e))?;
                Some(Arc::new(origin).rebuild(self.state.node.count)?)
            }
            None => None,
        };
        Ok(Some((wire, script)))
    }

    /// The call `wire` describes, on this node.
    fn wire_call(&self, wire: WirePlacement) -> Arc<PlacedCall> {
        Arc::new(PlacedCall {
            decision: PlacementDecision {
                call_id: wire.call_id,
                block: wire.block,
                udf: wire.udf,
                request: request_from(&wire.request),
                placement: if wire.gpu {
                    Placement::Gpu
                } else {
                    Placement::Cpu
                },
                reason: wire.reason,
            },
            devices: Arc::new(LeaseDevices::new()),
            node_id: self.state.node.id,
            instances: wire.instances.max(1),
            device_memory: wire.device_memory,
            pool: OnceLock::new(),
            statement: StatementInfo {
                statement_id: wire.statement_id,
                run_timeout: wire.run_timeout_ms.map(Duration::from_millis),
                memory_limit: wire.memory_limit,
                user: wire.user,
                processes: Default::default(),
            },
            gpu_class: wire.gpu_class,
            client_hold: wire.client_hold_ms.map(Duration::from_millis),
            stats: CallStats::default(),
            client: wire.client,
            copy: NEXT_COPY.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Gives the GPU-placed calls of a task's `plan` this node's devices, under the node lease
    /// of the task's statement (shared by its tasks here).
    pub(crate) async fn lease_for_plan(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        statement: &str,
        label: String,
    ) -> Result<NodeLease> {
        let calls: Vec<Arc<PlacedCall>> = placed_calls(plan)
            .into_iter()
            .filter(|c| c.decision.placement == Placement::Gpu)
            .collect();
        if calls.is_empty() {
            return Ok(NodeLease {
                _shared: None,
                waited: None,
            });
        }
        if self.state.devices.is_empty() {
            if let Some(required) = calls
                .iter()
                .find(|c| c.decision.request == AcceleratorRequest::Required)
            {
                return Err(EngineError::AcceleratorRequestFailed {
                    requested: AcceleratorRequest::Required,
                    detail: format!(
                        "node {} of the cluster has no GPU for {}()",
                        self.state.node.id, required.decision.udf
                    ),
                });
            }
            for call in &calls {
                let _ = call.devices.set(LeaseGrant::default());
            }
            return Ok(NodeLease {
                _shared: None,
                waited: None,
            });
        }
        let started = Instant::now();
        let shared = self.state.node_leases.share(statement);
        // The node's own sharing setting applies: under `memory`, the calls of the task that
        // takes the lease declare what it reserves.
        let (_, grant) = shared
            .lease
            .get_or_try_init(|| async {
                let (demand, layout) = statement_demand(&calls);
                let request = crate::exec::stream::lease_request(
                    label,
                    self.state.default_wait_timeout,
                    calls.first().and_then(|c| c.gpu_class.as_ref()),
                )
                .demand(demand);
                let lease = self.state.queue.acquire(request).await?;
                let grant = LeaseGrant::of_lease(&lease, &layout);
                Ok::<_, EngineError>((lease, grant))
            })
            .await?;
        for call in &calls {
            let _ = call.devices.set(grant.clone());
        }
        Ok(NodeLease {
            _shared: Some(shared),
            waited: Some(started.elapsed()),
        })
    }

    /// Kills the script workers of the placed calls of a task's `plan` on this node, and any
    /// they start from now on.
    pub(crate) fn kill_plan_workers(&self, plan: &Arc<dyn ExecutionPlan>) {
        for call in placed_calls(plan) {
            call.statement.processes.kill_all();
        }
    }

    /// Records what the placed calls of a task's `plan` have done on this node so far.
    pub(crate) fn record_task_calls(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        job: &str,
        lease: &NodeLease,
    ) {
        let node = self.state.node.id;
        let records = placed_calls(plan)
            .iter()
            .map(|call| {
                let devices: Vec<u32> = call
                    .devices
                    .get()
                    .map(|g| g.call_device_indices(call.decision.call_id))
                    .unwrap_or_default();
                let mut decision = call.decision.clone();
                if decision.placement == Placement::Gpu && devices.is_empty() {
                    decision.placement = Placement::Cpu;
                    decision.reason =
                        format!("optional; node {node} has no GPU, so it ran on the CPU");
                }
                let copy = call_record(call, decision, &devices, lease.waited);
                UdfCallRecord {
                    node: Some(node),
                    run: Some(NodeRun {
                        client: call.client,
                        job: job.to_string(),
                        copies: vec![(call.copy, copy.clone())],
                    }),
                    ..copy
                }
            })
            .collect::<Vec<UdfCallRecord>>();
        self.state.record_calls(records);
    }
}

/// The error of a placed call that arrived damaged.
fn damaged(name: &str, why: impl std::fmt::Display) -> EngineError {
    EngineError::Sql(datafusion::error::DataFusionError::Internal(format!(
        "a placed call of {name} arrived damaged: {why}"
    )))
}

/// The placed accelsql calls that `plan` runs: scalar calls in its expressions, and SET RETURNS
/// calls of aggregations that produce their result (a partial aggregation only gathers rows),
/// and EMITS calls.
/// The longest the statement of a task's `plan` may hold this node's lease: the engine's
/// bound, or its user's consumer group's `GPU_LEASE_HOLD_LIMIT` (carried by its placed
/// calls) if smaller.
pub(crate) fn hold_limit_for_plan(
    engine: Option<Duration>,
    plan: &Arc<dyn ExecutionPlan>,
) -> Option<Duration> {
    let calls = placed_calls(plan);
    let class = calls.iter().find_map(|c| c.gpu_class.as_ref());
    // The placing engine's own bound (a server's --max-lease-hold) applies here too.
    let client = calls.iter().filter_map(|c| c.client_hold).min();
    match (crate::exec::stream::hold_limit(engine, class), client) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn placed_calls(plan: &Arc<dyn ExecutionPlan>) -> Vec<Arc<PlacedCall>> {
    let mut out = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(agg) = node.downcast_ref::<AggregateExec>()
            && *agg.mode() != AggregateMode::Partial
        {
            for expr in agg.aggr_expr() {
                if let Some(call) =
                    as_accel_aggregate(expr.fun().inner().as_ref()).and_then(|a| a.placed_call())
                {
                    out.push(Arc::clone(call));
                }
            }
        }
        if let Some(call) = node
            .downcast_ref::<UdfCallExec>()
            .and_then(|exec| exec.call().placed.as_ref())
        {
            out.push(Arc::clone(call));
        }
        node.apply_expressions(&mut |e| {
            e.apply(|expr| {
                if let Some(f) = expr.downcast_ref::<ScalarFunctionExpr>()
                    && let Some(call) =
                        as_accel_udf(f.fun().inner().as_ref()).and_then(AccelScalarUdf::placed_call)
                {
                    out.push(Arc::clone(call));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::engine_options::EngineOptions;
    use crate::core::node_leases::NodeLeases;

    #[test]
    fn a_statements_tasks_share_one_lease_until_the_last_lets_go() {
        let leases = NodeLeases::default();
        let first = leases.share("job-1");
        let second = leases.share("job-1");
        assert!(Arc::ptr_eq(&first, &second));
        assert!(!Arc::ptr_eq(&first, &leases.share("job-2")));
        drop(first);
        // Still held by the second task: the same lease.
        assert!(Arc::ptr_eq(&second, &leases.share("job-1")));
        let weak = Arc::downgrade(&second);
        drop(second);
        // The last task let go: the lease is gone, and the next task of the job starts anew.
        assert!(weak.upgrade().is_none());
        let again = leases.share("job-1");
        assert!(weak.upgrade().is_none());
        assert!(again.lease.get().is_none());
    }

    /// A node's reading of one copy of a call for `job`.
    fn reading(job: &str, copy: u64, rows: u64, devices: Vec<u32>) -> UdfCallRecord {
        let call = unplaced_call("f");
        call.stats
            .rows_in
            .store(rows, std::sync::atomic::Ordering::Relaxed);
        let mut record = call_record(&call, call.decision.clone(), &[], None);
        record.devices = devices;
        record.instances = 1;
        record.node = Some(1);
        record.run = Some(NodeRun {
            client: 7,
            job: job.into(),
            copies: vec![(copy, record.clone())],
        });
        record
    }

    #[test]
    fn a_jobs_tasks_on_a_node_make_one_record_counting_each_copy_once() {
        let engine = EngineState::new(&EngineOptions::default()).unwrap();
        // Two tasks share copy 1 (the second reads its totals again, later); task 3 has copy 2.
        engine.record_calls(vec![reading("job-1", 1, 100, vec![0])]);
        engine.record_calls(vec![reading("job-1", 1, 250, vec![0])]);
        engine.record_calls(vec![reading("job-1", 2, 50, vec![1])]);
        // Another job's call is a record of its own.
        engine.record_calls(vec![reading("job-2", 3, 9, vec![0])]);
        let calls = engine.recent_calls();
        assert_eq!(calls.len(), 2, "{calls:#?}");
        assert_eq!(calls[0].rows_in, 300);
        assert_eq!(calls[0].instances, 2);
        assert_eq!(calls[0].devices, [0, 1]);
        assert_eq!(calls[1].rows_in, 9);
    }
}
