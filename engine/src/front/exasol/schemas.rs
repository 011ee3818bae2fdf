//! Exasol's schema statements on DataFusion's catalog: `CREATE SCHEMA s` makes `s` the current
//! schema, `OPEN SCHEMA` / `CLOSE SCHEMA` change it, `DROP SCHEMA s CASCADE` also drops the
//! scripts created in `s`. The current schema is DataFusion's `datafusion.catalog.default_schema`
//! (unqualified tables) and the session's script schema (unqualified scripts).

use datafusion::common::plan_datafusion_err;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Ident, ObjectName, ObjectNamePart, ObjectType, SchemaName, Statement,
};

use crate::core::error::EngineError;

/// The schema accelsql starts in, and returns to on `CLOSE SCHEMA` (the core's).
pub(crate) use crate::core::tables::DEFAULT_SCHEMA;

/// What a statement does to schemas, as the session must know before and after running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SchemaChange {
    /// `CREATE SCHEMA s`: `s` becomes current once it exists.
    Create(String),
    /// `DROP SCHEMA s, … [CASCADE]`.
    Drop {
        /// The schemas.
        names: Vec<String>,
        /// `CASCADE`: their tables and scripts go too.
        cascade: bool,
    },
}

/// An identifier as SQL folds it (unquoted → lower case, as DataFusion does).
fn folded(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_ascii_lowercase()
    }
}

/// The schema an unqualified-catalog name means (`s`, not `catalog.s`).
fn schema_of(name: &ObjectName) -> Option<String> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(schema)] => Some(folded(schema)),
        _ => None,
    }
}

/// What `statement` does to schemas, if anything.
pub(crate) fn schema_change(statement: &DfStatement) -> Option<SchemaChange> {
    let DfStatement::Statement(inner) = statement else {
        return None;
    };
    match inner.as_ref() {
        Statement::CreateSchema {
            schema_name: SchemaName::Simple(name) | SchemaName::NamedAuthorization(name, _),
            ..
        } => schema_of(name).map(SchemaChange::Create),
        Statement::Drop {
            object_type: ObjectType::Schema,
            names,
            cascade,
            ..
        } => Some(SchemaChange::Drop {
            names: names.iter().filter_map(schema_of).collect(),
            cascade: *cascade,
        }),
        _ => None,
    }
}

/// 42000 for a schema that does not exist.
pub(crate) fn no_such_schema(name: &str) -> EngineError {
    EngineError::from(plan_datafusion_err!(
        "schema {name} does not exist (CREATE SCHEMA {name} creates it)"
    ))
}

/// 42000 for `DROP SCHEMA s` without CASCADE while scripts live in it.
pub(crate) fn schema_has_scripts(name: &str, scripts: &[String]) -> EngineError {
    EngineError::from(plan_datafusion_err!(
        "schema {name} is not empty: it holds the scripts {}; DROP SCHEMA {name} CASCADE drops \
         them too",
        scripts.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::DFParser;

    fn change(sql: &str) -> Option<SchemaChange> {
        let statement = DFParser::parse_sql(sql).unwrap().pop_front().unwrap();
        schema_change(&statement)
    }

    #[test]
    fn creates_and_drops_are_recognised() {
        assert_eq!(
            change("CREATE SCHEMA Lab"),
            Some(SchemaChange::Create("lab".into()))
        );
        assert_eq!(
            change("CREATE SCHEMA IF NOT EXISTS \"Lab\""),
            Some(SchemaChange::Create("Lab".into()))
        );
        assert_eq!(
            change("DROP SCHEMA a CASCADE"),
            Some(SchemaChange::Drop {
                names: vec!["a".into()],
                cascade: true
            })
        );
        assert_eq!(
            change("DROP SCHEMA IF EXISTS a"),
            Some(SchemaChange::Drop {
                names: vec!["a".into()],
                cascade: false
            })
        );
        assert_eq!(change("DROP TABLE a"), None);
        assert_eq!(change("CREATE SCHEMA other_catalog.s"), None);
    }
}
