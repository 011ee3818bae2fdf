//! Repeated expressions in a select list (`SELECT f(), f()`, `SELECT 1, 1`), which Exasol,
//! PostgreSQL and DuckDB accept and DataFusion rejects ("Projections require unique expression
//! names"): the front end aliases each repeat before planning, and the statement's result gives
//! the repeats of its own select list the name of the first again.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Ident, Query, SelectItem, SetExpr, Statement, VisitMut, VisitorMut,
};

/// How a repeat of the top-level select list is aliased while planning: the position of the
/// item it repeats and its ordinal among the repeats.
const MARKER: &str = "__accelsql_repeat_of_";

/// Aliases every unaliased select item that repeats an earlier unaliased item of the same select
/// list. In the statement's own (outermost) select list the alias is a marker that
/// [`restore_repeated_names`] turns back into the first item's name; in sub-selects, where no one
/// can refer to either column by name anyway, it is readable: `f()_2`.
pub(crate) fn alias_repeated_select_items(statement: &mut DfStatement) {
    let DfStatement::Statement(inner) = statement else {
        if let DfStatement::Explain(explain) = statement {
            alias_repeated_select_items(&mut explain.statement);
        }
        return;
    };
    // The outermost select list first (its repeats get markers), then every query block; an
    // item aliased once is no longer a repeat.
    if let Statement::Query(q) = inner.as_mut() {
        alias_in_body(&mut q.body, true);
    }
    let _ = inner.visit(&mut Aliaser);
}

/// Aliases the repeats of every query block.
struct Aliaser;

impl VisitorMut for Aliaser {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        alias_in_body(&mut query.body, false);
        ControlFlow::Continue(())
    }
}

/// Aliases the repeats of each select list in `body`; `leftmost_top` when `body` names the
/// statement's result columns (the outermost query's first select).
fn alias_in_body(body: &mut SetExpr, leftmost_top: bool) {
    match body {
        SetExpr::Select(select) => alias_in_list(&mut select.projection, leftmost_top),
        SetExpr::SetOperation { left, right, .. } => {
            alias_in_body(left, leftmost_top);
            alias_in_body(right, false);
        }
        // A parenthesized query is a `Query` of its own: the visitor reaches it.
        _ => {}
    }
}

fn alias_in_list(items: &mut [SelectItem], top: bool) {
    // Positions are output positions only while no wildcard expands in front of them.
    let positional = top
        && !items.iter().any(|i| {
            matches!(
                i,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
            )
        });
    let mut seen: Vec<(String, usize)> = Vec::new();
    let mut repeats = 0usize;
    for (position, item) in items.iter_mut().enumerate() {
        let SelectItem::UnnamedExpr(expr) = item else {
            continue;
        };
        let text = expr.to_string();
        let Some(first) = seen.iter().find(|(t, _)| *t == text).map(|(_, p)| *p) else {
            seen.push((text, position));
            continue;
        };
        repeats += 1;
        let alias = if positional {
            format!("{MARKER}{first}_{repeats}")
        } else {
            let count = items_before_with(&seen, &text);
            format!("{text}_{count}")
        };
        seen.push((text, position));
        let expr = expr.clone();
        *item = SelectItem::ExprWithAlias {
            expr,
            alias: Ident::with_quote('"', alias),
        };
    }
}

/// How many times `text` occurred so far, counting this one.
fn items_before_with(seen: &[(String, usize)], text: &str) -> usize {
    seen.iter().filter(|(t, _)| t == text).count() + 1
}

/// The statement's result schema with the markers of [`alias_repeated_select_items`] replaced by
/// the names of the items they repeat (several columns may then share a name, as in Exasol);
/// `None` when there is nothing to rename.
pub(crate) fn restore_repeated_names(schema: &SchemaRef) -> Option<SchemaRef> {
    let fields = schema.fields();
    let first_of = |name: &str| -> Option<usize> {
        let rest = name.strip_prefix(MARKER)?;
        let (first, _) = rest.split_once('_')?;
        let first: usize = first.parse().ok()?;
        (first < fields.len() && !fields[first].name().starts_with(MARKER)).then_some(first)
    };
    if !fields.iter().any(|f| first_of(f.name()).is_some()) {
        return None;
    }
    let renamed: Vec<Field> = fields
        .iter()
        .map(|f| match first_of(f.name()) {
            Some(first) => f.as_ref().clone().with_name(fields[first].name()),
            None => f.as_ref().clone(),
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        renamed,
        schema.metadata().clone(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::DataType;
    use datafusion::sql::parser::DFParser;

    fn aliased(sql: &str) -> String {
        let mut statements = DFParser::parse_sql(sql).unwrap();
        let mut statement = statements.pop_front().unwrap();
        alias_repeated_select_items(&mut statement);
        statement.to_string()
    }

    #[test]
    fn repeats_get_aliases_and_first_items_keep_their_names() {
        assert_eq!(
            aliased("SELECT f(), f(), 1, f()"),
            "SELECT f(), f() AS \"__accelsql_repeat_of_0_1\", 1, f() AS \"__accelsql_repeat_of_0_2\""
        );
        // Aliased items are the user's names; different expressions are not repeats.
        assert_eq!(
            aliased("SELECT f() AS a, f() AS b, g(x), g(y)"),
            "SELECT f() AS a, f() AS b, g(x), g(y)"
        );
        // Sub-selects get readable names; wildcards make positions unusable.
        assert_eq!(
            aliased("SELECT * FROM (SELECT 1, 1) AS s"),
            "SELECT * FROM (SELECT 1, 1 AS \"1_2\") AS s"
        );
        assert_eq!(
            aliased("SELECT *, x, x FROM t"),
            "SELECT *, x, x AS \"x_2\" FROM t"
        );
        assert_eq!(
            aliased("EXPLAIN SELECT 1, 1 UNION ALL SELECT 2, 2"),
            "EXPLAIN SELECT 1, 1 AS \"__accelsql_repeat_of_0_1\" UNION ALL SELECT 2, 2 AS \"2_2\""
        );
    }

    #[test]
    fn markers_take_the_name_of_the_item_they_repeat() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("f()", DataType::Utf8, true),
            Field::new("x", DataType::Int64, false),
            Field::new("__accelsql_repeat_of_0_1", DataType::Utf8, true),
        ]));
        let renamed = restore_repeated_names(&schema).unwrap();
        let names: Vec<_> = renamed.fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["f()", "x", "f()"]);
        assert_eq!(renamed.field(1).data_type(), &DataType::Int64);
        let plain = Arc::new(Schema::new(vec![Field::new("a", DataType::Utf8, true)]));
        assert!(restore_repeated_names(&plain).is_none());
    }
}
