//! `IMPORT … FROM SCRIPT` and `EXPORT … INTO SCRIPT`, as Exasol runs them: the script's
//! `generate_sql_for_import_spec(import_spec)` (or `generate_sql_for_export_spec`) is called once
//! in a worker, and the SQL it returns is run — for IMPORT, its rows go into the target table
//! (or, for `IMPORT INTO (a INT, …)`, they are the statement's result, cast to those columns).
//!
//! For EXPORT, the returned SQL reads the exported rows: it runs with the source as a common
//! table expression named as the table (`"T"`; a query source is `"EXPORT_SOURCE"`), whose
//! columns carry Exasol's names (`source_column_names` are `"T"."A"`), and a `FROM DUAL` in it
//! reads that source, as in the statements Exasol's export scripts generate (`SELECT
//! s.export_udf(…, "T"."A") FROM DUAL GROUP BY iproc()`).

use accelsql_udf_runtime::script::{
    ConnectionInfo, ExportSpec, ImportSpec, SingleCall, WorkerContext, single_call_with_timeout,
};
use datafusion::common::plan_datafusion_err;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;

use std::time::Duration;

use async_trait::async_trait;

use super::connections::find_connection;
use super::statements::ScriptTransfer;
use super::text::replace_from_dual;
use crate::catalog::scripts::ScriptCatalog;
use crate::core::EngineState;
use crate::core::error::{EngineError, Result};
use crate::core::names::exasol_name;
use crate::core::privileges::Grants;
use crate::front::scripts::languages::SessionScripts;
use crate::front::splitter::split_statements;
use crate::script_err;

/// The error for generated SQL that is empty, or more than one statement (the script's fault).
fn generated_error(script: &str, function: &str, message: &str) -> EngineError {
    script_err!("script {script}: {function} {message}")
}

/// Runs SQL as a statement of the session that runs an IMPORT or EXPORT (the generated SQL,
/// and EXPORT's look at its source). The session implements it: this file does not depend on
/// the session that dispatches to it.
#[async_trait]
pub(crate) trait SqlRunner: Sync {
    /// Runs `sql` (one statement) and streams its result.
    async fn run_sql(&self, sql: &str) -> Result<SendableRecordBatchStream>;
}

/// What IMPORT and EXPORT use of the session that runs them.
pub(crate) struct TransferContext<'a> {
    /// The engine's scripts and connections.
    pub(crate) catalog: &'a ScriptCatalog,
    /// The session's languages and current schema.
    pub(crate) scripts: &'a SessionScripts,
    /// The engine's state (statement ids, node).
    pub(crate) state: &'a EngineState,
    /// `SET accelsql.udf_timeout`.
    pub(crate) udf_timeout: Option<Duration>,
    /// The session, to run SQL in.
    pub(crate) runner: &'a dyn SqlRunner,
    /// What the session may do.
    pub(crate) grants: &'a Grants,
}

/// The connection `AT name` or `AT 'address' USER … IDENTIFIED BY …` gives the script.
fn connection_of(cx: &TransferContext<'_>, t: &ScriptTransfer) -> Result<Option<ConnectionInfo>> {
    if let Some(name) = &t.connection_name {
        let found = find_connection(cx.catalog, name)
            .map_err(|m| EngineError::Sql(DataFusionError::Plan(m)))?;
        crate::front::privileges::check_use_connection(
            cx.grants,
            &found.name,
            found.owner.as_deref(),
        )?;
        return Ok(Some(ConnectionInfo::password(
            found.address,
            found.user,
            found.password,
        )));
    }
    Ok(t.connection
        .as_ref()
        .map(|(address, user, password)| ConnectionInfo::password(address, user, password)))
}

