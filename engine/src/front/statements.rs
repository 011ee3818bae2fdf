//! What kind each statement is: the one place a statement's text is classified before it runs.
//! accelsql's and Exasol's own statements are recognised here, from one token view of the text
//! ([`tokens`](super::tokens)); the rest is SQL that DataFusion plans after the front end's passes.

use super::exasol::dialect::exasol_text;
use super::exasol::statements::{ExasolStatement, exasol_statement};
use super::privileges::statements::{SecurityStatement, security_statement};
use super::scripts::ddl::is_script_ddl;
use super::tables::{TableStatement, table_statement};
use super::tokens::tokens;
use crate::core::error::Result;

/// A statement as the session runs it: each kind has its own run step.
#[derive(Debug)]
pub(crate) enum StatementKind {
    /// `CREATE … SCRIPT`, `DROP SCRIPT`, `ALTER SESSION SET SCRIPT_LANGUAGES`: the script
    /// catalog's (its body is not SQL, so it is recognised before the text is tokenized).
    ScriptDdl,
    /// Users, roles, privileges and consumer groups.
    Security(SecurityStatement),
    /// A statement of Exasol's that DataFusion does not know (`OPEN SCHEMA`, IMPORT, …).
    Exasol(ExasolStatement),
    /// The tables' own statements: transactions, `OPTIMIZE`, `VACUUM`, time travel, ….
    Table(TableStatement),
    /// SQL for DataFusion.
    Sql,
}

impl StatementKind {
    /// The kind of statement `text` is; in the Exasol dialect (`exasol`) Exasol's and the
    /// tables' statements are read with Exasol's names (`exasol_text`). An error for a statement
    /// of accelsql's own that is malformed.
    pub(crate) fn of(text: &str, exasol: bool) -> Result<Self> {
        if is_script_ddl(text) {
            return Ok(Self::ScriptDdl);
        }
        let toks = tokens(text);
        if let Some(toks) = &toks
            && let Some(statement) = security_statement(text, toks)?
        {
            return Ok(Self::Security(statement));
        }
        // The Exasol dialect's names: the same tokens unless the text changes.
        let exasol_text = exasol.then(|| exasol_text(text)).filter(|t| t != text);
        let toks = match &exasol_text {
            Some(t) => tokens(t),
            None => toks,
        };
        let text = exasol_text.as_deref().unwrap_or(text);
        let Some(toks) = toks else {
            return Ok(Self::Sql);
        };
        if let Some(statement) = exasol_statement(text, &toks)? {
            return Ok(Self::Exasol(match statement {
                ExasolStatement::Import(t) if exasol => ExasolStatement::Import(t.into_written()),
                ExasolStatement::Export(t) if exasol => ExasolStatement::Export(t.into_written()),
                other => other,
            }));
        }
        Ok(match table_statement(text, &toks)? {
            Some(statement) => Self::Table(statement),
            None => Self::Sql,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(text: &str, exasol: bool) -> String {
        format!("{:?}", StatementKind::of(text, exasol).unwrap())
    }

    #[test]
    fn each_statement_is_classified_once_by_its_first_words() {
        assert_eq!(
            kind(
                "CREATE PYTHON3 SCALAR SCRIPT f() RETURNS INT AS\ndef run(ctx): return 1\n/",
                false
            ),
            "ScriptDdl"
        );
        assert_eq!(kind("DROP SCRIPT f", true), "ScriptDdl");
        assert!(kind("CREATE USER ann IDENTIFIED BY \"pw\"", false).starts_with("Security("));
        assert!(kind("OPEN SCHEMA s", true).starts_with("Exasol("));
        assert!(kind("COMMIT", false).starts_with("Table("));
        assert_eq!(kind("SELECT 1", true), "Sql");
        // Text the tokenizer cannot read is DataFusion's to refuse.
        assert_eq!(kind("SELECT 'unclosed", false), "Sql");
    }

    #[test]
    fn a_malformed_statement_of_accelsqls_own_is_an_error_not_sql() {
        assert!(StatementKind::of("CREATE USER ann", false).is_err());
        assert!(StatementKind::of("OPEN SCHEMA a b", false).is_err());
    }
}
