//! CPU reference kernels of the built-in UDFs: plain functions over Arrow arrays. They are the
//! CPU implementation (and fallback) of each built-in; GPU kernels are checked against them.

pub mod geo;
pub mod options;
pub mod vectors;

use arrow::array::{Array, ArrayRef, AsArray, BooleanBufferBuilder, Float64Array};
use arrow::buffer::NullBuffer;
use arrow::datatypes::Float64Type;

use crate::{Result, RuntimeError};

/// One argument of a built-in kernel: a column with one value per row, or one value that holds
/// for every row (a constant in the query, e.g. the query vector of a similarity search).
///
/// Scalars are never replicated into columns: a GPU kernel uploads them once.
#[derive(Debug, Clone)]
pub enum Operand {
    /// One value per row; its length is the batch's row count.
    Column(ArrayRef),
    /// A one-element array whose value (or NULL) applies to every row.
    Scalar(ArrayRef),
}

impl Operand {
    /// The underlying array (a column, or the scalar's one-element array).
    pub fn array(&self) -> &ArrayRef {
        match self {
            Self::Column(a) | Self::Scalar(a) => a,
        }
    }

    /// Index into [`Operand::array`] of the value for `row`.
    pub fn index(&self, row: usize) -> usize {
        match self {
            Self::Column(_) => row,
            Self::Scalar(_) => 0,
        }
    }

    /// Whether the value for `row` is NULL.
    pub fn is_null(&self, row: usize) -> bool {
        self.array().is_null(self.index(row))
    }
}

/// The [`RuntimeError::InvalidArgument`] of built-in `function`.
pub(crate) fn invalid_argument(function: &str, message: impl Into<String>) -> RuntimeError {
    RuntimeError::InvalidArgument {
        function: function.to_string(),
        message: message.into(),
    }
}

/// Checks that argument `position` (1-based) of `function` fits a batch of `rows` rows: a column
/// of `rows` values or a one-element scalar.
pub(crate) fn check_rows(
    function: &str,
    position: usize,
    operand: &Operand,
    rows: usize,
) -> Result<()> {
    let (len, wanted) = match operand {
        Operand::Column(a) => (a.len(), rows),
        Operand::Scalar(a) => (a.len(), 1),
    };
    if len == wanted {
        Ok(())
    } else {
        Err(invalid_argument(
            function,
            format!(
                "argument {position} has {len} values where a batch of {rows} rows needs {wanted}"
            ),
        ))
    }
}

/// Row-wise `f` over DOUBLE operands: the kernel loop of `haversine_km` and `black_scholes_*`.
///
/// A NULL in any argument gives NULL without calling `f`; `f` returning `None` gives NULL too. A
/// NULL scalar makes the whole result NULL. An argument that is not DOUBLE is an
/// [`RuntimeError::InvalidArgument`] (the engine casts other numbers to DOUBLE first).
pub(crate) fn map_f64_rows<const N: usize>(
    function: &str,
    rows: usize,
    args: &[Operand; N],
    f: impl Fn([f64; N]) -> Option<f64>,
) -> Result<Float64Array> {
    let mut values: [&[f64]; N] = [&[]; N];
    // 1 for a column, 0 for a scalar: the value of `row` is `values[i][row * steps[i]]`.
    let mut steps = [0usize; N];
    let mut nulls: Option<NullBuffer> = None;
    for (i, arg) in args.iter().enumerate() {
        let array = arg
            .array()
            .as_primitive_opt::<Float64Type>()
            .ok_or_else(|| {
                invalid_argument(
                    function,
                    format!(
                        "argument {} is {}, expected DOUBLE",
                        i + 1,
                        arg.array().data_type()
                    ),
                )
            })?;
        check_rows(function, i + 1, arg, rows)?;
        values[i] = array.values();
        match arg {
            Operand::Column(_) => {
                steps[i] = 1;
                nulls = NullBuffer::union(nulls.as_ref(), array.nulls());
            }
            Operand::Scalar(_) if array.is_null(0) => return Ok(Float64Array::new_null(rows)),
            Operand::Scalar(_) => {}
        }
    }
    let mut out = Vec::with_capacity(rows);
    let mut valid = BooleanBufferBuilder::new(rows);
    for row in 0..rows {
        let value = if nulls.as_ref().is_none_or(|n| n.is_valid(row)) {
            f(std::array::from_fn(|i| values[i][row * steps[i]]))
        } else {
            None
        };
        out.push(value.unwrap_or(0.0));
        valid.append(value.is_some());
    }
    let valid = NullBuffer::new(valid.finish());
    let valid = (valid.null_count() > 0).then_some(valid);
    Ok(Float64Array::new(out.into(), valid))
}
