//! The udf-runtime error type and its stable codes.
//!
//! | code  | variant | meaning |
//! | ----- | ------- | ------- |
//! | 22U01 | [`RuntimeError::InvalidAnnotation`] | a `%…` annotation has a value we do not accept |
//! | 22U10 | [`RuntimeError::PythonException`] | the script raised (module-level code, `run`, `run_batch`, `cleanup`) |
//! | 58U11 | [`RuntimeError::WorkerCrashed`] | a worker process died (signal, `os._exit`, out of memory) |
//! | 57U12 | [`RuntimeError::WorkerTimeout`] | a worker did not answer within the timeout and was killed |
//! | 22U13 | [`RuntimeError::BadOutputValue`] | a value does not fit its declared output column |
//! | 58U14 | [`RuntimeError::InterpreterStart`] | the interpreter cannot be found, started, or is too old |
//! | 42U15 | [`RuntimeError::InvalidSqlType`] | a type in a script signature is not one we know |
//! | 42U16 | [`RuntimeError::ScriptCall`] | a call does not match the script's parameters |
//! | 58U17 | [`RuntimeError::WorkerProtocol`] | the worker broke the protocol (an internal error) |
//! | 42U18 | [`RuntimeError::SingleCall`] | a single call's function (`default_output_columns`, `generate_sql_for_import_spec`, …) is missing, returned no `str`, or returned an empty one |
//! | 22U20 | [`RuntimeError::InvalidArgument`] | a built-in kernel got an argument it cannot take (wrong type, vectors of different lengths) |
//! | 58U21 | [`RuntimeError::GpuUnavailable`] | the CUDA driver or NVRTC cannot be loaded or initialised, a device cannot be opened, or it failed in a way that leaves its context unusable |
//! | 58U22 | [`RuntimeError::Gpu`] | a CUDA call failed (compile, launch, copy) |
//! | 53U23 | [`RuntimeError::GpuOutOfMemory`] | a batch does not fit in device memory even when split as far as it goes |
//! | 53U25 | [`RuntimeError::WorkerOutOfMemory`] | a worker's resident memory passed its limit (the session's memory budget) and it was killed |
//! | 53U26 | [`RuntimeError::WorkerOverDeviceMemory`] | a worker used more device memory than its call declares (`%perInstanceRequiredAcceleratorMemory`) and was stopped |
//! | 54U24 | [`RuntimeError::RunTooLarge`] | a run's output passes a stated limit (one output column that cannot be one array) |

use std::path::PathBuf;
use std::time::Duration;

