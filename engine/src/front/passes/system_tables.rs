//! The pass that makes Exasol's system tables and `DUAL` reachable unqualified from any schema,
//! as in Exasol: an unqualified reference to one of [`SYSTEM_TABLES`] becomes `sys.<name>`.

use crate::catalog::system::{SYSTEM_SCHEMA, is_system_table};

/// Rewrites unqualified references to [`SYSTEM_TABLES`] as `sys.<name>`, unless `has_table`
/// says the current schema has a table of that name, so that Exasol's system tables and `DUAL`
/// are found from any schema, as in Exasol.
pub(crate) fn qualify_system_tables(
    statement: &mut datafusion::sql::parser::Statement,
    has_table: &dyn Fn(&str) -> bool,
) {
    use datafusion::sql::parser::Statement as DfStatement;
    use datafusion::sql::sqlparser::ast::{
        Ident, ObjectName, ObjectNamePart, VisitMut, VisitorMut,
    };
    use std::ops::ControlFlow;

    struct Qualifier<'a> {
        has_table: &'a dyn Fn(&str) -> bool,
    }
    impl VisitorMut for Qualifier<'_> {
        type Break = ();
        fn pre_visit_relation(&mut self, relation: &mut ObjectName) -> ControlFlow<()> {
            if let [ObjectNamePart::Identifier(ident)] = relation.0.as_slice() {
                let name = if ident.quote_style.is_some() {
                    ident.value.clone()
                } else {
                    ident.value.to_ascii_lowercase()
                };
                if is_system_table(&name) && !(self.has_table)(&name) {
                    *relation = ObjectName::from(vec![
                        Ident::new(SYSTEM_SCHEMA),
                        Ident::with_quote('"', name),
                    ]);
                }
            }
            ControlFlow::Continue(())
        }
    }
    match statement {
        DfStatement::Statement(inner) => {
            let _ = inner.visit(&mut Qualifier { has_table });
        }
        DfStatement::Explain(explain) => qualify_system_tables(&mut explain.statement, has_table),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn qualified(sql: &str, has_table: &dyn Fn(&str) -> bool) -> String {
        let mut statement = crate::front::passes::parse(sql);
        qualify_system_tables(&mut statement, has_table);
        statement.to_string()
    }

    #[test]
    fn system_tables_are_found_from_any_schema() {
        assert_eq!(
            qualified("SELECT * FROM EXA_METADATA, t", &|_| false),
            "SELECT * FROM sys.\"exa_metadata\", t"
        );
        assert_eq!(
            qualified("EXPLAIN SELECT 1 FROM dual", &|_| false),
            "EXPLAIN SELECT 1 FROM sys.\"dual\""
        );
        // A table of the current schema wins, and qualified names are the user's.
        assert_eq!(
            qualified("SELECT * FROM dual", &|name| name == "dual"),
            "SELECT * FROM dual"
        );
        assert_eq!(
            qualified("SELECT * FROM s.dual", &|_| false),
            "SELECT * FROM s.dual"
        );
    }
}
