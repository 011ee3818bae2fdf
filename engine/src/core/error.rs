//! The engine's error type: stable codes for every user-facing failure, and the conversions that
//! carry them through DataFusion and back.

use std::sync::Arc;

use accelsql_gpu_scheduler::SchedulerError;
use accelsql_udf_runtime::{AcceleratorRequest, RuntimeError};
use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;

/// Result type of this crate.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Everything a statement can fail with. [`EngineError::code`] gives the stable code that also
/// starts the message, e.g. `[22069] Accelerator device request failed …`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A required GPU call could not get the GPUs in its query block (Exasol's error 22069).
    #[error(
        "[{}] Accelerator device request failed for a user defined function (requested types: {requested}). \
         Impossible Accelerator Device Request: Insufficient accelerator resources to execute all user defined functions concurrently. \
         ({detail})",
        Self::ACCELERATOR_REQUEST_FAILED
    )]
    AcceleratorRequestFailed {
        /// The annotation the UDF carries.
        requested: AcceleratorRequest,
        /// Which UDF, and which call got the GPUs instead.
        detail: String,
    },

    /// A required GPU call on a node with no GPU.
    #[error(
        "[{}] Accelerator device request failed for a user defined function (requested types: GpuNvidia). \
         No GPU is present on this node, but UDF {udf} requires one (%perInstanceRequiredAcceleratorDevices GpuNvidia). \
         Declare it GpuNvidia|None to let it run on the CPU",
        Self::ACCELERATOR_REQUEST_FAILED
    )]
    NoGpuPresent {
        /// The UDF.
        udf: String,
    },

    /// A UDF definition is unusable (missing CPU implementation, bad annotation, name clash).
    #[error("[{}] invalid UDF definition: {message}", Self::INVALID_DEFINITION)]
    InvalidDefinition {
        /// What is wrong.
        message: String,
    },

    /// A UDF implementation returned a result of the wrong length or type.
    #[error(
        "[{}] UDF {udf} returned a bad result: {message}",
        Self::BAD_UDF_RESULT
    )]
    BadUdfResult {
        /// The UDF.
        udf: String,
        /// What was wrong.
        message: String,
    },

    /// An EMITS call where SQL cannot take its rows: anywhere but alone in its select list (with
    /// GROUP BY keys beside it), or with more than one EMITS call in one select.
    #[error(
        "[{}] EMITS UDF {udf} used in an illegal position: {message}",
        Self::EMITS_POSITION
    )]
    EmitsPosition {
        /// The UDF.
        udf: String,
        /// What is wrong, and how to write it instead.
        message: String,
    },

    /// Malformed or unusable script DDL (`CREATE … SCRIPT`, `DROP SCRIPT`,
    /// `ALTER SESSION SET SCRIPT_LANGUAGES`): what is wrong and where.
    #[error("[{}] {message}", Self::SCRIPT_DEFINITION)]
    ScriptDefinition {
        /// What is wrong, with its line and column.
        message: String,
    },

    /// The data directory (script catalog) cannot be used.
    #[error("[{}] data directory {}: {message}", Self::DATA_DIRECTORY, path.display())]
    DataDirectory {
        /// The directory or file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },

    /// The statement was cancelled by its user (Ctrl-C in the shell, an interrupted client); its
    /// stream was dropped, so its devices are released.
    #[error("[{}] statement cancelled: {reason}", Self::CANCELLED)]
    Cancelled {
        /// Who or what cancelled it.
        reason: String,
    },

    /// A file, folder or glob named as a table does not exist or matches no file (as do
    /// DataFusion's own "not found" errors from `CREATE EXTERNAL TABLE` and `COPY`, which keep
    /// their message but get this code).
    #[error("[{}] {path}: {message}", Self::FILE_NOT_FOUND)]
    FileNotFound {
        /// The path as the statement gave it.
        path: String,
        /// What is missing.
        message: String,
    },

    /// A file named as a table has an extension no file format is registered for.
    #[error(
        "[{}] cannot read {path} as a table: {message}",
        Self::UNKNOWN_FILE_FORMAT
    )]
    UnknownFileFormat {
        /// The path as the statement gave it.
        path: String,
        /// The extension found and the formats known.
        message: String,
    },

    /// A restricted session ([`Session::restrict`]) refused a statement: script DDL, a
    /// SCRIPT_LANGUAGES change, file access, or a setting that could lift a resource limit.
    ///
    /// [`Session::restrict`]: crate::Session::restrict
    #[error(
        "[{}] not allowed in a restricted session: {what}",
        Self::NOT_ALLOWED_RESTRICTED
    )]
    NotAllowedRestricted {
        /// What was refused, and why.
        what: String,
    },

    /// A statement held the GPU lease longer than [`EngineOptions::max_lease_hold`] allows (a
    /// client that stopped reading its result, say): it was stopped and the lease released.
    ///
    /// [`EngineOptions::max_lease_hold`]: crate::EngineOptions::max_lease_hold
    #[error(
        "[{}] the statement held the GPU lease for {} s, the most this engine allows: it was \
         stopped and the lease given to the next statement (read results promptly, or raise \
         the server's --max-lease-hold)",
        Self::LEASE_HELD_TOO_LONG,
        limit.as_secs_f64()
    )]
    LeaseHeldTooLong {
        /// The engine's limit.
        limit: std::time::Duration,
    },

    /// The statement ran longer than its statement timeout (`accelsql.statement_timeout`,
    /// Exasol's `QUERY_TIMEOUT`) and was stopped, its lease and workers freed.
    #[error(
        "[{}] the statement ran longer than its timeout of {} s and was stopped (its GPU lease \
         and workers were freed); raise accelsql.statement_timeout (ALTER SESSION SET \
         QUERY_TIMEOUT) if it needs longer",
        Self::STATEMENT_TIMEOUT,
        limit.as_secs_f64()
    )]
    StatementTimeout {
        /// The statement's limit.
        limit: std::time::Duration,
    },

    /// The statement's session was ended by `KILL SESSION` (its statements stopped, their
    /// leases and workers freed); the session takes no more statements.
    #[error(
        "[{}] session {session} was ended by KILL SESSION: its statements were stopped and it \
         takes no more; open a new session",
        Self::SESSION_KILLED
    )]
    SessionKilled {
        /// The session's number.
        session: u64,
    },

    /// The session's user lacks a privilege the statement needs (Exasol's "insufficient
    /// privileges").
    #[error("[{}] insufficient privileges: {what}", Self::INSUFFICIENT_PRIVILEGES)]
    InsufficientPrivileges {
        /// What was refused, and which privilege it needs.
        what: String,
    },

    /// A refused action Exasol words as `insufficient privileges for calling script S` or `…
    /// for using connection C`: its words, then which privilege it needs (42501).
    #[error(
        "[{}] insufficient privileges for {action}: it needs {needs}",
        Self::INSUFFICIENT_PRIVILEGES
    )]
    InsufficientPrivilegesFor {
        /// The action in Exasol's words (`calling script FN1.F`).
        action: String,
        /// The privilege(s) that would allow it.
        needs: String,
    },

    /// A user, role, consumer group or grant to create already exists.
    #[error("[{}] {what} already exists", Self::ALREADY_EXISTS)]
    AlreadyExists {
        /// What, e.g. `user ANN`.
        what: String,
    },

    /// A user, role, consumer group or object a statement names does not exist.
    #[error("[{}] {what} does not exist", Self::DOES_NOT_EXIST)]
    DoesNotExist {
        /// What, e.g. `role ANALYST`.
        what: String,
    },

    /// An object cannot be dropped while others depend on it (a user that owns scripts, a
    /// consumer group with users).
    #[error("[{}] {what}", Self::DEPENDENT_OBJECTS)]
    DependentObjects {
        /// What depends on what, and what to do.
        what: String,
    },

    /// `KILL SESSION n` named a session that does not exist (or has ended).
    #[error(
        "[{}] no session {session}: it never existed or has ended (see accelsql.gpu_leases for \
         sessions that hold or wait for the GPUs)",
        Self::UNKNOWN_SESSION
    )]
    UnknownSession {
        /// The number given.
        session: u64,
    },

    /// A statement nests deeper than the engine allows (see
    /// [`EngineOptions::max_statement_depth`](crate::EngineOptions::max_statement_depth)).
    #[error(
        "[{}] statement too complex: it nests about {depth} levels deep (operator chains, set \
         operations and brackets), more than the {limit} this server allows; split it (e.g. a \
         long OR chain into IN (…), a long UNION ALL into a table)",
        Self::STATEMENT_TOO_COMPLEX
    )]
    StatementTooComplex {
        /// The statement's estimated depth.
        depth: usize,
        /// The engine's limit.
        limit: usize,
    },

    /// A statement failed in a way the engine did not foresee (a panic inside it, caught): the
    /// statement ends with this error, the session and the process go on.
    #[error("[{}] internal error: {message}", Self::INTERNAL)]
    Internal {
        /// What failed.
        message: String,
    },

    /// A statement spilled more to disk than its session, its user or the engine may (see
    /// [`EngineOptions::spill_limit`](crate::EngineOptions::spill_limit)); its spill files are
    /// deleted.
    #[error(
        "[{}] the statement needs more spill space on disk than this session may use (its own, \
         its user's and the server's spill quotas; a server sets them with --spill-limit); \
         give it less data to sort, group or join at once ({message})",
        Self::SPILL_QUOTA
    )]
    SpillQuota {
        /// DataFusion's report.
        message: String,
    },

    /// The GPU lease, device inventory or device locks failed.
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),

    /// UDF annotations or instances failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),

    /// A failure of the tables' storage (a conflict, a full disk, a damaged file), with its own
    /// code.
    #[error(transparent)]
    Storage(#[from] accelsql_storage::StorageError),

    /// A setting has a value we cannot use.
    #[error("[{}] invalid setting {name}: {message}", Self::INVALID_SETTING)]
    InvalidSetting {
        /// The setting.
        name: String,
        /// What is wrong.
        message: String,
    },

    /// A coded error that reached us through a DataFusion error shared by several streams (e.g.
    /// a repartition's outputs), so it could not be taken out: its code and message, copied.
    #[error("{message}")]
    Relayed {
        /// The original error's code.
        code: &'static str,
        /// The original error's message (starting with its code).
        message: String,
    },

    /// Anything DataFusion reports: SQL syntax, planning, execution.
    #[error("[{}] {}", sql_code(.0), .0.strip_backtrace())]
    Sql(DataFusionError),
}

