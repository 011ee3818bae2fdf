//! The physical plan codec of a cluster: Ballista's, plus what to do with a function name the
//! decoding process does not know. The scheduler only splits plans into stages, so it keeps an
//! unknown function as a [`Forwarded`] stand-in that travels on to the executors; an executor
//! must run it, so there an unknown function is a clear error naming the node.

use std::sync::Arc;

use accelsql_engine::{Engine, NodeRowsParts, SetGrouping, UdfCallParts};
use ballista_core::serde::BallistaPhysicalExtensionCodec;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::{exec_err, internal_err, plan_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{
    AggregateUDF, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::PhysicalExprNode;
use prost::Message;

/// Who decodes with the codec, which decides what an unknown function name becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Decoder {
    /// The scheduler: a stand-in that is encoded again, by name, for the executors.
    Scheduler,
    /// The executor of node K: an error (the function is not registered there).
    Node(usize),
}

/// Ballista's physical codec with accelsql's handling of unknown functions.
#[derive(Debug)]
pub(crate) struct ClusterCodec {
    inner: BallistaPhysicalExtensionCodec,
    decoder: Decoder,
    /// The node's engine, on an executor: placed calls become its own UDFs.
    node: Option<Engine>,
}

impl ClusterCodec {
    pub(crate) fn new(decoder: Decoder) -> Self {
        Self {
            inner: BallistaPhysicalExtensionCodec::default(),
            decoder,
            node: None,
        }
    }

    /// The codec of the scheduler, whose engine (node 0's configuration) rebuilds the calls it
    /// knows — Rust UDFs registered there, scripts carried by their calls — so that their
    /// types are known when stages are planned.
    pub(crate) fn for_scheduler(engine: Engine) -> Self {
        Self {
            node: Some(engine),
            ..Self::new(Decoder::Scheduler)
        }
    }

    /// The codec of an executor whose node runs `engine`.
    pub(crate) fn for_node(node: usize, engine: Engine) -> Self {
        Self {
            node: Some(engine),
            ..Self::new(Decoder::Node(node))
        }
    }

    fn unknown<T>(&self, kind: &str, name: &str) -> Result<T> {
        match self.decoder {
            Decoder::Scheduler => exec_err!(
                "[42883] the {kind} {name} is not known to the cluster's scheduler: register it \
                 on every node of the cluster"
            ),
            Decoder::Node(node) => exec_err!("{}", unknown_message(kind, name, node)),
        }
    }
}

/// What starts an EMITS call's operator (and tells it from Ballista's own operators).
const UDF_CALL: &[u8] = b"accelsql-udf-call-v1\n";

/// An EMITS call's operator as it travels.
#[derive(Clone, PartialEq, prost::Message)]
struct UdfCallNode {
    #[prost(string, tag = "1")]
    name: String,
    /// The placement, and a script's definition.
    #[prost(bytes = "vec", tag = "2")]
    placement: Vec<u8>,
    #[prost(message, repeated, tag = "3")]
    keys: Vec<PhysicalExprNode>,
    #[prost(uint64, repeated, tag = "4")]
    output_keys: Vec<u64>,
    #[prost(message, repeated, tag = "5")]
    args: Vec<PhysicalExprNode>,
    #[prost(message, repeated, tag = "6")]
    carried: Vec<PhysicalExprNode>,
    #[prost(message, optional, tag = "7")]
    schema: Option<datafusion_proto::protobuf::Schema>,
    /// A grouped SET call whose input comes sorted by its keys (`accelsql.set_grouping =
    /// 'sort'`); false: it gathers each group's rows itself.
    #[prost(bool, tag = "8")]
    sorted_groups: bool,
    /// One partition's partial run of a call split by its top-k merge.
    #[prost(bool, tag = "9")]
    partial: bool,
}

/// What starts a per-node system table's scan (`accelsql.gpu_devices`, `gpu_leases`,
/// `udf_calls`).
const NODE_ROWS: &[u8] = b"accelsql-node-rows-v3\n";

impl ClusterCodec {
    /// A per-node system table's scan over `inputs` (its node numbers), producing the rows of
    /// the engine that decodes it.
    fn decode_node_rows(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let damaged = || DataFusionError::Internal("a system table's scan arrived damaged".into());
        let text = std::str::from_utf8(buf).map_err(|_| damaged())?;
        let mut lines = text.split('\n');
        let (Some(table), Some(columns), Some(client)) = (lines.next(), lines.next(), lines.next())
        else {
            return Err(damaged());
        };
        let client: u64 = client.parse().map_err(|_| damaged())?;
        let projection = match columns {
            "*" => None,
            "" => Some(Vec::new()),
            list => Some(
                list.split(',')
                    .map(|c| c.parse::<usize>().map_err(|_| damaged()))
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        let [nodes] = inputs else {
            return Err(damaged());
        };
        let Some(engine) = &self.node else {
            return internal_err!("{table} cannot be read without a node's engine");
        };
        engine
            .node_rows_exec(
                NodeRowsParts {
                    table: table.to_string(),
                    projection,
                    client,
                },
                Arc::clone(nodes),
            )
            .map_err(accelsql_engine::EngineError::into_datafusion)
    }

    fn encode_udf_call(
        &self,
        parts: UdfCallParts,
        buf: &mut Vec<u8>,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let exprs = |list: &[Arc<dyn PhysicalExpr>]| {
            list.iter()
                .map(|e| converter.physical_expr_to_proto(e, self))
                .collect::<Result<Vec<_>>>()
        };
        let node = UdfCallNode {
            name: parts.name.clone(),
            placement: parts.placement.clone(),
            keys: exprs(&parts.keys)?,
            output_keys: parts.output_keys.iter().map(|&k| k as u64).collect(),
            args: exprs(&parts.args)?,
            carried: exprs(&parts.carried)?,
            schema: Some(parts.schema.as_ref().try_into()?),
            sorted_groups: parts.grouping == SetGrouping::Sort,
            partial: parts.partial,
        };
        buf.extend_from_slice(UDF_CALL);
        node.encode(buf)
            .map_err(|e| DataFusionError::Internal(format!("encoding {}: {e}", parts.name)))
    }

    fn decode_udf_call(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let node = UdfCallNode::decode(buf).map_err(|e| {
            DataFusionError::Internal(format!("an EMITS call arrived damaged: {e}"))
        })?;
        let [input] = inputs else {
            return internal_err!(
                "the EMITS call {} has one input, got {}",
                node.name,
                inputs.len()
            );
        };
        let Some(engine) = &self.node else {
            return self.unknown("function", &node.name);
        };
        let input_schema = input.schema();
        let decode_ctx = PhysicalPlanDecodeContext::new(ctx, self);
        let exprs = |list: &[PhysicalExprNode]| {
            list.iter()
                .map(|e| converter.proto_to_physical_expr(e, &input_schema, &decode_ctx))
                .collect::<Result<Vec<_>>>()
        };
        let Some(schema) = &node.schema else {
            return internal_err!("the EMITS call {} arrived without its schema", node.name);
        };
        let parts = UdfCallParts {
            keys: exprs(&node.keys)?,
            output_keys: node
                .output_keys
                .iter()
                .map(|&k| usize::try_from(k).unwrap_or(usize::MAX))
                .collect(),
            args: exprs(&node.args)?,
            carried: exprs(&node.carried)?,
            schema: Arc::new(Schema::try_from(schema)?),
            name: node.name,
            placement: node.placement,
            partial: node.partial,
            grouping: if node.sorted_groups {
                SetGrouping::Sort
            } else {
                SetGrouping::Gather
            },
        };
        engine
            .udf_call_exec(parts, Arc::clone(input))
            .map_err(accelsql_engine::EngineError::into_datafusion)
    }
}

impl PhysicalExtensionCodec for ClusterCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(rest) = buf.strip_prefix(NODE_ROWS) {
            return self.decode_node_rows(rest, inputs);
        }
        match buf.strip_prefix(UDF_CALL) {
            Some(rest) => self.decode_udf_call(rest, inputs, ctx, proto_converter),
            None => self.inner.try_decode(buf, inputs, ctx, proto_converter),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(parts) = accelsql_engine::node_rows_parts(node.as_ref()) {
            // The table, the projected columns (`*` for all) and the planning engine, a line
            // each; the node numbers travel as the node's input.
            let columns = parts.projection.map_or_else(
                || "*".to_string(),
                |p| {
                    p.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
            );
            buf.extend_from_slice(NODE_ROWS);
            buf.extend_from_slice(
                format!("{}\n{columns}\n{}", parts.table, parts.client).as_bytes(),
            );
            return Ok(());
        }
        match accelsql_engine::udf_call_parts(node.as_ref()) {
            Some(parts) => self.encode_udf_call(parts, buf, proto_converter),
            None => self.inner.try_encode(node, buf, proto_converter),
        }
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        // A placed accelsql call: the node's own UDF (or the script the call carries), placed
        // as the client decided.
        if let Some(engine) = &self.node
            && let Some(placed) = engine
                .decode_placed_udf(name, buf)
                .map_err(accelsql_engine::EngineError::into_datafusion)?
        {
            return Ok(Arc::new(placed));
        }
        // Unknown here. On a node too, a stand-in: a decoding error loses its message in
        // Ballista (the task is only "rejected"), so the stand-in fails when called, with the
        // message the user needs. On the scheduler it keeps the placement for the executors.
        Ok(Arc::new(ScalarUDF::new_from_impl(Forwarded::new(
            name,
            self.decoder,
            buf.to_vec(),
        ))))
    }

    fn try_encode_udf(&self, udf: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        if accelsql_engine::udf::runs_only_in_this_process(udf) {
            return exec_err!(
                "{} is a script of this process: it cannot run on the cluster",
                udf.name()
            );
        }
        let inner: &dyn std::any::Any = udf.inner().as_ref();
        if let Some(forwarded) = inner.downcast_ref::<Forwarded>() {
            buf.extend_from_slice(&forwarded.payload);
        } else if let Some(placement) = accelsql_engine::encode_placement(udf) {
            buf.extend_from_slice(&placement);
        }
        Ok(())
    }

    fn try_encode_udaf(&self, udf: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        if accelsql_engine::udf::aggregate_runs_only_in_this_process(udf) {
            return exec_err!(
                "{} is a script of this process: it cannot run on the cluster",
                udf.name()
            );
        }
        if let Some(placement) = accelsql_engine::encode_aggregate_placement(udf) {
            buf.extend_from_slice(&placement);
        }
        Ok(())
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        if let Some(engine) = &self.node
            && let Some(placed) = engine
                .decode_placed_udaf(name, buf)
                .map_err(accelsql_engine::EngineError::into_datafusion)?
        {
            return Ok(Arc::new(placed));
        }
        self.unknown("aggregate function", name)
    }
}

/// A scalar function the scheduler does not know, kept by name so that the executors resolve
/// it. It is never evaluated (the scheduler runs no stage), and its type is never asked for (a
/// decoded call carries its return type).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Forwarded {
    name: String,
    signature: Signature,
    decoder: Decoder,
    /// What the call carried (a placement), sent on as it came.
    payload: Vec<u8>,
}

impl Forwarded {
    fn new(name: &str, decoder: Decoder, payload: Vec<u8>) -> Self {
        Self {
            name: name.to_string(),
            signature: Signature::variadic_any(Volatility::Volatile),
            decoder,
            payload,
        }
    }
}

impl ScalarUDFImpl for Forwarded {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        plan_err!("{} runs on the executors only", self.name)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match self.decoder {
            Decoder::Scheduler => internal_err!("{} runs on the executors only", self.name),
            Decoder::Node(node) => exec_err!("{}", unknown_message("function", &self.name, node)),
        }
    }
}

/// What a node says of a function it does not know.
fn unknown_message(kind: &str, name: &str, node: usize) -> String {
    format!(
        "[42883] the {kind} {name} is not known to node {node}: register it on every node of \
         the cluster (NodeOptions::configure)"
    )
}
