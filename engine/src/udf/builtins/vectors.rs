//! `cosine_similarity(a, b)`, `dot_product(a, b)` and `l2_distance(a, b)` over embedding vectors,
//! and the argument rule every vector built-in shares. Semantics and edge cases are those of
//! `accelsql_udf_runtime::kernels::vectors`.
//!
//! `dot_product` replaces DataFusion's alias of `inner_product` of the same name (same results
//! for valid input; ours is GPU-capable). `inner_product`, `cosine_distance` and
//! `array_distance` remain DataFusion's.

use std::sync::Arc;

use accelsql_udf_runtime::gpu;
use accelsql_udf_runtime::kernels::vectors::{self, VectorOp};
use datafusion::arrow::datatypes::{DataType, Field};

use super::adapt::with_kernels;
use crate::udf::ArgumentRule;
use crate::{AcceleratorRequest, Result, ScalarUdf};

/// `(a VECTOR, b VECTOR)`: two vectors (see [`vector_type`]).
pub(super) const TWO_VECTORS: ArgumentRule =
    ArgumentRule::new("(a VECTOR, b VECTOR)", |types| match types {
        [a, b] => Ok(vec![vector_type(1, a)?, vector_type(2, b)?]),
        _ => Err(format!(
            "takes 2 arguments (a VECTOR, b VECTOR), got {}",
            types.len()
        )),
    });

/// The type argument `position` (1-based) is cast to when it is a vector: an array (`List`,
/// `LargeList` or `FixedSizeList`) of FLOAT or DOUBLE stays as it is; an array of other numbers
/// (e.g. `[1, 2, 3]`, BIGINT) or of NULLs becomes the same array kind of DOUBLE; a NULL becomes a
/// NULL list of DOUBLE. Anything else does not fit.
pub(super) fn vector_type(position: usize, given: &DataType) -> Result<DataType, String> {
    let of_doubles =
        |field: &Arc<Field>| Arc::new(Field::new(field.name(), DataType::Float64, true));
    let element_fits = |field: &Arc<Field>| match field.data_type() {
        DataType::Float32 | DataType::Float64 => Some(false),
        t if t.is_numeric() || t.is_null() => Some(true),
        _ => None,
    };
    let cast = match given {
        DataType::Null => Some(DataType::List(Arc::new(Field::new_list_field(
            DataType::Float64,
            true,
        )))),
        DataType::List(f) => element_fits(f).map(|cast| {
            if cast {
                DataType::List(of_doubles(f))
            } else {
                given.clone()
            }
        }),
        DataType::LargeList(f) => element_fits(f).map(|cast| {
            if cast {
                DataType::LargeList(of_doubles(f))
            } else {
                given.clone()
            }
        }),
        DataType::FixedSizeList(f, n) => element_fits(f).map(|cast| {
            if cast {
                DataType::FixedSizeList(of_doubles(f), *n)
            } else {
                given.clone()
            }
        }),
        _ => None,
    };
    cast.ok_or_else(|| {
        format!(
            "argument {position} is {given}; expected a vector: an array of numbers such as \
             [0.1, 0.2, 0.3] (FLOAT or DOUBLE elements; other numbers are cast to DOUBLE)"
        )
    })
}

/// The definition of `cosine_similarity`, `dot_product` or `l2_distance`, with CPU and GPU
/// implementations. Result DOUBLE.
pub(super) fn vector_function(op: VectorOp) -> Result<ScalarUdf> {
    let builder = ScalarUdf::builder(op.name())
        .rule_inputs(TWO_VECTORS)
        .returns(DataType::Float64)
        .accelerator_request(AcceleratorRequest::Preferred)
        .device_memory(accelsql_udf_runtime::gpu::builtin_device_memory(
            super::estimates::ROW_BYTES_VECTOR_PAIR,
        ));
    with_kernels::<2, _>(
        builder,
        op.name(),
        move |rows, [a, b]| vectors::vector_similarity(op, rows, a, b),
        move |device, rows, [a, b]| gpu::vector_similarity(device, op, rows, a, b),
    )
    .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(t: DataType) -> DataType {
        DataType::List(Arc::new(Field::new_list_field(t, true)))
    }

    #[test]
    fn vectors_of_numbers_fit_and_others_do_not() {
        let fixed32 =
            DataType::FixedSizeList(Arc::new(Field::new_list_field(DataType::Float32, true)), 3);
        let fixed64 =
            DataType::FixedSizeList(Arc::new(Field::new_list_field(DataType::Float64, true)), 3);
        let fixed_int =
            DataType::FixedSizeList(Arc::new(Field::new_list_field(DataType::Int32, false)), 3);
        assert_eq!(vector_type(1, &fixed32), Ok(fixed32.clone()));
        assert_eq!(vector_type(1, &fixed_int), Ok(fixed64));
        assert_eq!(
            vector_type(1, &list(DataType::Int64)),
            Ok(list(DataType::Float64))
        );
        assert_eq!(
            vector_type(1, &list(DataType::Null)),
            Ok(list(DataType::Float64))
        );
        assert_eq!(vector_type(1, &DataType::Null), Ok(list(DataType::Float64)));
        let large = DataType::LargeList(Arc::new(Field::new_list_field(DataType::Float32, true)));
        assert_eq!(vector_type(2, &large), Ok(large.clone()));
        let e = vector_type(2, &list(DataType::Utf8)).unwrap_err();
        assert!(
            e.starts_with("argument 2 is List(Utf8); expected a vector"),
            "{e}"
        );
        assert!(vector_type(1, &list(list(DataType::Float64))).is_err());
        assert!(vector_type(1, &DataType::Float64).is_err());
        let e = TWO_VECTORS.coerce(&[DataType::Null]).unwrap_err();
        assert_eq!(e, "takes 2 arguments (a VECTOR, b VECTOR), got 1");
    }
}