impl EngineError {
    /// Code of [`EngineError::AcceleratorRequestFailed`] and [`EngineError::NoGpuPresent`] (Exasol's).
    pub const ACCELERATOR_REQUEST_FAILED: &'static str = "22069";
    /// Code of [`EngineError::InvalidDefinition`].
    pub const INVALID_DEFINITION: &'static str = "42E01";
    /// Code of [`EngineError::BadUdfResult`].
    pub const BAD_UDF_RESULT: &'static str = "22E02";
    /// Code of [`EngineError::EmitsPosition`].
    pub const EMITS_POSITION: &'static str = "42E02";
    /// Code of [`EngineError::ScriptDefinition`].
    pub const SCRIPT_DEFINITION: &'static str = "42E03";
    /// Code of [`EngineError::DataDirectory`].
    pub const DATA_DIRECTORY: &'static str = "58E01";
    /// Code of [`EngineError::Cancelled`] (SQLSTATE `query_canceled`).
    pub const CANCELLED: &'static str = "57014";
    /// Code of [`EngineError::InvalidSetting`].
    pub const INVALID_SETTING: &'static str = "22E03";
    /// Code of [`EngineError::FileNotFound`] (PostgreSQL's `undefined_file`).
    pub const FILE_NOT_FOUND: &'static str = "58P01";
    /// Code of [`EngineError::UnknownFileFormat`].
    pub const UNKNOWN_FILE_FORMAT: &'static str = "42E04";
    /// Code of [`EngineError::NotAllowedRestricted`] (SQLSTATE `insufficient_privilege`).
    pub const NOT_ALLOWED_RESTRICTED: &'static str = "42501";
    /// [`EngineError::InsufficientPrivileges`] (the same SQLSTATE as a restricted refusal).
    pub const INSUFFICIENT_PRIVILEGES: &'static str = "42501";
    /// [`EngineError::AlreadyExists`].
    pub const ALREADY_EXISTS: &'static str = "42710";
    /// [`EngineError::DoesNotExist`].
    pub const DOES_NOT_EXIST: &'static str = "42704";
    /// [`EngineError::DependentObjects`] (PostgreSQL's "dependent objects still exist").
    pub const DEPENDENT_OBJECTS: &'static str = "2BP01";
    /// Code of [`EngineError::LeaseHeldTooLong`] (beside the scheduler's 57G01 lease-wait
    /// timeout and 57G02 closed queue).
    pub const LEASE_HELD_TOO_LONG: &'static str = "57G03";
    /// Code of [`EngineError::StatementTimeout`] (not 57014, which is a user's cancel).
    pub const STATEMENT_TIMEOUT: &'static str = "57T01";
    /// Code of [`EngineError::SessionKilled`] (SQLSTATE `admin_shutdown`).
    pub const SESSION_KILLED: &'static str = "57P01";
    /// Code of [`EngineError::UnknownSession`] (SQLSTATE `undefined_object`).
    pub const UNKNOWN_SESSION: &'static str = "42704";
    /// Code of a statement that does not fit its session's memory budget or the engine's
    /// memory pool (SQLSTATE `out_of_memory`): DataFusion's "Resources exhausted".
    pub const OUT_OF_MEMORY: &'static str = "53200";
    /// Code of [`EngineError::StatementTooComplex`] (SQLSTATE `statement_too_complex`).
    pub const STATEMENT_TOO_COMPLEX: &'static str = "54001";
    /// Code of [`EngineError::SpillQuota`] (SQLSTATE `configuration_limit_exceeded`).
    pub const SPILL_QUOTA: &'static str = "53400";
    /// Code of [`EngineError::Internal`] (SQLSTATE `internal_error`).
    pub const INTERNAL: &'static str = "XX000";
    /// Code of other I/O failures DataFusion reports (SQLSTATE `io_error`).
    pub const IO_ERROR: &'static str = "58030";

    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::AcceleratorRequestFailed { .. } | Self::NoGpuPresent { .. } => {
                Self::ACCELERATOR_REQUEST_FAILED
            }
            Self::InvalidDefinition { .. } => Self::INVALID_DEFINITION,
            Self::BadUdfResult { .. } => Self::BAD_UDF_RESULT,
            Self::EmitsPosition { .. } => Self::EMITS_POSITION,
            Self::Cancelled { .. } => Self::CANCELLED,
            Self::ScriptDefinition { .. } => Self::SCRIPT_DEFINITION,
            Self::DataDirectory { .. } => Self::DATA_DIRECTORY,
            Self::InvalidSetting { .. } => Self::INVALID_SETTING,
            Self::FileNotFound { .. } => Self::FILE_NOT_FOUND,
            Self::UnknownFileFormat { .. } => Self::UNKNOWN_FILE_FORMAT,
            Self::NotAllowedRestricted { .. } => Self::NOT_ALLOWED_RESTRICTED,
            Self::LeaseHeldTooLong { .. } => Self::LEASE_HELD_TOO_LONG,
            Self::StatementTimeout { .. } => Self::STATEMENT_TIMEOUT,
            Self::SessionKilled { .. } => Self::SESSION_KILLED,
            Self::UnknownSession { .. } => Self::UNKNOWN_SESSION,
            Self::InsufficientPrivileges { .. } | Self::InsufficientPrivilegesFor { .. } => {
                Self::INSUFFICIENT_PRIVILEGES
            }
            Self::AlreadyExists { .. } => Self::ALREADY_EXISTS,
            Self::DoesNotExist { .. } => Self::DOES_NOT_EXIST,
            Self::DependentObjects { .. } => Self::DEPENDENT_OBJECTS,
            Self::StatementTooComplex { .. } => Self::STATEMENT_TOO_COMPLEX,
            Self::Internal { .. } => Self::INTERNAL,
            Self::SpillQuota { .. } => Self::SPILL_QUOTA,
            Self::Scheduler(e) => e.code(),
            Self::Runtime(e) => e.code(),
            Self::Storage(accelsql_storage::StorageError::DataFusion(e)) => sql_code(e),
            Self::Storage(e) => e.code(),
            Self::Relayed { code, .. } => code,
            Self::Sql(e) => sql_code(e),
        }
    }

    /// The coded accelsql error inside an error message that crossed a process boundary as
    /// text (a cluster executor's failure, relayed by Ballista inside its own wording): the
    /// innermost `[CODE] message`, without the wrappers' trailing punctuation. `None` when the
    /// text holds no code.
    pub fn from_remote_message(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        let start = (0..bytes.len().saturating_sub(7)).rev().find(|&i| {
            bytes[i] == b'['
                && bytes[i + 6] == b']'
                && bytes[i + 7] == b' '
                && bytes[i + 1..i + 6]
                    .iter()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
        })?;
        let code = intern_code(&text[start + 1..start + 6]);
        // Debug-formatted wrappers close with `")))`: cut there, keeping a message's own `)`.
        let mut message = text[start..].trim_end();
        let unwrapped = message.trim_end_matches(')');
        let mut debug = false;
        if unwrapped.ends_with('"') && !unwrapped.ends_with("\\\"") {
            message = &unwrapped[..unwrapped.len() - 1];
            debug = true;
        }
        // A Debug-formatted message has its newlines, quotes and backslashes escaped.
        let message = if debug || (!message.contains('\n') && message.contains("\\n")) {
            unescape_debug(message)
        } else {
            message.replace("\\\"", "\"")
        };
        Some(Self::Relayed { code, message })
    }

    /// The error a remote process's uncoded DataFusion error stands for, from its text: the
    /// innermost DataFusion error in `text` (`Arrow error: Divide by zero error`), with the code
    /// it has in this process (22000). `None` when the text names no DataFusion error.
    pub fn from_remote_datafusion_text(text: &str) -> Option<Self> {
        const KINDS: [(&str, &str); 9] = [
            ("Arrow error: ", "22000"),
            ("Execution error: ", "22000"),
            ("Parquet error: ", "22000"),
            ("Error during planning: ", "42000"),
            ("Schema error: ", "42000"),
            ("This feature is not implemented: ", "0A000"),
            ("Resources exhausted: ", EngineError::OUT_OF_MEMORY),
            ("Invalid or Unsupported Configuration: ", "22023"),
            ("IO error: ", EngineError::IO_ERROR),
        ];
        let (start, code) = KINDS
            .iter()
            .filter_map(|(prefix, code)| text.rfind(prefix).map(|i| (i, *code)))
            .max_by_key(|(i, _)| *i)?;
        let message = text[start..].trim_end();
        let unwrapped = message.trim_end_matches(')');
        let message = if unwrapped.ends_with('"') && !unwrapped.ends_with("\\\"") {
            unescape_debug(&unwrapped[..unwrapped.len() - 1])
        } else {
            message.to_string()
        };
        Some(Self::Relayed {
            code,
            message: format!("[{code}] {message}"),
        })
    }

    /// Wraps this error for DataFusion, which hands it back unchanged through [`From`].
    pub fn into_datafusion(self) -> DataFusionError {
        DataFusionError::External(Box::new(self))
    }
}

