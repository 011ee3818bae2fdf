//! Exasol's SQL around UDFs that DataFusion does not have: schema statements with a current
//! schema, `COMMIT`/`ROLLBACK`, connections, `IMPORT … FROM SCRIPT` / `EXPORT … INTO SCRIPT`,
//! `DUAL` and Exasol's scalar functions. Differences that remain are listed in the README
//! ("Differences from Exasol").

pub(crate) mod case;
pub(crate) mod connections;
pub(crate) mod functions;
pub(crate) mod schemas;
pub(crate) mod statements;
pub(crate) mod text;
pub(crate) mod transfer;

pub(crate) use functions::{SessionValues, map_exasol_functions};
pub(crate) use schemas::{DEFAULT_SCHEMA, SchemaChange, schema_change};
pub(crate) use statements::{ExasolStatement, parse_exasol_statement};
pub(crate) use text::rewrite_exasol_text;

use datafusion::execution::SendableRecordBatchStream;

use crate::{Result, Session};

/// Runs the Exasol statements that need the engine's catalog (connections, IMPORT, EXPORT).
pub(crate) async fn run_statement(
    session: &Session,
    statement: ExasolStatement,
) -> Result<SendableRecordBatchStream> {
    let catalog = &session.engine().inner.scripts;
    match statement {
        ExasolStatement::CreateConnection {
            or_replace,
            name,
            address,
            user,
            password,
        } => connections::create_connection(catalog, name, address, user, password, or_replace)?,
        ExasolStatement::DropConnection { if_exists, name } => {
            catalog.drop_connection(&name, if_exists)?
        }
        ExasolStatement::Import(transfer) => return transfer::import(session, transfer).await,
        ExasolStatement::Export(transfer) => return transfer::export(session, transfer).await,
        ExasolStatement::OpenSchema(_)
        | ExasolStatement::CloseSchema
        | ExasolStatement::Transaction => {}
    }
    crate::session::empty_stream()
}
