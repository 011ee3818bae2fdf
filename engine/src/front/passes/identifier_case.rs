//! Exasol's identifier case in results (`SET accelsql.identifier_case = 'upper'`): unquoted
//! names are shown upper case, as Exasol folds them (`SELECT 1 AS a` returns column `A`), while
//! a name written in double quotes keeps its case (`SELECT 1 AS "a"` returns `a`).
//!
//! Names are still folded to lower case inside the engine (DataFusion's rule), so tables, columns
//! and scripts are found however the statement writes them; only the result's column names
//! change. Quoted names are taken from the statement's outermost select list.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr, Statement};

/// The names of the outermost select list that were written in double quotes (aliases and
/// column references): they keep their case in an upper-case result.
pub(crate) fn quoted_output_names(statement: &DfStatement) -> HashSet<String> {
    let mut names = HashSet::new();
    if let DfStatement::Statement(inner) = statement
        && let Statement::Query(query) = inner.as_ref()
    {
        collect_query(query, &mut names);
    }
    names
}

fn collect_query(query: &Query, names: &mut HashSet<String>) {
    collect_body(&query.body, names);
}

fn collect_body(body: &SetExpr, names: &mut HashSet<String>) {
    match body {
        SetExpr::Select(select) => {
            for item in &select.projection {
                let ident = match item {
                    SelectItem::ExprWithAlias { alias, .. } => Some(alias),
                    SelectItem::UnnamedExpr(Expr::Identifier(ident)) => Some(ident),
                    SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => parts.last(),
                    _ => None,
                };
                if let Some(Ident {
                    value,
                    quote_style: Some(_),
                    ..
                }) = ident
                {
                    names.insert(value.clone());
                }
            }
        }
        // A set operation's names are its first branch's.
        SetExpr::SetOperation { left, .. } => collect_body(left, names),
        SetExpr::Query(query) => collect_query(query, names),
        _ => {}
    }
}

/// `schema` with every column name upper case except those in `quoted`; `None` when no name
/// changes.
pub(crate) fn upper_case_names(schema: &SchemaRef, quoted: &HashSet<String>) -> Option<SchemaRef> {
    let upper = |name: &str| -> Option<String> {
        let folded = name.to_uppercase();
        (!quoted.contains(name) && folded != name).then_some(folded)
    };
    if !schema.fields().iter().any(|f| upper(f.name()).is_some()) {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match upper(f.name()) {
            Some(name) => f.as_ref().clone().with_name(name),
            None => f.as_ref().clone(),
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::DataType;
    use datafusion::sql::parser::DFParser;

    fn quoted(sql: &str) -> HashSet<String> {
        let statement = DFParser::parse_sql(sql).unwrap().pop_front().unwrap();
        quoted_output_names(&statement)
    }

    #[test]
    fn quoted_aliases_and_columns_of_the_outer_select_are_kept() {
        let q = quoted(r#"SELECT 1 AS "a", 2 AS b, t."Mixed", c FROM t"#);
        assert_eq!(q, HashSet::from(["a".to_string(), "Mixed".to_string()]));
        let q = quoted(r#"SELECT x AS "k" FROM t UNION ALL SELECT y AS "other" FROM u"#);
        assert_eq!(q, HashSet::from(["k".to_string()]));
        assert!(quoted(r#"SELECT * FROM (SELECT 1 AS "inner") s"#).is_empty());
    }

    #[test]
    fn unquoted_names_are_shown_upper_case() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("kept", DataType::Int64, false),
            Field::new("f(x)", DataType::Int64, false),
            Field::new("ALREADY", DataType::Int64, false),
        ]));
        let renamed = upper_case_names(&schema, &HashSet::from(["kept".to_string()])).unwrap();
        let names: Vec<&str> = renamed.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["A", "kept", "F(X)", "ALREADY"]);
        let all_upper = Arc::new(Schema::new(vec![Field::new("A", DataType::Int64, false)]));
        assert!(upper_case_names(&all_upper, &HashSet::new()).is_none());
    }
}
