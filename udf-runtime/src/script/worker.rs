//! `PythonWorker`: one script instance as one Python process, driven batch by batch.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::ArrayRef;
use arrow::compute::{can_cast_types, cast};
use arrow::datatypes::DataType;

use super::chunks::{RunChunking, RunOutput, RunRows};
use super::fork_server::{Forked, fork_worker};
use super::interpreter::{EXIT_TOO_OLD, worker_args};
use super::process::{IoEnd, Process, describe_exit};
use super::wire::{self, WorkerError};
use super::{ColumnSpec, ScriptSpec, SqlType, WorkerContext};
use crate::{BadOutputValueInfo, PythonExceptionInfo, Result, RuntimeError};

/// How long a worker that announced its end, or closed its socket, may take to exit before it is
/// killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for a dead worker's last stderr output.
const STDERR_SETTLE: Duration = Duration::from_millis(500);

/// One instance of a Python script: a worker process that ran the script's module-level code
/// once and now runs `run(ctx)` on each batch (SCALAR) or group (SET) it is given.
///
/// The process starts with a clean environment (only `PATH`, `HOME`, `LANG`, the script's `%env`
/// settings and the device variables), in its own process group, and is killed if the engine dies
/// (Linux: `PR_SET_PDEATHSIG`). Dropping a worker that was not [`finish`](Self::finish)ed kills
/// and reaps it (and whatever it started). It is forked by a warm fork server for its interpreter
/// and environment when one is ready (a start of a few milliseconds instead of an interpreter
/// start and imports), else spawned; either way a fresh process.
///
/// Device variables: with a device, `CUDA_VISIBLE_DEVICES` and `NVIDIA_VISIBLE_DEVICES` name it
/// by UUID (a simulated device by its index, since no driver knows its UUID) and
/// `CUDA_DEVICE_ORDER=PCI_BUS_ID`; without one, `CUDA_VISIBLE_DEVICES` is empty (no GPU visible)
/// and `NVIDIA_VISIBLE_DEVICES` is unset. They win over `%env`.
///
/// ```no_run
/// use std::sync::Arc;
/// use accelsql_udf_runtime::script::*;
/// use arrow::array::{ArrayRef, Float64Array};
/// use arrow::datatypes::DataType;
///
/// let spec = Arc::new(ScriptSpec {
///     schema: "S".into(), name: "TWICE".into(), language: "PYTHON3".into(),
///     interpreter: find_python3()?, input_type: ScriptInputType::Scalar,
///     inputs: Some(vec![ColumnSpec::new("x", SqlType::Double)]),
///     output: ScriptOutput::Returns(SqlType::Double),
///     body: "def run(ctx):\n    return ctx.x * 2\n".into(), env: vec![],
///     imports: ScriptImports::none(), connections: ScriptConnections::none(),
/// });
/// let mut w = PythonWorker::start(spec, WorkerContext::default(), &[DataType::Float64], None)?;
/// let x: ArrayRef = Arc::new(Float64Array::from(vec![1.0, 2.5]));
/// let out = w.run(2, &[x])?;
/// w.finish()?;
/// # Ok::<(), accelsql_udf_runtime::RuntimeError>(())
/// ```
#[derive(Debug)]
pub struct PythonWorker {
    spec: Arc<ScriptSpec>,
    script: String,
    vm_id: usize,
    inputs: Vec<ColumnSpec>,
    input_arrow: Vec<DataType>,
    outputs: Vec<ColumnSpec>,
    timeout: Option<Duration>,
    process: Option<Process>,
    pid: u32,
    run_batch: bool,
    chunking: RunChunking,
    startup: Duration,
    interpreter_info: String,
    /// Why the worker can no longer run, once it cannot.
    gone: Option<String>,
}

impl PythonWorker {
    /// Starts the worker process and runs the script's module-level code once.
    ///
    /// `input_types` are the Arrow types of the call's arguments: a variadic script takes its
    /// columns from them; a declared one checks their count and that they cast to its parameters.
    /// `timeout`, if given, bounds the start and each later [`run`](Self::run) and
    /// [`finish`](Self::finish); on expiry the worker is killed (57U12).
    pub fn start(
        spec: Arc<ScriptSpec>,
        ctx: WorkerContext,
        input_types: &[DataType],
        timeout: Option<Duration>,
    ) -> Result<Self> {
        let outputs = spec.output_columns();
        Self::start_in_mode(spec, ctx, input_types, timeout, wire::MODE_RUNS, outputs)
    }

