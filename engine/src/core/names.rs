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

/// The name Exasol gives the type of values of Arrow type `data_type` (`DECIMAL(19,0)` for a
/// 64-bit integer, `VARCHAR(2000000) UTF8` for a string); Arrow's name for a type Exasol lacks.
pub(crate) fn exasol_type_name(data_type: &datafusion::arrow::datatypes::DataType) -> String {
    use datafusion::arrow::datatypes::{DataType as T, IntervalUnit};
    let decimal = |p: u8| format!("DECIMAL({p},0)");
    match data_type {
        T::Int8 | T::UInt8 => decimal(3),
        T::Int16 | T::UInt16 => decimal(5),
        T::Int32 | T::UInt32 => decimal(10),
        T::Int64 => decimal(19),
        T::UInt64 => decimal(20),
        T::Decimal32(p, s) | T::Decimal64(p, s) | T::Decimal128(p, s) | T::Decimal256(p, s) => {
            format!("DECIMAL({p},{s})")
        }
        T::Float16 | T::Float32 | T::Float64 => "DOUBLE".into(),
        T::Boolean => "BOOLEAN".into(),
        T::Date32 | T::Date64 => "DATE".into(),
        T::Timestamp(_, None) => "TIMESTAMP".into(),
        T::Timestamp(_, Some(_)) => "TIMESTAMP WITH LOCAL TIME ZONE".into(),
        T::Utf8 | T::LargeUtf8 | T::Utf8View => "VARCHAR(2000000) UTF8".into(),
        T::Interval(IntervalUnit::YearMonth) => "INTERVAL YEAR(2) TO MONTH".into(),
        T::Interval(_) => "INTERVAL DAY(2) TO SECOND(3)".into(),
        T::Dictionary(_, value) => exasol_type_name(value),
        other => other.to_string(),
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