/// `bytes` as mebibytes, for messages.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Result type of this crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// What can go wrong while reading UDF annotations or running UDF instances.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// An annotation such as `%perInstanceRequiredAcceleratorDevices` has a value we do not accept.
    #[error("[{}] invalid {option}: {message}", Self::INVALID_ANNOTATION)]
    InvalidAnnotation {
        /// The annotation's name.
        option: String,
        /// What is wrong and which values are accepted.
        message: String,
    },

    /// Python code of a script raised an exception (or had a syntax error).
    #[error("{0}")]
    PythonException(Box<PythonExceptionInfo>),

    /// A worker process died while it had work to do.
    #[error(
        "[{}] Python script {script}: the worker process of instance {vm_id} (pid {pid}) died during {phase}: {how}. \
         It crashed (e.g. in a native extension or by os._exit) or was killed (out of memory?); \
         only this statement fails{}",
        Self::WORKER_CRASHED,
        stderr_suffix(.stderr)
    )]
    WorkerCrashed {
        /// The script, `SCHEMA.NAME`.
        script: String,
        /// The instance whose worker died.
        vm_id: usize,
        /// The worker's process id.
        pid: u32,
        /// What it was doing: `start`, `run(ctx)`, `cleanup()`.
        phase: String,
        /// How it ended, e.g. `exited with code 3`, `was killed by signal 9 (SIGKILL)`.
        how: String,
        /// The last lines the worker wrote to stderr.
        stderr: String,
    },

    /// A worker did not answer within the timeout; it was killed.
    #[error(
        "[{}] Python script {script}: instance {vm_id} did not finish {phase} within {timeout:?}; \
         its worker process (pid {pid}) was killed. Make the script faster or raise the timeout",
        Self::WORKER_TIMEOUT
    )]
    WorkerTimeout {
        /// The script, `SCHEMA.NAME`.
        script: String,
        /// The instance whose worker was killed.
        vm_id: usize,
        /// The worker's process id.
        pid: u32,
        /// What it was doing.
        phase: String,
        /// The timeout that expired.
        timeout: Duration,
    },

    /// A worker's resident memory passed its limit; it was killed.
    #[error(
        "[{}] Python script {script}: instance {vm_id} used {} of memory during {phase}, past \
         its limit of {} (the session's memory budget, accelsql.memory_limit); its worker \
         process (pid {pid}) was killed. Give the script less data at once or raise the budget",
        Self::WORKER_OUT_OF_MEMORY,
        mib(*.resident),
        mib(*.limit)
    )]
    WorkerOutOfMemory {
        /// The script, `SCHEMA.NAME`.
        script: String,
        /// The instance whose worker was killed.
        vm_id: usize,
        /// The worker's process id.
        pid: u32,
        /// What it was doing.
        phase: String,
        /// Its resident memory when it was seen past the limit, in bytes.
        resident: u64,
        /// The limit, in bytes.
        limit: u64,
    },

    /// A worker used more GPU memory than its call declares per instance
    /// (`%perInstanceRequiredAcceleratorMemory`); it was stopped.
    #[error(
        "[{}] Python script {script}: instance {vm_id} used {} of GPU memory on {device} during \
         {phase}, past the {} it declares (%perInstanceRequiredAcceleratorMemory), which is \
         what its statement reserved there; its worker process (pid {pid}) was stopped. \
         Declare more, or use less device memory per instance",
        Self::WORKER_OVER_DEVICE_MEMORY,
        mib(*.used),
        mib(*.declared)
    )]
    WorkerOverDeviceMemory {
        /// The script, `SCHEMA.NAME`.
        script: String,
        /// The instance whose worker was stopped.
        vm_id: usize,
        /// The worker's process id.
        pid: u32,
        /// What it was doing.
        phase: String,
        /// The device, e.g. `GPU 0 (GPU-…)`.
        device: String,
        /// Its device memory when it was seen past the declaration, in bytes.
        used: u64,
        /// The declaration, in bytes.
        declared: u64,
    },

    /// A value the script returned or emitted does not fit its output column.
    #[error("{0}")]
    BadOutputValue(Box<BadOutputValueInfo>),

    /// The script language's interpreter cannot be found or started, or is too old.
    #[error("[{}] cannot start the Python interpreter {}: {message}", Self::INTERPRETER_START, .interpreter.display())]
    InterpreterStart {
        /// The interpreter we tried (`python3` when it was not found at all).
        interpreter: PathBuf,
        /// What went wrong and what to do.
        message: String,
    },

    /// A type in a script's signature is not one we know.
    #[error("[{}] invalid SQL type '{text}': {message}", Self::INVALID_SQL_TYPE)]
    InvalidSqlType {
        /// The type as written.
        text: String,
        /// What is wrong and which types are accepted.
        message: String,
    },

    /// A call does not match the script's parameters (count, or a type that cannot be cast).
    #[error("[{}] Python script {script}: {message}", Self::SCRIPT_CALL)]
    ScriptCall {
        /// The script, `SCHEMA.NAME`.
        script: String,
        /// What does not match.
        message: String,
    },

    /// The worker sent something the protocol does not allow (an accelsql bug, or a script that
    /// wrote to the worker's private socket).
    #[error(
        "[{}] Python script {script} (instance {vm_id}): worker protocol error: {message}",
        Self::WORKER_PROTOCOL
    )]
    WorkerProtocol {
        /// The script, `SCHEMA.NAME`.
        script: String,
        /// The instance.
        vm_id: usize,
        /// What was wrong.
        message: String,
    },

    /// A single call ([`single_call`](crate::script::single_call)) cannot give a result: the
    /// script does not define the function, or it returned something other than a non-empty
    /// `str`. (An exception it raises is [`RuntimeError::PythonException`].)
    #[error("[{}] Python script {script}: {message}", Self::SINGLE_CALL)]
    SingleCall {
        /// The script, `SCHEMA.NAME`.
        script: String,
        /// The function, e.g. `generate_sql_for_import_spec`.
        function: String,
        /// What is wrong, e.g. `generate_sql_for_import_spec did not return string type`.
        message: String,
    },

    /// A built-in kernel got an argument it cannot take.
    #[error("[{}] {function}: {message}", Self::INVALID_ARGUMENT)]
    InvalidArgument {
        /// The function, e.g. `cosine_similarity`.
        function: String,
        /// What is wrong, e.g. `vectors of different lengths (3 and 4) in row 7`.
        message: String,
    },

    /// CUDA cannot be used at all on this machine or device: the driver or NVRTC library is
    /// missing, initialising the device failed, or an error left its CUDA context unusable (a
    /// sticky error such as an illegal address). Optional (`GpuNvidia|None`) calls fall back to
    /// the CPU on this error.
    #[error("[{}] GPU unavailable: {message}", Self::GPU_UNAVAILABLE)]
    GpuUnavailable {
        /// What failed and what to check.
        message: String,
    },

    /// A CUDA call failed while running a GPU implementation.
    #[error("[{}] GPU error on device {device}: {message}", Self::GPU)]
    Gpu {
        /// The device, e.g. `0 (GPU-6f3c…)`.
        device: String,
        /// The failed step and the driver's message.
        message: String,
    },

    /// A batch does not fit in device memory even after splitting it as far as it goes.
    #[error(
        "[{}] out of GPU memory on device {device}: {message}",
        Self::GPU_OUT_OF_MEMORY
    )]
    GpuOutOfMemory {
        /// The device.
        device: String,
        /// How much was needed and how much was free.
        message: String,
    },

    /// A run's output passes one of the limits of one run (see the `script` module's docs).
    #[error(
        "[{}] Python script {script} (instance {vm_id}): output column {column}: {message}; \
         split the work into more groups (GROUP BY) or emit less per group",
        Self::RUN_TOO_LARGE
    )]
    RunTooLarge {
        /// The script, `SCHEMA.NAME`.
        script: String,
        /// The instance.
        vm_id: usize,
        /// The output column.
        column: String,
        /// Which limit it passed.
        message: String,
    },
}