    /// [`start`](Self::start) in `mode` ([`wire::MODE_RUNS`], or [`wire::MODE_SINGLE_CALL`],
    /// which needs no `run`), with `outputs` as the output columns.
    pub(crate) fn start_in_mode(
        spec: Arc<ScriptSpec>,
        ctx: WorkerContext,
        input_types: &[DataType],
        timeout: Option<Duration>,
        mode: u8,
        outputs: Vec<ColumnSpec>,
    ) -> Result<Self> {
        let script = spec.qualified_name();
        let inputs = resolve_inputs(&spec, &script, input_types)?;
        let input_arrow = wire::input_arrow_types(&inputs);
        let began = Instant::now();
        let deadline = timeout.and_then(|t| began.checked_add(t));

        let env = worker_env(&spec, &ctx);
        // A warm start when a fork server is ready; a fresh process otherwise.
        let mut process = match fork_worker(&spec.interpreter, env.clone(), deadline) {
            Forked::Worker(process) => process,
            Forked::NoServer => spawn_worker(&spec, &env)?,
        };
        // The worker sits outside the engine's memory pool: its resident memory is watched.
        let memory_limit = (ctx.memory_limit > 0).then_some(ctx.memory_limit);
        let device_watch = device_watch(&ctx);
        if let Some(limit) = memory_limit {
            process.limit_memory(limit);
        }
        if let Some(watch) = &device_watch {
            process.limit_device_memory(watch.clone());
        }
        let pid = process.pid();
        let mut worker = Self {
            script,
            vm_id: ctx.vm_id,
            inputs,
            input_arrow,
            outputs,
            timeout,
            process: Some(process),
            pid,
            run_batch: false,
            chunking: ctx.chunking,
            startup: Duration::ZERO,
            interpreter_info: String::new(),
            gone: None,
            spec,
        };
        let mut hello = worker.hello(deadline);
        if matches!(hello, Err(IoEnd::Closed))
            && worker.process.as_ref().is_some_and(Process::is_forked)
        {
            // A forked worker that died before HELLO: its server failed under it. Spawn one.
            if let Some(p) = worker.process.take() {
                p.terminate(Duration::ZERO);
            }
            let mut process = spawn_worker(&worker.spec, &env)?;
            if let Some(limit) = memory_limit {
                process.limit_memory(limit);
            }
            if let Some(watch) = &device_watch {
                process.limit_device_memory(watch.clone());
            }
            worker.pid = process.pid();
            worker.process = Some(process);
            hello = worker.hello(deadline);
        }
        match hello {
            Ok(()) => {}
            // A death before HELLO is a start failure: the interpreter could not run our code.
            Err(IoEnd::Closed) => return Err(worker.start_failure()),
            Err(end) => return Err(worker.io_failure(end, "start")),
        }
        let init = wire::encode_init(&worker.spec, &ctx, mode, &worker.inputs, &worker.outputs);
        let (kind, payload) = worker.exchange(wire::F_INIT, &init, deadline, "start")?;
        match kind {
            wire::F_READY => {
                worker.run_batch = payload.first() == Some(&1);
                worker.startup = began.elapsed();
                Ok(worker)
            }
            other => Err(worker.protocol(format!("expected READY, got frame {other}"))),
        }
    }

    /// Receives HELLO, which proves the interpreter runs our code, and keeps its description.
    fn hello(&mut self, deadline: Option<Instant>) -> std::result::Result<(), IoEnd> {
        let (kind, payload) = match self.process.as_mut() {
            Some(p) => p.recv(deadline)?,
            None => return Err(IoEnd::Closed),
        };
        if kind != wire::F_HELLO {
            return Err(IoEnd::Broken(format!("expected HELLO, got frame {kind}")));
        }
        self.interpreter_info = wire::Reader::new(&payload).str().unwrap_or_default();
        Ok(())
    }

    /// One run: for SCALAR scripts `num_rows` rows, `run(ctx)` once per row (or `run_batch(ctx)`
    /// once, when the script defines it and RETURNS); for SET scripts one group of `num_rows`
    /// rows, `run(ctx)` once (an empty group is not run: RETURNS gives one NULL, EMITS nothing).
    ///
    /// Returns the output columns with the Arrow types of [`SqlType::arrow_type`]: RETURNS SCALAR
    /// one column of `num_rows` values, RETURNS SET one column of one value, EMITS the emitted
    /// rows (any number) as one array per EMITS column.
    pub fn run(&mut self, num_rows: usize, args: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
        for (i, a) in args.iter().enumerate() {
            if a.len() != num_rows {
                return Err(self.call_error(format!(
                    "argument {} has {} rows, the batch has {num_rows}",
                    i + 1,
                    a.len()
                )));
            }
        }
        self.run_parts(vec![(num_rows, args.to_vec())])
    }

