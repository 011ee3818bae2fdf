//! The physical plan codec of a cluster: Ballista's, plus what to do with a function name the
//! decoding process does not know. The scheduler only splits plans into stages, so it keeps an
//! unknown function as a [`Forwarded`] stand-in that travels on to the executors; an executor
//! must run it, so there an unknown function is a clear error naming the node.

use std::sync::Arc;

use accelsql_engine::Engine;
use ballista_core::serde::BallistaPhysicalExtensionCodec;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, internal_err, plan_err};
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{
    AggregateUDF, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

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

impl PhysicalExtensionCodec for ClusterCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.inner.try_decode(buf, inputs, ctx, proto_converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        self.inner.try_encode(node, buf, proto_converter)
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        // A placed accelsql call: the node's own UDF, placed as the client decided.
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

    fn try_encode_udaf(&self, udf: &AggregateUDF, _buf: &mut Vec<u8>) -> Result<()> {
        if accelsql_engine::udf::aggregate_runs_only_in_this_process(udf) {
            return exec_err!(
                "{} is a script of this process: it cannot run on the cluster",
                udf.name()
            );
        }
        Ok(())
    }

    fn try_decode_udaf(&self, name: &str, _buf: &[u8]) -> Result<Arc<AggregateUDF>> {
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
