//! A stored script as a UDF of one session: its signature as DataFusion sees it, and kernels that
//! run it in the instance's Python worker (started on the instance's first run, reused for every
//! batch or group of the call, finished when the statement ends).

use std::path::PathBuf;
use std::sync::Arc;

use accelsql_udf_runtime::script::{
    ColumnSpec, PythonWorker, ScriptInputType, ScriptOutput, ScriptSpec, SqlType, WorkerContext,
};
use accelsql_udf_runtime::{AcceleratorRequest, InstanceContext, RuntimeError};
use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::logical_expr::ColumnarValue;

use super::definition::{ScriptEntry, StoredOutput};
use super::links::{ScriptLinks, script_connections, script_imports};
use super::origin::{ScriptOrigin, TravelRuntime, builtin_python3};
use crate::core::error::EngineError;
use crate::script_err;
use crate::udf::definition::ScalarUdf;
use crate::udf::set::{RunInput, SetKernel, SetUdf};
use crate::udf_result_err;

/// A script, ready to register in a session.
pub(crate) enum ScriptUdf {
    /// SCALAR … RETURNS.
    Scalar(ScalarUdf),
    /// SET …, or SCALAR … EMITS.
    Set(SetUdf),
}

impl ScriptUdf {
    /// The same UDF, which another process of a cluster rebuilds from `origin`.
    pub(crate) fn travelling(self, origin: Arc<ScriptOrigin>) -> Self {
        match self {
            Self::Scalar(udf) => Self::Scalar(udf.with_origin(origin)),
            Self::Set(udf) => Self::Set(udf.with_origin(origin)),
        }
    }
}

fn definition_error(entry: &ScriptEntry, message: impl std::fmt::Display) -> EngineError {
    script_err!("script {}.{}: {message}", entry.schema, entry.name)
}

/// The runtime's view of `entry`: types parsed, interpreter chosen.
pub(crate) fn script_spec(
    entry: &ScriptEntry,
    interpreter: PathBuf,
    links: &ScriptLinks,
) -> crate::Result<ScriptSpec> {
    let parse = |ty: &str| SqlType::parse(ty).map_err(|e| definition_error(entry, e));
    let columns = |cols: &[(String, String)]| {
        cols.iter()
            .map(|(name, ty)| Ok(ColumnSpec::new(name.clone(), parse(ty)?)))
            .collect::<crate::Result<Vec<_>>>()
    };
    let output = match &entry.output {
        StoredOutput::Returns(ty) => ScriptOutput::Returns(parse(ty)?),
        StoredOutput::Emits(cols) => ScriptOutput::Emits(columns(cols)?),
        StoredOutput::DynamicEmits => {
            return Err(definition_error(
                entry,
                "its EMITS columns are given at each call: SELECT f(…) EMITS (a INT, …)",
            ));
        }
    };
    Ok(ScriptSpec {
        schema: entry.schema.clone(),
        name: entry.name.clone(),
        language: entry.language.clone(),
        interpreter,
        input_type: if entry.set {
            ScriptInputType::Set
        } else {
            ScriptInputType::Scalar
        },
        inputs: entry.params.as_deref().map(columns).transpose()?,
        output,
        body: entry.code.clone(),
        env: entry.env.clone(),
        imports: links.imports.clone(),
        connections: links.connections.clone(),
    })
}

/// The user every script runs as: accelsql has no users yet.
const SCRIPT_USER: &str = "SYS";

/// Builds the UDF of `entry` for a session (`session_id`), running it with `interpreter`.
pub(crate) fn script_udf(
    entry: &ScriptEntry,
    interpreter: PathBuf,
    session_id: u64,
) -> crate::Result<ScriptUdf> {
    script_udf_named(
        entry,
        &entry.name,
        Ok(interpreter),
        session_id,
        &ScriptLinks::default(),
    )
}

