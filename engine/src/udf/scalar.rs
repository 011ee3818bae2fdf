//! The DataFusion adapter of a [`ScalarUdf`]: signature, volatility, and invocation on the
//! instance (and device) its placement gives it.

use datafusion::arrow::datatypes::DataType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature};
use std::any::Any;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::call::{PlacedCall, on_instance, same_placement};
use super::definition::{ScalarUdf, coerce, signature};
use crate::core::error::EngineError;
use crate::udf_result_err;

/// A [`ScalarUdf`] as DataFusion sees it. Unplaced as registered; the placement rule replaces each
/// call with a placed copy (same name, so plans and column names do not change).
#[derive(Debug, Clone)]
pub(crate) struct AccelScalarUdf {
    def: Arc<ScalarUdf>,
    signature: Signature,
    placed: Option<Arc<PlacedCall>>,
}

impl AccelScalarUdf {
    pub(crate) fn new(def: Arc<ScalarUdf>) -> Self {
        let signature = signature(def.inputs());
        Self {
            def,
            signature,
            placed: None,
        }
    }

    pub(crate) fn definition(&self) -> &Arc<ScalarUdf> {
        &self.def
    }

    /// The placed call, if the placement rule placed this copy.
    pub(crate) fn placed_call(&self) -> Option<&Arc<PlacedCall>> {
        self.placed.as_ref()
    }

    pub(crate) fn is_placed(&self) -> bool {
        self.placed.is_some()
    }

    pub(crate) fn placed(&self, call: Arc<PlacedCall>) -> Self {
        Self {
            def: Arc::clone(&self.def),
            signature: self.signature.clone(),
            placed: Some(call),
        }
    }

    fn run(&self, args: ScalarFunctionArgs) -> crate::Result<ColumnarValue> {
        let rows = args.number_rows;
        let ran = on_instance(
            self.placed.as_deref(),
            None,
            self.def.name(),
            self.def.accelerator(),
            self.def.cpu.as_ref(),
            self.def.gpu.as_deref(),
            |kernel, context| kernel.evaluate(context, rows, &args.args),
        )?;
        let array = ran.value;
        if array.len() != rows {
            return Err(udf_result_err!(
                self.def.name(),
                "{} rows for a batch of {rows}",
                array.len()
            ));
        }
        if array.data_type() != self.def.returns() {
            return Err(udf_result_err!(
                self.def.name(),
                "type {} where RETURNS says {}",
                array.data_type(),
                self.def.returns()
            ));
        }
        if let Some(call) = &self.placed {
            call.stats.record(
                rows,
                array.len(),
                ran.elapsed,
                ran.instance,
                ran.used_gpu_impl,
            );
        }
        Ok(ColumnarValue::Array(array))
    }
}

impl PartialEq for AccelScalarUdf {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.def, &other.def) && same_placement(&self.placed, &other.placed)
    }
}

impl Eq for AccelScalarUdf {}

impl Hash for AccelScalarUdf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.def.name().hash(state);
        self.placed.as_ref().map(|c| c.decision.call_id).hash(state);
    }
}

impl ScalarUDFImpl for AccelScalarUdf {
    fn name(&self) -> &str {
        self.def.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.def.returns().clone())
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        coerce(self.def.name(), self.def.inputs(), arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.run(args).map_err(EngineError::into_datafusion)
    }
}

/// Downcasts a DataFusion UDF to ours.
pub(crate) fn as_accel(udf: &dyn ScalarUDFImpl) -> Option<&AccelScalarUdf> {
    (udf as &dyn Any).downcast_ref::<AccelScalarUdf>()
}

/// Whether a plan that calls `udf` can only run in this process: the UDF was defined by a
/// script of this process that does not carry its definition (a call site's `EMITS (...)`).
/// Catalog scripts travel with the plan (their definition with the placed call); Rust UDFs and
/// DataFusion's functions run wherever they are registered.
pub fn runs_only_in_this_process(udf: &datafusion::logical_expr::ScalarUDF) -> bool {
    as_accel(udf.inner().as_ref())
        .is_some_and(|u| u.definition().is_local() && u.definition().origin().is_none())
}