/// `text` as it was before `{:?}` escaped it (`\\n`, `\\t`, `\\"`, `\\\\`, `\\u{…}`).
fn unescape_debug(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('u') => {
                let rest = chars.as_str();
                let code = rest
                    .strip_prefix('{')
                    .and_then(|r| r.split_once('}'))
                    .and_then(|(hex, _)| u32::from_str_radix(hex, 16).ok().map(|v| (hex.len(), v)))
                    .and_then(|(len, v)| char::from_u32(v).map(|ch| (len, ch)));
                match code {
                    Some((len, ch)) => {
                        out.push(ch);
                        chars = rest[len + 2..].chars();
                    }
                    None => out.push_str("\\u"),
                }
            }
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// `code` as a `&'static str`: each distinct code is allocated once (codes are five
/// characters, and few).
fn intern_code(code: &str) -> &'static str {
    static CODES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut codes = CODES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = codes.iter().find(|c| **c == code) {
        return known;
    }
    let leaked: &'static str = Box::leak(code.to_string().into_boxed_str());
    codes.push(leaked);
    leaked
}

/// SQLSTATE-style class of a DataFusion error.
fn sql_code(e: &DataFusionError) -> &'static str {
    if e.to_string()
        .contains(crate::core::spill::DATAFUSION_QUOTA_TEXT)
    {
        return EngineError::SPILL_QUOTA;
    }
    match e {
        DataFusionError::SQL(..) | DataFusionError::Plan(_) | DataFusionError::SchemaError(..) => {
            "42000"
        }
        DataFusionError::NotImplemented(_) => "0A000",
        DataFusionError::Configuration(_) => "22023",
        DataFusionError::ResourcesExhausted(_) => EngineError::OUT_OF_MEMORY,
        DataFusionError::Execution(_) | DataFusionError::ArrowError(..) => "22000",
        // A bad value for a DataFusion setting (`SET datafusion.execution.batch_size = 'x'`)
        // comes as a parse failure wrapped in context, whatever its root: an invalid value.
        DataFusionError::Context(context, _) if context.starts_with("Error setting config") => {
            "22023"
        }
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            sql_code(inner)
        }
        // DataFusion 55's type coercion reports a function whose argument type no signature
        // takes (e.g. `sum` over a CASE that coerced to text) as an internal error; to the user
        // it is a planning error like any other signature mismatch.
        DataFusionError::Internal(message) if message.contains("failed to match any signature") => {
            "42000"
        }
        DataFusionError::Collection(errors) => errors.first().map_or("XX000", sql_code),
        DataFusionError::Shared(inner) => sql_code(inner),
        DataFusionError::ObjectStore(inner) => match **inner {
            datafusion::object_store::Error::NotFound { .. } => EngineError::FILE_NOT_FOUND,
            _ => EngineError::IO_ERROR,
        },
        DataFusionError::IoError(inner) => match inner.kind() {
            std::io::ErrorKind::NotFound => EngineError::FILE_NOT_FOUND,
            _ => EngineError::IO_ERROR,
        },
        DataFusionError::ParquetError(_) => "22000",
        _ => "XX000",
    }
}

