//! The front end's part of EMITS calls: in each select list, a call of an EMITS UDF becomes one
//! select item per EMITS column (`f(x)` → `get_field(f(x), 'a') AS a, get_field(f(x), 'b') AS b`),
//! so the SQL planner knows the emitted column names (`ORDER BY a`, outer queries reading `b`).
//! The EMITS rule later folds those items back into one `UdfCall`. EMITS calls anywhere else are
//! rejected here with a clear error.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, GroupByExpr, Ident, ObjectName, ObjectNamePart, Select, SelectItem,
    Statement, Value, VisitMut, VisitorMut, visit_expressions,
};

use crate::udf::{InputType, SetUdf};
use crate::{EngineError, emits_err};

/// Rewrites the EMITS calls of `statement`; `lookup` finds the EMITS UDF a function name calls.
pub(crate) fn expand_emits_calls(
    statement: &mut DfStatement,
    lookup: &dyn Fn(&str) -> Option<Arc<SetUdf>>,
) -> crate::Result<()> {
    match statement {
        DfStatement::Statement(inner) => expand_in(inner, lookup),
        DfStatement::Explain(explain) => expand_emits_calls(&mut explain.statement, lookup),
        _ => Ok(()),
    }
}

fn expand_in(
    statement: &mut Statement,
    lookup: &dyn Fn(&str) -> Option<Arc<SetUdf>>,
) -> crate::Result<()> {
    let mut calls = Vec::new();
    let _ = visit_expressions(statement, |expr| {
        if let Some(def) = emits_call(expr, lookup) {
            calls.push(def);
        }
        ControlFlow::<()>::Continue(())
    });
    let Some(first) = calls.first().cloned() else {
        return Ok(());
    };
    let mut expander = Expander {
        lookup,
        expanded: 0,
    };
    if let ControlFlow::Break(e) = statement.visit(&mut expander) {
        return Err(e);
    }
    if expander.expanded < calls.len() {
        return Err(emits_err!(
            first.name(),
            "emitting function in expression (as Exasol says): an EMITS call must be an item \
             of a select list, not inside an expression, a WHERE, GROUP BY or ORDER BY clause, \
             or a function argument"
        ));
    }
    Ok(())
}

/// The EMITS UDF `expr` calls, if it is such a call.
fn emits_call(expr: &SqlExpr, lookup: &dyn Fn(&str) -> Option<Arc<SetUdf>>) -> Option<Arc<SetUdf>> {
    let SqlExpr::Function(Function { name, .. }) = expr else {
        return None;
    };
    let [ObjectNamePart::Identifier(ident)] = name.0.as_slice() else {
        return None;
    };
    let name = if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_ascii_lowercase()
    };
    lookup(&name)
}

struct Expander<'a> {
    lookup: &'a dyn Fn(&str) -> Option<Arc<SetUdf>>,
    expanded: usize,
}

impl VisitorMut for Expander<'_> {
    type Break = EngineError;

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<Self::Break> {
        let mut found: Option<(usize, Arc<SetUdf>)> = None;
        for (i, item) in select.projection.iter().enumerate() {
            let (expr, alias) = match item {
                SelectItem::UnnamedExpr(expr) => (expr, None),
                SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias)),
                _ => continue,
            };
            let Some(def) = emits_call(expr, self.lookup) else {
                continue;
            };
            if let Some((_, other)) = &found {
                return ControlFlow::Break(emits_err!(
                    def.name(),
                    "a select list may hold only one EMITS call, and {}() is already in it; \
                     move one of them into a sub-select",
                    other.name()
                ));
            }
            if let Some(alias) = alias {
                return ControlFlow::Break(emits_err!(
                    def.name(),
                    "an EMITS call cannot be renamed (AS {alias}); its columns are named by its \
                     EMITS clause — rename them in an outer select"
                ));
            }
            found = Some((i, def));
        }
        let Some((i, def)) = found else {
            return ControlFlow::Continue(());
        };
        let SelectItem::UnnamedExpr(call) = select.projection[i].clone() else {
            return ControlFlow::Continue(());
        };
        let items = def
            .emits()
            .into_iter()
            .flatten()
            .map(|field| SelectItem::ExprWithAlias {
                expr: get_field(call.clone(), field.name()),
                alias: Ident::with_quote('"', field.name()),
            });
        select.projection.splice(i..=i, items);
        if def.input_type() == InputType::Set {
            hide_group_uniqueness(select);
        }
        self.expanded += 1;
        ControlFlow::Continue(())
    }
}

/// A SET EMITS call's select emits any number of rows per group, but DataFusion's planner takes a
/// GROUP BY's keys to be unique in its output (a functional dependency): an outer `GROUP BY k`
/// over it would then also group by every emitted column. A NULL among the keys, which the
/// select list does not show, keeps the dependency from reaching the select's output; it does not
/// change the groups.
fn hide_group_uniqueness(select: &mut Select) {
    if let GroupByExpr::Expressions(keys, _) = &mut select.group_by
        && !keys.is_empty()
    {
        keys.push(SqlExpr::value(Value::Null));
    }
}

/// `get_field(expr, 'name')`.
fn get_field(expr: SqlExpr, name: &str) -> SqlExpr {
    let arg = |e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e));
    SqlExpr::Function(Function {
        name: ObjectName::from(vec![Ident::new("get_field")]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![
                arg(expr),
                arg(SqlExpr::value(Value::SingleQuotedString(name.to_string()))),
            ],
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use datafusion::arrow::array::ArrayRef;
    use datafusion::arrow::datatypes::{DataType, Field};

    use super::*;
    use crate::InstanceContext;

    /// `pairs(x) EMITS (a BIGINT, b BIGINT)`, a SET UDF.
    fn pairs() -> Arc<SetUdf> {
        let udf = SetUdf::builder("pairs")
            .inputs([DataType::Int64])
            .emits([
                Field::new("a", DataType::Int64, false),
                Field::new("b", DataType::Int64, false),
            ])
            .cpu(|_: &InstanceContext, _: usize, _: &[ArrayRef]| Ok(Vec::new()))
            .build()
            .unwrap();
        Arc::new(udf)
    }

    fn expanded(sql: &str) -> crate::Result<String> {
        let mut statement = crate::front::passes::parse(sql);
        let def = pairs();
        let lookup = |name: &str| (name == "pairs").then(|| Arc::clone(&def));
        expand_emits_calls(&mut statement, &lookup)?;
        Ok(statement.to_string())
    }

    #[test]
    fn an_emits_call_becomes_one_item_per_column() {
        let sql = expanded("SELECT k, PAIRS(x) FROM t GROUP BY k").unwrap();
        assert_eq!(
            sql,
            "SELECT k, get_field(PAIRS(x), 'a') AS \"a\", get_field(PAIRS(x), 'b') AS \"b\" \
             FROM t GROUP BY k, NULL"
        );
        // Other calls are left alone.
        assert_eq!(
            expanded("SELECT f(x) FROM t").unwrap(),
            "SELECT f(x) FROM t"
        );
    }

    #[test]
    fn emits_calls_cannot_be_renamed_or_doubled() {
        let e = expanded("SELECT pairs(x) AS p FROM t").unwrap_err();
        assert!(e.to_string().contains("cannot be renamed"), "{e}");
        let e = expanded("SELECT pairs(x), pairs(y) FROM t").unwrap_err();
        assert!(e.to_string().contains("only one EMITS call"), "{e}");
    }
}