/// Like [`script_udf`], registered under `function` (a call site's own name for `EMITS (...)`,
/// or `schema.name`), with `imports` behind its `exa.import_script`.
///
/// With `Err(why)` for the interpreter (its language alias cannot run in this session), every
/// call fails with `why`.
pub(crate) fn script_udf_named(
    entry: &ScriptEntry,
    function: &str,
    interpreter: Result<PathBuf, String>,
    session_id: u64,
    links: &ScriptLinks,
) -> crate::Result<ScriptUdf> {
    let (interpreter, unavailable) = match interpreter {
        Ok(path) => (path, None),
        Err(why) => (PathBuf::new(), Some(why)),
    };
    let spec = Arc::new(script_spec(entry, interpreter, links)?);
    let request = match &entry.accelerator {
        Some(text) => AcceleratorRequest::parse(text)?,
        None => AcceleratorRequest::None,
    };
    let runner = Arc::new(ScriptRunner {
        spec: Arc::clone(&spec),
        session_id,
        current_schema: links.meta_schema(),
        node_count: links.node_count,
        unavailable,
    });
    let input_types: Option<Vec<DataType>> = spec
        .inputs
        .as_ref()
        .map(|cols| cols.iter().map(|c| c.sql_type.arrow_type()).collect());
    match (&spec.output, spec.input_type) {
        (ScriptOutput::Returns(ty), ScriptInputType::Scalar) => {
            let mut builder = ScalarUdf::builder(builder_name(function))
                .returns(ty.arrow_type())
                .accelerator_request(request);
            builder = match input_types {
                Some(types) => builder.castable_inputs(types),
                None => builder.variadic(),
            };
            if let Some(limit) = entry.instance_limit {
                builder = builder.instance_limit(limit);
            }
            if let Some(bytes) = entry.device_memory {
                builder = builder.device_memory(bytes);
            }
            let kernel = Arc::clone(&runner);
            let udf = builder
                .cpu(
                    move |ctx: &InstanceContext, rows: usize, args: &[ColumnarValue]| {
                        let arrays = args
                            .iter()
                            .map(|a| a.to_array(rows))
                            .collect::<datafusion::error::Result<Vec<_>>>()?;
                        let mut out = kernel.run(ctx, vec![(rows, arrays)], &mut None)?;
                        if out.len() != 1 {
                            return Err(udf_result_err!(
                                kernel.spec.qualified_name(),
                                "{} columns for RETURNS",
                                out.len()
                            )
                            .into_datafusion());
                        }
                        let column = out.remove(0);
                        if column.data_type() == &DataType::LargeUtf8 {
                            // A batch's values in one array: more than 2 GiB of text fits none.
                            return cast(column.as_ref(), &DataType::Utf8).map_err(|e| {
                                EngineError::Relayed {
                                    code: RuntimeError::RUN_TOO_LARGE,
                                    message: format!(
                                        "[{}] script {}: its values for one batch of {rows} \
                                         rows pass the 2 GiB of text one column can hold ({e}); \
                                         return less per row, or lower \
                                         datafusion.execution.batch_size",
                                        RuntimeError::RUN_TOO_LARGE,
                                        kernel.spec.qualified_name()
                                    ),
                                }
                                .into_datafusion()
                            });
                        }
                        Ok(column)
                    },
                )
                .build()?
                .renamed(function.to_string())
                .local_to_this_process();
            Ok(ScriptUdf::Scalar(udf))
        }
        (output, input_type) => {
            let mut builder = SetUdf::builder(builder_name(function)).accelerator_request(request);
            if input_type == ScriptInputType::Scalar {
                builder = builder.scalar_input();
            }
            builder = match input_types {
                Some(types) => builder.castable_inputs(types),
                None => builder.variadic(),
            };
            builder = match output {
                ScriptOutput::Returns(ty) => builder.returns(ty.arrow_type()),
                // Each column carries its declared type (`VARCHAR(10) UTF8`, `DECIMAL(18,0)`
                // for INT), as a table's declared columns do: a result or a table made from the
                // call shows it (DESCRIBE, EXA_ALL_COLUMNS, clients' metadata).
                ScriptOutput::Emits(cols) => builder.emits(cols.iter().map(|c| {
                    Field::new(&c.name, c.sql_type.arrow_type(), true).with_metadata(
                        std::collections::HashMap::from([(
                            crate::core::names::SQL_TYPE_METADATA_KEY.to_string(),
                            c.sql_type.exasol_name(),
                        )]),
                    )
                })),
            };
            if let Some(limit) = entry.instance_limit {
                builder = builder.instance_limit(limit);
            }
            if let Some(bytes) = entry.device_memory {
                builder = builder.device_memory(bytes);
            }
            let udf = builder
                .cpu(ScriptSetKernel(Arc::clone(&runner)))
                .build()?
                .renamed(function.to_string())
                .local_to_this_process();
            Ok(ScriptUdf::Set(udf))
        }
    }
}

/// A name the UDF builders accept, standing in for `function` while the UDF is built (their check
/// is for Rust identifiers; a script's name may be quoted, mixed-case or `schema.name`).
fn builder_name(function: &str) -> String {
    let name: String = function
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.is_empty() {
        "script".into()
    } else {
        name
    }
}

