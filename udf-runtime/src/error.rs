//! The udf-runtime error type and its stable codes.

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
}

impl RuntimeError {
    /// Code of [`RuntimeError::InvalidAnnotation`].
    pub const INVALID_ANNOTATION: &'static str = "22U01";

    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidAnnotation { .. } => Self::INVALID_ANNOTATION,
        }
    }
}
