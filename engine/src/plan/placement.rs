//! The GPU placement rule: per query block, at most one UDF call gets the GPUs (required calls
//! first, then left to right); other required calls fail with 22069, optional ones fall back to
//! the CPU. Decisions are recorded for EXPLAIN and `accelsql.udf_calls`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use accelsql_udf_runtime::AcceleratorRequest;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::expr::{AggregateFunction, ScalarFunction};
use datafusion::logical_expr::{AggregateUDF, Expr, Extension, LogicalPlan, ScalarUDF};
use datafusion::optimizer::AnalyzerRule;

use super::emits_node::UdfCallNode;
use super::statement::{PlacementFailure, StatementScope};
use crate::core::calls::{Placement, PlacementDecision};
use crate::core::error::EngineError;
use crate::udf::call::{CallStats, PlacedCall};

/// The analyzer rule, one per statement (it records into the statement's scope).
#[derive(Debug)]
pub(crate) struct PlacementRule {
    scope: Arc<StatementScope>,
    blocks: Mutex<usize>,
    /// `datafusion.execution.target_partitions` of the statement: the default instance count.
    partitions: AtomicUsize,
}

/// A UDF call the rule places: a scalar function, an aggregate (SET RETURNS) or a `UdfCall`
/// node (EMITS).
#[derive(Debug, Clone)]
struct CallSite {
    udf: String,
    request: AcceleratorRequest,
    instance_limit: Option<usize>,
    device_memory: Option<u64>,
}

impl CallSite {
    fn of_expr(e: &Expr) -> Option<Self> {
        match e {
            Expr::ScalarFunction(ScalarFunction { func, .. }) => {
                crate::udf::as_accel_udf(func.inner().as_ref())
                    .filter(|u| !u.is_placed())
                    .map(|u| {
                        let d = u.definition();
                        Self::new(
                            d.name(),
                            d.accelerator(),
                            d.instance_limit(),
                            d.device_memory(),
                        )
                    })
            }
            Expr::AggregateFunction(AggregateFunction { func, .. }) => {
                crate::udf::as_accel_aggregate(func.inner().as_ref())
                    .filter(|u| !u.is_placed())
                    .map(|u| {
                        let d = u.definition();
                        Self::new(
                            d.name(),
                            d.accelerator(),
                            d.instance_limit(),
                            d.device_memory(),
                        )
                    })
            }
            _ => None,
        }
    }

    fn of_node(plan: &LogicalPlan) -> Option<Self> {
        let node = unplaced_node(plan)?;
        let d = &node.def;
        Some(Self::new(
            d.name(),
            d.accelerator(),
            d.instance_limit(),
            d.device_memory(),
        ))
    }

    fn new(
        udf: &str,
        request: AcceleratorRequest,
        instance_limit: Option<usize>,
        device_memory: Option<u64>,
    ) -> Self {
        Self {
            udf: udf.to_string(),
            request,
            instance_limit,
            device_memory,
        }
    }
}

/// Whether `plan` (its subqueries included) calls an accelsql UDF the placement rule places: a
/// scalar or SET UDF, an EMITS call (before or after the EMITS rule made it a node).
pub(crate) fn has_udf_calls(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        if unplaced_node(node).is_some() {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                let emits = match e {
                    Expr::ScalarFunction(f) => crate::udf::emits_of(&f.func).is_some(),
                    Expr::AggregateFunction(f) => crate::udf::emits_of_aggregate(&f.func).is_some(),
                    _ => false,
                };
                found |= emits || CallSite::of_expr(e).is_some();
                Ok(if found {
                    TreeNodeRecursion::Stop
                } else {
                    TreeNodeRecursion::Continue
                })
            })
        })
    });
    found
}

/// The `UdfCall` node `plan` is, if it is one and not yet placed.
fn unplaced_node(plan: &LogicalPlan) -> Option<&UdfCallNode> {
    match plan {
        LogicalPlan::Extension(Extension { node }) => node
            .as_any()
            .downcast_ref::<UdfCallNode>()
            .filter(|n| n.placed.is_none()),
        _ => None,
    }
}