impl From<DataFusionError> for EngineError {
    fn from(e: DataFusionError) -> Self {
        match e {
            DataFusionError::External(boxed) => match boxed.downcast::<EngineError>() {
                Ok(engine) => *engine,
                Err(other) => match other.downcast::<SchedulerError>() {
                    Ok(s) => Self::Scheduler(*s),
                    Err(other) if other.is::<accelsql_storage::StorageError>() => {
                        match other.downcast::<accelsql_storage::StorageError>() {
                            Ok(storage) => match *storage {
                                accelsql_storage::StorageError::DataFusion(inner) => {
                                    Self::from(inner)
                                }
                                storage => Self::Storage(storage),
                            },
                            Err(other) => Self::Sql(DataFusionError::External(other)),
                        }
                    }
                    // A DataFusion or Arrow error boxed by another layer (Ballista's task
                    // runner) keeps the code it has unboxed.
                    Err(other) => match other.downcast::<DataFusionError>() {
                        Ok(inner) => Self::from(*inner),
                        Err(other) => match other.downcast::<ArrowError>() {
                            Ok(arrow) => Self::Sql(DataFusionError::ArrowError(arrow, None)),
                            Err(other) => Self::Sql(DataFusionError::External(other)),
                        },
                    },
                },
            },
            // Context only decorates; the root keeps its code.
            DataFusionError::Context(context, inner) => match Self::from(*inner) {
                Self::Sql(inner) => Self::Sql(DataFusionError::Context(context, Box::new(inner))),
                coded => coded,
            },
            // A diagnostic only adds source locations for tools; the root keeps its code.
            DataFusionError::Diagnostic(diagnostic, inner) => match Self::from(*inner) {
                Self::Sql(inner) => {
                    Self::Sql(DataFusionError::Diagnostic(diagnostic, Box::new(inner)))
                }
                coded => coded,
            },
            DataFusionError::Shared(shared) => match Arc::try_unwrap(shared) {
                Ok(inner) => Self::from(inner),
                Err(shared) => match coded_inside(&shared) {
                    Some((code, message)) => Self::Relayed { code, message },
                    None => Self::Sql(DataFusionError::Shared(shared)),
                },
            },
            // A table's reader names its damaged files (a storage error inside Parquet's).
            DataFusionError::ParquetError(inner) => match *inner {
                datafusion::parquet::errors::ParquetError::External(boxed)
                    if boxed.is::<accelsql_storage::StorageError>() =>
                {
                    match boxed.downcast::<accelsql_storage::StorageError>() {
                        Ok(storage) => Self::Storage(*storage),
                        Err(other) => Self::Sql(DataFusionError::ParquetError(Box::new(
                            datafusion::parquet::errors::ParquetError::External(other),
                        ))),
                    }
                }
                inner => Self::Sql(DataFusionError::ParquetError(Box::new(inner))),
            },
            other
                if other
                    .to_string()
                    .contains(crate::core::spill::DATAFUSION_QUOTA_TEXT) =>
            {
                Self::SpillQuota {
                    message: other.strip_backtrace(),
                }
            }
            other => Self::Sql(other),
        }
    }
}

