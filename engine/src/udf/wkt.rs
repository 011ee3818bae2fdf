//! GEOMETRY values as Exasol writes them: accelsql keeps a GEOMETRY as its well-known text
//! (WKT), normalized the way Exasol prints it — the type's name in upper case, one space before
//! each `(`, `, ` between points, numbers without trailing zeros (`POINT(1.0 1)` is
//! `POINT (1 1)`). `accelsql_geometry(text)` normalizes; casts to GEOMETRY and writes into a
//! GEOMETRY column go through it.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The name the normalizing function is registered under.
pub(crate) const GEOMETRY_FUNCTION: &str = "accelsql_geometry";

/// One piece of WKT text.
#[derive(Debug, PartialEq)]
enum Piece {
    Word(String),
    Number(f64),
    Open,
    Close,
    Comma,
}

/// The pieces of `text`, or `None` where it holds something WKT has not.
fn pieces(text: &str) -> Option<Vec<Piece>> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '(' | ')' | ',' => {
                chars.next();
                out.push(match c {
                    '(' => Piece::Open,
                    ')' => Piece::Close,
                    _ => Piece::Comma,
                });
            }
            c if c.is_ascii_alphabetic() => {
                let mut end = start;
                while let Some(&(i, c)) = chars.peek() {
                    if !c.is_ascii_alphanumeric() {
                        break;
                    }
                    end = i + c.len_utf8();
                    chars.next();
                }
                out.push(Piece::Word(text[start..end].to_ascii_uppercase()));
            }
            c if c.is_ascii_digit() || matches!(c, '-' | '+' | '.') => {
                let mut end = start;
                let mut previous = ' ';
                while let Some(&(i, c)) = chars.peek() {
                    let sign_of_exponent = matches!(c, '-' | '+') && matches!(previous, 'e' | 'E');
                    let first = i == start;
                    if !(c.is_ascii_digit()
                        || matches!(c, '.' | 'e' | 'E')
                        || sign_of_exponent
                        || (first && matches!(c, '-' | '+')))
                    {
                        break;
                    }
                    previous = c;
                    end = i + c.len_utf8();
                    chars.next();
                }
                let value: f64 = text[start..end].parse().ok()?;
                if !value.is_finite() {
                    return None;
                }
                out.push(Piece::Number(value));
            }
            _ => return None,
        }
    }
    Some(out)
}

/// A coordinate as Exasol prints it: the shortest text that reads back as the same number,
/// without a trailing `.0`.
fn number_text(value: f64) -> String {
    let value = if value == 0.0 { 0.0 } else { value };
    format!("{value}")
}

/// `text` as Exasol prints the geometry it holds (see the module docs); `None` when it is not
/// WKT.
pub(crate) fn normalized_wkt(text: &str) -> Option<String> {
    let pieces = pieces(text)?;
    // A type's name, `Z`/`M`/`ZM` perhaps, then `EMPTY` or one parenthesized list.
    if !matches!(pieces.first(), Some(Piece::Word(_))) {
        return None;
    }
    let mut body = 1;
    while let Some(Piece::Word(w)) = pieces.get(body)
        && matches!(w.as_str(), "Z" | "M" | "ZM")
    {
        body += 1;
    }
    match pieces.get(body) {
        Some(Piece::Word(w)) if w == "EMPTY" && body + 1 == pieces.len() => {}
        Some(Piece::Open) if matches!(pieces.last(), Some(Piece::Close)) => {}
        _ => return None,
    }
    let mut depth = 0usize;
    let mut out = String::with_capacity(text.len());
    for (i, piece) in pieces.iter().enumerate() {
        match piece {
            Piece::Word(word) => {
                if matches!(pieces.get(i.wrapping_sub(1)), Some(Piece::Word(_))) {
                    out.push(' ');
                }
                out.push_str(word);
                if matches!(pieces.get(i + 1), Some(Piece::Open)) {
                    out.push(' ');
                }
            }
            Piece::Number(value) => {
                if matches!(pieces.get(i.wrapping_sub(1)), Some(Piece::Number(_))) {
                    out.push(' ');
                }
                out.push_str(&number_text(*value));
            }
            Piece::Open => {
                depth += 1;
                out.push('(');
            }
            Piece::Close => {
                depth = depth.checked_sub(1)?;
                // The list closes only at the end.
                if depth == 0 && i + 1 != pieces.len() {
                    return None;
                }
                out.push(')');
            }
            Piece::Comma => out.push_str(", "),
        }
    }
    (depth == 0).then_some(out)
}

