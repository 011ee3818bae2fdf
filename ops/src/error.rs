//! The crate's error type: what setting up an operator's endpoint can fail with.

/// Result type of this crate.
pub type Result<T, E = OpsError> = std::result::Result<T, E>;

/// Everything setting up an endpoint can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpsError {
    /// The endpoint's TLS certificate, key or client authority cannot be used.
    #[error("[{}] the HTTP endpoint's TLS: {message}", Self::TLS)]
    Tls {
        /// What is wrong with which file or value.
        message: String,
    },
}

impl OpsError {
    /// Code of [`OpsError::Tls`]: a configuration the endpoint cannot start with (as the
    /// server's and the cluster's own configuration errors).
    pub const TLS: &'static str = "F0000";

    /// The error's accelsql code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Tls { .. } => Self::TLS,
        }
    }
}