impl PlacementRule {
    pub(crate) fn new(scope: Arc<StatementScope>) -> Self {
        Self {
            scope,
            blocks: Mutex::new(0),
            partitions: AtomicUsize::new(1),
        }
    }

    /// Places the calls of the block rooted at `plan`, then of the blocks nested in it.
    fn place_block(&self, plan: LogicalPlan) -> DfResult<LogicalPlan> {
        let block = {
            let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
            *blocks += 1;
            *blocks
        };
        let mut found = Vec::new();
        collect_block_calls(&plan, &mut found)?;
        let decisions = self
            .decide(block, &found)
            .map_err(EngineError::into_datafusion)?;
        let mut next = decisions.into_iter();
        self.rewrite_block_node(plan, &mut next)
    }

    fn decide(&self, block: usize, found: &[CallSite]) -> crate::Result<Vec<Arc<PlacedCall>>> {
        let mut order: Vec<usize> = (0..found.len()).collect();
        // Required calls first, then left to right (the sort is stable).
        order.sort_by_key(|&i| found[i].request != AcceleratorRequest::Required);
        let present = self.scope.devices_present;
        let mut gpu_holder: Option<String> = None;
        let mut placements = vec![None; found.len()];
        for i in order {
            let name = found[i].udf.clone();
            let (placement, reason) = match found[i].request {
                AcceleratorRequest::None => {
                    (Placement::Cpu, "no accelerator requested".to_string())
                }
                AcceleratorRequest::Required if !self.scope.gpu_allowed => {
                    let failure = PlacementFailure::NoGpuPrivilege { udf: name };
                    self.scope.placement_failed(failure.clone());
                    return Err(failure.into());
                }
                AcceleratorRequest::Preferred if !self.scope.gpu_allowed => (
                    Placement::Cpu,
                    "the session's user lacks the USE GPU privilege".to_string(),
                ),
                AcceleratorRequest::Required if present == 0 => {
                    let failure = PlacementFailure::NoGpu { udf: name };
                    self.scope.placement_failed(failure.clone());
                    return Err(failure.into());
                }
                AcceleratorRequest::Required => match &gpu_holder {
                    None => (Placement::Gpu, "required, first in its block".to_string()),
                    Some(holder) => {
                        let failure = PlacementFailure::Taken {
                            detail: format!(
                                "UDF {name} requires the GPUs, which {holder}() in the same query block already has; \
                                 only one GPU call per select is possible — move one call into its own sub-select"
                            ),
                        };
                        self.scope.placement_failed(failure.clone());
                        return Err(failure.into());
                    }
                },
                AcceleratorRequest::Preferred if present == 0 => {
                    (Placement::Cpu, "no GPU present".to_string())
                }
                AcceleratorRequest::Preferred => match &gpu_holder {
                    None => (Placement::Gpu, "optional, first in its block".to_string()),
                    Some(holder) => (
                        Placement::Cpu,
                        format!("GPUs taken by {holder}() in this block"),
                    ),
                },
            };
            if placement == Placement::Gpu {
                gpu_holder = Some(name.clone());
            }
            placements[i] = Some((placement, reason));
        }
        let mut calls = self.scope.calls.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(found.len());
        let partitions = self.partitions.load(Ordering::Relaxed).max(1);
        for (site, slot) in found.iter().zip(placements) {
            let (placement, reason) = slot.unwrap_or((Placement::Cpu, String::new()));
            let call = Arc::new(PlacedCall {
                decision: PlacementDecision {
                    call_id: calls.len() + 1,
                    block,
                    udf: site.udf.clone(),
                    request: site.request,
                    placement,
                    reason,
                },
                devices: Arc::clone(&self.scope.lease_devices),
                node_id: self.scope.node_id,
                instances: site
                    .instance_limit
                    .map_or(partitions, |limit| limit.min(partitions)),
                device_memory: site.device_memory,
                pool: std::sync::OnceLock::new(),
                statement: accelsql_udf_runtime::StatementInfo {
                    statement_id: self.scope.id,
                    run_timeout: self.scope.run_timeout,
                    memory_limit: self.scope.memory_limit,
                    user: self.scope.user.clone(),
                    processes: self.scope.processes.clone(),
                },
                stats: CallStats::default(),
                client: self.scope.client,
                gpu_class: self.scope.gpu_class.clone(),
                client_hold: self.scope.client_hold,
                copy: 0,
            });
            calls.push(Arc::clone(&call));
            out.push(call);
        }
        Ok(out)
    }