    /// Like [`run`](Self::run), for a run given in consecutive parts (each a row count and every
    /// argument for those rows), as an engine gathers a group: the parts are not joined into one
    /// array per argument first. The worker gets them in chunks (see
    /// [`RunChunking`]), whatever the parts' sizes.
    pub fn run_parts(&mut self, parts: Vec<(usize, Vec<ArrayRef>)>) -> Result<Vec<ArrayRef>> {
        self.run_chunked(parts, false).map(|(columns, _)| columns)
    }

    /// [`run_parts`](Self::run_parts) of a SCALAR EMITS script, also saying which input row
    /// each output row came from: for each input row, how many rows the run had emitted after
    /// it (a running count, its last value the output's row count).
    pub fn run_parts_traced(
        &mut self,
        parts: Vec<(usize, Vec<ArrayRef>)>,
    ) -> Result<(Vec<ArrayRef>, Vec<u64>)> {
        if self.spec.input_type != super::ScriptInputType::Scalar
            || !matches!(self.spec.output, super::ScriptOutput::Emits(_))
        {
            return Err(self.call_error(
                "only a SCALAR EMITS script says which input row each output row came from"
                    .to_string(),
            ));
        }
        let (columns, ends) = self.run_chunked(parts, true)?;
        match ends {
            Some(ends) => Ok((columns, ends)),
            None => Err(self.protocol("no ROW_ENDS before RESULT".to_string())),
        }
    }

    /// One run in chunks; with `trace`, the worker's ROW_ENDS too.
    fn run_chunked(
        &mut self,
        parts: Vec<(usize, Vec<ArrayRef>)>,
        trace: bool,
    ) -> Result<(Vec<ArrayRef>, Option<Vec<u64>>)> {
        let mut cast_parts = Vec::with_capacity(parts.len());
        for (p, (rows, args)) in parts.into_iter().enumerate() {
            if args.len() != self.inputs.len() {
                return Err(self.call_error(format!(
                    "it takes {} arguments, {} were given",
                    self.inputs.len(),
                    args.len()
                )));
            }
            let mut cast_args = Vec::with_capacity(args.len());
            for (i, (a, want)) in args.iter().zip(&self.input_arrow).enumerate() {
                if a.len() != rows {
                    return Err(self.call_error(format!(
                        "argument {} has {} rows, part {p} of the run has {rows}",
                        i + 1,
                        a.len()
                    )));
                }
                let sql_type = &self.inputs[i].sql_type;
                if sql_type.is_interval() {
                    // A script gets Exasol's text of an interval.
                    let text = super::intervals::to_text(a.as_ref(), sql_type).map_err(|e| {
                        self.call_error(format!(
                            "argument {} ({}) cannot be passed as {sql_type}: {e}",
                            i + 1,
                            self.inputs[i].name
                        ))
                    })?;
                    cast_args.push(text);
                } else if a.data_type() == want {
                    cast_args.push(Arc::clone(a));
                } else {
                    let c = cast(a.as_ref(), want).map_err(|e| {
                        self.call_error(format!(
                            "argument {} ({}) cannot be passed as {}: {e}",
                            i + 1,
                            self.inputs[i].name,
                            self.inputs[i].sql_type
                        ))
                    })?;
                    cast_args.push(c);
                }
            }
            cast_parts.push((rows, cast_args));
        }
        let rows = RunRows::new(cast_parts, self.input_arrow.clone(), self.chunking);
        let total = rows.total();
        let (first_rows, first) = rows.chunk(0).map_err(|e| self.protocol(e))?;
        let flags = if trace { wire::RUN_TRACE_ROWS } else { 0 };
        let payload = wire::encode_chunk(total, Some(flags), first_rows, &first)
            .map_err(|e| self.protocol(e))?;
        drop(first);
        let deadline = self.deadline();
        let mut output = RunOutput::default();
        let mut row_ends: Option<Vec<u64>> = None;
        let mut answer = self.exchange(wire::F_RUN, &payload, deadline, "run")?;
        drop(payload);
        loop {
            match answer {
                (wire::F_FETCH, request) => {
                    let from = wire::decode_fetch(&request).map_err(|e| self.protocol(e))?;
                    let (n, columns) = rows.chunk(from).map_err(|e| self.protocol(e))?;
                    let reply = wire::encode_chunk(from, None, n, &columns)
                        .map_err(|e| self.protocol(e))?;
                    answer = self.exchange(wire::F_ROWS, &reply, deadline, "run")?;
                }
                (wire::F_EMIT, part) => {
                    let columns =
                        wire::decode_result(&part, &self.outputs).map_err(|e| self.protocol(e))?;
                    output.push(columns);
                    answer = self.receive(deadline, "run")?;
                }
                (wire::F_ROW_ENDS, payload) if trace && row_ends.is_none() => {
                    let ends =
                        wire::decode_row_ends(&payload, total).map_err(|e| self.protocol(e))?;
                    row_ends = Some(ends);
                    answer = self.receive(deadline, "run")?;
                }
                (wire::F_RESULT, part) => {
                    let columns =
                        wire::decode_result(&part, &self.outputs).map_err(|e| self.protocol(e))?;
                    output.push(columns);
                    break;
                }
                (kind, _) => {
                    return Err(self.protocol(format!("expected RESULT, got frame {kind}")));
                }
            }
        }
        let returns_rows = match (&self.spec.output, self.spec.input_type) {
            (super::ScriptOutput::Returns(_), super::ScriptInputType::Scalar) => Some(total),
            (super::ScriptOutput::Returns(_), super::ScriptInputType::Set) => Some(1),
            (super::ScriptOutput::Emits(_), _) => None,
        };
        if let Some(expected) = returns_rows
            && output.rows() != expected
        {
            return Err(self.protocol(format!(
                "{} values returned for a run that needs {expected}",
                output.rows()
            )));
        }
        if let Some(ends) = &row_ends
            && ends.last().copied().unwrap_or(0) != output.rows() as u64
        {
            return Err(self.protocol(format!(
                "ROW_ENDS count {} rows, the run emitted {}",
                ends.last().copied().unwrap_or(0),
                output.rows()
            )));
        }
        let names: Vec<&str> = self.outputs.iter().map(|c| c.name.as_str()).collect();
        let mut columns =
            output
                .finish(&names)
                .map_err(|(column, message)| RuntimeError::RunTooLarge {
                    script: self.script.clone(),
                    vm_id: self.vm_id,
                    column,
                    message,
                })?;
        // Intervals come back as the text the worker checked: the engine's intervals.
        for i in 0..columns.len().min(self.outputs.len()) {
            let spec = &self.outputs[i];
            if spec.sql_type.is_interval() {
                match super::intervals::from_text(columns[i].as_ref(), &spec.sql_type) {
                    Ok(engine) => columns[i] = engine,
                    Err(e) => {
                        let message = format!("output column {}: {e}", spec.name);
                        return Err(self.protocol(message));
                    }
                }
            }
        }
        Ok((columns, row_ends))
    }