/// Finishes the script workers of a statement whose plan is done: runs each `cleanup()` and ends
/// the process, all workers at once. The first failure (an exception in `cleanup()`, in the order
/// the workers were started) fails the statement.
pub(crate) fn finish_workers(
    registry: &accelsql_udf_runtime::ProcessRegistry,
) -> crate::Result<()> {
    let mut workers = Vec::new();
    for storage in registry.take_storages() {
        let taken = storage.lock().take();
        let Some(mut boxed) = taken else { continue };
        if let Some(worker) = boxed
            .downcast_mut::<WorkerSlot>()
            .and_then(|slot| slot.0.take())
        {
            workers.push(worker);
        }
    }
    let results: Vec<_> = match workers.len() {
        0 => Vec::new(),
        1 => workers.into_iter().map(PythonWorker::finish).collect(),
        // Each finish waits for its process's cleanup() and exit: wait for them side by side.
        _ => std::thread::scope(|scope| {
            let finishing: Vec<_> = workers
                .into_iter()
                .map(|w| scope.spawn(move || w.finish()))
                .collect();
            finishing
                .into_iter()
                // A panic in a finish goes on in the caller, as if it had finished the worker.
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        }),
    };
    let first_error = results.into_iter().find_map(Result::err);
    first_error.map_or(Ok(()), |e| Err(EngineError::from(e)))
}

/// Runs a script on the worker of the instance it is given.
struct ScriptRunner {
    spec: Arc<ScriptSpec>,
    session_id: u64,
    /// The session's open schema when the script was registered (`exa.meta`), as Exasol
    /// names it; `None` after `CLOSE SCHEMA`.
    current_schema: Option<String>,
    /// `exa.meta.node_count`.
    node_count: usize,
    /// Why the script cannot run in this session (its language alias), if it cannot.
    unavailable: Option<String>,
}

