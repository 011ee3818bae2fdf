//! Built-in SQL functions of accelsql: `iproc()` and `nproc()`.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// `iproc()` (this node's number) or `nproc()` (the number of nodes).
#[derive(Debug, PartialEq, Eq, Hash)]
struct NodeFunction {
    name: &'static str,
    value: i64,
    signature: Signature,
}

impl ScalarUDFImpl for NodeFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Int64(Some(self.value))))
    }
}

/// `iproc()` for node `node` and `nproc()` for `nodes` nodes. Volatile: evaluated where the
/// row is processed (on a cluster node, that node's), never folded into a constant by the
/// planner.
pub(crate) fn node_functions(node: i64, nodes: i64) -> [ScalarUDF; 2] {
    let make = |name, value| {
        ScalarUDF::new_from_impl(NodeFunction {
            name,
            value,
            signature: Signature::nullary(Volatility::Volatile),
        })
    };
    [make("iproc", node), make("nproc", nodes)]
}
