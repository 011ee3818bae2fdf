//! The harness's one error type: a message saying what failed, built at the point of failure.

use std::fmt;

/// Why a suite, a peer or the harness could not go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchError(String);

impl BenchError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }

    /// The same error, its message prefixed with `context: `.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self(format!("{context}: {}", self.0))
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

/// The harness's result type.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Builds a [`BenchError`] from a format string: `bench_err!("no file {}", path.display())`.
#[macro_export]
macro_rules! bench_err {
    ($($arg:tt)*) => {
        $crate::error::BenchError::new(format!($($arg)*))
    };
}

macro_rules! from_display {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for BenchError {
            fn from(e: $t) -> Self {
                Self(e.to_string())
            }
        })*
    };
}

from_display!(
    std::io::Error,
    accelsql_engine::datafusion::error::DataFusionError,
    accelsql_engine::datafusion::arrow::error::ArrowError,
    accelsql_engine::EngineError,
    accelsql_engine::gpu_scheduler::SchedulerError,
    parquet::errors::ParquetError,
    serde_json::Error,
    tokio::task::JoinError,
    String,
    &str,
);