    /// Calls the function of a single call; the worker must have been started in
    /// [`wire::MODE_SINGLE_CALL`].
    pub(crate) fn call_single(&mut self, call: &super::SingleCall) -> Result<String> {
        let payload = wire::encode_single_call(call);
        let deadline = self.deadline();
        let phase = format!("single call {}", call.function());
        let (kind, payload) = self.exchange(wire::F_SINGLE_CALL, &payload, deadline, &phase)?;
        if kind != wire::F_SINGLE_RESULT {
            return Err(self.protocol(format!("expected SINGLE_RESULT, got frame {kind}")));
        }
        wire::decode_single_result(&payload).map_err(|e| self.protocol(e))
    }

    /// Calls the script's `cleanup()` (if it defines one) and waits for the process to exit.
    pub fn finish(mut self) -> Result<()> {
        if self.process.is_none() {
            return Ok(());
        }
        let deadline = self.deadline();
        let result = self.exchange(wire::F_FINISH, &[], deadline, "cleanup");
        if let Some(p) = self.process.take() {
            p.terminate(EXIT_GRACE);
        }
        match result? {
            (wire::F_DONE, _) => Ok(()),
            (kind, _) => Err(self.protocol(format!("expected DONE, got frame {kind}"))),
        }
    }

    /// Whether a fork server started this worker.
    #[cfg(test)]
    pub(crate) fn is_forked(&self) -> bool {
        self.process.as_ref().is_some_and(Process::is_forked)
    }

    /// The worker's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The instance number (`exa.meta.vm_id`).
    pub fn vm_id(&self) -> usize {
        self.vm_id
    }

    /// How long [`start`](Self::start) took: process start, imports and module-level code.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// Whether runs use the script's vectorized `run_batch(ctx)`.
    pub fn uses_run_batch(&self) -> bool {
        self.run_batch
    }