/// What [`RuntimeError::PythonException`] says (boxed: it is the largest error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "[{}] VM error: {}Python script {script} failed in {phase}{} (instance {vm_id}): \
     {exception}: {message}\n{traceback}",
    RuntimeError::PYTHON_EXCEPTION,
    exasol_vm_error(phase),
    line_suffix(*.line)
)]
pub struct PythonExceptionInfo {
    /// The script, `SCHEMA.NAME`.
    pub script: String,
    /// The instance (`exa.meta.vm_id`) whose worker raised.
    pub vm_id: usize,
    /// Where: `its module-level code`, `run(ctx)`, `run_batch(ctx)` or `cleanup()`.
    pub phase: String,
    /// Line in the script's text (the `CREATE SCRIPT` body, line 1 = its first line), when the
    /// exception passed through the script's own code.
    pub line: Option<u32>,
    /// The exception's type, e.g. `NameError`.
    pub exception: String,
    /// The exception's message.
    pub message: String,
    /// The traceback as Python prints it, without the worker's own frames.
    pub traceback: String,
}

/// What [`RuntimeError::BadOutputValue`] says (boxed, as large as the above).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "[{}] Python script {script} (instance {vm_id}): output column {column} {sql_type}, row {row} of this run: the value {value} {message}",
    RuntimeError::BAD_OUTPUT_VALUE
)]
pub struct BadOutputValueInfo {
    /// The script, `SCHEMA.NAME`.
    pub script: String,
    /// The instance.
    pub vm_id: usize,
    /// The output column (a RETURNS script's one column is named after the script).
    pub column: String,
    /// The column's declared type, e.g. `DOUBLE`.
    pub sql_type: String,
    /// The offending value as Python's `repr` shows it (shortened).
    pub value: String,
    /// Why it does not fit, phrased to follow the value, e.g. `is a str, not a DOUBLE value`.
    pub message: String,
    /// Row of the run's output (1-based).
    pub row: u64,
}

/// Exasol's words for a script's exception in `phase`, as its Python VM prints them
/// (`F-UDF-CL-SL-PYTHON-1114: Exception during run: ` for `run(ctx)`).
fn exasol_vm_error(phase: &str) -> String {
    if phase.starts_with("run") {
        "F-UDF-CL-SL-PYTHON-1114: Exception during run: ".into()
    } else if phase.starts_with("cleanup") {
        "Exception during cleanup: ".into()
    } else if phase.contains("module-level") {
        "Exception during the script's initialisation: ".into()
    } else {
        format!("Exception during {phase}: ")
    }
}

