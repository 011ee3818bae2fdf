//! Names as Exasol shows them: accelsql keeps unquoted identifiers in lower case (DataFusion's
//! rule), Exasol in upper case; system tables, `exa.meta` and generated SQL show Exasol's.
//!
//! In the Exasol dialect (`SET accelsql.sql_dialect = 'exasol'`) the two are one bijection,
//! [`swap_case`]: the name Exasol calls `A` (unquoted `a`, or quoted `"A"`) is `a` inside the
//! engine, and the one Exasol calls `a` (quoted `"a"`) is `A`, so every part of the engine that
//! folds unquoted names to lower case (tables, schemas, scripts, privileges) keeps working, and
//! tables made in either dialect are shared.

/// A name as Exasol shows a name it folded: accelsql keeps unquoted names in lower case, so an
/// all-lower-case name is shown in upper case, any other as it is.
pub(crate) fn exasol_name(name: &str) -> String {
    if name.chars().any(|c| c.is_uppercase()) {
        name.to_string()
    } else {
        name.to_uppercase()
    }
}

/// `name` with the case of each letter swapped (`Ab_c` → `aB_C`): the Exasol dialect's name for
/// an engine name, and the engine's name for an Exasol name (the map is its own inverse).
pub(crate) fn swap_case(name: &str) -> String {
    // A letter whose other case is not one letter that maps back (`ß` → `SS`) is kept, so
    // the map stays its own inverse.
    fn single(mut it: impl Iterator<Item = char>) -> Option<char> {
        let c = it.next()?;
        it.next().is_none().then_some(c)
    }
    name.chars()
        .map(|c| {
            let other = if c.is_uppercase() {
                single(c.to_lowercase()).filter(|l| single(l.to_uppercase()) == Some(c))
            } else if c.is_lowercase() {
                single(c.to_uppercase()).filter(|u| single(u.to_lowercase()) == Some(c))
            } else {
                None
            };
            other.unwrap_or(c)
        })
        .collect()
}

/// A result column's name as the Exasol dialect shows it: a plain name (an identifier) is the
/// Exasol name of the engine's ([`swap_case`]); in a computed one (`upper(t.a)`) function names
/// are upper case, qualified names (`t.a`) and lower-case words are swapped as plain names
/// are, upper-case words (`IS NULL`) and quoted parts are kept: `UPPER(T.A)`.
pub(crate) fn exasol_shown_name(name: &str) -> String {
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '$' || c == '#';
    if name.chars().all(is_word) {
        return swap_case(name);
    }
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            let end = chars[i + 1..]
                .iter()
                .position(|&d| d == c)
                .map_or(chars.len(), |p| i + 2 + p);
            out.extend(&chars[i..end]);
            i = end;
        } else if is_word(c) {
            let end = chars[i..]
                .iter()
                .position(|&d| !is_word(d))
                .map_or(chars.len(), |p| i + p);
            let word: String = chars[i..end].iter().collect();
            let before_dot = chars.get(end) == Some(&'.');
            let after_dot = i > 0 && chars[i - 1] == '.';
            if chars.get(end) == Some(&'(') {
                out.push_str(&word.to_uppercase());
            } else if before_dot || after_dot || word.chars().any(char::is_lowercase) {
                out.push_str(&swap_case(&word));
            } else {
                out.push_str(&word);
            }
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The Arrow field metadata key holding a column's SQL type as Exasol names it
/// (`VARCHAR(10) UTF8`, `CHAR(3) ASCII`, `DECIMAL(18,0)`, `GEOMETRY(4326)`), where the Arrow
/// type does not say it all. Set on the columns of `CREATE TABLE t (a VARCHAR(10), …)` (and so
/// kept by the table, its scans and results), and in the Exasol dialect on a selected string
/// literal (`'abc'` is `CHAR(3) ASCII`, as Exasol types it). Clients read it from a result's
/// Arrow schema.
pub const SQL_TYPE_METADATA_KEY: &str = "accelsql.sql_type";

/// A column's type as Exasol describes it: its name (`DECIMAL(18,0)`, `VARCHAR(10) UTF8`), and
/// the digits, scale and length `EXA_ALL_COLUMNS` and drivers show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExasolType {
    /// The type's name with its parameters.
    pub name: String,
    /// Total digits of a number (`DOUBLE`: 64, as Exasol says).
    pub precision: Option<u64>,
    /// Digits after the point of an exact number.
    pub scale: Option<u64>,
    /// Characters of a string (a number's digits, as `COLUMN_MAXSIZE` shows them).
    pub size: Option<u64>,
}

