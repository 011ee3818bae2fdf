//! Exasol's types where DataFusion has none of that name, in column definitions and casts:
//! `GEOMETRY[(srid)]` (WKT text, as Exasol passes it to scripts) and `HASHTYPE[(n BYTE|BIT)]`
//! (hex text) are strings; `INTERVAL YEAR TO MONTH` and `INTERVAL DAY TO SECOND` are
//! DataFusion's `INTERVAL`; and Exasol's interval literals (`INTERVAL '5-3' YEAR TO MONTH`,
//! `INTERVAL '2 10:20:30.5' DAY TO SECOND`, and casts of such strings) become the intervals
//! they write. (`TIMESTAMP WITH LOCAL TIME ZONE`, which does not parse, is rewritten on the
//! text: `front/exasol/text.rs`.)

use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    CastKind, ColumnDef, ColumnOption, DataType, DateTimeField, Expr, Interval, Statement,
    TimezoneInfo, Value, VisitMut, VisitorMut,
};

/// Rewrites Exasol's types and interval literals throughout `statement`.
pub(crate) fn map_exasol_types(statement: &mut DfStatement) {
    match statement {
        DfStatement::Statement(inner) => {
            let _ = inner.visit(&mut Types);
        }
        DfStatement::Explain(explain) => map_exasol_types(&mut explain.statement),
        _ => {}
    }
}

/// The columns a `CREATE TABLE t (a VARCHAR(10), …)` declares, each with its SQL type as
/// Exasol names it (`VARCHAR(10) UTF8`, `DECIMAL(18,0)` for `INT`, `GEOMETRY(4326)`), read
/// before the types are mapped; in the Exasol dialect the table keeps them as field metadata
/// ([`SQL_TYPE_METADATA_KEY`](crate::core::names::SQL_TYPE_METADATA_KEY)). Names are the
/// engine's (unquoted ones folded); a type that is no script type (`INTERVAL DAY TO HOUR`) is
/// left out.
pub(crate) fn declared_column_types(statement: &DfStatement) -> Vec<(String, String)> {
    use crate::udf::script::names::folded;
    use crate::udf_runtime::script::SqlType;
    let DfStatement::Statement(inner) = statement else {
        return Vec::new();
    };
    let Statement::CreateTable(create) = inner.as_ref() else {
        return Vec::new();
    };
    create
        .columns
        .iter()
        .filter_map(|column| {
            // `TIMESTAMP WITH LOCAL TIME ZONE`: the dialect's text pass wrote `WITH TIME ZONE`.
            let text = match &column.data_type {
                DataType::Timestamp(_, TimezoneInfo::WithTimeZone) => {
                    "TIMESTAMP WITH LOCAL TIME ZONE".to_string()
                }
                other => other.to_string(),
            };
            let sql_type = SqlType::parse(&text).ok()?;
            let mut name = sql_type.exasol_name();
            // `CHAR(3) ASCII`: the dialect's text pass spelled it `CHARACTER SET ASCII`.
            let ascii = column.options.iter().any(|o| {
                matches!(&o.option, ColumnOption::CharacterSet(set)
                    if set.to_string().eq_ignore_ascii_case("ascii"))
            });
            if ascii && let Some(base) = name.strip_suffix(" UTF8") {
                name = format!("{base} ASCII");
            }
            // `TIMESTAMP(3)`: a precision written is shown, as Exasol's DESCRIBE shows it.
            if let DataType::Timestamp(Some(precision), _) = &column.data_type
                && let Some(rest) = name.strip_prefix("TIMESTAMP")
            {
                name = format!("TIMESTAMP({precision}){rest}");
            }
            Some((folded(&column.name), name))
        })
        .collect()
}

struct Types;

impl VisitorMut for Types {
    type Break = ();