/// The worker kept in an instance's storage; finished (its `cleanup()` run) when the call's
/// instances are dropped at the end of the statement. After a failed run it holds no worker but
/// the failure (code, message), which a later run of the instance in the same statement reports
/// again (the statement has failed; parts of its plan may still be winding down).
struct WorkerSlot(Option<PythonWorker>, Option<(&'static str, String)>);

impl Drop for WorkerSlot {
    fn drop(&mut self) {
        if let Some(worker) = self.0.take()
            && let Err(e) = worker.finish()
        {
            log::warn!("script cleanup failed: {e}");
        }
    }
}

/// A SET or SCALAR EMITS script as a [`SetKernel`]: a run's chunks go to the worker as they
/// were gathered, not joined first (the worker gets them in chunks of its own size).
struct ScriptSetKernel(Arc<ScriptRunner>);

impl SetKernel for ScriptSetKernel {
    fn run(
        &self,
        instance: &InstanceContext,
        num_rows: usize,
        args: &[ArrayRef],
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        self.0
            .run(instance, vec![(num_rows, args.to_vec())], &mut None)
    }

    fn run_input(
        &self,
        instance: &InstanceContext,
        input: &RunInput,
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        let mut ends = None;
        self.0.run(instance, run_parts(input)?, &mut ends)
    }

    fn run_input_traced(
        &self,
        instance: &InstanceContext,
        input: &RunInput,
    ) -> datafusion::error::Result<(Vec<ArrayRef>, Vec<u64>)> {
        let mut ends = Some(Vec::new());
        let columns = self.0.run(instance, run_parts(input)?, &mut ends)?;
        Ok((columns, ends.unwrap_or_default()))
    }
}

/// A run's chunks as the worker takes them: (rows, one array per argument).
fn run_parts(input: &RunInput) -> datafusion::error::Result<Vec<(usize, Vec<ArrayRef>)>> {
    input
        .chunks()
        .iter()
        .map(|chunk| Ok((chunk.num_rows(), chunk.to_arrays()?)))
        .collect()
}

impl ScriptRunner {
    /// One run, given as parts of (rows, one array per argument). With `Some` in `row_ends`, a
    /// SCALAR EMITS run also fills it with its running count of emitted rows per input row.
    fn run(
        &self,
        ctx: &InstanceContext,
        parts: Vec<(usize, Vec<ArrayRef>)>,
        row_ends: &mut Option<Vec<u64>>,
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        // A run blocks for as long as the script takes. On a tokio worker thread (a plan's
        // task), hand the thread's other tasks — timers, watchdogs, other sessions' streams — to
        // another worker meanwhile, so that a slow script never stalls the runtime.
        let on_multi_thread_runtime = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if on_multi_thread_runtime {
            tokio::task::block_in_place(|| self.run_blocking(ctx, parts, row_ends))
        } else {
            self.run_blocking(ctx, parts, row_ends)
        }
    }

    /// [`run`](Self::run) on the calling thread.
    fn run_blocking(
        &self,
        ctx: &InstanceContext,
        parts: Vec<(usize, Vec<ArrayRef>)>,
        row_ends: &mut Option<Vec<u64>>,
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        if let Some(why) = &self.unavailable {
            return Err(
                script_err!("script {}: {why}", self.spec.qualified_name()).into_datafusion()
            );
        }
        let mut storage = ctx.storage.lock();
        let slot = match storage
            .as_mut()
            .and_then(|s| s.downcast_mut::<WorkerSlot>())
        {
            Some(slot) => slot,
            None => {
                let types: Vec<DataType> = parts
                    .first()
                    .map(|(_, args)| args.iter().map(|a| a.data_type().clone()).collect())
                    .unwrap_or_default();
                let worker = PythonWorker::start(
                    Arc::clone(&self.spec),
                    WorkerContext {
                        session_id: self.session_id,
                        statement_id: ctx.statement_id,
                        node_count: self.node_count,
                        node_id: ctx.node_id,
                        vm_id: ctx.instance_id,
                        device: ctx.device.clone(),
                        current_user: ctx.user.clone().unwrap_or_else(|| SCRIPT_USER.into()),
                        scope_user: ctx.user.clone().unwrap_or_else(|| SCRIPT_USER.into()),
                        current_schema: self.current_schema.clone(),
                        memory_limit: ctx.memory_limit.unwrap_or(0),
                        ..WorkerContext::default()
                    },
                    &types,
                    ctx.run_timeout,
                )
                .map_err(|e| EngineError::from(e).into_datafusion())?;
                // Cancelling the statement kills it, even in the middle of a run; when the plan
                // is done, the statement finishes it (cleanup()).
                ctx.processes.register(worker.pid());
                ctx.processes.register_storage(ctx.storage.clone());
                *storage = Some(Box::new(WorkerSlot(Some(worker), None)));
                storage
                    .as_mut()
                    .and_then(|s| s.downcast_mut::<WorkerSlot>())
                    .ok_or_else(|| {
                        datafusion::error::DataFusionError::Internal(
                            "script worker slot vanished".into(),
                        )
                    })?
            }
        };
        let Some(worker) = slot.0.as_mut() else {
            let (code, message) = slot.1.clone().unwrap_or((
                EngineError::CANCELLED,
                "[57014] statement cancelled: its script workers were stopped".to_string(),
            ));
            return Err(EngineError::Relayed { code, message }.into_datafusion());
        };
        let ran = match row_ends {
            Some(ends) => worker.run_parts_traced(parts).map(|(columns, traced)| {
                *ends = traced;
                columns
            }),
            None => worker.run_parts(parts),
        };
        match ran {
            Ok(columns) => Ok(columns),
            Err(e) => {
                // A failed run leaves the worker unusable (crashed, killed, or mid-protocol): drop
                // it without cleanup, which kills and reaps the process.
                drop(slot.0.take());
                let e = EngineError::from(e);
                slot.1 = Some((e.code(), e.to_string()));
                Err(e.into_datafusion())
            }
        }
    }
}

impl ScriptOrigin {
    /// The script's UDF in this process, on a node of `node_count` nodes; it carries this
    /// origin on, so that it can be sent again (the scheduler forwards it to the executors).
    pub(crate) fn rebuild(self: Arc<Self>, node_count: usize) -> crate::Result<ScriptUdf> {
        let interpreter = match &self.runtime {
            TravelRuntime::BuiltinPython3 => builtin_python3(),
            TravelRuntime::Interpreter(path) => Ok(path.clone()),
            TravelRuntime::Unavailable(why) => Err(why.clone()),
        };
        let links = ScriptLinks {
            imports: script_imports(
                self.scripts.to_vec(),
                self.current_schema.clone(),
                self.denied.scripts.clone(),
            ),
            connections: script_connections(
                self.connections.to_vec(),
                self.denied.connections.clone(),
                crate::core::names::exasol_name(&self.entry.name),
            ),
            current_schema: self.current_schema.clone(),
            schema_closed: self.schema_closed,
            node_count,
        };
        let udf = script_udf_named(
            &self.entry,
            &self.function,
            interpreter,
            self.session_id,
            &links,
        )?;
        Ok(udf.travelling(self))
    }
}
