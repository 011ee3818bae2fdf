//! The Rust functions the plain-DataFusion peers run as `ScalarUDF`s (and, for the overhead
//! suites, accelsql too): one plain `ScalarUDFImpl` over a row kernel.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use accelsql_engine::datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use accelsql_engine::datafusion::arrow::datatypes::{DataType, Float64Type};
use accelsql_engine::datafusion::common::exec_datafusion_err;
use accelsql_engine::datafusion::error::Result as DfResult;
use accelsql_engine::datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use accelsql_engine::udf_runtime::kernels::Operand;
use accelsql_engine::udf_runtime::kernels::geo::haversine_km_value;
use accelsql_engine::udf_runtime::kernels::vectors::{VectorOp, vector_similarity};

/// A columnar kernel: the arguments, the row count, the result column.
pub type Kernel = fn(&[ColumnarValue], usize) -> DfResult<ArrayRef>;

/// A plain DataFusion `ScalarUDF` (no accelsql around it) taking `arity` arguments of any type
/// and returning DOUBLE.
#[derive(Debug)]
struct PlainUdf {
    name: &'static str,
    signature: Signature,
    kernel: Kernel,
}

impl PartialEq for PlainUdf {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for PlainUdf {}

impl Hash for PlainUdf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for PlainUdf {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        (self.kernel)(&args.args, args.number_rows).map(ColumnarValue::Array)
    }
}

/// A plain DataFusion UDF `name` of `arity` arguments running `kernel` (Volatile, as accelsql's
/// UDFs are, so neither side gets constant folding the other lacks).
pub fn plain_udf(name: &'static str, arity: usize, kernel: Kernel) -> ScalarUDF {
    ScalarUDF::new_from_impl(PlainUdf {
        name,
        signature: Signature::any(arity, Volatility::Volatile),
        kernel,
    })
}

fn f64_column(arg: &ColumnarValue, rows: usize, what: &str) -> DfResult<Float64Array> {
    let array = arg.to_array(rows)?;
    array
        .as_primitive_opt::<Float64Type>()
        .cloned()
        .ok_or_else(|| exec_datafusion_err!("{what}: expected DOUBLE, got {}", array.data_type()))
}

/// `3x² + 2x + 1` per row, NULL in → NULL out: the UDF-overhead and concurrency kernel.
pub fn poly(args: &[ColumnarValue], rows: usize) -> DfResult<ArrayRef> {
    let x = f64_column(&args[0], rows, "poly")?;
    let out: Float64Array = x
        .iter()
        .map(|v| v.map(|v| 3.0 * v * v + 2.0 * v + 1.0))
        .collect();
    Ok(Arc::new(out))
}

/// `haversine_km(lat1, lon1, lat2, lon2)` with accelsql's own per-row function
/// (`udf_runtime::kernels::geo::haversine_km_value`): the same Rust code, without accelsql.
pub fn haversine(args: &[ColumnarValue], rows: usize) -> DfResult<ArrayRef> {
    let c: Vec<Float64Array> = args
        .iter()
        .map(|a| f64_column(a, rows, "haversine"))
        .collect::<DfResult<_>>()?;
    let (a, b, x, y) = (c[0].values(), c[1].values(), c[2].values(), c[3].values());
    let out: Float64Array = (0..rows)
        .map(|i| haversine_km_value(a[i], b[i], x[i], y[i]))
        .collect();
    Ok(Arc::new(out))
}

/// The standard normal CDF, `erfc(-x/√2)/2`.
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

/// The Black–Scholes price of a European call (no dividends).
pub fn black_scholes_call_value(spot: f64, strike: f64, years: f64, rate: f64, vol: f64) -> f64 {
    let vs = vol * years.sqrt();
    let d1 = ((spot / strike).ln() + (rate + 0.5 * vol * vol) * years) / vs;
    let d2 = d1 - vs;
    spot * normal_cdf(d1) - strike * (-rate * years).exp() * normal_cdf(d2)
}

/// `black_scholes_call(spot, strike, years, rate, volatility)`: the textbook formula in Rust.
pub fn black_scholes_call(args: &[ColumnarValue], rows: usize) -> DfResult<ArrayRef> {
    let c: Vec<Float64Array> = args
        .iter()
        .map(|a| f64_column(a, rows, "black_scholes_call"))
        .collect::<DfResult<_>>()?;
    let out: Float64Array = (0..rows)
        .map(|i| {
            black_scholes_call_value(
                c[0].value(i),
                c[1].value(i),
                c[2].value(i),
                c[3].value(i),
                c[4].value(i),
            )
        })
        .collect();
    Ok(Arc::new(out))
}

/// `cosine(emb, query)`: cosine similarity per row with accelsql's own CPU kernel
/// (`udf_runtime::kernels::vectors::vector_similarity`, eight-lane sums, the query's norm
/// taken once) — the same Rust code as accelsql's `cosine_similarity`, without accelsql, so a
/// comparison of the two measures only what accelsql's layer costs.
pub fn cosine(args: &[ColumnarValue], rows: usize) -> DfResult<ArrayRef> {
    let operand = |arg: &ColumnarValue| -> DfResult<Operand> {
        Ok(match arg {
            ColumnarValue::Array(a) => Operand::Column(Arc::clone(a)),
            ColumnarValue::Scalar(s) => Operand::Scalar(s.to_array()?),
        })
    };
    let scores = vector_similarity(
        VectorOp::Cosine,
        rows,
        &operand(&args[0])?,
        &operand(&args[1])?,
    )
    .map_err(|e| exec_datafusion_err!("cosine: {e}"))?;
    Ok(Arc::new(scores))
}

#[cfg(test)]
mod tests {
    use super::*;
    use accelsql_engine::datafusion::arrow::array::FixedSizeListArray;
    use accelsql_engine::datafusion::common::ScalarValue;

    #[test]
    fn black_scholes_matches_a_textbook_value() {
        // Hull's example: S=42, K=40, T=0.5, r=0.1, σ=0.2 → call ≈ 4.76.
        let c = black_scholes_call_value(42.0, 40.0, 0.5, 0.1, 0.2);
        assert!((c - 4.759).abs() < 1e-3, "{c}");
    }

    #[test]
    fn cosine_of_parallel_and_orthogonal_vectors() {
        use accelsql_engine::datafusion::arrow::array::Float32Array;
        use accelsql_engine::datafusion::arrow::datatypes::Field;
        let field = Arc::new(Field::new("item", DataType::Float32, false));
        let values = Float32Array::from(vec![1.0, 0.0, 0.0, 2.0]);
        let emb = FixedSizeListArray::try_new(field, 2, Arc::new(values), None).unwrap();
        let query = ScalarValue::List(ScalarValue::new_list_nullable(
            &[
                ScalarValue::Float64(Some(1.0)),
                ScalarValue::Float64(Some(0.0)),
            ],
            &DataType::Float64,
        ));
        let out = cosine(
            &[
                ColumnarValue::Array(Arc::new(emb)),
                ColumnarValue::Scalar(query),
            ],
            2,
        )
        .unwrap();
        let out = out.as_primitive::<Float64Type>();
        assert_eq!(out.values().to_vec(), vec![1.0, 0.0]);
    }
}