impl ExasolType {
    fn decimal(precision: u64, scale: u64) -> Self {
        Self {
            name: format!("DECIMAL({precision},{scale})"),
            precision: Some(precision),
            scale: Some(scale),
            size: Some(precision),
        }
    }

    fn named(name: &str) -> Self {
        Self {
            name: name.to_string(),
            precision: None,
            scale: None,
            size: None,
        }
    }
}

/// The Exasol type of a column: the SQL type its field's [`SQL_TYPE_METADATA_KEY`] declares,
/// else the one of its Arrow type ([`exasol_type_of`]).
pub fn exasol_field_type(field: &datafusion::arrow::datatypes::Field) -> ExasolType {
    use crate::udf_runtime::script::SqlType;
    let declared = field
        .metadata()
        .get(SQL_TYPE_METADATA_KEY)
        .and_then(|text| {
            let sql_type = SqlType::parse(text).ok()?;
            if sql_type == SqlType::Double {
                return Some(exasol_type_of(
                    &datafusion::arrow::datatypes::DataType::Float64,
                ));
            }
            Some(ExasolType {
                name: text.clone(),
                precision: sql_type.precision().map(u64::from),
                scale: sql_type.scale().and_then(|s| u64::try_from(s).ok()),
                size: sql_type
                    .length()
                    .or_else(|| sql_type.precision())
                    .map(u64::from),
            })
        });
    declared.unwrap_or_else(|| exasol_type_of(field.data_type()))
}

/// The Exasol type of values of Arrow type `data_type` (`DECIMAL(19,0)` for a 64-bit integer,
/// `VARCHAR(2000000) UTF8` for a string); Arrow's name for a type Exasol lacks.
pub(crate) fn exasol_type_of(data_type: &datafusion::arrow::datatypes::DataType) -> ExasolType {
    use datafusion::arrow::datatypes::{DataType as T, IntervalUnit};
    match data_type {
        T::Int8 | T::UInt8 => ExasolType::decimal(3, 0),
        T::Int16 | T::UInt16 => ExasolType::decimal(5, 0),
        T::Int32 | T::UInt32 => ExasolType::decimal(10, 0),
        T::Int64 => ExasolType::decimal(19, 0),
        T::UInt64 => ExasolType::decimal(20, 0),
        T::Decimal32(p, s) | T::Decimal64(p, s) | T::Decimal128(p, s) | T::Decimal256(p, s) => {
            ExasolType::decimal(u64::from(*p), u64::try_from(*s).unwrap_or(0))
        }
        T::Float16 | T::Float32 | T::Float64 => ExasolType {
            precision: Some(64),
            size: Some(64),
            ..ExasolType::named("DOUBLE")
        },
        T::Boolean => ExasolType::named("BOOLEAN"),
        T::Date32 | T::Date64 => ExasolType::named("DATE"),
        T::Timestamp(_, None) => ExasolType::named("TIMESTAMP"),
        T::Timestamp(_, Some(_)) => ExasolType::named("TIMESTAMP WITH LOCAL TIME ZONE"),
        T::Utf8 | T::LargeUtf8 | T::Utf8View => ExasolType {
            size: Some(2_000_000),
            ..ExasolType::named("VARCHAR(2000000) UTF8")
        },
        T::Interval(IntervalUnit::YearMonth) => ExasolType::named("INTERVAL YEAR(2) TO MONTH"),
        T::Interval(_) => ExasolType::named("INTERVAL DAY(2) TO SECOND(3)"),
        T::Dictionary(_, value) => exasol_type_of(value),
        other => ExasolType::named(&other.to_string()),
    }
}

/// The name of [`exasol_type_of`]`(data_type)`.
pub(crate) fn exasol_type_name(data_type: &datafusion::arrow::datatypes::DataType) -> String {
    exasol_type_of(data_type).name
}