/// Calls `call` of the script `t` names, in a worker off the async runtime; returns the SQL it
/// generated, one statement without its trailing `;`.
async fn generate(
    cx: &TransferContext<'_>,
    t: &ScriptTransfer,
    call: SingleCall,
) -> Result<String> {
    let spec = cx.scripts.single_call_spec(cx.catalog, &t.script)?;
    let ctx = WorkerContext {
        session_id: cx.scripts.session_id(),
        statement_id: cx.state.next_statement_id(),
        current_user: cx.grants.user.clone(),
        scope_user: cx.grants.user.clone(),
        current_schema: cx.scripts.open_schema().map(|s| exasol_name(&s)),
        node_count: cx.state.node.count,
        node_id: cx.state.node.id,
        ..WorkerContext::default()
    };
    let timeout = cx.udf_timeout;
    let function = call.function();
    let script = spec.qualified_name();
    let sql =
        tokio::task::spawn_blocking(move || single_call_with_timeout(&spec, &ctx, &call, timeout))
            .await
            .map_err(|e| EngineError::Sql(DataFusionError::External(Box::new(e))))??;
    let sql = sql.trim().trim_end_matches(';').trim().to_string();
    if sql.is_empty() {
        return Err(generated_error(&script, function, "returned no SQL"));
    }
    if split_statements(&sql).len() > 1 {
        return Err(generated_error(
            &script,
            function,
            "returned more than one statement",
        ));
    }
    Ok(sql)
}

/// `IMPORT INTO t [(a, b)] FROM SCRIPT s [AT c] [WITH k = 'v' …]`, or `IMPORT INTO (a INT, …)
/// FROM SCRIPT …` (a result of its own).
pub(crate) async fn import(
    cx: &TransferContext<'_>,
    t: ScriptTransfer,
) -> Result<SendableRecordBatchStream> {
    let sql = match t.table.clone() {
        Some(table) => {
            let names: Vec<&str> = t.columns.iter().map(|(n, _)| n.as_str()).collect();
            let generated = import_generated(cx, &t, false).await?;
            let columns = if names.is_empty() {
                String::new()
            } else {
                format!(" ({})", names.join(", "))
            };
            format!("INSERT INTO {table}{columns} {generated}")
        }
        None => import_query(cx, t).await?,
    };
    cx.runner.run_sql(&sql).await
}

/// The query an IMPORT that gives rows (`IMPORT [INTO (a INT, …)] FROM SCRIPT …`, at the top
/// or in a sub-select, `SELECT … FROM (IMPORT …)`) stands for: the SQL the script generated,
/// its columns cast to those named. The columns may be left out, as in Exasol; the generated
/// SQL's own columns are then the rows'.
pub(crate) async fn import_query(cx: &TransferContext<'_>, t: ScriptTransfer) -> Result<String> {
    if let Some(table) = &t.table {
        return Err(EngineError::from(plan_datafusion_err!(
            "IMPORT INTO {table} writes a table; a sub-select can only IMPORT INTO (<name> \
             <type>, …) or IMPORT FROM SCRIPT"
        )));
    }
    let (names, types): (Vec<String>, Vec<String>) = t
        .columns
        .iter()
        .map(|(name, ty)| (name.clone(), ty.clone().unwrap_or_default()))
        .unzip();
    if types.iter().any(String::is_empty) {
        return Err(EngineError::Sql(DataFusionError::Plan(
            "IMPORT INTO (…) FROM SCRIPT needs each column's name and type".into(),
        )));
    }
    let generated = import_generated(cx, &t, true).await?;
    if names.is_empty() {
        return Ok(format!("SELECT * FROM ({generated}) AS import_result"));
    }
    let casts: Vec<String> = names
        .iter()
        .zip(&types)
        .map(|(n, ty)| format!("CAST({n} AS {ty}) AS {n}"))
        .collect();
    Ok(format!(
        "SELECT {} FROM ({generated}) AS import_result({})",
        casts.join(", "),
        names.join(", ")
    ))
}

