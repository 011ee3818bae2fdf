//! The client side: [`ClusterClient`] makes a session run its queries on a cluster, through
//! [`ClusterQueryExec`], the leaf that submits a placed physical plan to the scheduler.

use std::fmt;
use std::sync::Arc;

use accelsql_engine::{EngineError, EngineOptions, NodeIdentity, PlanDistributor};
use ballista_core::config::{BALLISTA_JOB_NAME, BALLISTA_SCHEDULER_MAX_PARTITIONS_PER_TASK};
use ballista_core::extension::SessionConfigExt;
use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::common::hash_utils::create_hashes;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::Result as DfResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::expressions::{CaseExpr, Column, Literal};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::limit::LocalLimitExec;
use datafusion::physical_plan::memory::LazyMemoryExec;
use datafusion::physical_plan::repartition::{REPARTITION_RANDOM_STATE, RepartitionExec};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, displayable,
};
use datafusion::prelude::SessionConfig;
use datafusion_proto::physical_plan::{AsExecutionPlan, PhysicalExtensionCodec};
use datafusion_proto::protobuf::PhysicalPlanNode;
use futures::{StreamExt, TryStreamExt};

use crate::Result;
use crate::codec::{ClusterCodec, Decoder};
use crate::error::config_err;
use crate::guard::STATEMENT_JOB_PREFIX;
use crate::info::cluster_nodes;
use crate::security::ClusterAuth;
use crate::submit::{Connections, submit};

/// A cluster a session runs its queries on: the scheduler's address and the node count.
///
/// ```no_run
/// # async fn f() -> accelsql_cluster::Result<()> {
/// use accelsql_cluster::{ClusterAuth, ClusterClient};
/// use accelsql_engine::{Engine, EngineOptions};
///
/// let cluster = ClusterClient::connect("127.0.0.1:50050", ClusterAuth::none(), None).await?;
/// let engine = Engine::with_options(cluster.engine_options(EngineOptions::default()))?;
/// let rows = engine.session().sql("SELECT iproc(), count(*) FROM 'data/' GROUP BY iproc()").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ClusterClient {
    address: String,
    auth: ClusterAuth,
    nodes: usize,
    partitions_per_node: usize,
    devices_per_node: usize,
    codec: Arc<dyn PhysicalExtensionCodec>,
    /// The connections its statements share.
    connections: Arc<Connections>,
}

impl fmt::Debug for ClusterClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterClient")
            .field("address", &self.address)
            .field("auth", &self.auth)
            .field("nodes", &self.nodes)
            .field("partitions_per_node", &self.partitions_per_node)
            .finish()
    }
}

impl ClusterClient {
    /// A client of the scheduler at `address` (`HOST:PORT`), authenticated by `auth` (a
    /// cluster secret or certificates; [`ClusterAuth::none`] for a loopback cluster without
    /// one). The node count comes from the scheduler; `nodes` is only needed when no executor
    /// has registered yet, and must agree with the scheduler's otherwise (22E03).
    ///
    /// Fails with 08001 if the scheduler does not answer within 5 seconds, and with 28K01 if
    /// it refuses this client's credentials (a missing or wrong secret).
    pub async fn connect(address: &str, auth: ClusterAuth, nodes: Option<usize>) -> Result<Self> {
        if nodes == Some(0) {
            return config_err!("a cluster has at least one node");
        }
        let nodes = match (cluster_nodes(address, &auth).await?, nodes) {
            (Some(known), Some(given)) if known != given => {
                return config_err!(
                    "the cluster at {address} has {known} node(s), not {given} (--nodes can be \
                     left out: the scheduler knows)"
                );
            }
            (Some(known), _) => known,
            (None, Some(given)) => given,
            (None, None) => {
                return config_err!(
                    "the scheduler at {address} does not know the cluster's size yet (no \
                     executor has registered, and it was started without --nodes): give --nodes N"
                );
            }
        };
        Ok(Self {
            address: address.to_string(),
            auth,
            nodes,
            partitions_per_node: 1,
            devices_per_node: 1,
            codec: Arc::new(ClusterCodec::new(Decoder::Scheduler)),
            connections: Arc::default(),
        })
    }

    /// Plans each query with `n` partitions per node (1 by default: a scan of N files on N
    /// nodes gives each node one file).
    pub fn with_partitions_per_node(mut self, n: usize) -> Self {
        self.partitions_per_node = n.max(1);
        self
    }

