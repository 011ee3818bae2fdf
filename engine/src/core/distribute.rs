//! The hook through which a statement's physical plan runs somewhere else: on a cluster's
//! executors instead of in this process (the `accelsql-cluster` crate implements it).

use std::fmt::Debug;
use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;

/// Runs the physical plans of a session's queries elsewhere.
///
/// The session plans every statement itself — the placement rule decides each UDF call once,
/// here — then hands the finished physical plan to [`distribute`](PlanDistributor::distribute),
/// which returns the plan this process executes in its place (typically one leaf that submits
/// the plan to a cluster and streams the result back), or the plan itself to run it here. DDL,
/// `SET`, `EXPLAIN`, `INSERT` and `COPY … TO` stay local. A distributed statement takes no GPU
/// lease in this process: the nodes lease theirs (see [`Engine::lease_for_plan`](crate::Engine::lease_for_plan)).
pub trait PlanDistributor: Debug + Send + Sync {
    /// The plan to execute instead of `plan`; `task` is the statement's context (its session
    /// id and configuration).
    fn distribute(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        task: &TaskContext,
    ) -> Result<Arc<dyn ExecutionPlan>>;

    /// The configuration the session plans with, from the one it would use on one node: the
    /// settings the place plans run needs (a cluster's: no plan parts it cannot split into
    /// stages, such as dynamic filters that cross a stage boundary). Unchanged by default.
    fn configure_session(&self, config: SessionConfig) -> SessionConfig {
        config
    }

    /// How many partitions the session plans with (`datafusion.execution.target_partitions`):
    /// enough to give every node of the cluster work. `None` keeps DataFusion's default.
    fn target_partitions(&self) -> Option<usize> {
        None
    }

    /// How many GPUs each node has, for the placement rule (a required call is placed on the
    /// GPUs when there are some); `None`: this process's devices. Each node leases its own
    /// devices when it runs its part of the plan.
    fn devices_per_node(&self) -> Option<usize> {
        None
    }
}
