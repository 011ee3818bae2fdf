//! The server's error type, and how every error reaches a client: a gRPC status whose message
//! starts with accelsql's code (`[22069] …`) and whose trailing metadata carries the code alone
//! (`x-accelsql-code`), so that clients need not parse text.

use accelsql_engine::EngineError;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};

/// Result type of this crate.
pub type Result<T, E = ServerError> = std::result::Result<T, E>;

/// The metadata key that carries an error's accelsql code beside the gRPC status.
pub const CODE_METADATA_KEY: &str = "x-accelsql-code";

/// Everything the server can fail with, besides what the engine reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A request the Flight SQL protocol does not allow here: a malformed command, parameters
    /// that do not fit, a missing descriptor.
    #[error("[{}] {message}", Self::BAD_REQUEST)]
    BadRequest {
        /// What is wrong with the request.
        message: String,
    },

    /// No valid credentials: a wrong user or password, a missing, forged or expired token.
    #[error("[{}] {message}", Self::UNAUTHENTICATED)]
    Unauthenticated {
        /// Why the request was refused.
        message: String,
    },

    /// A prepared statement handle or result ticket this session does not hold (never issued,
    /// closed, already fetched, expired, or another session's).
    #[error("[{}] {message}", Self::UNKNOWN_HANDLE)]
    UnknownHandle {
        /// Which handle, and what to do instead.
        message: String,
    },

    /// Ingestion into a table that exists (or does not) where the client said it must not.
    #[error("[{}] {message}", Self::INGEST_TARGET)]
    IngestTarget {
        /// What the client asked for and what was found.
        message: String,
    },

    /// The server has as many sessions as it allows (`--max-sessions`).
    #[error(
        "[{}] the server has {max} sessions, the most it allows: close idle connections or raise --max-sessions",
        Self::TOO_MANY_SESSIONS
    )]
    TooManySessions {
        /// The limit.
        max: usize,
    },

    /// Too many failed logins for one user name or from one address, recently: the login is
    /// refused without checking the password (`28L01`).
    #[error("[{}] {message}", Self::LOGIN_RATE_LIMITED)]
    LoginRateLimited {
        /// Whose logins, and when to try again.
        message: String,
    },

    /// The user has as many sessions as `--max-sessions-per-user` allows.
    #[error(
        "[{}] user {user:?} has {max} sessions, the most --max-sessions-per-user allows: close one first",
        Self::TOO_MANY_USER_SESSIONS
    )]
    TooManyUserSessions {
        /// The user.
        user: String,
        /// The limit.
        max: usize,
    },

    /// The user has as many statements running (or results waiting to be fetched) as
    /// `--max-statements-per-user` allows.
    #[error(
        "[{}] user {user:?} has {max} statements running or waiting to be fetched, the most \
         --max-statements-per-user allows: fetch, cancel or close one first",
        Self::TOO_MANY_USER_STATEMENTS
    )]
    TooManyUserStatements {
        /// The user.
        user: String,
        /// The limit.
        max: usize,
    },

    /// The server's configuration cannot be used: the users file, the TLS certificate or key.
    #[error("[{}] {message}", Self::CONFIG)]
    Config {
        /// What is wrong, naming the file.
        message: String,
    },

    /// The listening socket could not be opened, or serving failed.
    #[error("[{}] {message}", Self::NETWORK)]
    Network {
        /// What failed.
        message: String,
    },

    /// A failure of the server itself (a bug: please report it).
    #[error("[{}] {message}", Self::INTERNAL)]
    Internal {
        /// What failed.
        message: String,
    },

    /// The engine reported the failure (SQL, placement, GPU lease, scripts).
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A [`ServerError::BadRequest`] from a format string.
#[macro_export]
macro_rules! bad_request_err {
    ($($arg:tt)*) => {
        $crate::ServerError::BadRequest { message: format!($($arg)*) }
    };
}

