//! The engine's side of running placed UDF calls in another process (a cluster's executor):
//! what travels with a placed call, how a node rebuilds it with its own UDF, and the node lease
//! a task takes for the GPU-placed calls in its plan.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use accelsql_gpu_scheduler::{Lease, LeaseRequest};
use accelsql_udf_runtime::{AcceleratorRequest, StatementInfo};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::ScalarUDF;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_plan::ExecutionPlan;
use serde::{Deserialize, Serialize};

use crate::placement::{CallStats, Placement, PlacementDecision};
use crate::statement::LeaseDevices;
use crate::udf::{AccelScalarUdf, PlacedCall, as_accel_udf};
use crate::{Engine, EngineError, Result};

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
}

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
/// rule placed; `None` for anything else (DataFusion's functions, unplaced calls).
pub fn encode_placement(udf: &ScalarUDF) -> Option<Vec<u8>> {
    let call = as_accel_udf(udf.inner().as_ref())?.placed_call()?;
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
    };
    let mut out = MAGIC.to_vec();
    serde_json::to_writer(&mut out, &wire).ok()?;
    Some(out)
}

/// The tasks' node lease: held while a task with GPU-placed calls runs; dropping it releases
/// the node's GPUs to the next task in line.
#[derive(Debug)]
pub struct NodeLease {
    _lease: Option<Lease>,
}

impl Engine {
    /// This node's copy of a placed call that arrived as `bytes` (from [`encode_placement`]):
    /// the UDF registered here under `name`, placed as the client decided, on this node's
    /// devices once [`lease_for_plan`](Self::lease_for_plan) gives them. `Ok(None)` when the
    /// bytes are not a placement or no UDF of that name is registered here.
    pub fn decode_placed_udf(&self, name: &str, bytes: &[u8]) -> Result<Option<ScalarUDF>> {
        let Some(json) = bytes.strip_prefix(MAGIC) else {
            return Ok(None);
        };
        let wire: WirePlacement = serde_json::from_slice(json).map_err(|e| {
            EngineError::Sql(datafusion::error::DataFusionError::Internal(format!(
                "a placed call of {name} arrived damaged: {e}"
            )))
        })?;
        let def = {
            let registry = self.inner.udfs.read().unwrap_or_else(|e| e.into_inner());
            registry.scalar.iter().find(|u| u.name() == name).cloned()
        };
        let Some(def) = def else {
            return Ok(None);
        };
        let call = Arc::new(PlacedCall {
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
            node_id: self.inner.node.id,
            instances: wire.instances.max(1),
            pool: OnceLock::new(),
            statement: StatementInfo {
                statement_id: wire.statement_id,
                run_timeout: wire.run_timeout_ms.map(Duration::from_millis),
                processes: Default::default(),
            },
            stats: CallStats::default(),
        });
        Ok(Some(ScalarUDF::new_from_impl(
            AccelScalarUdf::new(def).placed(call),
        )))
    }

    /// Gives the GPU-placed calls of a task's `plan` this node's devices: waits (in FIFO order,
    /// as statements do on one node) for the node lease and hands its devices to them; the
    /// lease is held until the returned guard is dropped. A plan without GPU-placed calls takes
    /// nothing. On a node without GPUs, a required call fails with 22069 naming the node, and
    /// optional ones run on the CPU.
    pub async fn lease_for_plan(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        label: String,
    ) -> Result<NodeLease> {
        let calls: Vec<Arc<PlacedCall>> = placed_calls(plan)
            .into_iter()
            .filter(|c| c.decision.placement == Placement::Gpu)
            .collect();
        if calls.is_empty() {
            return Ok(NodeLease { _lease: None });
        }
        if self.devices().is_empty() {
            if let Some(required) = calls
                .iter()
                .find(|c| c.decision.request == AcceleratorRequest::Required)
            {
                return Err(EngineError::AcceleratorRequestFailed {
                    requested: AcceleratorRequest::Required,
                    detail: format!(
                        "node {} of the cluster has no GPU for {}()",
                        self.inner.node.id, required.decision.udf
                    ),
                });
            }
            for call in &calls {
                let _ = call.devices.set(Vec::new());
            }
            return Ok(NodeLease { _lease: None });
        }
        let request = LeaseRequest::new(label).timeout_opt(self.inner.default_wait_timeout);
        let lease = self.lease_queue().acquire(request).await?;
        for call in &calls {
            let _ = call.devices.set(lease.devices().to_vec());
        }
        Ok(NodeLease {
            _lease: Some(lease),
        })
    }
}

/// The placed accelsql calls in `plan`'s expressions.
fn placed_calls(plan: &Arc<dyn ExecutionPlan>) -> Vec<Arc<PlacedCall>> {
    let mut out = Vec::new();
    let _ = plan.apply(|node| {
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
