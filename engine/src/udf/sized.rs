//! Functions whose output a small input can make huge — `repeat`, `lpad`, `rpad`, `concat`,
//! `concat_ws`, `replace`, `regexp_replace`, `translate`, `array_repeat`, `array_resize`,
//! `range`, `generate_series` — reserve an upper estimate of their output against the
//! session's memory budget before they build it, so that `repeat('x', 3000000000)` or a
//! `replace` that turns 200 MB into 3 GB fails with 53200 at once instead of allocating
//! gigabytes (DataFusion's memory pool sees operators' state, not a function's output).

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
    /// `concat(a, b, …)`, `concat_ws(sep, a, b, …)`: the arguments' text, and separators.
    Concat,
    /// `replace(s, from, to)`: each `from` in `s` (at most `len(s)/len(from)` of them, or one
    /// between every two characters for an empty `from`) becomes `to`.
    Replace,
    /// `regexp_replace(s, pattern, replacement [, flags])`: at most one match per position,
    /// each replaced by the replacement's text plus, for each back-reference in it, text of
    /// the match (all matches together are at most `s`).
    RegexpReplace,
    /// `translate(s, from, to)`: each character of `s` becomes at most one of `to`'s.
    Translate,
    /// `array_repeat(v, n)`: `n` copies of `v`.
    ArrayRepeat,
    /// `array_resize(a, n [, v])`: `n` elements.
    ArrayResize,
    /// `range(start, stop [, step])`, `generate_series(…)` as a scalar: a list of
    /// `(stop - start) / step` values.
    Range,
}

/// The functions this module wraps, and how each grows.
const GROWING: [(&str, Growth); 13] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("concat", Growth::Concat),
    ("concat_ws", Growth::Concat),
    ("replace", Growth::Replace),
    ("regexp_replace", Growth::RegexpReplace),
    ("translate", Growth::Translate),
    ("array_repeat", Growth::ArrayRepeat),
    ("array_resize", Growth::ArrayResize),
    ("range", Growth::Range),
    ("generate_series", Growth::Range),
    ("list_repeat", Growth::ArrayRepeat),
];