/// A [`ServerError::UnknownHandle`] from a format string.
#[macro_export]
macro_rules! unknown_handle_err {
    ($($arg:tt)*) => {
        $crate::ServerError::UnknownHandle { message: format!($($arg)*) }
    };
}

/// A [`ServerError::Unauthenticated`] from a format string.
#[macro_export]
macro_rules! unauthenticated_err {
    ($($arg:tt)*) => {
        $crate::ServerError::Unauthenticated { message: format!($($arg)*) }
    };
}

impl ServerError {
    /// Code of [`ServerError::BadRequest`] (SQLSTATE `protocol_violation`).
    pub const BAD_REQUEST: &'static str = "08P01";
    /// Code of [`ServerError::Unauthenticated`] (SQLSTATE `invalid_authorization_specification`).
    pub const UNAUTHENTICATED: &'static str = "28000";
    /// Code of [`ServerError::UnknownHandle`] (SQLSTATE `invalid_sql_statement_name`).
    pub const UNKNOWN_HANDLE: &'static str = "26000";
    /// Code of [`ServerError::IngestTarget`] (SQLSTATE `duplicate_table` / `undefined_table`'s class).
    pub const INGEST_TARGET: &'static str = "42P07";
    /// Code of [`ServerError::TooManySessions`] (SQLSTATE `too_many_connections`).
    pub const TOO_MANY_SESSIONS: &'static str = "53300";
    /// Code of [`ServerError::LoginRateLimited`].
    pub const LOGIN_RATE_LIMITED: &'static str = "28L01";
    /// Code of [`ServerError::TooManyUserSessions`].
    pub const TOO_MANY_USER_SESSIONS: &'static str = "53S01";
    /// Code of [`ServerError::TooManyUserStatements`].
    pub const TOO_MANY_USER_STATEMENTS: &'static str = "53S02";
    /// Code of a connection closed at once because the server has `--max-connections` (in the
    /// server's log: the client only sees its connection closed).
    pub const TOO_MANY_CONNECTIONS: &'static str = "53C01";
    /// Code of a connection closed because it did not authenticate within the handshake
    /// deadline (in the server's log).
    pub const HANDSHAKE_TIMEOUT: &'static str = "08T01";
    /// Code of [`ServerError::Config`] (SQLSTATE `config_file_error`).
    pub const CONFIG: &'static str = "F0000";
    /// Code of [`ServerError::Network`] (SQLSTATE `connection_exception`).
    pub const NETWORK: &'static str = "08000";

    /// Code of [`ServerError::Internal`].
    pub const INTERNAL: &'static str = "XX000";

    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest { .. } => Self::BAD_REQUEST,
            Self::Unauthenticated { .. } => Self::UNAUTHENTICATED,
            Self::UnknownHandle { .. } => Self::UNKNOWN_HANDLE,
            Self::IngestTarget { .. } => Self::INGEST_TARGET,
            Self::TooManySessions { .. } => Self::TOO_MANY_SESSIONS,
            Self::LoginRateLimited { .. } => Self::LOGIN_RATE_LIMITED,
            Self::TooManyUserSessions { .. } => Self::TOO_MANY_USER_SESSIONS,
            Self::TooManyUserStatements { .. } => Self::TOO_MANY_USER_STATEMENTS,
            Self::Config { .. } => Self::CONFIG,
            Self::Network { .. } => Self::NETWORK,
            Self::Internal { .. } => Self::INTERNAL,
            Self::Engine(e) => e.code(),
        }
    }

    /// The gRPC status a client gets: the message (starting with the code), the fitting status
    /// code, and the accelsql code in metadata.
    pub fn to_status(&self) -> Status {
        coded_status(self.code(), &self.to_string())
    }
}

impl From<ServerError> for Status {
    fn from(e: ServerError) -> Self {
        e.to_status()
    }
}

