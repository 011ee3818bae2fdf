//! The CLI's error type: scheduler errors, plus failures to start the user's command.

use accelsql_gpu_scheduler::SchedulerError;

/// Exit code for accelsql's own failures (no matching GPU, bad option), as `timeout`/`env` use it.
pub(crate) const EXIT_OWN_FAILURE: u8 = 125;
/// Exit code when the command exists but cannot be run.
pub(crate) const EXIT_CANNOT_RUN: u8 = 126;
/// Exit code when the command is not found.
pub(crate) const EXIT_NOT_FOUND: u8 = 127;

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
}

impl CliError {
    const SPAWN: &'static str = "58C01";
    const OUTPUT: &'static str = "58C02";

    /// The process exit code for this error.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                EXIT_NOT_FOUND
            }
            Self::Spawn { .. } => EXIT_CANNOT_RUN,
            Self::Scheduler(_) | Self::Output(_) => EXIT_OWN_FAILURE,
        }
    }
}