fn line_suffix(line: Option<u32>) -> String {
    line.map(|l| format!(" at line {l}")).unwrap_or_default()
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!(". Its last stderr output:\n{}", stderr.trim_end())
    }
}

impl RuntimeError {
    /// Code of [`RuntimeError::InvalidAnnotation`].
    pub const INVALID_ANNOTATION: &'static str = "22U01";
    /// Code of [`RuntimeError::PythonException`].
    pub const PYTHON_EXCEPTION: &'static str = "22U10";
    /// Code of [`RuntimeError::WorkerCrashed`].
    pub const WORKER_CRASHED: &'static str = "58U11";
    /// Code of [`RuntimeError::WorkerTimeout`].
    pub const WORKER_TIMEOUT: &'static str = "57U12";
    /// Code of [`RuntimeError::WorkerOutOfMemory`].
    pub const WORKER_OUT_OF_MEMORY: &'static str = "53U25";
    /// Code of [`RuntimeError::BadOutputValue`].
    pub const BAD_OUTPUT_VALUE: &'static str = "22U13";
    /// Code of [`RuntimeError::InterpreterStart`].
    pub const INTERPRETER_START: &'static str = "58U14";
    /// Code of [`RuntimeError::InvalidSqlType`].
    pub const INVALID_SQL_TYPE: &'static str = "42U15";
    /// Code of [`RuntimeError::ScriptCall`].
    pub const SCRIPT_CALL: &'static str = "42U16";
    /// Code of [`RuntimeError::WorkerProtocol`].
    pub const WORKER_PROTOCOL: &'static str = "58U17";
    /// Code of [`RuntimeError::SingleCall`].
    pub const SINGLE_CALL: &'static str = "42U18";
    /// Code of [`RuntimeError::InvalidArgument`].
    pub const INVALID_ARGUMENT: &'static str = "22U20";
    /// Code of [`RuntimeError::GpuUnavailable`].
    pub const GPU_UNAVAILABLE: &'static str = "58U21";
    /// Code of [`RuntimeError::Gpu`].
    pub const GPU: &'static str = "58U22";
    /// Code of [`RuntimeError::GpuOutOfMemory`].
    pub const GPU_OUT_OF_MEMORY: &'static str = "53U23";
    /// Code of [`RuntimeError::WorkerOverDeviceMemory`].
    pub const WORKER_OVER_DEVICE_MEMORY: &'static str = "53U26";
    /// Code of [`RuntimeError::RunTooLarge`].
    pub const RUN_TOO_LARGE: &'static str = "54U24";

    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidAnnotation { .. } => Self::INVALID_ANNOTATION,
            Self::PythonException(_) => Self::PYTHON_EXCEPTION,
            Self::WorkerCrashed { .. } => Self::WORKER_CRASHED,
            Self::WorkerTimeout { .. } => Self::WORKER_TIMEOUT,
            Self::WorkerOutOfMemory { .. } => Self::WORKER_OUT_OF_MEMORY,
            Self::WorkerOverDeviceMemory { .. } => Self::WORKER_OVER_DEVICE_MEMORY,
            Self::BadOutputValue(_) => Self::BAD_OUTPUT_VALUE,
            Self::InterpreterStart { .. } => Self::INTERPRETER_START,
            Self::InvalidSqlType { .. } => Self::INVALID_SQL_TYPE,
            Self::ScriptCall { .. } => Self::SCRIPT_CALL,
            Self::WorkerProtocol { .. } => Self::WORKER_PROTOCOL,
            Self::SingleCall { .. } => Self::SINGLE_CALL,
            Self::InvalidArgument { .. } => Self::INVALID_ARGUMENT,
            Self::GpuUnavailable { .. } => Self::GPU_UNAVAILABLE,
            Self::Gpu { .. } => Self::GPU,
            Self::GpuOutOfMemory { .. } => Self::GPU_OUT_OF_MEMORY,
            Self::RunTooLarge { .. } => Self::RUN_TOO_LARGE,
        }
    }
}
