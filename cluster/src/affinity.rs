//! The scheduler's task placement: partition p of every stage runs on node `p mod N`, so that
//! which node reads which file (and processes which shuffle partition) is fixed, not Ballista's
//! round-robin choice of the moment. A node whose executor is busy keeps its partitions waiting
//! for its next free slot; a node with no executor in the cluster (lost) has its partitions run
//! on any executor with a free slot.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use ballista_core::JobId;
use ballista_core::execution_plans::{RangeShuffleReaderExec, ShuffleReaderExec};
use ballista_core::serde::protobuf::{AvailableVcores, job_status};
use ballista_core::serde::scheduler::TaskKey;
use ballista_scheduler::cluster::{BoundTask, DistributionPolicy};
use ballista_scheduler::state::execution_graph::{TaskDescription, create_task_info};
use ballista_scheduler::state::execution_stage::RunningStage;
use ballista_scheduler::state::task_manager::JobInfoCache;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

/// The node number and node count an executor's id carries (`node-K-of-N-…`).
pub(crate) fn node_and_count(executor_id: &str) -> Option<(usize, usize)> {
    let mut parts = executor_id.strip_prefix("node-")?.split('-');
    let node = parts.next()?.parse().ok()?;
    if parts.next()? != "of" {
        return None;
    }
    let count = parts.next()?.parse().ok()?;
    Some((node, count))
}

/// Binds partition p of each running stage to an executor of node `p mod N`.
#[derive(Debug, Default)]
pub(crate) struct NodeAffinity {
    /// The executors in the cluster now (busy ones included: the budgets list only those with
    /// a free slot), kept by the scheduler's watch of executors joining and leaving.
    members: Mutex<HashSet<String>>,
}

impl NodeAffinity {
    /// Executor `executor_id` joined the cluster.
    pub(crate) fn joined(&self, executor_id: &str) {
        self.members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(executor_id.to_string());
    }

    /// Executor `executor_id` left the cluster.
    pub(crate) fn left(&self, executor_id: &str) {
        self.members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(executor_id);
    }
}

#[async_trait::async_trait]
impl DistributionPolicy for NodeAffinity {
    async fn bind_tasks(
        &self,
        mut budgets: Vec<&mut AvailableVcores>,
        running_jobs: Arc<HashMap<JobId, JobInfoCache>>,
    ) -> datafusion::error::Result<Vec<BoundTask>> {
        let mut bound = Vec::new();
        if budgets.iter().all(|b| b.vcores == 0) {
            return Ok(bound);
        }
        // (node, count) of every executor known to be in the cluster.
        let members: Vec<(usize, usize)> = {
            let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
            members
                .iter()
                .map(String::as_str)
                .chain(budgets.iter().map(|b| b.executor_id.as_str()))
                .filter_map(node_and_count)
                .collect()
        };
        let nodes = members.iter().map(|&(_, n)| n).max().unwrap_or(1).max(1);
        let present: HashSet<usize> = members.iter().map(|&(k, _)| k % nodes).collect();
        for (job_id, job) in running_jobs.iter() {
            if !matches!(job.status, Some(job_status::Status::Running(_))) {
                continue;
            }
            let mut graph = job.execution_graph.write().await;
            let session_id = graph.session_id().to_string();
            let mut seen = Vec::new();
            while let Some(stage) = graph.fetch_running_stage(&seen) {
                seen.push(stage.stage_id);
                let pending = stage.pending.next_slice(usize::MAX);
                if pending.is_empty() {
                    continue;
                }
                if has_input_collapse(&stage.plan) {
                    // One task must take every partition (its root merges them): node 0's
                    // executor if it has a slot, else any.
                    match pick(&budgets, 0, nodes, &present) {
                        Some(i) => {
                            bound.push(bind(stage, &session_id, job_id, budgets[i], pending))
                        }
                        None => stage.pending.reschedule(pending),
                    }
                    continue;
                }
                let mut waiting = Vec::new();
                for partition in pending {
                    match pick(&budgets, partition % nodes, nodes, &present) {
                        Some(i) => bound.push(bind(
                            stage,
                            &session_id,
                            job_id,
                            budgets[i],
                            vec![partition],
                        )),
                        None => waiting.push(partition),
                    }
                }
                stage.pending.reschedule(waiting);
            }
        }
        Ok(bound)
    }

