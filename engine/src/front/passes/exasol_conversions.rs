//! The implicit conversions of Exasol's dialect (`SET accelsql.sql_dialect = 'exasol'`), made
//! explicit before DataFusion plans the statement:
//!
//! - a string function's string arguments may be numbers or dates (`REPEAT(1, 3)`,
//!   `LPAD(5, 3, '0')`): each is cast to `VARCHAR` (a string literal is left alone);
//! - `a || b` is `CONCAT(a, b)`: NULL counts as the empty string, numbers and dates as their
//!   text, as Exasol documents the operator;
//! - a number with an exponent (`1.5e0`) is a `DOUBLE`, as in Exasol;
//! - a string literal in arithmetic (`'5' + 1`) is the number it spells: an exact literal when
//!   it is one, else cast to `DOUBLE` (which fails on text that is not a number, as Exasol's
//!   conversion does).

use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, ObjectNamePart, Value,
    ValueWithSpan, VisitMut, VisitorMut,
};

/// The positions of a string function's string arguments (`None`: every argument).
fn string_positions(name: &str) -> Option<Option<&'static [usize]>> {
    Some(match name {
        "repeat" | "left" | "right" | "substr" | "substring" | "upper" | "ucase" | "lower"
        | "lcase" | "length" | "char_length" | "character_length" | "octet_length"
        | "bit_length" | "trim" | "ltrim" | "rtrim" | "btrim" | "reverse" | "initcap" | "ascii"
        | "regexp_replace" | "regexp_like" | "split_part" => Some(&[0]),
        "lpad" | "rpad" => Some(&[0, 2]),
        "replace" | "translate" | "instr" | "strpos" | "concat" | "concat_ws" | "starts_with"
        | "ends_with" => None,
        _ => return None,
    })
}

/// Makes the Exasol dialect's implicit conversions in `statement` explicit (see the module
/// docs).
pub(crate) fn make_conversions_explicit(statement: &mut DfStatement) {
    match statement {
        DfStatement::Statement(inner) => {
            let _ = inner.visit(&mut Converter);
        }
        DfStatement::Explain(explain) => make_conversions_explicit(&mut explain.statement),
        _ => {}
    }
}

struct Converter;

impl VisitorMut for Converter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::StringConcat,
                right,
            } => {
                let args = vec![
                    std::mem::replace(left.as_mut(), null()),
                    std::mem::replace(right.as_mut(), null()),
                ];
                *expr = call("concat", args);
            }
            Expr::BinaryOp {
                left,
                op:
                    BinaryOperator::Plus
                    | BinaryOperator::Minus
                    | BinaryOperator::Multiply
                    | BinaryOperator::Divide
                    | BinaryOperator::Modulo,
                right,
            } => {
                as_number(left);
                as_number(right);
            }
            Expr::Function(f) => cast_string_arguments(f),
            // Exasol types a literal with an exponent as DOUBLE (the dialect's other decimal
            // literals are exact).
            Expr::Value(ValueWithSpan {
                value: Value::Number(n, _),
                ..
            }) if n.contains(['e', 'E']) => {
                *expr = cast(
                    std::mem::replace(expr, null()),
                    DataType::Double(datafusion::sql::sqlparser::ast::ExactNumberInfo::None),
                );
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn null() -> Expr {
    Expr::value(Value::Null)
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

fn string_literal(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Value(ValueWithSpan {
            value: Value::SingleQuotedString(s),
            ..
        }) => Some(s),
        _ => None,
    }
}

/// A string literal operand of arithmetic as the number it spells.
fn as_number(operand: &mut Box<Expr>) {
    let Some(text) = string_literal(operand) else {
        return;
    };
    let text = text.trim().to_string();
    let exact = !text.is_empty()
        && text
            .trim_start_matches(['-', '+'])
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
        && text.parse::<f64>().is_ok()
        && !text.contains(['e', 'E', 'i', 'I', 'n', 'N']);
    **operand = if exact {
        match text.strip_prefix('-') {
            Some(digits) => Expr::UnaryOp {
                op: datafusion::sql::sqlparser::ast::UnaryOperator::Minus,
                expr: Box::new(Expr::value(Value::Number(digits.to_string(), false))),
            },
            None => Expr::value(Value::Number(
                text.trim_start_matches('+').to_string(),
                false,
            )),
        }
    } else {
        cast(
            std::mem::replace(operand.as_mut(), null()),
            DataType::Double(datafusion::sql::sqlparser::ast::ExactNumberInfo::None),
        )
    };
}

fn cast(expr: Expr, data_type: DataType) -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(expr),
        data_type,
        array: false,
        format: None,
    }
}

/// Casts the string arguments of a string function that are not string literals to `VARCHAR`.
fn cast_string_arguments(f: &mut Function) {
    let name = match f.name.0.as_slice() {
        [ObjectNamePart::Identifier(ident)] if ident.quote_style.is_none() => {
            ident.value.to_ascii_lowercase()
        }
        _ => return,
    };
    let Some(positions) = string_positions(&name) else {
        return;
    };
    let FunctionArguments::List(list) = &mut f.args else {
        return;
    };
    for (i, arg) in list.args.iter_mut().enumerate() {
        if positions.is_some_and(|p| !p.contains(&i)) {
            continue;
        }
        let FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) = arg else {
            continue;
        };
        let already_text = string_literal(e).is_some()
            || matches!(
                e,
                Expr::Value(ValueWithSpan {
                    value: Value::Null,
                    ..
                })
            )
            || matches!(
                e,
                Expr::Cast {
                    data_type: DataType::Varchar(_),
                    ..
                }
            );
        if !already_text {
            *e = cast(std::mem::replace(e, null()), DataType::Varchar(None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::passes::parse;

    fn converted(sql: &str) -> String {
        let mut statement = parse(sql);
        make_conversions_explicit(&mut statement);
        statement.to_string()
    }

    #[test]
    fn string_functions_take_numbers_as_text() {
        assert_eq!(
            converted("SELECT REPEAT(1, 3), lpad(x, 5, 0), upper('a')"),
            "SELECT REPEAT(CAST(1 AS VARCHAR), 3), lpad(CAST(x AS VARCHAR), 5, CAST(0 AS VARCHAR)), upper('a')"
        );
    }

    #[test]
    fn concatenation_is_concat_and_string_literals_in_arithmetic_are_numbers() {
        assert_eq!(
            converted("SELECT a || 'x' || 1, '5' + 1, 2 * '-1.5', 'abc' - 1"),
            "SELECT concat(concat(a, 'x'), 1), 5 + 1, 2 * -1.5, CAST('abc' AS DOUBLE) - 1"
        );
        assert_eq!(
            converted("SELECT 1.5e0, 2E3, 1.5"),
            "SELECT CAST(1.5e0 AS DOUBLE), CAST(2E3 AS DOUBLE), 1.5"
        );
    }
}
