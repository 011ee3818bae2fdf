//! Functions that a small input can make huge — `repeat`, `lpad`, `rpad` — reserve their
//! output against the session's memory budget before they build it, so that
//! `repeat('x', 3000000000)` fails with 53200 at once instead of allocating gigabytes
//! (DataFusion's memory pool sees operators' state, not a function's output).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

use accelsql_gpu_scheduler::units::format_bytes;
use datafusion::common::resources_datafusion_err;

use crate::core::memory::SessionPool;
use crate::core::options::AccelsqlOptions;

/// How a function's output grows with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(s, n)`: `n` copies of `s`.
    Repeat,
    /// `lpad/rpad(s, n [, fill])`: `n` characters.
    Pad,
}

/// The functions this module wraps, and how each grows.
const GROWING: [(&str, Growth); 3] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
];

/// Replaces `ctx`'s `repeat`, `lpad` and `rpad` with versions that reserve their output's size
/// from `pool` (the session's budget within the engine's pool) before they run.
pub(crate) fn bound_growing_functions(ctx: &SessionContext, pool: &Arc<SessionPool>) {
    for (name, growth) in GROWING {
        if let Ok(inner) = ctx.udf(name) {
            ctx.register_udf(ScalarUDF::new_from_impl(SizedOutput {
                inner,
                growth,
                pool: Arc::clone(pool),
            }));
        }
    }
}

/// A DataFusion function whose output is reserved before it is built.
#[derive(Debug)]
struct SizedOutput {
    inner: Arc<ScalarUDF>,
    growth: Growth,
    pool: Arc<SessionPool>,
}

impl PartialEq for SizedOutput {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && Arc::ptr_eq(&self.pool, &other.pool)
    }
}

impl Eq for SizedOutput {}

impl Hash for SizedOutput {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
        self.growth.hash(state);
    }
}

impl ScalarUDFImpl for SizedOutput {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.inner().schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs<'_>) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let bytes = output_bytes(self.growth, &args.args, args.number_rows)?;
        // Past what one i32-offset string array holds, DataFusion's `repeat` refuses before it
        // allocates, with its own error: let it say so.
        let small_offsets = args
            .args
            .first()
            .is_some_and(|a| a.data_type() != DataType::LargeUtf8);
        if self.growth == Growth::Repeat && small_offsets && bytes > i32::MAX as usize {
            return self.inner.invoke_with_args(args);
        }
        let what = format!("{}()", self.name());
        // The statement's session budget travels with its plan: a cluster's executor, whose
        // pool is its own, holds the call to it too.
        if let Some(budget) = args
            .config_options
            .extensions
            .get::<AccelsqlOptions>()
            .and_then(|own| own.memory_limit().ok().flatten())
            && bytes > budget
        {
            return Err(resources_datafusion_err!(
                "{what} needs {}, which is past the session's memory budget of {}; lower the \
                 statement's needs or raise accelsql.memory_limit",
                format_bytes(bytes as u64),
                format_bytes(budget as u64)
            ));
        }
        // Held while the output is built; the result batch is accounted where it is returned.
        let _reserved = self.pool.reserve(&what, bytes)?;
        self.inner.invoke_with_args(args)
    }
}

/// An upper estimate of the bytes `growth`'s function builds for `rows` rows of `args`.
fn output_bytes(growth: Growth, args: &[ColumnarValue], rows: usize) -> Result<usize> {
    let (Some(text), Some(count)) = (args.first(), args.get(1)) else {
        return Ok(0);
    };
    let text = Strings::of(text);
    let fill = args.get(2).map(Strings::of);
    let count = Counts::of(count)?;
    let mut total: usize = 0;
    for row in 0..rows {
        let Some(n) = count.at(row) else { continue };
        let n = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
        let row_bytes = match growth {
            Growth::Repeat => text.at(row).map_or(0, |s| s.len().saturating_mul(n)),
            Growth::Pad => {
                // n characters, each as wide as the widest the text or the fill has.
                let wide = |s: Option<&str>| s.is_some_and(|s| !s.is_ascii());
                let width = if wide(text.at(row)) || fill.as_ref().is_some_and(|f| wide(f.at(row)))
                {
                    4
                } else {
                    1
                };
                n.saturating_mul(width)
            }
        };
        total = total.saturating_add(row_bytes);
    }
    Ok(total)
}