/// The gRPC status code for an accelsql code: what a client library turns into its own
/// exception classes.
pub fn grpc_code(code: &str) -> Code {
    match code {
        ServerError::UNAUTHENTICATED => Code::Unauthenticated,
        ServerError::UNKNOWN_HANDLE => Code::NotFound,
        ServerError::LOGIN_RATE_LIMITED => Code::ResourceExhausted,
        ServerError::CONFIG | ServerError::NETWORK => Code::Internal,
        EngineError::NOT_ALLOWED_RESTRICTED => Code::PermissionDenied,
        EngineError::CANCELLED => Code::Cancelled,
        EngineError::ACCELERATOR_REQUEST_FAILED => Code::FailedPrecondition,
        EngineError::FILE_NOT_FOUND => Code::NotFound,
        // Waiting for the GPU lease, or a script worker, took longer than allowed.
        "57G01" | "57U12" => Code::DeadlineExceeded,
        // The statement ran past its statement timeout.
        EngineError::STATEMENT_TIMEOUT => Code::DeadlineExceeded,
        EngineError::LEASE_HELD_TOO_LONG => Code::ResourceExhausted,
        // Too many statements of the consumer group wait for the GPU lease.
        "57G04" => Code::ResourceExhausted,
        EngineError::DOES_NOT_EXIST => Code::NotFound,
        EngineError::ALREADY_EXISTS => Code::AlreadyExists,
        "57G02" => Code::Unavailable,
        "0A000" => Code::Unimplemented,
        _ => match code.get(..2) {
            // Syntax, planning, definitions, data, settings, the protocol.
            Some("42" | "22" | "08" | "0A" | "2B" | "34" | "26") => Code::InvalidArgument,
            Some("28") => Code::Unauthenticated,
            Some("53") => Code::ResourceExhausted,
            Some("57") => Code::Aborted,
            _ => Code::Internal,
        },
    }
}

/// A status with `message` (which should start with `[code]`) and `code` as metadata.
pub fn coded_status(code: &str, message: &str) -> Status {
    let mut metadata = MetadataMap::new();
    if let Ok(value) = MetadataValue::try_from(code) {
        metadata.insert(CODE_METADATA_KEY, value);
    }
    Status::with_metadata(grpc_code(code), message, metadata)
}

/// The accelsql code a status carries (from its metadata, else from a `[code]` message prefix).
pub fn status_code(status: &Status) -> Option<String> {
    if let Some(value) = status.metadata().get(CODE_METADATA_KEY)
        && let Ok(text) = value.to_str()
    {
        return Some(text.to_string());
    }
    let message = status.message().strip_prefix('[')?;
    let (code, _) = message.split_once(']')?;
    Some(code.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_the_status_the_issue_names() {
        assert_eq!(grpc_code("42000"), Code::InvalidArgument);
        assert_eq!(grpc_code("28000"), Code::Unauthenticated);
        assert_eq!(grpc_code("57014"), Code::Cancelled);
        assert_eq!(grpc_code("57G01"), Code::DeadlineExceeded);
        assert_eq!(grpc_code("57G03"), Code::ResourceExhausted);
        assert_eq!(grpc_code("57T01"), Code::DeadlineExceeded);
        assert_eq!(grpc_code("28L01"), Code::ResourceExhausted);
        assert_eq!(grpc_code("53S02"), Code::ResourceExhausted);
        assert_eq!(grpc_code("XX000"), Code::Internal);
        assert_eq!(grpc_code("22069"), Code::FailedPrecondition);
        assert_eq!(grpc_code("42501"), Code::PermissionDenied);
    }

    #[test]
    fn a_status_carries_its_code_in_text_and_metadata() {
        let e = bad_request_err!("no {}", "thing");
        let status = e.to_status();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "[08P01] no thing");
        assert_eq!(status_code(&status).as_deref(), Some("08P01"));
        let plain = Status::internal("[XX000] boom");
        assert_eq!(status_code(&plain).as_deref(), Some("XX000"));
        assert_eq!(status_code(&Status::internal("boom")), None);
    }
}
