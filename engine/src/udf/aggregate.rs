//! The DataFusion adapter of a SET RETURNS [`SetUdf`]: an aggregate function whose accumulator
//! gathers each group's rows and hands them to one instance as one run.

use std::any::Any;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, ColumnarValue, Signature};

use super::call::{PlacedCall, on_instance, same_placement};
use super::definition::{coerce, signature};
use super::set::{Output, RunChunk, RunInput, SetUdf};
use crate::core::error::EngineError;
use crate::udf_result_err;

/// A SET RETURNS [`SetUdf`] as DataFusion sees it: unplaced as registered; the placement rule
/// replaces each call with a placed copy of the same name.
#[derive(Debug, Clone)]
pub(crate) struct AccelAggregateUdf {
    def: Arc<SetUdf>,
    returns: DataType,
    signature: Signature,
    placed: Option<Arc<PlacedCall>>,
}

impl AccelAggregateUdf {
    /// The adapter of `def`, which must be SET RETURNS.
    pub(crate) fn new(def: Arc<SetUdf>) -> crate::Result<Self> {
        let Output::Returns(returns) = def.output().clone() else {
            return Err(crate::definition_err!(
                "UDF {} EMITS rows; it is not an aggregate",
                def.name()
            ));
        };
        Ok(Self {
            signature: signature(def.inputs()),
            returns,
            def,
            placed: None,
        })
    }

    pub(crate) fn definition(&self) -> &Arc<SetUdf> {
        &self.def
    }

    pub(crate) fn is_placed(&self) -> bool {
        self.placed.is_some()
    }

    /// The call this copy was placed as, if placed.
    pub(crate) fn placed_call(&self) -> Option<&Arc<PlacedCall>> {
        self.placed.as_ref()
    }

    pub(crate) fn placed(&self, call: Arc<PlacedCall>) -> Self {
        Self {
            placed: Some(call),
            ..self.clone()
        }
    }
}

impl PartialEq for AccelAggregateUdf {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.def, &other.def) && same_placement(&self.placed, &other.placed)
    }
}

impl Eq for AccelAggregateUdf {}

impl Hash for AccelAggregateUdf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.def.name().hash(state);
        self.placed.as_ref().map(|c| c.decision.call_id).hash(state);
    }
}

impl AggregateUDFImpl for AccelAggregateUdf {
    fn name(&self) -> &str {
        self.def.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.returns.clone())
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        coerce(self.def.name(), self.def.inputs(), arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs<'_>) -> DfResult<Box<dyn Accumulator>> {
        if args.is_distinct {
            return Err(DataFusionError::NotImplemented(format!(
                "DISTINCT in a call of SET UDF {}",
                self.def.name()
            )));
        }
        Ok(Box::new(GroupAccumulator {
            udf: self.clone(),
            fields: args.expr_fields.to_vec(),
            input: RunInput::new(),
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs<'_>) -> DfResult<Vec<FieldRef>> {
        // Partial aggregation ships each group's rows as one list per argument.
        Ok(args
            .input_fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                Arc::new(Field::new_list(
                    format!("{}[rows of argument {i}]", args.name),
                    Field::new_list_field(f.data_type().clone(), true),
                    true,
                ))
            })
            .collect())
    }
}

/// The rows of one group, as they arrived, until the group is complete.
#[derive(Debug)]
struct GroupAccumulator {
    udf: AccelAggregateUdf,
    fields: Vec<FieldRef>,
    input: RunInput,
}

impl GroupAccumulator {
    /// Each argument's rows as one array.
    fn columns(&self) -> DfResult<Vec<ArrayRef>> {
        if self.input.num_rows() == 0 {
            return Ok(self
                .fields
                .iter()
                .map(|f| datafusion::arrow::array::new_empty_array(f.data_type()))
                .collect());
        }
        self.input.to_arrays()
    }

    fn push(&mut self, values: Vec<ArrayRef>) -> DfResult<()> {
        let rows = values.first().map_or(0, |v| v.len());
        let args = values.into_iter().map(ColumnarValue::Array).collect();
        self.input.push(RunChunk::new(rows, args))
    }
}

impl Accumulator for GroupAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.push(values.to_vec())
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let rows = self.input.num_rows();
        let def = &self.udf.def;
        if rows == 0 {
            // Only the one group of a call without GROUP BY can be empty: as Exasol, its
            // result is one NULL and the UDF is not called.
            return ScalarValue::try_from(&self.udf.returns);
        }
        let result = (|| {
            let ran = on_instance(
                self.udf.placed.as_deref(),
                None,
                def.name(),
                def.accelerator(),
                def.cpu.as_ref(),
                def.gpu.as_deref(),
                |kernel, context| kernel.run_input(context, &self.input),
            )?;
            let bad = |message: String| udf_result_err!(def.name(), "{message}");
            let [value] = ran.value.as_slice() else {
                return Err(bad(format!(
                    "{} columns where RETURNS needs one value",
                    ran.value.len()
                )));
            };
            if value.len() != 1 {
                return Err(bad(format!(
                    "{} values where RETURNS needs one per group",
                    value.len()
                )));
            }
            if value.data_type() != &self.udf.returns {
                return Err(bad(format!(
                    "type {} where RETURNS says {}",
                    value.data_type(),
                    self.udf.returns
                )));
            }
            if let Some(call) = &self.udf.placed {
                call.stats
                    .record(rows, 1, ran.elapsed, ran.instance, ran.used_gpu_impl);
            }
            Ok(ScalarValue::try_from_array(value, 0)?)
        })();
        result.map_err(EngineError::into_datafusion)
    }

    fn size(&self) -> usize {
        // DataFusion asks after every batch: counted as rows arrive, not by walking them.
        std::mem::size_of_val(self) + self.input.memory_size()
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let columns = self.columns()?;
        columns
            .into_iter()
            .map(|values| {
                let item = Arc::new(Field::new_list_field(values.data_type().clone(), true));
                let offsets = OffsetBuffer::from_lengths([values.len()]);
                let list = ListArray::try_new(item, offsets, values, None)?;
                Ok(ScalarValue::List(Arc::new(list)))
            })
            .collect()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let lists = states
            .iter()
            .map(|state| {
                state.as_list_opt::<i32>().ok_or_else(|| {
                    DataFusionError::Internal(format!(
                        "state of SET UDF {} is {}, not a list",
                        self.udf.def.name(),
                        state.data_type()
                    ))
                })
            })
            .collect::<DfResult<Vec<_>>>()?;
        let Some(first) = lists.first() else {
            return Ok(());
        };
        for i in 0..first.len() {
            // Each state row holds one partial group's rows, one list per argument (all of
            // the same length).
            if first.is_valid(i) {
                self.push(lists.iter().map(|l| l.value(i)).collect())?;
            }
        }
        Ok(())
    }
}

/// Downcasts a DataFusion aggregate UDF to ours.
pub(crate) fn as_accel_aggregate(udf: &dyn AggregateUDFImpl) -> Option<&AccelAggregateUdf> {
    (udf as &dyn Any).downcast_ref::<AccelAggregateUdf>()
}

/// [`runs_only_in_this_process`](crate::udf::runs_only_in_this_process) for aggregate functions
/// (SET RETURNS scripts).
pub fn aggregate_runs_only_in_this_process(udf: &datafusion::logical_expr::AggregateUDF) -> bool {
    as_accel_aggregate(udf.inner().as_ref())
        .is_some_and(|u| u.definition().is_local() && u.definition().origin().is_none())
}