/// A text argument, row by row, without copying a scalar into an array.
enum Strings<'a> {
    Scalar(Option<&'a str>),
    Array(&'a ArrayRef),
}

impl<'a> Strings<'a> {
    fn of(value: &'a ColumnarValue) -> Self {
        match value {
            ColumnarValue::Scalar(
                ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s),
            ) => Strings::Scalar(s.as_deref()),
            ColumnarValue::Scalar(_) => Strings::Scalar(None),
            ColumnarValue::Array(a) => Strings::Array(a),
        }
    }

    fn at(&self, row: usize) -> Option<&'a str> {
        match self {
            Strings::Scalar(s) => *s,
            Strings::Array(a) if row >= a.len() || a.is_null(row) => None,
            Strings::Array(a) => match a.data_type() {
                DataType::Utf8 => Some(a.as_string::<i32>().value(row)),
                DataType::LargeUtf8 => Some(a.as_string::<i64>().value(row)),
                DataType::Utf8View => Some(a.as_string_view().value(row)),
                _ => None,
            },
        }
    }
}

/// A count argument, row by row.
enum Counts {
    Scalar(Option<i64>),
    Array(Int64Array),
}

impl Counts {
    fn of(value: &ColumnarValue) -> Result<Self> {
        Ok(match value {
            ColumnarValue::Scalar(s) if s.is_null() => Counts::Scalar(None),
            ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Int64)? {
                ScalarValue::Int64(n) => Counts::Scalar(n),
                _ => Counts::Scalar(None),
            },
            ColumnarValue::Array(a) => {
                Counts::Array(cast(a, &DataType::Int64)?.as_primitive().clone())
            }
        })
    }

    fn at(&self, row: usize) -> Option<i64> {
        match self {
            Counts::Scalar(n) => *n,
            Counts::Array(a) if row >= a.len() || a.is_null(row) => None,
            Counts::Array(a) => Some(a.value(row)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> ColumnarValue {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(s.into())))
    }

    fn int(n: i64) -> ColumnarValue {
        ColumnarValue::Scalar(ScalarValue::Int64(Some(n)))
    }

    #[test]
    fn estimates_cover_what_the_functions_build() {
        let repeat = output_bytes(Growth::Repeat, &[text("ab"), int(1000)], 1).unwrap();
        assert_eq!(repeat, 2000);
        let pad = output_bytes(Growth::Pad, &[text("x"), int(10)], 3).unwrap();
        assert_eq!(pad, 30);
        let wide = output_bytes(Growth::Pad, &[text("x"), int(10), text("é")], 1).unwrap();
        assert_eq!(wide, 40);
        let negative = output_bytes(Growth::Repeat, &[text("ab"), int(-5)], 1).unwrap();
        assert_eq!(negative, 0);
        let huge = output_bytes(Growth::Repeat, &[text("ab"), int(i64::MAX)], 2).unwrap();
        assert_eq!(huge, usize::MAX);
    }

    #[test]
    fn arrays_are_read_row_by_row() {
        let texts: ArrayRef = Arc::new(datafusion::arrow::array::StringViewArray::from(vec![
            Some("abc"),
            None,
            Some("d"),
        ]));
        let counts: ArrayRef = Arc::new(datafusion::arrow::array::Int32Array::from(vec![
            Some(2),
            Some(100),
            None,
        ]));
        let bytes = output_bytes(
            Growth::Repeat,
            &[ColumnarValue::Array(texts), ColumnarValue::Array(counts)],
            3,
        )
        .unwrap();
        assert_eq!(bytes, 6);
    }
}