    /// Tells the placement rule how many GPUs each node has (1 by default: it places calls as
    /// if the nodes had GPUs; a node without one fails a required call with 22069 naming
    /// itself and runs optional ones on the CPU). 0: the cluster has no GPUs (required calls
    /// fail with 22069 when planned, optional ones are placed on the CPU).
    pub fn with_devices_per_node(mut self, n: usize) -> Self {
        self.devices_per_node = n;
        self
    }

    /// The scheduler's address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// `base` with this cluster as the place queries run, and its node count for `nproc()`.
    pub fn engine_options(&self, base: EngineOptions) -> EngineOptions {
        EngineOptions {
            node: NodeIdentity {
                id: 0,
                count: self.nodes,
            },
            distributor: Some(Arc::new(self.clone())),
            ..base
        }
    }
}

impl PlanDistributor for ClusterClient {
    fn distribute(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _task: &TaskContext,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // A plan Ballista cannot carry (a system table, a script's plan node, a table provider
        // of this process) runs here, as on one node: its answer is the same, only not spread.
        if let Err(e) =
            PhysicalPlanNode::try_from_physical_plan(Arc::clone(&plan), self.codec.as_ref())
        {
            log::debug!("running a plan in the client: the cluster cannot carry it: {e}");
            return Ok(plan);
        }
        if let Some(why) = cannot_travel(&plan) {
            log::debug!("running a plan in the client: {why}");
            return Ok(plan);
        }
        let plan = keep_source_limits(plan)?;
        let plan = route_node_groups(plan, self.nodes)?;
        Ok(Arc::new(
            ClusterQueryExec::new(
                plan,
                self.address.clone(),
                Arc::clone(&self.codec),
                self.auth.clone(),
            )
            .with_connections(Arc::clone(&self.connections)),
        ))
    }

    /// Ballista's settings for the plans it runs (no dynamic filters across stages, scalar
    /// subqueries as joins, no round-robin repartitions, ...), applied where the plan is made.
    fn configure_session(&self, config: SessionConfig) -> SessionConfig {
        config.upgrade_for_ballista()
    }

    fn target_partitions(&self) -> Option<usize> {
        Some(self.nodes * self.partitions_per_node)
    }

    fn devices_per_node(&self) -> Option<usize> {
        Some(self.devices_per_node)
    }
}

