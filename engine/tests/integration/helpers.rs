//! Helpers the integration modules share: run a statement for its rows, a result as text rows,
//! read a stream's error, wait for a condition.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::time::{Duration, Instant};

use accelsql_engine::datafusion::arrow::array::RecordBatch;
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

/// `batches` as rows, each its values (`NULL` for nulls) joined by `|`.
pub(crate) fn flat(batches: &[RecordBatch]) -> Vec<String> {
    testing::cells(batches)
        .unwrap()
        .into_iter()
        .map(|r| r.join("|"))
        .collect()
}

/// Waits until `cond` holds; fails the test after 20 s, naming `what`.
pub(crate) async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(20), "never: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
