//! The cluster crate's error type: every failure carries an accelsql code.

use accelsql_engine::EngineError;

/// Result type of this crate.
pub type Result<T, E = ClusterError> = std::result::Result<T, E>;

/// What starting, joining or talking to a cluster can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The scheduler could not be reached (not running, wrong address, a firewall).
    #[error(
        "[{}] cannot reach the cluster's scheduler at {address}: {message}",
        Self::UNREACHABLE
    )]
    SchedulerUnreachable {
        /// The address tried.
        address: String,
        /// Why it failed.
        message: String,
    },

    /// A setting that cannot be used: a bad address, a node number outside the node count.
    #[error("[{}] {message}", Self::CONFIG)]
    Config {
        /// What is wrong.
        message: String,
    },

    /// A cluster process failed to start, or stopped: the scheduler, an executor (naming its
    /// node), a process of `accelsql cluster local`.
    #[error("[{}] {message}", Self::PROCESS)]
    Process {
        /// What failed.
        message: String,
    },

    /// Ballista reported the failure.
    #[error("[{}] Ballista: {message}", Self::PROCESS)]
    Ballista {
        /// Ballista's message.
        message: String,
    },

    /// The node's engine reported the failure (devices, the script catalog).
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl ClusterError {
    /// The scheduler cannot be reached (SQLSTATE class 08: connection exception).
    pub const UNREACHABLE: &'static str = "08001";
    /// A setting cannot be used.
    pub const CONFIG: &'static str = "22E03";
    /// A cluster process failed.
    pub const PROCESS: &'static str = "58K01";

    /// The accelsql code of this error.
    pub fn code(&self) -> &str {
        match self {
            Self::SchedulerUnreachable { .. } => Self::UNREACHABLE,
            Self::Config { .. } => Self::CONFIG,
            Self::Process { .. } | Self::Ballista { .. } => Self::PROCESS,
            Self::Engine(e) => e.code(),
        }
    }
}

impl From<ballista_core::error::BallistaError> for ClusterError {
    fn from(e: ballista_core::error::BallistaError) -> Self {
        Self::Ballista {
            message: e.to_string(),
        }
    }
}

/// `Err(ClusterError::Config { .. })` from a format string.
macro_rules! config_err {
    ($($arg:tt)*) => {
        Err($crate::error::ClusterError::Config { message: format!($($arg)*) })
    };
}
pub(crate) use config_err;

/// `Err(ClusterError::Process { .. })` from a format string.
macro_rules! process_err {
    ($($arg:tt)*) => {
        Err($crate::error::ClusterError::Process { message: format!($($arg)*) })
    };
}
pub(crate) use process_err;
