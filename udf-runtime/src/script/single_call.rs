//! Single calls (Exasol's "singleCall" mode): one module-level function of a script called once,
//! not per row — `default_output_columns()`, `generate_sql_for_import_spec(import_spec)`,
//! `generate_sql_for_export_spec(export_spec)`.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::DataType;

use super::wire;
use super::{ConnectionInfo, PythonWorker, ScriptSpec, WorkerContext};
use crate::Result;

/// What `IMPORT FROM SCRIPT s [AT connection] WITH k = 'v' …` tells
/// `generate_sql_for_import_spec(import_spec)`. In Python the object allows attribute and
/// `[key]` access; `parameters` is a `dict`, `connection` an `exa.ConnectionInformation` or
/// `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportSpec {
    /// Whether the IMPORT is a subselect (`SELECT * FROM (IMPORT …)`), whose columns are then
    /// given.
    pub is_subselect: bool,
    /// The subselect's column names (`None` when it is no subselect).
    pub subselect_column_names: Option<Vec<String>>,
    /// The subselect's column types as SQL writes them, e.g. `DECIMAL(18,0)` (`None` when it is
    /// no subselect).
    pub subselect_column_types: Option<Vec<String>>,
    /// The connection named by `AT name`.
    pub connection_name: Option<String>,
    /// The connection given inline (`AT 'address' USER … IDENTIFIED BY …`), or the one named.
    pub connection: Option<ConnectionInfo>,
    /// The `WITH` parameters, in order; keys as SQL resolves identifiers (unquoted ones
    /// upper-case: the engine folds them), values as written. Passed verbatim.
    pub parameters: Vec<(String, String)>,
}

/// What `EXPORT … INTO SCRIPT s [AT connection] WITH k = 'v' …` tells
/// `generate_sql_for_export_spec(export_spec)` (in Python as for [`ImportSpec`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportSpec {
    /// The `WITH` parameters, as in [`ImportSpec::parameters`].
    pub parameters: Vec<(String, String)>,
    /// The connection named by `AT name`.
    pub connection_name: Option<String>,
    /// The connection given inline, or the one named.
    pub connection: Option<ConnectionInfo>,
    /// Whether the EXPORT says `TRUNCATE`.
    pub has_truncate: bool,
    /// Whether the EXPORT says `REPLACE`.
    pub has_replace: bool,
    /// The `CREATED BY` text.
    pub created_by: Option<String>,
    /// The exported columns, quoted and qualified as Exasol writes them (`"T"."A"`).
    pub source_column_names: Option<Vec<String>>,
}

/// Which function a [`single_call`] calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SingleCall {
    /// `default_output_columns()`: the EMITS columns of a call that gives none, as SQL text
    /// (`"a varchar(123), b double"`). `exa.meta.input_columns` are the script's parameters;
    /// `exa.meta.output_columns` is empty.
    DefaultOutputColumns,
    /// `generate_sql_for_import_spec(import_spec)`: the SELECT an `IMPORT FROM SCRIPT` runs.
    ImportSpec(ImportSpec),
    /// `generate_sql_for_export_spec(export_spec)`: the SQL an `EXPORT INTO SCRIPT` runs.
    ExportSpec(ExportSpec),
}

impl SingleCall {
    /// The Python function's name.
    pub fn function(&self) -> &'static str {
        match self {
            SingleCall::DefaultOutputColumns => "default_output_columns",
            SingleCall::ImportSpec(_) => "generate_sql_for_import_spec",
            SingleCall::ExportSpec(_) => "generate_sql_for_export_spec",
        }
    }
}

/// Calls one function of `spec`'s script once and returns the `str` it returned.
///
/// Starts a worker for the script (its module-level code runs as usual, so `exa.get_connection`
/// and `exa.import_script` work in it and in the function; the script needs no `run`), calls the
/// function, and ends the worker (calling `cleanup()` if the script defines one). `ctx` gives
/// `exa.meta` as for a run. `exa.meta.input_columns` are the script's parameters (none for a
/// variadic script); `exa.meta.output_columns` are the script's output columns, empty for
/// [`SingleCall::DefaultOutputColumns`].
///
/// Errors: the function is not defined, returned no `str`, or (`default_output_columns`) an empty
/// one: [`RuntimeError::SingleCall`](crate::RuntimeError::SingleCall) (42U18), with Exasol's text
/// where it has one; the function (or module-level code) raised:
/// [`RuntimeError::PythonException`](crate::RuntimeError::PythonException) (22U10); the worker
/// failed as in [`PythonWorker::start`].
///
/// ```no_run
/// use accelsql_udf_runtime::script::*;
///
/// # fn spec() -> ScriptSpec { unimplemented!() }
/// let spec: ScriptSpec = spec(); // CREATE PYTHON3 SET SCRIPT s(...) EMITS (...) AS ...
/// let sql = single_call(
///     &spec,
///     &WorkerContext::default(),
///     &SingleCall::ImportSpec(ImportSpec {
///         parameters: vec![("TABLE".into(), "t".into())],
///         ..ImportSpec::default()
///     }),
/// )?;
/// # Ok::<(), accelsql_udf_runtime::RuntimeError>(())
/// ```
pub fn single_call(spec: &ScriptSpec, ctx: &WorkerContext, call: &SingleCall) -> Result<String> {
    single_call_with_timeout(spec, ctx, call, None)
}

/// [`single_call`] bounded by `timeout` (start, call and end each; 57U12 on expiry).
pub fn single_call_with_timeout(
    spec: &ScriptSpec,
    ctx: &WorkerContext,
    call: &SingleCall,
    timeout: Option<Duration>,
) -> Result<String> {
    let input_types: Vec<DataType> = spec
        .inputs
        .as_ref()
        .map(|cols| cols.iter().map(|c| c.sql_type.arrow_type()).collect())
        .unwrap_or_default();
    let outputs = match call {
        SingleCall::DefaultOutputColumns => Vec::new(),
        _ => spec.output_columns(),
    };
    let mut worker = PythonWorker::start_in_mode(
        Arc::new(spec.clone()),
        ctx.clone(),
        &input_types,
        timeout,
        wire::MODE_SINGLE_CALL,
        outputs,
    )?;
    let result = worker.call_single(call)?;
    worker.finish()?;
    Ok(result)
}
