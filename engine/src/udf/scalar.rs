//! The DataFusion adapter of a [`ScalarUdf`]: signature, volatility, and invocation on the
//! instance (and device) its placement gives it.

use std::any::Any;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

use accelsql_udf_runtime::{AcceleratorRequest, InstanceContext, InstancePool};
use datafusion::arrow::datatypes::DataType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};

use super::{Inputs, ScalarUdf};
use crate::EngineError;
use crate::placement::{CallStats, Placement, PlacementDecision};
use crate::statement::LeaseDevices;

/// One placed call of a UDF in one statement: where it runs, its instance pool, its counters.
#[derive(Debug)]
pub(crate) struct PlacedCall {
    pub(crate) decision: PlacementDecision,
    pub(crate) devices: Arc<LeaseDevices>,
    pub(crate) node_id: usize,
    pub(crate) pool: std::sync::OnceLock<InstancePool>,
    pub(crate) stats: CallStats,
}

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
        // Volatile: two identical calls stay two calls (no common-subexpression merging).
        let signature = match def.inputs() {
            Inputs::Exact(types) => Signature::exact(types.clone(), Volatility::Volatile),
            Inputs::Variadic => Signature::one_of(
                vec![TypeSignature::Nullary, TypeSignature::VariadicAny],
                Volatility::Volatile,
            ),
        };
        Self {
            def,
            signature,
            placed: None,
        }
    }

    pub(crate) fn definition(&self) -> &Arc<ScalarUdf> {
        &self.def
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
        let partitions = args.config_options.execution.target_partitions.max(1);
        let size = self
            .def
            .instance_limit()
            .map_or(partitions, |limit| limit.min(partitions));
        let (outcome, elapsed, instance, used_gpu_impl) = match &self.placed {
            None => {
                // Reached only through APIs that bypass Session::sql (e.g. a DataFrame built by hand).
                if self.def.accelerator() == AcceleratorRequest::Required {
                    return Err(EngineError::NoGpuPresent {
                        udf: self.def.name().to_string(),
                    });
                }
                let context = InstanceContext {
                    instance_id: 0,
                    node_id: 0,
                    device: None,
                };
                let start = Instant::now();
                let out = self.def.cpu.evaluate(&context, rows, &args.args);
                (out, start.elapsed(), 0, false)
            }
            Some(call) => {
                // The lease's devices are read once, when the call's pool is first built.
                let devices: &[_] = match call.decision.placement {
                    Placement::Gpu => call.devices.get().ok_or_else(|| {
                        EngineError::Sql(datafusion::error::DataFusionError::Internal(format!(
                            "GPU call of {} ran without the statement's lease",
                            self.def.name()
                        )))
                    })?,
                    Placement::Cpu => &[],
                };
                let pool = call
                    .pool
                    .get_or_init(|| InstancePool::new(size, devices.to_vec(), call.node_id));
                let slot = pool.checkout();
                let context = slot.context();
                // Simulated devices have no CUDA behind them: their instances run the CPU
                // implementation (and the call statistics say so).
                let gpu_kernel = match (&self.def.gpu, &context.device) {
                    (Some(kernel), Some(device)) if !device.simulated => Some(kernel),
                    _ => None,
                };
                let start = Instant::now();
                let out = match gpu_kernel {
                    Some(kernel) => kernel.evaluate(context, rows, &args.args),
                    None => self.def.cpu.evaluate(context, rows, &args.args),
                };
                (
                    out,
                    start.elapsed(),
                    context.instance_id,
                    gpu_kernel.is_some(),
                )
            }
        };
        let array = outcome.map_err(EngineError::from)?;
        if array.len() != rows {
            return Err(EngineError::BadUdfResult {
                udf: self.def.name().to_string(),
                message: format!("{} rows for a batch of {rows}", array.len()),
            });
        }
        if array.data_type() != self.def.returns() {
            return Err(EngineError::BadUdfResult {
                udf: self.def.name().to_string(),
                message: format!(
                    "type {} where RETURNS says {}",
                    array.data_type(),
                    self.def.returns()
                ),
            });
        }
        if let Some(call) = &self.placed {
            call.stats
                .record(rows, array.len(), elapsed, instance, used_gpu_impl);
        }
        Ok(ColumnarValue::Array(array))
    }
}

impl PartialEq for AccelScalarUdf {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.def, &other.def)
            && match (&self.placed, &other.placed) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
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

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.run(args).map_err(EngineError::into_datafusion)
    }
}

/// Downcasts a DataFusion UDF to ours.
pub(crate) fn as_accel(udf: &dyn ScalarUDFImpl) -> Option<&AccelScalarUdf> {
    (udf as &dyn Any).downcast_ref::<AccelScalarUdf>()
}