/// The code and message of the accelsql or scheduler error inside `e`, if there is one.
fn coded_inside(e: &DataFusionError) -> Option<(&'static str, String)> {
    match e {
        DataFusionError::External(boxed) => {
            if let Some(engine) = boxed.downcast_ref::<EngineError>() {
                Some((engine.code(), engine.to_string()))
            } else if let Some(storage) = boxed.downcast_ref::<accelsql_storage::StorageError>() {
                Some((storage.code(), storage.to_string()))
            } else {
                boxed
                    .downcast_ref::<SchedulerError>()
                    .map(|s| (s.code(), s.to_string()))
            }
        }
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            coded_inside(inner)
        }
        DataFusionError::Shared(inner) => coded_inside(inner),
        _ => None,
    }
}

/// Builds an [`EngineError::InvalidDefinition`]: `definition_err!("UDF {name} has no CPU implementation")`.
#[macro_export]
macro_rules! definition_err {
    ($($arg:tt)*) => { $crate::EngineError::InvalidDefinition { message: format!($($arg)*) } };
}

/// Builds an [`EngineError::NotAllowedRestricted`]: `restricted_err!("COPY … TO writes files")`.
#[macro_export]
macro_rules! restricted_err {
    ($($arg:tt)*) => { $crate::EngineError::NotAllowedRestricted { what: format!($($arg)*) } };
}

