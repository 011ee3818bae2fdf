//! Statement parameters: `?` placeholders are numbered `$1`, `$2`, … in the order they appear
//! (DataFusion binds `$n`), and [`Session::sql_with_params`](crate::Session::sql_with_params)
//! binds values to them in the plan — never by pasting text into the statement.

use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{Expr, Value, VisitMut, VisitorMut};

/// Numbers the `?` placeholders of `statement` as `$1`, `$2`, …; fails when the statement mixes
/// `?` with `$n` (which `?` would mean is ambiguous).
pub(crate) fn number_question_marks(statement: &mut DfStatement) -> crate::Result<()> {
    struct Numberer {
        next: usize,
        numbered: bool,
    }
    impl VisitorMut for Numberer {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if let Expr::Value(v) = expr
                && let Value::Placeholder(p) = &mut v.value
            {
                if p == "?" {
                    self.next += 1;
                    *p = format!("${}", self.next);
                } else {
                    self.numbered = true;
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut numberer = Numberer {
        next: 0,
        numbered: false,
    };
    match statement {
        DfStatement::Statement(inner) => {
            let _ = inner.visit(&mut numberer);
        }
        DfStatement::Explain(explain) => return number_question_marks(&mut explain.statement),
        _ => {}
    }
    if numberer.next > 0 && numberer.numbered {
        return Err(crate::EngineError::Sql(
            datafusion::error::DataFusionError::Plan(
                "a statement cannot mix ? placeholders with $n ones".into(),
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::DFParser;

    #[test]
    fn question_marks_are_numbered_in_order() {
        let mut s = DFParser::parse_sql("SELECT ? + 1 FROM t WHERE a = ? AND b IN (?, 'x?')")
            .unwrap()
            .pop_front()
            .unwrap();
        number_question_marks(&mut s).unwrap();
        assert_eq!(
            s.to_string(),
            "SELECT $1 + 1 FROM t WHERE a = $2 AND b IN ($3, 'x?')"
        );
        let mut mixed = DFParser::parse_sql("SELECT ?, $1")
            .unwrap()
            .pop_front()
            .unwrap();
        assert!(number_question_marks(&mut mixed).is_err());
    }
}