    /// The interpreter as the worker describes itself, e.g. `cpython 3.11.7 (/usr/bin/python3)`.
    pub fn interpreter_info(&self) -> &str {
        &self.interpreter_info
    }

    /// The input columns (for a variadic script, the ones its call's types gave it).
    pub fn input_columns(&self) -> &[ColumnSpec] {
        &self.inputs
    }

    /// The output columns (RETURNS: one, named after the script).
    pub fn output_columns(&self) -> &[ColumnSpec] {
        &self.outputs
    }

    /// What the script printed to stdout or stderr lately (the last 16 KiB).
    pub fn stderr_tail(&self) -> String {
        self.process
            .as_ref()
            .map(|p| p.stderr_tail(Duration::ZERO))
            .unwrap_or_default()
    }

    fn deadline(&self) -> Option<Instant> {
        self.timeout.and_then(|t| Instant::now().checked_add(t))
    }

    fn process_mut(&mut self) -> Result<&mut Process> {
        match self.process.as_mut() {
            Some(p) => Ok(p),
            None => Err(RuntimeError::WorkerCrashed {
                script: self.script.clone(),
                vm_id: self.vm_id,
                pid: self.pid,
                phase: "run(ctx)".to_string(),
                how: format!(
                    "it had already stopped ({})",
                    self.gone.as_deref().unwrap_or("finished")
                ),
                stderr: String::new(),
            }),
        }
    }

    /// Sends one frame and receives the answer; an ERROR answer becomes the script's error.
    fn exchange(
        &mut self,
        kind: u8,
        payload: &[u8],
        deadline: Option<Instant>,
        phase: &str,
    ) -> Result<(u8, Vec<u8>)> {
        let process = self.process_mut()?;
        let sent = process.send(kind, payload, deadline);
        if let Err(end) = sent {
            return Err(self.io_failure(end, phase));
        }
        self.receive(deadline, phase)
    }

    /// Receives the worker's next frame, answering its requests on the way; an ERROR frame
    /// becomes the script's error.
    fn receive(&mut self, deadline: Option<Instant>, phase: &str) -> Result<(u8, Vec<u8>)> {
        let mut answer = self.process_mut()?.recv(deadline);
        // `exa.import_script` asks for other scripts' code, `exa.get_connection` for connections,
        // before it answers.
        loop {
            let (kind, reply) = match &answer {
                Ok((wire::F_IMPORT, request)) => {
                    let found = wire::decode_import(request)
                        .map_err(|e| format!("bad IMPORT frame: {e}"))
                        .and_then(|name| self.spec.imports.find(&name));
                    (wire::F_SCRIPT, wire::encode_script(&found))
                }
                Ok((wire::F_GET_CONNECTION, request)) => {
                    let found = wire::decode_get_connection(request)
                        .map_err(|e| format!("bad GET_CONNECTION frame: {e}"))
                        .and_then(|name| self.spec.connections.find(&name));
                    (wire::F_CONNECTION, wire::encode_connection(&found))
                }
                _ => break,
            };
            let process = self.process_mut()?;
            answer = process
                .send(kind, &reply, deadline)
                .and_then(|()| process.recv(deadline));
        }
        match answer {
            Ok((wire::F_ERROR, payload)) => Err(self.worker_error(&payload)),
            Ok(answer) => Ok(answer),
            Err(end) => Err(self.io_failure(end, phase)),
        }
    }

    fn phase_name(&self, phase: &str) -> String {
        match phase {
            "start" => "its module-level code".to_string(),
            "run" if self.run_batch => "run_batch(ctx)".to_string(),
            "run" => "run(ctx)".to_string(),
            "cleanup" => "cleanup()".to_string(),
            other => other.to_string(),
        }
    }

    fn worker_error(&mut self, payload: &[u8]) -> RuntimeError {
        match wire::decode_error(payload) {
            Ok(WorkerError::Exception {
                exception,
                message,
                line,
                traceback,
                phase,
            }) => RuntimeError::PythonException(Box::new(PythonExceptionInfo {
                script: self.script.clone(),
                vm_id: self.vm_id,
                phase: self.phase_name(&phase),
                line,
                exception,
                message,
                traceback,
            })),
            Ok(WorkerError::BadOutput {
                column,
                sql_type,
                value,
                message,
                row,
            }) => RuntimeError::BadOutputValue(Box::new(BadOutputValueInfo {
                script: self.script.clone(),
                vm_id: self.vm_id,
                // The worker knows a RETURNS script's column as RETURN (exa.meta); errors name it
                // after the script.
                column: match (&self.spec.output, self.outputs.first()) {
                    (super::ScriptOutput::Returns(_), Some(c)) => c.name.clone(),
                    _ => column,
                },
                sql_type,
                value,
                message,
                row: row + 1,
            })),
            Ok(WorkerError::SingleCall { function, message }) => RuntimeError::SingleCall {
                script: self.script.clone(),
                function,
                message,
            },
            Err(e) => self.protocol(e),
        }
    }

