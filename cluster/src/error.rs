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

    /// A cluster's security cannot be used as configured: no secret off loopback, a secret or
    /// key file others can read, unreadable or bad TLS files.
    #[error("[{}] {message}", Self::INSECURE)]
    Insecure {
        /// What is wrong and how to fix it.
        message: String,
    },

    /// A peer refused this process's credentials, or this process refused the peer's: a
    /// missing or wrong cluster secret, a certificate of another authority.
    #[error("[{}] {message}", Self::AUTHENTICATION)]
    Authentication {
        /// Who refused whom, and the TLS failure.
        message: String,
    },

    /// The scheduler refused an executor: its node number is held by another running
    /// executor, or is outside the cluster's node count.
    #[error("[{}] {message}", Self::NODE_REFUSED)]
    NodeRefused {
        /// The scheduler's reason.
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
    /// The cluster's security cannot be used as configured.
    pub const INSECURE: &'static str = "F0000";
    /// A missing or wrong cluster secret or certificate (SQLSTATE class 28: invalid
    /// authorization).
    pub const AUTHENTICATION: &'static str = "28K01";
    /// The scheduler refused an executor's node number.
    pub const NODE_REFUSED: &'static str = "08K04";

    /// The accelsql code of this error.
    pub fn code(&self) -> &str {
        match self {
            Self::SchedulerUnreachable { .. } => Self::UNREACHABLE,
            Self::Config { .. } => Self::CONFIG,
            Self::Insecure { .. } => Self::INSECURE,
            Self::Authentication { .. } => Self::AUTHENTICATION,
            Self::NodeRefused { .. } => Self::NODE_REFUSED,
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
