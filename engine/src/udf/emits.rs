//! Placeholders of EMITS UDFs for DataFusion's SQL planner. An EMITS call plans as a function
//! returning a struct of its EMITS columns; the front end selects each column
//! (`get_field(f(x), 'a') AS a`) and the EMITS rule turns the select into a `UdfCall` node.
//! A placeholder that is ever evaluated was in a position the rule cannot rewrite.

use std::any::Any;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};

use super::definition::{coerce, signature};
use super::set::SetUdf;
use crate::emits_err;

fn struct_type(def: &SetUdf) -> DataType {
    DataType::Struct(def.emits().cloned().unwrap_or_default())
}

fn misplaced(def: &SetUdf) -> datafusion::error::DataFusionError {
    emits_err!(
        def.name(),
        "an EMITS call must be the only expression of its select list (beside GROUP BY keys)"
    )
    .into_datafusion()
}

/// A SCALAR EMITS UDF as the SQL planner sees it.
#[derive(Debug)]
pub(crate) struct EmitsScalar {
    def: Arc<SetUdf>,
    signature: Signature,
}

impl EmitsScalar {
    pub(crate) fn new(def: Arc<SetUdf>) -> Self {
        Self {
            signature: signature(def.inputs()),
            def,
        }
    }
}

/// A SET EMITS UDF as the SQL planner sees it (an aggregate, so GROUP BY plans around it).
#[derive(Debug)]
pub(crate) struct EmitsAggregate {
    def: Arc<SetUdf>,
    signature: Signature,
}

impl EmitsAggregate {
    pub(crate) fn new(def: Arc<SetUdf>) -> Self {
        Self {
            signature: signature(def.inputs()),
            def,
        }
    }
}

macro_rules! by_definition {
    ($t:ty) => {
        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                Arc::ptr_eq(&self.def, &other.def)
            }
        }
        impl Eq for $t {}
        impl Hash for $t {
            fn hash<H: Hasher>(&self, state: &mut H) {
                self.def.name().hash(state);
            }
        }
    };
}
by_definition!(EmitsScalar);
by_definition!(EmitsAggregate);

impl ScalarUDFImpl for EmitsScalar {
    fn name(&self) -> &str {
        self.def.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(struct_type(&self.def))
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        coerce(self.def.name(), self.def.inputs(), arg_types)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Err(misplaced(&self.def))
    }
}

impl AggregateUDFImpl for EmitsAggregate {
    fn name(&self) -> &str {
        self.def.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(struct_type(&self.def))
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        coerce(self.def.name(), self.def.inputs(), arg_types)
    }

    fn accumulator(&self, _args: AccumulatorArgs<'_>) -> DfResult<Box<dyn Accumulator>> {
        Err(misplaced(&self.def))
    }
}

/// The EMITS UDF behind a scalar placeholder, if `udf` is one.
pub(crate) fn emits_of(udf: &ScalarUDF) -> Option<&Arc<SetUdf>> {
    (udf.inner().as_ref() as &dyn Any)
        .downcast_ref::<EmitsScalar>()
        .map(|e| &e.def)
}

/// The EMITS UDF behind an aggregate placeholder, if `udf` is one.
pub(crate) fn emits_of_aggregate(udf: &AggregateUDF) -> Option<&Arc<SetUdf>> {
    (udf.inner().as_ref() as &dyn Any)
        .downcast_ref::<EmitsAggregate>()
        .map(|e| &e.def)
}