    /// The worker ended, timed out or broke the protocol: stop it and say how.
    fn io_failure(&mut self, end: IoEnd, phase: &str) -> RuntimeError {
        let phase_name = if phase == "start" {
            "start".to_string()
        } else {
            self.phase_name(phase)
        };
        match end {
            IoEnd::Timeout => {
                if let Some(p) = self.process.take() {
                    p.terminate(Duration::ZERO);
                }
                let timeout = self.timeout.unwrap_or_default();
                self.gone = Some(format!("killed after the timeout of {timeout:?}"));
                RuntimeError::WorkerTimeout {
                    script: self.script.clone(),
                    vm_id: self.vm_id,
                    pid: self.pid,
                    phase: phase_name,
                    timeout,
                }
            }
            IoEnd::Closed => {
                let (how, stderr) = match self.process.take() {
                    Some(p) => {
                        let status = p_terminate_with_stderr(p);
                        (describe_exit(status.0), status.1)
                    }
                    None => ("it had already stopped".to_string(), String::new()),
                };
                self.gone = Some(how.clone());
                RuntimeError::WorkerCrashed {
                    script: self.script.clone(),
                    vm_id: self.vm_id,
                    pid: self.pid,
                    phase: phase_name,
                    how,
                    stderr,
                }
            }
            IoEnd::OverMemory { resident, limit } => {
                if let Some(p) = self.process.take() {
                    p.terminate(Duration::ZERO);
                }
                self.gone = Some(format!("killed at {resident} bytes of memory"));
                RuntimeError::WorkerOutOfMemory {
                    script: self.script.clone(),
                    vm_id: self.vm_id,
                    pid: self.pid,
                    phase: phase_name,
                    resident,
                    limit,
                }
            }
            IoEnd::OverDeviceMemory {
                used,
                declared,
                device,
            } => {
                if let Some(p) = self.process.take() {
                    p.terminate(Duration::ZERO);
                }
                self.gone = Some(format!("stopped at {used} bytes of device memory"));
                RuntimeError::WorkerOverDeviceMemory {
                    script: self.script.clone(),
                    vm_id: self.vm_id,
                    pid: self.pid,
                    phase: phase_name,
                    device,
                    used,
                    declared,
                }
            }
            IoEnd::Broken(message) => self.protocol(message),
        }
    }

    /// The worker died before saying HELLO: the interpreter could not run the bootstrap.
    fn start_failure(&mut self) -> RuntimeError {
        let (status, stderr) = match self.process.take() {
            Some(p) => p_terminate_with_stderr(p),
            None => return self.protocol("no process".to_string()),
        };
        self.gone = Some(describe_exit(status));
        let message = if status.code() == Some(EXIT_TOO_OLD) {
            format!(
                "{}; point the script language at a newer interpreter",
                stderr.trim().trim_start_matches("accelsql: ")
            )
        } else {
            format!(
                "it {} before running the accelsql worker; is it a Python 3 interpreter? {}",
                describe_exit(status),
                stderr.trim()
            )
        };
        RuntimeError::InterpreterStart {
            interpreter: self.spec.interpreter.clone(),
            message,
        }
    }

    /// A protocol error leaves the worker in an unknown state: kill it.
    fn protocol(&mut self, message: String) -> RuntimeError {
        if let Some(p) = self.process.take() {
            p.terminate(Duration::ZERO);
        }
        self.gone = Some(format!("protocol error: {message}"));
        RuntimeError::WorkerProtocol {
            script: self.script.clone(),
            vm_id: self.vm_id,
            message,
        }
    }

    fn call_error(&self, message: String) -> RuntimeError {
        RuntimeError::ScriptCall {
            script: self.script.clone(),
            message,
        }
    }
}

/// The engine keeps workers in per-instance storage shared across threads.
const _: fn() = || {
    fn assert_send<T: Send + 'static>() {}
    assert_send::<PythonWorker>();
};

fn p_terminate_with_stderr(p: Process) -> (std::process::ExitStatus, String) {
    let stderr = p.stderr_handle();
    let status = p.terminate(EXIT_GRACE);
    (status, stderr.text(STDERR_SETTLE))
}