    /// Rewrites the calls of one node of the current block, then its children: children in the
    /// same block continue it; block boundaries and subqueries start new blocks.
    fn rewrite_block_node(
        &self,
        plan: LogicalPlan,
        calls: &mut std::vec::IntoIter<Arc<PlacedCall>>,
    ) -> DfResult<LogicalPlan> {
        let next = |calls: &mut std::vec::IntoIter<Arc<PlacedCall>>| {
            calls.next().ok_or_else(|| {
                datafusion::error::DataFusionError::Internal("placement: call count changed".into())
            })
        };
        let plan = plan
            .map_expressions(|expr| {
                expr.transform_down(|e| {
                    if is_subquery_expr(&e) {
                        return Ok(Transformed::new(e, false, TreeNodeRecursion::Jump));
                    }
                    if CallSite::of_expr(&e).is_none() {
                        return Ok(Transformed::no(e));
                    }
                    match e {
                        Expr::ScalarFunction(ScalarFunction { func, args }) => {
                            let func = match crate::udf::as_accel_udf(func.inner().as_ref()) {
                                Some(u) => {
                                    Arc::new(ScalarUDF::new_from_impl(u.placed(next(calls)?)))
                                }
                                None => func,
                            };
                            Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction {
                                func,
                                args,
                            })))
                        }
                        Expr::AggregateFunction(AggregateFunction { func, params }) => {
                            let func = match crate::udf::as_accel_aggregate(func.inner().as_ref()) {
                                Some(u) => {
                                    Arc::new(AggregateUDF::new_from_impl(u.placed(next(calls)?)))
                                }
                                None => func,
                            };
                            Ok(Transformed::yes(Expr::AggregateFunction(
                                AggregateFunction { func, params },
                            )))
                        }
                        e => Ok(Transformed::no(e)),
                    }
                })
            })?
            .data;
        // An EMITS node is placed after the calls in its own expressions (its arguments).
        let plan = match unplaced_node(&plan) {
            Some(node) => LogicalPlan::Extension(Extension {
                node: Arc::new(node.placed(next(calls)?)),
            }),
            None => plan,
        };
        let plan = plan
            .map_subqueries(|sub| self.place_block(sub).map(Transformed::yes))?
            .data;
        let new_block_children = starts_blocks(&plan);
        plan.map_children(|child| {
            if new_block_children {
                self.place_block(child).map(Transformed::yes)
            } else {
                self.rewrite_block_node(child, calls).map(Transformed::yes)
            }
        })
        .map(|t| t.data)
    }
}

impl AnalyzerRule for PlacementRule {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> DfResult<LogicalPlan> {
        self.partitions
            .store(config.execution.target_partitions, Ordering::Relaxed);
        self.place_block(plan)
    }

    fn name(&self) -> &str {
        "accelsql_gpu_placement"
    }
}

/// Whether the children of `plan` each begin a query block of their own.
fn starts_blocks(plan: &LogicalPlan) -> bool {
    matches!(
        plan,
        LogicalPlan::SubqueryAlias(_) | LogicalPlan::Union(_) | LogicalPlan::RecursiveQuery(_)
    )
}

fn is_subquery_expr(e: &Expr) -> bool {
    matches!(
        e,
        Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
    )
}

/// The unplaced accelsql calls of the block rooted at `plan`, in the order the rewrite meets them.
fn collect_block_calls(plan: &LogicalPlan, out: &mut Vec<CallSite>) -> DfResult<()> {
    plan.apply_expressions(|expr| {
        expr.apply(|e| {
            if is_subquery_expr(e) {
                return Ok(TreeNodeRecursion::Jump);
            }
            out.extend(CallSite::of_expr(e));
            Ok(TreeNodeRecursion::Continue)
        })
    })?;
    out.extend(CallSite::of_node(plan));
    if !starts_blocks(plan) {
        for child in plan.inputs() {
            collect_block_calls(child, out)?;
        }
    }
    Ok(())
}