    fn name(&self) -> &str {
        "accelsql-node-affinity"
    }
}

/// The executor of `node` with a free slot; when no executor of the cluster is that node (it was
/// lost), any executor with a free slot. `None`: wait for a slot.
fn pick(
    budgets: &[&mut AvailableVcores],
    node: usize,
    nodes: usize,
    present: &HashSet<usize>,
) -> Option<usize> {
    let of_node = |b: &AvailableVcores| node_and_count(&b.executor_id).map(|(k, _)| k % nodes);
    if let Some(i) = budgets
        .iter()
        .position(|b| b.vcores > 0 && of_node(b) == Some(node))
    {
        return Some(i);
    }
    if present.contains(&node) {
        return None;
    }
    budgets
        .iter()
        .enumerate()
        .filter(|(_, b)| b.vcores > 0)
        .max_by_key(|(_, b)| b.vcores)
        .map(|(i, _)| i)
}

/// A task of `partitions` of `stage` on the executor of `budget` (as Ballista's own binding
/// makes it: the stage's next task slot, the partitions' retry count, one slot used).
fn bind(
    stage: &mut RunningStage,
    session_id: &str,
    job_id: &JobId,
    budget: &mut AvailableVcores,
    partitions: Vec<usize>,
) -> BoundTask {
    let executor_id = budget.executor_id.clone();
    let task_id = stage.task_infos.len();
    let task_attempt = partitions
        .iter()
        .filter_map(|p| stage.task_failure_numbers.get(*p).copied())
        .max()
        .unwrap_or(0);
    let mut info = create_task_info(executor_id.clone(), task_id);
    info.global_input_partition_ids = partitions.clone();
    info.vcores_consumed = 1;
    stage.task_infos.push(info);
    budget.vcores -= 1;
    let task = TaskDescription {
        session_id: session_id.to_string(),
        key: TaskKey {
            job_id: job_id.clone(),
            stage_id: stage.stage_id,
            task_id,
        },
        stage_attempt_num: stage.stage_attempt_num,
        task_attempt,
        global_input_partition_ids: partitions,
        vcores_consumed: 1,
        plan: Arc::clone(&stage.plan),
        session_config: Arc::clone(&stage.session_config),
    };
    (executor_id, task)
}

/// Whether the stage's plan merges its input partitions into one below its root (so one task
/// must take them all), as Ballista decides it.
fn has_input_collapse(root: &Arc<dyn ExecutionPlan>) -> bool {
    fn walk(node: &Arc<dyn ExecutionPlan>) -> bool {
        if node.is::<ShuffleReaderExec>() || node.is::<RangeShuffleReaderExec>() {
            return false;
        }
        if node.output_partitioning().partition_count() == 1 {
            return true;
        }
        match node.children().as_slice() {
            [child] => walk(child),
            _ => false,
        }
    }
    match root.children().as_slice() {
        [child] => walk(child),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executor_ids_carry_their_node_and_the_node_count() {
        assert_eq!(node_and_count("node-2-of-3-5f0c"), Some((2, 3)));
        assert_eq!(node_and_count("node-0-of-1-a-b-c"), Some((0, 1)));
        assert_eq!(node_and_count("node-2-5f0c"), None);
        assert_eq!(node_and_count("executor-1"), None);
    }

    #[test]
    fn a_partition_goes_to_its_nodes_executor_or_waits_for_it() {
        let mut a = AvailableVcores {
            executor_id: "node-0-of-2-x".into(),
            vcores: 1,
        };
        let mut b = AvailableVcores {
            executor_id: "node-1-of-2-y".into(),
            vcores: 0,
        };
        let both = HashSet::from([0, 1]);
        let budgets = vec![&mut a, &mut b];
        assert_eq!(pick(&budgets, 0, 2, &both), Some(0));
        // Node 1 is there but busy: its partition waits.
        assert_eq!(pick(&budgets, 1, 2, &both), None);
        let mut c = AvailableVcores {
            executor_id: "node-0-of-2-x".into(),
            vcores: 2,
        };
        let budgets = vec![&mut c];
        // Node 1 was lost: its partition runs where there is room.
        assert_eq!(pick(&budgets, 1, 2, &HashSet::from([0])), Some(0));
    }
}
