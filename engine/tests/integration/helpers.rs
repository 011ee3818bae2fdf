//! Helpers the integration modules share: run a statement for its rows, read a stream's error.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use accelsql_engine::datafusion::execution::SendableRecordBatchStream;
use accelsql_engine::{EngineError, Session, testing};
use futures::StreamExt;

/// The rows `sql` returns, each as its values joined by `|`; a failure panics naming `sql`.
pub(crate) async fn run(s: &Session, sql: &str) -> Vec<String> {
    testing::query_rows(s, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Reads `stream` to its end; the error it ends with, if any.
pub(crate) async fn error_of(mut stream: SendableRecordBatchStream) -> Option<EngineError> {
    while let Some(next) = stream.next().await {
        if let Err(e) = next {
            return Some(EngineError::from(e));
        }
    }
    None
}