impl Drop for PythonWorker {
    fn drop(&mut self) {
        if let Some(p) = self.process.take() {
            p.terminate(Duration::ZERO);
        }
    }
}

/// Spawns a fresh worker process of `spec`'s interpreter with exactly the environment `env`.
fn spawn_worker(spec: &ScriptSpec, env: &[(OsString, OsString)]) -> Result<Process> {
    let mut cmd = std::process::Command::new(&spec.interpreter);
    cmd.args(worker_args())
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)));
    Process::spawn(cmd).map_err(|e| RuntimeError::InterpreterStart {
        interpreter: spec.interpreter.clone(),
        message: format!(
            "{e}; check the script language's interpreter path (for PYTHON3: python3 on PATH)"
        ),
    })
}

/// The worker's whole environment, sorted by name: `PATH`, `HOME` and `LANG` of the engine, the
/// script's `%env` settings, and the device variables (which win over `%env`).
pub(crate) fn worker_env(spec: &ScriptSpec, ctx: &WorkerContext) -> Vec<(OsString, OsString)> {
    let mut env: BTreeMap<OsString, OsString> = BTreeMap::new();
    for var in ["PATH", "HOME", "LANG"] {
        if let Some(v) = std::env::var_os(var) {
            env.insert(var.into(), v);
        }
    }
    // Under the sandbox a worker may not create files directly in the parent folders of the
    // denied paths (often the system's temporary folder): its temporary files go to a
    // scratch folder of its own (unless the script's `%env` says otherwise).
    if let Some(scratch) = super::sandbox::scratch_dir() {
        for var in ["TMPDIR", "TEMP", "TMP"] {
            env.insert(var.into(), scratch.clone().into_os_string());
        }
        // Run as another OS user, the engine's home is not its own.
        if super::sandbox::script_user().is_some() {
            env.insert("HOME".into(), scratch.into_os_string());
        }
    }
    for (k, v) in &spec.env {
        env.insert(k.into(), v.into());
    }
    match &ctx.device {
        Some(d) => {
            let id = if d.simulated {
                d.index.to_string()
            } else {
                d.uuid.clone()
            };
            env.insert("CUDA_VISIBLE_DEVICES".into(), id.clone().into());
            env.insert("NVIDIA_VISIBLE_DEVICES".into(), id.into());
            env.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
        }
        None => {
            env.insert("CUDA_VISIBLE_DEVICES".into(), OsString::new());
            env.remove(OsStr::new("NVIDIA_VISIBLE_DEVICES"));
        }
    }
    env.into_iter().collect()
}

/// The script's input columns for a call with `input_types`.
fn resolve_inputs(
    spec: &ScriptSpec,
    script: &str,
    input_types: &[DataType],
) -> Result<Vec<ColumnSpec>> {
    let call_error = |message: String| RuntimeError::ScriptCall {
        script: script.to_string(),
        message,
    };
    match &spec.inputs {
        None => input_types
            .iter()
            .enumerate()
            .map(|(i, t)| Ok(ColumnSpec::new(i.to_string(), SqlType::from_arrow(t)?)))
            .collect(),
        Some(cols) => {
            if cols.len() != input_types.len() {
                return Err(call_error(format!(
                    "it takes {} argument{} ({}), the call passes {}",
                    cols.len(),
                    if cols.len() == 1 { "" } else { "s" },
                    cols.iter()
                        .map(|c| format!("{} {}", c.name, c.sql_type))
                        .collect::<Vec<_>>()
                        .join(", "),
                    input_types.len()
                )));
            }
            for (i, (c, t)) in cols.iter().zip(input_types).enumerate() {
                let want = c.sql_type.arrow_type();
                if t != &want && !can_cast_types(t, &want) {
                    return Err(call_error(format!(
                        "argument {} ({}) is {t}, which cannot be passed as {}",
                        i + 1,
                        c.name,
                        c.sql_type
                    )));
                }
            }
            Ok(cols.clone())
        }
    }
}