/// `accelsql_geometry(text)`: [`normalized_wkt`] of each value; text that is no WKT fails the
/// statement (22018), as a cast of it to GEOMETRY does in Exasol.
#[derive(Debug, PartialEq, Eq, Hash)]
struct GeometryText {
    signature: Signature,
}

fn normalize(value: Option<&str>) -> Result<Option<String>> {
    match value {
        None => Ok(None),
        Some(text) => match normalized_wkt(text) {
            Some(wkt) => Ok(Some(wkt)),
            None => exec_err!(
                "[22018] data exception - invalid geometry: {text:?} is not well-known text \
                 (e.g. 'POINT (1 2)')"
            ),
        },
    }
}

impl ScalarUDFImpl for GeometryText {
    fn name(&self) -> &str {
        GEOMETRY_FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("{GEOMETRY_FUNCTION} takes one argument");
        };
        match arg {
            ColumnarValue::Scalar(value) => {
                let text = match value {
                    ScalarValue::Utf8(v) => v.clone(),
                    other if other.is_null() => None,
                    other => Some(other.to_string()),
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Utf8(normalize(
                    text.as_deref(),
                )?)))
            }
            ColumnarValue::Array(array) => {
                let strings = datafusion::arrow::compute::cast(array, &DataType::Utf8)?;
                let Some(strings) = strings.as_any().downcast_ref::<StringArray>() else {
                    return exec_err!("{GEOMETRY_FUNCTION}: expected text");
                };
                let out: StringArray = strings
                    .iter()
                    .map(normalize)
                    .collect::<Result<Vec<_>>>()?
                    .into_iter()
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
            }
        }
    }
}

/// The `accelsql_geometry` function.
pub(crate) fn geometry_function() -> ScalarUDF {
    ScalarUDF::new_from_impl(GeometryText {
        signature: Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
    })
}

#[cfg(test)]
mod tests {
    use super::normalized_wkt;

    #[test]
    fn wkt_is_written_as_exasol_prints_it() {
        let cases = [
            ("POINT(1 1)", "POINT (1 1)"),
            ("point ( 1.0  -2.50 )", "POINT (1 -2.5)"),
            ("LINESTRING(0 0,1 1 , 2 2)", "LINESTRING (0 0, 1 1, 2 2)"),
            (
                "POLYGON((0 0,4 0,4 4,0 4,0 0),(1 1, 2 1, 2 2, 1 1))",
                "POLYGON ((0 0, 4 0, 4 4, 0 4, 0 0), (1 1, 2 1, 2 2, 1 1))",
            ),
            (
                "GEOMETRYCOLLECTION(POINT(2 5),LINESTRING(1 1,15 2))",
                "GEOMETRYCOLLECTION (POINT (2 5), LINESTRING (1 1, 15 2))",
            ),
            ("point empty", "POINT EMPTY"),
            ("POINT Z(1 2 3)", "POINT Z (1 2 3)"),
            ("POINT(1e3 -0.0)", "POINT (1000 0)"),
        ];
        for (text, expected) in cases {
            assert_eq!(normalized_wkt(text).as_deref(), Some(expected), "{text}");
        }
        for bad in [
            "",
            "(1 1)",
            "POINT(1 1",
            "POINT(1 1))",
            "POINT(1 1) (2 2)",
            "POINT(a; b)",
            "POINT(1e400 1)",
            "not wkt",
            "POINT EMPTY 1",
        ] {
            assert_eq!(normalized_wkt(bad), None, "{bad}");
        }
    }
}