/// Why `plan` must run here although it can be encoded: a part that DataFusion's plan encoding
/// changes on the way (a compressed CSV or JSON scan arrives as an uncompressed one; a
/// generated series that keeps no column arrives with one).
fn cannot_travel(plan: &Arc<dyn ExecutionPlan>) -> Option<String> {
    let mut why = None;
    let _ = plan.apply(|node| {
        // A generated series that keeps none of its columns (`SELECT count(*) FROM range(n)`)
        // arrives with its column back, and fails there.
        if node.is::<LazyMemoryExec>() && node.schema().fields().is_empty() {
            why = Some(
                "it counts the rows of a generated series, which the cluster's plan \
                        encoding changes"
                    .to_string(),
            );
            return Ok(TreeNodeRecursion::Stop);
        }
        if let Some(scan) = node.downcast_ref::<DataSourceExec>() {
            let source: &dyn std::any::Any = scan.data_source().as_ref();
            if let Some(config) = source.downcast_ref::<FileScanConfig>()
                && config.file_compression_type.is_compressed()
            {
                why = Some(format!(
                    "it reads compressed files ({:?}), which the cluster's plan encoding loses",
                    config.file_compression_type.get_variant()
                ));
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    why
}

/// `plan` with each shuffle on `iproc()` alone (`GROUP BY iproc()`) routed so that key k lands
/// in a shuffle partition of node k: partition p runs on node `p mod N`, and instead of `k` the
/// shuffle hashes a stand-in value whose hash puts it in such a partition. Equal keys still
/// meet in one partition, so the answer is unchanged; group k's aggregate (a SET script) runs on
/// node k, as in Exasol.
fn route_node_groups(
    plan: Arc<dyn ExecutionPlan>,
    nodes: usize,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(repartition) = node.downcast_ref::<RepartitionExec>() else {
            return Ok(Transformed::no(node));
        };
        let Partitioning::Hash(exprs, partitions) = repartition.partitioning() else {
            return Ok(Transformed::no(node));
        };
        let ([key], partitions) = (exprs.as_slice(), *partitions) else {
            return Ok(Transformed::no(node));
        };
        if !is_node_number(key) || partitions < nodes || nodes < 2 {
            return Ok(Transformed::no(node));
        }
        let mut when_then = Vec::with_capacity(nodes);
        for k in 0..nodes {
            let Some(stand_in) = stand_in_for(k, nodes, partitions) else {
                return Ok(Transformed::no(node));
            };
            when_then.push((
                Arc::new(Literal::new(ScalarValue::Int64(Some(k as i64)))) as Arc<dyn PhysicalExpr>,
                Arc::new(Literal::new(ScalarValue::Int64(Some(stand_in)))) as Arc<dyn PhysicalExpr>,
            ));
        }
        let routed: Arc<dyn PhysicalExpr> = Arc::new(CaseExpr::try_new(
            Some(Arc::clone(key)),
            when_then,
            Some(Arc::clone(key)),
        )?);
        let input = Arc::clone(repartition.input());
        let routed = RepartitionExec::try_new(input, Partitioning::Hash(vec![routed], partitions))?;
        let routed = if repartition.preserve_order() {
            routed.with_preserve_order()
        } else {
            routed
        };
        Ok(Transformed::yes(Arc::new(routed) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}

/// Whether `expr` is `iproc()`, or a column of that name (an aggregation's group key).
fn is_node_number(expr: &Arc<dyn PhysicalExpr>) -> bool {
    if let Some(f) = expr.downcast_ref::<ScalarFunctionExpr>() {
        return f.name() == "iproc" && f.args().is_empty();
    }
    expr.downcast_ref::<Column>()
        .is_some_and(|c| c.name() == "iproc()")
}

/// The smallest value ≥ 0 whose shuffle hash (DataFusion's, which Ballista's shuffle writer
/// uses too) puts it in a partition of node `k`: one `p` with `p mod nodes == k`.
fn stand_in_for(k: usize, nodes: usize, partitions: usize) -> Option<i64> {
    let state = REPARTITION_RANDOM_STATE.random_state();
    (0..100_000i64).find(|&v| {
        let array: ArrayRef = Arc::new(Int64Array::from(vec![v]));
        let mut hashes = vec![0u64; 1];
        create_hashes(&[array], state, &mut hashes).is_ok()
            && (hashes[0] % partitions as u64) as usize % nodes == k
    })
}

/// `plan` with each in-memory scan's row limit (`fetch`, a `LIMIT` pushed into the scan) kept
/// by a `LocalLimitExec` above it as well: Ballista gives each task a copy of the scan holding
/// only its partitions, and that copy loses the limit.
fn keep_source_limits(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let limit = node
            .downcast_ref::<DataSourceExec>()
            .filter(|scan| {
                let source: &dyn std::any::Any = scan.data_source().as_ref();
                source.is::<MemorySourceConfig>()
            })
            .and_then(|scan| scan.fetch());
        Ok(match limit {
            Some(fetch) => Transformed::yes(Arc::new(LocalLimitExec::new(node, fetch)) as _),
            None => Transformed::no(node),
        })
    })
    .map(|t| t.data)
}

/// The code of a query stopped because a node left the cluster while it ran.
pub const NODE_LOST: &str = "58K02";

/// The accelsql error a cluster failure stands for: the coded error an executor raised, or
/// 58K02 for a job the scheduler stopped because a node was lost (this client never cancels a
/// job itself: dropping the stream makes the scheduler cancel it, and then no one reads the
/// error), or for results whose node broke the connection while they were read. `None`: keep
/// Ballista's error.
fn relay_error(e: &datafusion::error::DataFusionError) -> Option<EngineError> {
    let text = e.to_string();
    if let Some(coded) = EngineError::from_remote_message(&text) {
        return Some(coded);
    }
    if is_broken_connection(&text) {
        return Some(EngineError::Relayed {
            code: NODE_LOST,
            message: format!(
                "[{NODE_LOST}] the query stopped: a node of the cluster stopped answering while \
                 its results were read (its executor stopped or the network failed); run it \
                 again. Detail: {}",
                text.lines().next().unwrap_or_default()
            ),
        });
    }
    if !text.trim_end().ends_with("failed: Cancelled") {
        return EngineError::from_remote_datafusion_text(&text);
    }
    Some(EngineError::Relayed {
        code: NODE_LOST,
        message: format!(
            "[{NODE_LOST}] the query stopped: a node of the cluster left while it ran (its \
             executor stopped or stopped answering), and the scheduler stopped the query \
             rather than risk a wrong answer (its log names the node); run it again"
        ),
    })
}

/// Whether Ballista's error `text` is a connection that broke or could not be made (to an
/// executor serving results, or to the scheduler), rather than an error of the query.
pub(crate) fn is_broken_connection(text: &str) -> bool {
    const SIGNS: [&str; 7] = [
        "h2 protocol error",
        "error trying to connect",
        "transport error",
        "peer closed connection",
        "Connection refused",
        "Connection reset",
        "broken pipe",
    ];
    SIGNS.iter().any(|sign| text.contains(sign))
}

/// A leaf that runs its plan on a cluster: executing it submits the plan to the scheduler and
/// streams the result of the final stage back.
pub struct ClusterQueryExec {
    plan: Arc<dyn ExecutionPlan>,
    scheduler: String,
    auth: ClusterAuth,
    codec: Arc<dyn PhysicalExtensionCodec>,
    properties: Arc<PlanProperties>,
    connections: Arc<Connections>,
}

impl ClusterQueryExec {
    /// Runs `plan` on the cluster whose scheduler is at `scheduler`, encoding it with `codec`,
    /// connecting to the scheduler and executors with `auth`.
    pub fn new(
        plan: Arc<dyn ExecutionPlan>,
        scheduler: String,
        codec: Arc<dyn PhysicalExtensionCodec>,
        auth: ClusterAuth,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(plan.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Self {
            plan,
            scheduler,
            auth,
            codec,
            properties,
            connections: Arc::default(),
        }
    }

    /// Submits over `connections`, which other statements share, rather than its own.
    pub(crate) fn with_connections(mut self, connections: Arc<Connections>) -> Self {
        self.connections = connections;
        self
    }

    /// The plan the cluster runs.
    pub fn plan(&self) -> &Arc<dyn ExecutionPlan> {
        &self.plan
    }
}

impl fmt::Debug for ClusterQueryExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterQueryExec")
            .field("scheduler", &self.scheduler)
            .finish()
    }
}

impl DisplayAs for ClusterQueryExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match t {
            DisplayFormatType::TreeRender => write!(f, "scheduler={}", self.scheduler),
            _ => write!(
                f,
                "ClusterQueryExec: scheduler={}\n{}",
                self.scheduler,
                displayable(self.plan.as_ref()).indent(false)
            ),
        }
    }
}

impl ExecutionPlan for ClusterQueryExec {
    fn name(&self) -> &str {
        "ClusterQueryExec"
    }

    fn schema(&self) -> SchemaRef {
        self.plan.schema()
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return datafusion::common::internal_err!(
                "ClusterQueryExec has one partition, not {partition}"
            );
        }
        // One partition per task: a stage's partitions spread over the nodes instead of
        // filling the first executor's cores (a scan of N files on N nodes: one file each).
        let config = context
            .session_config()
            .clone()
            .upgrade_for_ballista()
            .set_usize(BALLISTA_SCHEDULER_MAX_PARTITIONS_PER_TASK, 1)
            // A unique name: the scheduler cancels the job by it if this stream is dropped
            // before the job ends.
            .set_str(
                BALLISTA_JOB_NAME,
                &format!(
                    "{STATEMENT_JOB_PREFIX}{}",
                    ballista_core::ids::new_instance_id()
                ),
            );
        // The scheduler and the executors serving results take only the cluster's certificate.
        let config = match self.auth.endpoint_override() {
            Some(secure) => config.with_ballista_override_create_grpc_client_endpoint(secure),
            None => config,
        };
        let url = format!("http://{}", self.scheduler);
        let plan = Arc::clone(&self.plan);
        let codec = Arc::clone(&self.codec);
        let connections = Arc::clone(&self.connections);
        let session_id = context.session_id();
        let submitted =
            async move { submit(connections, url, plan, codec.as_ref(), session_id, config).await };
        // An executor's failure arrives as Ballista's text around ours: give the caller the
        // accelsql error inside it, with its code.
        let stream = futures::stream::once(submitted)
            .try_flatten()
            .map_err(|e| relay_error(&e).map_or(e, EngineError::into_datafusion));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream.boxed(),
        )))
    }
}