/// Calls the script's `generate_sql_for_import_spec` with the import's spec; `subselect` when
/// its rows are a result rather than written to a table.
async fn import_generated(
    cx: &TransferContext<'_>,
    t: &ScriptTransfer,
    subselect: bool,
) -> Result<String> {
    let (names, types): (Vec<String>, Vec<String>) = t
        .columns
        .iter()
        .map(|(name, ty)| (name.clone(), ty.clone().unwrap_or_default()))
        .unzip();
    let spec = ImportSpec {
        is_subselect: subselect,
        subselect_column_names: subselect.then(|| names.iter().map(|n| exasol_name(n)).collect()),
        subselect_column_types: subselect.then(|| types.iter().map(|t| type_text(t)).collect()),
        connection_name: t.connection_name.clone(),
        connection: connection_of(cx, t)?,
        parameters: t.parameters.clone(),
    };
    generate(cx, t, SingleCall::ImportSpec(spec)).await
}

/// A column type as Exasol writes it: upper case, no spaces inside parentheses (`VARCHAR(20)`,
/// `DECIMAL(18,0)`).
fn type_text(ty: &str) -> String {
    let mut out = String::with_capacity(ty.len());
    let words = ty.split_whitespace().collect::<Vec<_>>();
    for (i, w) in words.iter().enumerate() {
        let glued = matches!(*w, "(" | ")" | ",")
            || out.ends_with(['(', ','])
            || (i > 0 && w.starts_with(['(', ')', ',']));
        if i > 0 && !glued {
            out.push(' ');
        }
        out.push_str(&w.to_uppercase());
    }
    out
}

/// `EXPORT t|(query) INTO SCRIPT s [AT c] [WITH k = 'v' …]`.
pub(crate) async fn export(
    cx: &TransferContext<'_>,
    t: ScriptTransfer,
) -> Result<SendableRecordBatchStream> {
    let Some(source) = t.table.clone() else {
        return Err(EngineError::Sql(DataFusionError::Plan(
            "EXPORT needs a table or a (query) to export".into(),
        )));
    };
    let query_source = source.trim_start().starts_with('(');
    let name = if query_source {
        "EXPORT_SOURCE".to_string()
    } else {
        // The last part of `schema.t`, as Exasol names it.
        let last = source.rsplit('.').next().unwrap_or(&source).trim();
        match last.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
            Some(quoted) => quoted.to_string(),
            None => exasol_name(&last.to_ascii_lowercase()),
        }
    };
    let select = if query_source {
        format!("SELECT * FROM {source} AS export_source")
    } else {
        format!("SELECT * FROM {source}")
    };
    let schema = cx
        .runner
        .run_sql(&format!("SELECT * FROM ({select}) LIMIT 0"))
        .await?
        .schema();
    let quoted = |n: &str| format!("\"{}\"", n.replace('"', "\"\""));
    let source_column_names = schema
        .fields()
        .iter()
        .map(|f| format!("{}.{}", quoted(&name), quoted(&exasol_name(f.name()))))
        .collect();
    let spec = ExportSpec {
        parameters: t.parameters.clone(),
        connection_name: t.connection_name.clone(),
        connection: connection_of(cx, &t)?,
        has_truncate: t.truncate,
        has_replace: t.replace,
        created_by: t.created_by.clone(),
        source_column_names: Some(source_column_names),
    };
    let generated = generate(cx, &t, SingleCall::ExportSpec(spec)).await?;
    // The source under the name its columns are qualified with, each column as Exasol names it.
    let renamed: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{} AS {}", quoted(f.name()), quoted(&exasol_name(f.name()))))
        .collect();
    let sql = format!(
        "WITH {} AS (SELECT {} FROM ({select})) {}",
        quoted(&name),
        renamed.join(", "),
        replace_from_dual(&generated, &quoted(&name))
    );
    cx.runner.run_sql(&sql).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_written_as_exasol_writes_them() {
        assert_eq!(type_text("varchar ( 20 )"), "VARCHAR(20)");
        assert_eq!(type_text("DECIMAL ( 18 , 0 )"), "DECIMAL(18,0)");
        assert_eq!(type_text("double precision"), "DOUBLE PRECISION");
        assert_eq!(type_text("VARCHAR(10) UTF8"), "VARCHAR(10) UTF8");
    }
}