/// The type Exasol gives a string literal: `CHAR(n)` of its length (`VARCHAR(n)` past
/// `CHAR`'s 2000 characters), `ASCII` when every character is, else `UTF8`.
pub(crate) fn exasol_literal_type(text: &str) -> String {
    let chars = text.chars().count();
    let set = if text.is_ascii() { "ASCII" } else { "UTF8" };
    if chars <= 2000 {
        format!("CHAR({chars}) {set}")
    } else {
        format!("VARCHAR({chars}) {set}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swapping_case_is_its_own_inverse() {
        for name in ["a", "A", "MixEd_1", "straße", "ÄÖü", "x$#"] {
            assert_eq!(swap_case(&swap_case(name)), name);
        }
        assert_eq!(swap_case("MixEd_1"), "mIXeD_1");
        assert_eq!(exasol_name("abc"), "ABC");
    }

    #[test]
    fn arrow_types_have_exasol_names() {
        use datafusion::arrow::datatypes::{DataType as T, TimeUnit};
        assert_eq!(exasol_type_name(&T::Decimal128(20, 0)), "DECIMAL(20,0)");
        assert_eq!(exasol_type_name(&T::Int64), "DECIMAL(19,0)");
        assert_eq!(exasol_type_name(&T::Float64), "DOUBLE");
        assert_eq!(exasol_type_name(&T::Boolean), "BOOLEAN");
        assert_eq!(exasol_type_name(&T::Date32), "DATE");
        assert_eq!(
            exasol_type_name(&T::Timestamp(TimeUnit::Microsecond, None)),
            "TIMESTAMP"
        );
        assert_eq!(exasol_type_name(&T::Utf8View), "VARCHAR(2000000) UTF8");
        assert_eq!(exasol_type_of(&T::Int32).precision, Some(10));
        assert_eq!(exasol_type_of(&T::Float64).scale, None);
    }

    #[test]
    fn declared_types_come_before_the_arrow_type() {
        use datafusion::arrow::datatypes::{DataType as T, Field};
        use std::collections::HashMap;

        use crate::udf_runtime::script::SqlType;
        let declared = |text: &str, t: T| {
            Field::new("c", t, true).with_metadata(HashMap::from([(
                SQL_TYPE_METADATA_KEY.to_string(),
                text.to_string(),
            )]))
        };
        let varchar = exasol_field_type(&declared("VARCHAR(10) UTF8", T::Utf8));
        assert_eq!(varchar.name, "VARCHAR(10) UTF8");
        assert_eq!((varchar.size, varchar.precision), (Some(10), None));
        let int = exasol_field_type(&declared("DECIMAL(18,0)", T::Int32));
        assert_eq!((int.precision, int.scale), (Some(18), Some(0)));
        // Metadata that is no SQL type is ignored.
        let odd = exasol_field_type(&declared("NO SUCH TYPE", T::Int64));
        assert_eq!(odd.name, "DECIMAL(19,0)");
        assert_eq!(
            SqlType::parse("INT").unwrap().exasol_name(),
            "DECIMAL(18,0)"
        );
        assert_eq!(
            SqlType::parse("char(3)").unwrap().exasol_name(),
            "CHAR(3) UTF8"
        );
        assert_eq!(exasol_literal_type("abc"), "CHAR(3) ASCII");
        assert_eq!(exasol_literal_type("äb"), "CHAR(2) UTF8");
        assert_eq!(
            exasol_literal_type(&"x".repeat(2001)),
            "VARCHAR(2001) ASCII"
        );
    }

    #[test]
    fn shown_names_swap_plain_names_and_raise_computed_ones() {
        assert_eq!(exasol_shown_name("a"), "A");
        assert_eq!(exasol_shown_name("A"), "a");
        assert_eq!(exasol_shown_name("sum(t.a)"), "SUM(T.A)");
        assert_eq!(exasol_shown_name("upper(t.LBL)"), "UPPER(T.lbl)");
        assert_eq!(exasol_shown_name("t.a IS NULL"), "T.A IS NULL");
        assert_eq!(
            exasol_shown_name("concat(t.a,Utf8(\"x y\"))"),
            "CONCAT(T.A,UTF8(\"x y\"))"
        );
    }
}