/// What to watch a GPU instance's worker against: its device and declared memory, when the
/// instance has both and something can read a process's device memory.
fn device_watch(ctx: &WorkerContext) -> Option<super::process::DeviceWatch> {
    let device = ctx.device.as_ref()?;
    let limit = ctx.device_memory.as_ref()?;
    Some(super::process::DeviceWatch {
        uuid: device.uuid.clone(),
        label: device.label(),
        declared: limit.bytes,
        probe: std::sync::Arc::clone(limit.probe.as_ref()?),
    })
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, Float64Array};

    use super::super::{
        ImportedScript, ScriptConnections, ScriptImports, ScriptInputType, ScriptOutput,
        find_python3,
    };
    use super::*;

    fn start(body: &str) -> PythonWorker {
        start_importing(body, ScriptImports::none())
    }

    fn start_importing(body: &str, imports: ScriptImports) -> PythonWorker {
        let spec = Arc::new(ScriptSpec {
            schema: "S".into(),
            name: "F".into(),
            language: "PYTHON3".into(),
            interpreter: find_python3().unwrap(),
            input_type: ScriptInputType::Scalar,
            inputs: Some(vec![ColumnSpec::new("x", SqlType::Double)]),
            output: ScriptOutput::Returns(SqlType::Varchar(200)),
            body: body.into(),
            env: vec![],
            imports,
            connections: ScriptConnections::none(),
        });
        PythonWorker::start(spec, WorkerContext::default(), &[DataType::Float64], None).unwrap()
    }

    fn run(w: &mut PythonWorker) -> Result<Vec<String>> {
        let x: ArrayRef = Arc::new(Float64Array::from(vec![1.5, 2.5]));
        let out = w.run(2, &[x])?;
        Ok(out[0]
            .as_string::<i32>()
            .iter()
            .map(|v| v.unwrap_or_default().to_string())
            .collect())
    }

    /// ctx.<column> is a plain slot on scripts that name their columns exactly; the other
    /// spellings (another case, computed names) still find the column, and a name that is no
    /// column gets the same message either way.
    #[test]
    fn columns_are_found_by_any_spelling_and_missing_ones_named() {
        for body in [
            "def run(ctx):\n    return '%s %s' % (ctx.x, ctx[0])\n",
            "def run(ctx):\n    return '%s %s' % (ctx.X, ctx['X'])\n",
            "def run(ctx):\n    return '%s %s' % (getattr(ctx, 'x'.upper()), ctx.x)\n",
            "def run(ctx):\n    return '{0.X} {0.x}'.format(ctx)\n",
        ] {
            let mut w = start(body);
            assert_eq!(run(&mut w).unwrap(), ["1.5 1.5", "2.5 2.5"], "{body}");
            w.finish().unwrap();
        }
        for body in [
            "def run(ctx):\n    return ctx.nope\n",
            "def run(ctx):\n    return str(ctx.X) + ctx.nope\n",
        ] {
            let mut w = start(body);
            let e = run(&mut w).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains(
                    "AttributeError: E-UDF-CL-SL-PYTHON-1085: Iterator has no object with name 'nope': ctx has no input column 'nope'; the input columns are: x"
                ),
                "{text}"
            );
            assert!(!text.contains("Did you mean"), "{text}");
        }
    }

    /// `exa.import_script` asks the engine for the code, in module-level code and in run(); the
    /// module is made once per instance, sees `exa` too, and a missing script is an ImportError
    /// with the engine's reason.
    #[test]
    fn scripts_import_other_scripts_through_the_engine() {
        let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let log = Arc::clone(&asked);
        let imports = ScriptImports::new(move |name| {
            log.lock().unwrap().push(name.to_string());
            match name {
                "lib" | "s.lib" => Ok(ImportedScript {
                    qualified_name: "s.lib".into(),
                    code: "LOADS = []\nLOADS.append(1)\ndef twice(x):\n    return 2 * x\nNAME = exa.meta.script_name\n".into(),
                }),
                other => Err(format!("script {other} does not exist")),
            }
        });
        let body = "lib = exa.import_script('lib')\n\
                    def run(ctx):\n    again = exa.import_script('s.lib')\n    \
                    return '%s %s %s %s' % (lib.twice(ctx.x), again is lib, len(lib.LOADS), lib.NAME)\n";
        let mut w = start_importing(body, imports.clone());
        assert_eq!(run(&mut w).unwrap(), ["3.0 True 1 F", "5.0 True 1 F"]);
        w.finish().unwrap();
        // Each name is asked for once per instance.
        assert_eq!(*asked.lock().unwrap(), ["lib", "s.lib"]);

        let mut w = start_importing(
            "def run(ctx):\n    return exa.import_script('nope').x\n",
            imports,
        );
        let text = run(&mut w).unwrap_err().to_string();
        assert!(
            text.contains("ImportError: exa.import_script('nope'): script nope does not exist"),
            "{text}"
        );
        // Without a catalog, every import fails with the reason.
        let mut w =
            start("import_me = exa.import_script\ndef run(ctx):\n    return import_me('a').x\n");
        let text = run(&mut w).unwrap_err().to_string();
        assert!(
            text.contains("cannot be imported here (no script catalog)"),
            "{text}"
        );
    }
}