/// Builds an [`EngineError::InsufficientPrivileges`]: `privilege_err!("CREATE USER needs …")`.
#[macro_export]
macro_rules! privilege_err {
    ($($arg:tt)*) => { $crate::EngineError::InsufficientPrivileges { what: format!($($arg)*) } };
}

/// Builds an [`EngineError::ScriptDefinition`]: `script_err!("script {name} does not exist")`.
#[macro_export]
macro_rules! script_err {
    ($($arg:tt)*) => { $crate::EngineError::ScriptDefinition { message: format!($($arg)*) } };
}

/// Builds an [`EngineError::InvalidSetting`]: `setting_err!("accelsql.memory_limit", "must be
/// more than 0 bytes")`.
#[macro_export]
macro_rules! setting_err {
    ($name:expr, $($arg:tt)*) => {
        $crate::EngineError::InvalidSetting { name: $name.to_string(), message: format!($($arg)*) }
    };
}

/// Builds an [`EngineError::AlreadyExists`]: `exists_err!("role {name}")`.
#[macro_export]
macro_rules! exists_err {
    ($($arg:tt)*) => { $crate::EngineError::AlreadyExists { what: format!($($arg)*) } };
}

/// Builds an [`EngineError::DoesNotExist`]: `missing_err!("user {name}")`.
#[macro_export]
macro_rules! missing_err {
    ($($arg:tt)*) => { $crate::EngineError::DoesNotExist { what: format!($($arg)*) } };
}