/// Replaces `ctx`'s growing functions ([`GROWING`]) with versions that reserve their output's
/// size from `pool` (the session's budget within the engine's pool) before they run, and
/// refuse to make one value larger than `max_value` bytes.
pub(crate) fn bound_growing_functions(
    ctx: &SessionContext,
    pool: &Arc<SessionPool>,
    max_value: usize,
) {
    for (name, growth) in GROWING {
        if let Ok(inner) = ctx.udf(name) {
            ctx.register_udf(ScalarUDF::new_from_impl(SizedOutput {
                inner,
                growth,
                pool: Arc::clone(pool),
                max_value,
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
    /// The largest value one call may make, in bytes.
    max_value: usize,
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

impl SizedOutput {
    /// The largest value one call may make: the engine's cap, and at most a quarter of the
    /// session's budget (`budget`, the statement's, else the session pool's), since a value is
    /// copied several times on its way to the client (folded into the plan, the result batch,
    /// its encoding) while a reservation covers it only while it is built.
    fn value_cap(&self, budget: Option<usize>) -> usize {
        match budget.or_else(|| self.pool.budget()) {
            Some(budget) => self.max_value.min(budget / 4),
            None => self.max_value,
        }
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
        // `concat` of constants is joined here, while the statement is planned: its text is
        // held to the same bounds as when it runs.
        if self.growth == Growth::Concat {
            let bytes = args
                .iter()
                .map(|arg| match arg {
                    Expr::Literal(
                        ScalarValue::Utf8(Some(s))
                        | ScalarValue::LargeUtf8(Some(s))
                        | ScalarValue::Utf8View(Some(s)),
                        _,
                    ) => s.len(),
                    _ => 0,
                })
                .fold(0usize, usize::saturating_add);
            let what = format!("{}()", self.name());
            let cap = self.value_cap(None);
            if bytes > cap {
                return Err(resources_datafusion_err!(
                    "{what} would make a value of {}, past the largest value one cell may hold \
                     ({})",
                    format_bytes(bytes as u64),
                    format_bytes(cap as u64)
                ));
            }
            let _reserved = self.pool.reserve(&what, bytes)?;
            return self.inner.simplify(args, info);
        }
        self.inner.simplify(args, info)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let size = output_bytes(self.growth, &args.args, args.number_rows)?;
        let bytes = size.total;
        // Past what one i32-offset string array holds, DataFusion's `repeat`, `lpad` and
        // `rpad` refuse before they allocate, with their own error: let them say so.
        let small_offsets = args
            .args
            .first()
            .is_some_and(|a| a.data_type() != DataType::LargeUtf8);
        if matches!(self.growth, Growth::Repeat | Growth::Pad)
            && small_offsets
            && bytes > i32::MAX as usize
        {
            return self.inner.invoke_with_args(args);
        }
        // Likewise a list longer than a list can be: DataFusion refuses it before it allocates.
        let too_long = match self.growth {
            Growth::ArrayRepeat | Growth::ArrayResize => {
                longest_count(&args.args, args.number_rows)? > i64::from(i32::MAX)
            }
            Growth::Range => longest_range(&args.args, args.number_rows)? > i32::MAX as u128,
            _ => false,
        };
        if too_long {
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
        // One value, however much budget is left: every copy of it (the result batch, its
        // encoding for the client) is as large.
        let cap = self.value_cap(
            args.config_options
                .extensions
                .get::<AccelsqlOptions>()
                .and_then(|own| own.memory_limit().ok().flatten()),
        );
        if size.largest > cap {
            return Err(resources_datafusion_err!(
                "{what} would make a value of {}, past the largest value one cell may hold ({})",
                format_bytes(size.largest as u64),
                format_bytes(cap as u64)
            ));
        }
        // Held while the output is built; the result batch is accounted where it is returned.
        let _reserved = self.pool.reserve(&what, bytes)?;
        self.inner.invoke_with_args(args)
    }
}

/// An upper estimate of a function's output: all of it, and its largest value.
#[derive(Debug, Default, Clone, Copy)]
struct Size {
    total: usize,
    largest: usize,
}

impl Size {
    /// One more row of `bytes`.
    fn add(&mut self, bytes: usize) {
        self.total = self.total.saturating_add(bytes);
        self.largest = self.largest.max(bytes);
    }
}

/// An upper estimate of the bytes `growth`'s function builds for `rows` rows of `args`.
fn output_bytes(growth: Growth, args: &[ColumnarValue], rows: usize) -> Result<Size> {
    match growth {
        Growth::Repeat | Growth::Pad => counted_text_bytes(growth, args, rows),
        Growth::Concat => {
            let parts: Vec<Strings<'_>> = args.iter().map(Strings::of).collect();
            let mut size = Size::default();
            for row in 0..rows {
                let row_bytes = parts.iter().fold(0usize, |sum, part| {
                    // A value that is not text prints as at most a few dozen bytes.
                    sum.saturating_add(part.at(row).map_or(40, str::len))
                });
                // concat_ws puts its separator (the first argument) between the others.
                let separators = parts
                    .first()
                    .and_then(|sep| sep.at(row))
                    .map_or(0, |sep| sep.len().saturating_mul(parts.len()));
                size.add(row_bytes.saturating_add(separators));
            }
            Ok(size)
        }
        Growth::Replace | Growth::RegexpReplace | Growth::Translate => {
            let (Some(text), Some(from)) = (args.first(), args.get(1)) else {
                return Ok(Size::default());
            };
            let (text, from) = (Strings::of(text), Strings::of(from));
            let to = args.get(2).map(Strings::of);
            let mut size = Size::default();
            for row in 0..rows {
                let Some(s) = text.at(row) else { continue };
                let to = to.as_ref().and_then(|t| t.at(row)).unwrap_or("");
                let len = s.len();
                let row_bytes = match growth {
                    Growth::Replace => {
                        let from = from.at(row).map_or(0, str::len);
                        if from == 0 {
                            len.saturating_add(len.saturating_add(1).saturating_mul(to.len()))
                        } else if to.len() <= from {
                            len
                        } else {
                            len.saturating_add((len / from).saturating_mul(to.len() - from))
                        }
                    }
                    Growth::RegexpReplace => {
                        let references = to.matches(['\\', '$']).count();
                        len.saturating_add(len.saturating_add(1).saturating_mul(to.len()))
                            .saturating_add(references.saturating_mul(len))
                    }
                    _ => len.saturating_mul(4),
                };
                size.add(row_bytes);
            }
            Ok(size)
        }
        Growth::ArrayRepeat | Growth::ArrayResize => {
            let (Some(value), Some(count)) = (args.first(), args.get(1)) else {
                return Ok(Size::default());
            };
            // The size of one copied value: the value's own, or the list's elements' average.
            let each = match (growth, value) {
                (Growth::ArrayRepeat, ColumnarValue::Scalar(v)) => v.size(),
                (_, ColumnarValue::Scalar(v)) => v.size(),
                (Growth::ArrayRepeat, ColumnarValue::Array(a)) => {
                    a.get_array_memory_size() / a.len().max(1)
                }
                (_, ColumnarValue::Array(a)) => {
                    let elements = match a.data_type() {
                        DataType::List(_) => a.as_list::<i32>().values().len(),
                        DataType::LargeList(_) => a.as_list::<i64>().values().len(),
                        _ => a.len(),
                    };
                    a.get_array_memory_size() / elements.max(1)
                }
            }
            .max(1);
            let count = Counts::of(count)?;
            let mut size = Size::default();
            for row in 0..rows {
                let n = count
                    .at(row)
                    .map_or(0, |n| usize::try_from(n.max(0)).unwrap_or(usize::MAX));
                size.add(n.saturating_mul(each));
            }
            Ok(size)
        }
        Growth::Range => {
            // Dates and timestamps by intervals are not estimated (their counts are bounded by
            // the calendar).
            if args.iter().any(|a| !a.data_type().is_integer()) {
                return Ok(Size::default());
            }
            // One argument: 0..stop; two or three: start..stop by step.
            let (start, stop, step) = match args {
                [stop] => (None, Counts::of(stop)?, None),
                [start, stop] => (Some(Counts::of(start)?), Counts::of(stop)?, None),
                [start, stop, step, ..] => (
                    Some(Counts::of(start)?),
                    Counts::of(stop)?,
                    Some(Counts::of(step)?),
                ),
                [] => return Ok(Size::default()),
            };
            let mut size = Size::default();
            for row in 0..rows {
                let from = start.as_ref().and_then(|s| s.at(row)).unwrap_or(0);
                let Some(to) = stop.at(row) else { continue };
                let by = step
                    .as_ref()
                    .and_then(|s| s.at(row))
                    .unwrap_or(1)
                    .unsigned_abs()
                    .max(1);
                let values = (i128::from(to) - i128::from(from)).unsigned_abs() / u128::from(by);
                let bytes = values.saturating_add(1).saturating_mul(8);
                size.add(usize::try_from(bytes).unwrap_or(usize::MAX));
            }
            Ok(size)
        }
    }
}

/// The largest count (the second argument) of `rows` rows of `args`.
fn longest_count(args: &[ColumnarValue], rows: usize) -> Result<i64> {
    let Some(count) = args.get(1).filter(|c| c.data_type().is_integer()) else {
        return Ok(0);
    };
    let count = Counts::of(count)?;
    Ok((0..rows).filter_map(|row| count.at(row)).max().unwrap_or(0))
}

/// The most values one row of `range(start, stop, step)` makes (integer arguments only).
fn longest_range(args: &[ColumnarValue], rows: usize) -> Result<u128> {
    if args.is_empty() || args.iter().any(|a| !a.data_type().is_integer()) {
        return Ok(0);
    }
    let counts = args.iter().map(Counts::of).collect::<Result<Vec<_>>>()?;
    let mut most = 0u128;
    for row in 0..rows {
        let (from, to, by) = match counts.as_slice() {
            [stop] => (Some(0), stop.at(row), Some(1)),
            [start, stop] => (start.at(row), stop.at(row), Some(1)),
            [start, stop, step, ..] => (start.at(row), stop.at(row), step.at(row)),
            [] => return Ok(0),
        };
        let (Some(from), Some(to), Some(by)) = (from, to, by) else {
            continue;
        };
        let by = u128::from(by.unsigned_abs().max(1));
        most = most.max((i128::from(to) - i128::from(from)).unsigned_abs() / by);
    }
    Ok(most)
}

/// [`output_bytes`] of `repeat` and `lpad/rpad`: a text and a count.
fn counted_text_bytes(growth: Growth, args: &[ColumnarValue], rows: usize) -> Result<Size> {
    let (Some(text), Some(count)) = (args.first(), args.get(1)) else {
        return Ok(Size::default());
    };
    let text = Strings::of(text);
    let fill = args.get(2).map(Strings::of);
    let count = Counts::of(count)?;
    let mut size = Size::default();
    for row in 0..rows {
        let Some(n) = count.at(row) else { continue };
        let n = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
        let row_bytes = match growth {
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
            _ => text.at(row).map_or(0, |s| s.len().saturating_mul(n)),
        };
        size.add(row_bytes);
    }
    Ok(size)
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

    /// All of the estimate.
    fn output_bytes(growth: Growth, args: &[ColumnarValue], rows: usize) -> Result<usize> {
        super::output_bytes(growth, args, rows).map(|size| size.total)
    }

    #[test]
    fn the_largest_value_is_estimated_beside_the_whole() {
        let counts = ColumnarValue::Array(Arc::new(Int64Array::from(vec![10, 1000, 100])));
        let size = super::output_bytes(Growth::Repeat, &[text("ab"), counts], 3).unwrap();
        assert_eq!((size.total, size.largest), (2220, 2000));
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
    fn estimates_bound_the_functions_that_grow_text() {
        let big = "x".repeat(1000);
        let concat = output_bytes(Growth::Concat, &[text(&big), text(&big), int(7)], 2).unwrap();
        assert!(concat >= 2 * 2000, "{concat}");
        let replace =
            output_bytes(Growth::Replace, &[text(&big), text("x"), text("yyyy")], 1).unwrap();
        assert_eq!(replace, 4000);
        let shrink = output_bytes(Growth::Replace, &[text(&big), text("xx"), text("")], 1).unwrap();
        assert_eq!(shrink, 1000);
        let everywhere = output_bytes(Growth::Replace, &[text("ab"), text(""), text("--")], 1);
        assert_eq!(everywhere.unwrap(), 2 + 3 * 2);
        let regexp = output_bytes(
            Growth::RegexpReplace,
            &[text(&big), text("x"), text("yy")],
            1,
        )
        .unwrap();
        assert!(regexp >= 2000, "{regexp}");
        let references = output_bytes(
            Growth::RegexpReplace,
            &[text(&big), text("(x)"), text("\\1\\1")],
            1,
        )
        .unwrap();
        assert!(references >= 2000, "{references}");
    }

    #[test]
    fn estimates_bound_the_functions_that_grow_lists() {
        let repeat = output_bytes(Growth::ArrayRepeat, &[int(5), int(1_000_000)], 1).unwrap();
        assert!(repeat >= 8_000_000, "{repeat}");
        let range = output_bytes(Growth::Range, &[int(0), int(1_000_000_000)], 1).unwrap();
        assert!(range >= 8_000_000_000, "{range}");
        let stepped = output_bytes(Growth::Range, &[int(0), int(1000), int(10)], 3).unwrap();
        assert_eq!(stepped, 3 * 101 * 8);
        let backwards = output_bytes(Growth::Range, &[int(10), int(0), int(-1)], 1).unwrap();
        assert_eq!(backwards, 11 * 8);
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
