//! Single calls (Exasol's "singleCall" mode): one module-level function of a script called once,
//! not per row — `default_output_columns()`, `generate_sql_for_import_spec(import_spec)`,
//! `generate_sql_for_export_spec(export_spec)`.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::DataType;

use super::wire;
use super::{PythonWorker, ScriptSpec, SingleCall, WorkerContext};
use crate::Result;

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
