//! Exasol's SQL around UDFs that DataFusion does not have: schema statements with a current
//! schema, `COMMIT`/`ROLLBACK`, connections, `IMPORT … FROM SCRIPT` / `EXPORT … INTO SCRIPT`,
//! and Exasol syntax rewritten before parsing. `DUAL` and Exasol's scalar functions are front-end
//! passes (`front/passes/`). Differences that remain are listed in `docs/src/exasol-sql.md`
//! ("Differences from Exasol").

pub(crate) mod connections;
pub(crate) mod dialect;
pub(crate) mod schemas;
pub(crate) mod statements;
pub(crate) mod text;
pub(crate) mod transfer;

use datafusion::execution::SendableRecordBatchStream;

use self::statements::ExasolStatement;
use self::transfer::TransferContext;
use super::results::empty_stream;
use crate::core::error::Result;

/// Runs the Exasol statements that need the engine's catalog (connections, IMPORT, EXPORT).
pub(crate) async fn run_statement(
    cx: &TransferContext<'_>,
    statement: ExasolStatement,
) -> Result<SendableRecordBatchStream> {
    let catalog = cx.catalog;
    match statement {
        ExasolStatement::CreateConnection {
            or_replace,
            name,
            address,
            user,
            password,
        } => connections::create_connection(
            catalog,
            name,
            address,
            user,
            password,
            or_replace,
            (!cx.grants.owns(None)).then(|| cx.grants.user.clone()),
        )?,
        ExasolStatement::DropConnection { if_exists, name } => {
            catalog.drop_connection(&name, if_exists)?;
            catalog.change_security(|s| {
                s.forget_object(crate::core::privileges::ObjectKind::Connection, &name);
                Ok(())
            })?;
        }
        ExasolStatement::Import(transfer) => return transfer::import(cx, transfer).await,
        ExasolStatement::Export(transfer) => return transfer::export(cx, transfer).await,
        ExasolStatement::OpenSchema(_)
        | ExasolStatement::CloseSchema
        | ExasolStatement::QueryTimeout(_)
        | ExasolStatement::KillSession(_) => {}
    }
    empty_stream()
}
