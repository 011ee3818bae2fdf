//! The CLI's error type: scheduler and engine errors, failed SQL statements, and the command's
//! own failures (starting the user's command, reading a script, the terminal).

use std::fmt;
use std::path::PathBuf;

use accelsql_engine::EngineError;
use accelsql_gpu_scheduler::SchedulerError;

/// Exit code for accelsql's own failures (no matching GPU, bad option), as `timeout`/`env` use it.
pub(crate) const EXIT_OWN_FAILURE: u8 = 125;
/// Exit code when the command exists but cannot be run.
pub(crate) const EXIT_CANNOT_RUN: u8 = 126;
/// Exit code when the command is not found.
pub(crate) const EXIT_NOT_FOUND: u8 = 127;
/// Exit code of the SQL shell when a statement fails or the shell cannot run (as for `psql`).
pub(crate) const EXIT_SHELL_FAILURE: u8 = 1;

/// Everything the `accelsql` command can fail with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Device discovery, selection or locking failed.
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),

    /// The command given to `accelsql gpu run` could not be started.
    #[error("[{code}] cannot run {command:?}: {source}", code = Self::SPAWN)]
    Spawn {
        /// The program name.
        command: String,
        /// Why it did not start.
        #[source]
        source: std::io::Error,
    },

    /// Output could not be written.
    #[error("[{code}] {0}", code = Self::OUTPUT)]
    Output(String),

    /// The engine could not start (e.g. a malformed `ACCELSQL_*` variable).
    #[error(transparent)]
    Engine(Box<EngineError>),

    /// A SQL statement failed; the message carries the engine's own code.
    #[error("{}", statement_message(.location.as_ref(), .source))]
    Statement {
        /// Where the statement stands in a script; `None` for `-c` and the interactive prompt.
        location: Option<StatementLocation>,
        /// The engine's error.
        #[source]
        source: Box<EngineError>,
    },

    /// A script file (or piped standard input) could not be read.
    #[error("[{code}] cannot read {}: {source}", path.display(), code = Self::SCRIPT)]
    Script {
        /// The file, or `<stdin>`.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },

    /// Standard output was closed by its reader (`accelsql … | head`); the shell stops quietly.
    #[error("[{code}] standard output was closed", code = Self::OUTPUT)]
    OutputClosed,

    /// `accelsql serve` could not start or serve (users file, TLS, listening socket).
    #[error(transparent)]
    Server(Box<accelsql_server::ServerError>),

    /// A cluster could not be started or reached (`accelsql cluster …`, `--cluster`).
    #[error(transparent)]
    Cluster(Box<accelsql_cluster::ClusterError>),

    /// A backslash command that is unknown or was given wrong arguments (`\x maybe`), or whose
    /// file cannot be written (`\o /no/such/dir/f`).
    #[error("[{code}] {0}", code = Self::COMMAND)]
    Command(String),

    /// The interactive prompt or the async runtime failed.
    #[error("[{code}] {0}", code = Self::TERMINAL)]
    Terminal(String),
}

/// Where a failing statement stands in a script: `FILE:LINE (statement N)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatementLocation {
    /// The script's name as the user gave it (a path, or `<stdin>`).
    pub(crate) script: String,
    /// The 1-based line the statement starts on.
    pub(crate) line: usize,
    /// The statement's 1-based position in the script.
    pub(crate) index: usize,
}

impl fmt::Display for StatementLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} (statement {})",
            self.script, self.line, self.index
        )
    }
}

/// `ERROR at FILE:LINE (statement N): [CODE] message` in a script, `ERROR [CODE]: message` elsewhere.
fn statement_message(location: Option<&StatementLocation>, error: &EngineError) -> String {
    let code = error.code();
    let text = error.to_string();
    match location {
        Some(location) => format!("ERROR at {location}: {text}"),
        None => {
            let message = text
                .strip_prefix(&format!("[{code}]"))
                .map_or(text.as_str(), str::trim_start);
            format!("ERROR [{code}]: {message}")
        }
    }
}

impl CliError {
    const SPAWN: &'static str = "58C01";
    const OUTPUT: &'static str = "58C02";
    const SCRIPT: &'static str = "58C03";
    const TERMINAL: &'static str = "58C04";
    const COMMAND: &'static str = "42C01";

    /// A failed statement, without a location (`-c`, the interactive prompt).
    pub(crate) fn statement(source: EngineError) -> Self {
        Self::Statement {
            location: None,
            source: Box::new(source),
        }
    }

    /// This error, placed at `location` in a script if it is a failed statement.
    pub(crate) fn at(self, location: StatementLocation) -> Self {
        match self {
            Self::Statement { source, .. } => Self::Statement {
                location: Some(location),
                source,
            },
            other => other,
        }
    }

    /// The line to print on standard error: failed statements as they are (they start with
    /// `ERROR`), everything else after `accelsql: `.
    pub(crate) fn report(&self) -> String {
        match self {
            Self::Statement { .. } => self.to_string(),
            _ => format!("accelsql: {self}"),
        }
    }

    /// The process exit code for this error.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                EXIT_NOT_FOUND
            }
            Self::Spawn { .. } => EXIT_CANNOT_RUN,
            Self::Scheduler(_)
            | Self::Output(_)
            | Self::OutputClosed
            | Self::Server(_)
            | Self::Cluster(_) => EXIT_OWN_FAILURE,
            Self::Engine(_)
            | Self::Statement { .. }
            | Self::Script { .. }
            | Self::Command(_)
            | Self::Terminal(_) => EXIT_SHELL_FAILURE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_gpu() -> EngineError {
        EngineError::NoGpuPresent { udf: "f".into() }
    }

    #[test]
    fn a_failed_statement_prints_its_code_after_error() {
        let line = CliError::statement(no_gpu()).report();
        assert!(
            line.starts_with("ERROR [22069]: Accelerator device request failed"),
            "{line}"
        );
    }

    #[test]
    fn a_failed_script_statement_says_where_it_stands() {
        let e = CliError::statement(no_gpu()).at(StatementLocation {
            script: "setup.sql".into(),
            line: 7,
            index: 3,
        });
        let line = e.report();
        assert!(
            line.starts_with("ERROR at setup.sql:7 (statement 3): [22069] Accelerator"),
            "{line}"
        );
        assert_eq!(e.exit_code(), EXIT_SHELL_FAILURE);
    }
}