    fn pre_visit_statement(&mut self, statement: &mut Statement) -> ControlFlow<()> {
        if let Statement::CreateTable(create) = statement {
            create.columns.iter_mut().for_each(map_column);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::Cast {
                kind,
                expr: inner,
                data_type,
                ..
            } => {
                // `CAST('5-3' AS INTERVAL YEAR TO MONTH)`: the literal it writes.
                let literal = match (&*kind, &*data_type) {
                    (
                        CastKind::Cast | CastKind::DoubleColon,
                        DataType::Interval {
                            fields: Some(fields),
                            ..
                        },
                    ) => interval_fields(&fields.to_string()).and_then(|(leading, last)| {
                        string_literal(inner).and_then(|s| interval_text(s, &leading, &last))
                    }),
                    _ => None,
                };
                let geometry = matches!(&*data_type, DataType::Custom(name, _)
                    if name.to_string().eq_ignore_ascii_case("GEOMETRY"));
                match literal {
                    Some(text) => *expr = interval_literal(text),
                    None => map_type(data_type),
                }
                if geometry {
                    // GEOMETRY's text as Exasol writes it (`POINT (1 1)`).
                    *expr = geometry_text(expr.clone());
                }
            }
            Expr::Interval(Interval {
                value,
                leading_field: Some(leading),
                last_field: Some(last),
                ..
            }) => {
                if let Some(text) = string_literal(value)
                    && let Some(value) = interval_text(text, leading, last)
                {
                    *expr = interval_literal(value);
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// `accelsql_geometry(expr)`: `expr`'s WKT as Exasol writes it.
fn geometry_text(expr: Expr) -> Expr {
    use datafusion::sql::sqlparser::ast::{
        Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident,
        ObjectName,
    };
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(crate::udf::wkt::GEOMETRY_FUNCTION)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(expr))],
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

fn map_column(column: &mut ColumnDef) {
    map_type(&mut column.data_type);
}

/// Exasol's type as the DataFusion type that holds its values.
fn map_type(data_type: &mut DataType) {
    match data_type {
        DataType::Custom(name, _) => {
            let name = name.to_string().to_ascii_uppercase();
            if name == "GEOMETRY" || name == "HASHTYPE" {
                *data_type = DataType::Varchar(None);
            }
        }
        DataType::Interval { fields, precision } if fields.is_some() => {
            *fields = None;
            *precision = None;
        }
        _ => {}
    }
}

/// The text of a single-quoted string literal.
fn string_literal(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => Some(s),
            _ => None,
        },
        _ => None,
    }
}

/// An interval literal DataFusion parses: `INTERVAL '5 years 3 months'`.
fn interval_literal(text: String) -> Expr {
    Expr::Interval(Interval {
        value: Box::new(Expr::value(Value::SingleQuotedString(text))),
        leading_field: None,
        leading_precision: None,
        last_field: None,
        fractional_seconds_precision: None,
    })
}

/// The leading and last fields of an interval type's `YEAR TO MONTH`, `DAY(4) TO SECOND(3)`.
fn interval_fields(text: &str) -> Option<(DateTimeField, DateTimeField)> {
    let upper = text.to_ascii_uppercase();
    let (leading, last) = upper.split_once(" TO ")?;
    let field = |s: &str| -> Option<DateTimeField> {
        let word = s.split('(').next()?.trim();
        Some(match word {
            "YEAR" => DateTimeField::Year,
            "MONTH" => DateTimeField::Month,
            "DAY" => DateTimeField::Day,
            "HOUR" => DateTimeField::Hour,
            "MINUTE" => DateTimeField::Minute,
            "SECOND" => DateTimeField::Second,
            _ => return None,
        })
    };
    Some((field(leading)?, field(last)?))
}

/// Exasol's interval text for the fields `leading` to `last` (`'5-3'` YEAR TO MONTH, `'2
/// 10:20:30.5'` DAY TO SECOND, `'-1 2'` DAY TO HOUR, `'10:20'` HOUR TO MINUTE, …) as the words
/// DataFusion's interval parser reads (`5 years 3 months`); a sign applies to every part.
fn interval_text(text: &str, leading: &DateTimeField, last: &DateTimeField) -> Option<String> {
    use DateTimeField as F;
    let text = text.trim();
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (units, parts): (&[&str], Vec<&str>) = match (leading, last) {
        (F::Year, F::Month) => (&["years", "months"], body.split('-').collect()),
        (F::Day, _) => {
            let (days, clock) = body.split_once(' ').unwrap_or((body, ""));
            let mut parts = vec![days];
            parts.extend(clock.split(':').filter(|p| !p.is_empty()));
            (&["days", "hours", "minutes", "seconds"], parts)
        }
        (F::Hour, _) => (&["hours", "minutes", "seconds"], body.split(':').collect()),
        (F::Minute, _) => (&["minutes", "seconds"], body.split(':').collect()),
        _ => return None,
    };
    let wanted = match (leading, last) {
        (F::Year, F::Month) | (F::Day, F::Hour) | (F::Hour, F::Minute) => 2,
        (F::Minute, F::Second) => 2,
        (F::Day, F::Minute) | (F::Hour, F::Second) => 3,
        (F::Day, F::Second) => 4,
        _ => return None,
    };
    if parts.len() != wanted {
        return None;
    }
    let sign = if negative { "-" } else { "" };
    let mut words = Vec::with_capacity(parts.len());
    for (part, unit) in parts.iter().zip(units) {
        let part = part.trim();
        let numeric = !part.is_empty()
            && part.chars().all(|c| c.is_ascii_digit() || c == '.')
            && part.matches('.').count() <= 1;
        if !numeric {
            return None;
        }
        words.push(format!("{sign}{part} {unit}"));
    }
    Some(words.join(" "))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::parse;
    use super::*;

    fn mapped(sql: &str) -> String {
        let mut s = parse(sql);
        map_exasol_types(&mut s);
        s.to_string()
    }

    #[test]
    fn declared_column_types_are_read_before_mapping() {
        let statement = crate::front::passes::parse(
            "CREATE TABLE t (a INT, \"B\" VARCHAR(10), c GEOMETRY(4326), d INTERVAL YEAR TO MONTH, e CHAR(3), \
             f CHAR(2) CHARACTER SET ascii, g TIMESTAMP(3), h TIMESTAMP, \
             i TIMESTAMP(6) WITH TIME ZONE)",
        );
        assert_eq!(
            super::declared_column_types(&statement),
            [
                ("a".to_string(), "DECIMAL(18,0)".to_string()),
                ("B".into(), "VARCHAR(10) UTF8".into()),
                ("c".into(), "GEOMETRY(4326)".into()),
                ("d".into(), "INTERVAL YEAR(2) TO MONTH".into()),
                ("e".into(), "CHAR(3) UTF8".into()),
                ("f".into(), "CHAR(2) ASCII".into()),
                // A precision written is kept; the text pass wrote WITH LOCAL TIME ZONE so.
                ("g".into(), "TIMESTAMP(3)".into()),
                ("h".into(), "TIMESTAMP".into()),
                ("i".into(), "TIMESTAMP(6) WITH LOCAL TIME ZONE".into()),
            ]
        );
        let select = crate::front::passes::parse("SELECT 1");
        assert!(super::declared_column_types(&select).is_empty());
    }

    #[test]
    fn exasol_types_become_datafusion_types_in_tables_and_casts() {
        assert_eq!(
            mapped(
                "CREATE TABLE t (g GEOMETRY, h HASHTYPE, g2 GEOMETRY(4326), i INTERVAL DAY TO SECOND, y INTERVAL YEAR TO MONTH)"
            ),
            "CREATE TABLE t (g VARCHAR, h VARCHAR, g2 VARCHAR, i INTERVAL, y INTERVAL)"
        );
        assert_eq!(
            mapped("SELECT CAST(x AS GEOMETRY), CAST(y AS INTERVAL DAY TO SECOND) FROM t"),
            "SELECT accelsql_geometry(CAST(x AS VARCHAR)), CAST(y AS INTERVAL) FROM t"
        );
    }

    #[test]
    fn exasol_interval_literals_become_the_intervals_they_write() {
        assert_eq!(
            mapped("SELECT INTERVAL '5-3' YEAR TO MONTH, INTERVAL '-1-6' YEAR TO MONTH"),
            "SELECT INTERVAL '5 years 3 months', INTERVAL '-1 years -6 months'"
        );
        assert_eq!(
            mapped("SELECT INTERVAL '2 10:20:30.5' DAY TO SECOND, INTERVAL '+3 04' DAY TO HOUR"),
            "SELECT INTERVAL '2 days 10 hours 20 minutes 30.5 seconds', INTERVAL '3 days 04 hours'"
        );
        assert_eq!(
            mapped(
                "SELECT INTERVAL '10:20' HOUR TO MINUTE, INTERVAL '100:30.123' MINUTE TO SECOND"
            ),
            "SELECT INTERVAL '10 hours 20 minutes', INTERVAL '100 minutes 30.123 seconds'"
        );
        assert_eq!(
            mapped("SELECT CAST('1-2' AS INTERVAL YEAR TO MONTH)"),
            "SELECT INTERVAL '1 years 2 months'"
        );
        // What is not Exasol's form is left for DataFusion to judge.
        for same in [
            "SELECT INTERVAL '5' YEAR",
            "SELECT INTERVAL '1 day'",
            "SELECT INTERVAL 'x-y' YEAR TO MONTH",
        ] {
            assert_eq!(mapped(same), parse(same).to_string(), "{same}");
        }
    }
}