/// Builds an [`EngineError::BadUdfResult`]: `udf_result_err!(def.name(), "{n} rows for {rows}")`.
#[macro_export]
macro_rules! udf_result_err {
    ($udf:expr, $($arg:tt)*) => {
        $crate::EngineError::BadUdfResult { udf: $udf.to_string(), message: format!($($arg)*) }
    };
}

/// Builds an [`EngineError::DataDirectory`]: `data_dir_err!(path, "is not a directory")`.
#[macro_export]
macro_rules! data_dir_err {
    ($path:expr, $($arg:tt)*) => {
        $crate::EngineError::DataDirectory { path: $path, message: format!($($arg)*) }
    };
}

/// Builds an [`EngineError::EmitsPosition`]: `emits_err!(udf, "it must be alone in its select list")`.
#[macro_export]
macro_rules! emits_err {
    ($udf:expr, $($arg:tt)*) => {
        $crate::EngineError::EmitsPosition { udf: $udf.to_string(), message: format!($($arg)*) }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_code_of_a_relayed_message_is_the_error() {
        let text = r#"Execution error: Job 1 failed: Task failed: DataFusionError(Shared(External(DataFusionError(Execution("[22069] no GPU on node 2 for \"f\"")))))"#;
        let e = EngineError::from_remote_message(text).unwrap();
        assert_eq!(e.code(), "22069");
        assert_eq!(e.to_string(), r#"[22069] no GPU on node 2 for "f""#);
        // A wrapper's own code is not the one that counts; the innermost is.
        let nested = "[22000] Execution error: [42883] the function f is not known";
        assert_eq!(
            EngineError::from_remote_message(nested).unwrap().code(),
            "42883"
        );
        // No code, or something that only looks like one: nothing to relay.
        assert!(EngineError::from_remote_message("Arrow error: Divide by zero").is_none());
        assert!(EngineError::from_remote_message("index [a-b_c] out").is_none());
        assert!(EngineError::from_remote_message("[").is_none());
        // A message's own closing parenthesis stays.
        let plain = EngineError::from_remote_message("[57014] cancelled (by the client)").unwrap();
        assert_eq!(plain.to_string(), "[57014] cancelled (by the client)");
        // A remote DataFusion error without a code gets the code it has here.
        let e = EngineError::from_remote_datafusion_text(
            "Execution error: Job 7 failed: Arrow error: Divide by zero error",
        )
        .unwrap();
        assert_eq!(e.code(), "22000");
        assert_eq!(e.to_string(), "[22000] Arrow error: Divide by zero error");
        assert!(EngineError::from_remote_datafusion_text("connection refused").is_none());
        // A Debug-formatted message gets its newlines, quotes and backslashes back.
        let text = r#"Task failed: DataFusionError(Execution("[22U10] failed at line 5:\nTraceback:\n  x = \"a\\b\" \u{e9}"))"#;
        let e = EngineError::from_remote_message(text).unwrap();
        assert_eq!(
            e.to_string(),
            "[22U10] failed at line 5:\nTraceback:\n  x = \"a\\b\" \u{e9}"
        );
    }

    #[test]
    fn coded_errors_survive_a_trip_through_datafusion() {
        // A DataFusion error boxed by another layer keeps its code and message.
        let boxed = DataFusionError::External(Box::new(DataFusionError::ArrowError(
            Box::new(ArrowError::DivideByZero),
            None,
        )));
        let e = EngineError::from(boxed);
        assert_eq!(e.code(), "22000");
        assert_eq!(e.to_string(), "[22000] Arrow error: Divide by zero error");
        let e = EngineError::NoGpuPresent { udf: "f".into() }.into_datafusion();
        let e = DataFusionError::Context("while running".into(), Box::new(e));
        let back = EngineError::from(e);
        assert_eq!(back.code(), "22069");
        let s = EngineError::from(DataFusionError::External(Box::new(
            SchedulerError::QueueClosed,
        )));
        assert_eq!(s.code(), "57G02");
    }

    #[test]
    fn a_coded_error_shared_by_several_streams_keeps_its_code() {
        let shared = Arc::new(
            EngineError::BadUdfResult {
                udf: "f".into(),
                message: "bad".into(),
            }
            .into_datafusion(),
        );
        let _other_holder = Arc::clone(&shared);
        let e = EngineError::from(DataFusionError::Shared(shared));
        assert_eq!(e.code(), "22E02");
        assert!(
            e.to_string()
                .starts_with("[22E02] UDF f returned a bad result"),
            "{e}"
        );
    }

    #[test]
    fn datafusion_errors_get_sqlstate_classes() {
        let e = EngineError::from(DataFusionError::Plan("no table t".into()));
        assert_eq!(e.code(), "42000");
        assert!(e.to_string().starts_with("[42000]"), "{e}");
    }

    #[test]
    fn the_22069_message_has_exasols_shape() {
        let e = EngineError::AcceleratorRequestFailed {
            requested: AcceleratorRequest::Required,
            detail: "UDF g; the GPUs went to f".into(),
        };
        assert!(e.to_string().starts_with(
            "[22069] Accelerator device request failed for a user defined function (requested types: GpuNvidia). \
             Impossible Accelerator Device Request: Insufficient accelerator resources to execute all user defined functions concurrently."
        ));
    }
}
