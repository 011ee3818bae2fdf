//! `VALUES` rows with subqueries in them (`INSERT INTO t VALUES ((SELECT max(a) FROM t) + 1,
//! 'z')`), which DataFusion plans but cannot run: its `VALUES` operator evaluates each row's
//! expressions when the plan is made, before any subquery has run ("ScalarSubqueryExpr
//! evaluated before the subquery was executed", an internal error). Such a row list becomes the
//! `SELECT … UNION ALL SELECT …` of its rows, whose columns keep the names `VALUES` gives them
//! (`column1`, `column2`, …).

use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::visit_expressions;
use datafusion::sql::sqlparser::ast::{Expr, Query, SetExpr, Values, VisitMut, VisitorMut};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Rewrites every `VALUES` row list of `statement` that has a subquery in a row (and no
/// `DEFAULT`, which only `VALUES` can say) into the union of its rows as selects.
pub(crate) fn lift_values_subqueries(statement: &mut DfStatement) {
    match statement {
        DfStatement::Statement(inner) => {
            let _ = inner.visit(&mut Lifter);
        }
        DfStatement::Explain(explain) => lift_values_subqueries(&mut explain.statement),
        _ => {}
    }
}

struct Lifter;

impl VisitorMut for Lifter {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Values(values) = query.body.as_ref()
            && let Some(body) = as_selects(values)
        {
            query.body = body;
        }
        ControlFlow::Continue(())
    }
}

/// The rows of `values` as `SELECT … UNION ALL SELECT …`, if a row has a subquery and none says
/// `DEFAULT`.
fn as_selects(values: &Values) -> Option<Box<SetExpr>> {
    let mut subquery = false;
    let mut default = false;
    for row in &values.rows {
        let _ = visit_expressions(&row.content, |e: &Expr| {
            match e {
                Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
                    subquery = true;
                }
                Expr::Identifier(id)
                    if id.quote_style.is_none() && id.value.eq_ignore_ascii_case("DEFAULT") =>
                {
                    default = true;
                }
                _ => {}
            }
            ControlFlow::<()>::Continue(())
        });
    }
    if !subquery || default {
        return None;
    }
    let selects: Vec<String> = values
        .rows
        .iter()
        .map(|row| {
            let items: Vec<String> = row
                .content
                .iter()
                .enumerate()
                .map(|(i, e)| format!("{e} AS column{}", i + 1))
                .collect();
            format!("SELECT {}", items.join(", "))
        })
        .collect();
    let text = selects.join(" UNION ALL ");
    let query = Parser::new(&GenericDialect {})
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_query())
        .ok()?;
    Some(query.body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::parse;
    use super::*;

    fn lifted(sql: &str) -> String {
        let mut s = parse(sql);
        lift_values_subqueries(&mut s);
        s.to_string()
    }

    #[test]
    fn rows_with_subqueries_become_selects_named_as_values_names_them() {
        assert_eq!(
            lifted("INSERT INTO t VALUES ((SELECT max(a) FROM t) + 1, 'z'), (2, 'y')"),
            "INSERT INTO t SELECT (SELECT max(a) FROM t) + 1 AS column1, 'z' AS column2 \
             UNION ALL SELECT 2 AS column1, 'y' AS column2"
        );
        assert_eq!(
            lifted("SELECT * FROM (VALUES (EXISTS (SELECT 1))) AS v(x)"),
            "SELECT * FROM (SELECT EXISTS (SELECT 1) AS column1) AS v (x)"
        );
    }

    #[test]
    fn other_row_lists_are_left_alone() {
        for sql in [
            "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
            "INSERT INTO t VALUES ((SELECT 1), DEFAULT)",
            "SELECT * FROM (VALUES (1)) AS v(x) WHERE x IN (SELECT 1)",
        ] {
            assert_eq!(lifted(sql), parse(sql).to_string(), "{sql}");
        }
    }
}
