//! A statement that panics ends with an error (XX000) instead of taking its caller's task, its
//! session or a server's connection with it: planning runs under [`catch_panic`], and the
//! result's stream under [`CatchPanics`].

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::Result as DfResult;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use futures::{FutureExt, Stream};

use crate::core::error::{EngineError, Result};

/// The text a panic carried (`panic!("…")`), or a placeholder.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// The error a panic inside a statement becomes.
fn internal(payload: &(dyn Any + Send)) -> EngineError {
    let message = panic_message(payload);
    log::error!("a statement panicked: {message}");
    EngineError::Internal {
        message: format!("the statement stopped on a bug ({message}); the session goes on"),
    }
}

/// Runs `future`; a panic while it is polled becomes [`EngineError::Internal`].
pub(crate) async fn catch_panic<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(outcome) => outcome,
        Err(payload) => Err(internal(payload.as_ref())),
    }
}

/// A result stream whose panics (its own, or a task's it re-raises) end it with
/// [`EngineError::Internal`].
pub(crate) struct CatchPanics {
    inner: SendableRecordBatchStream,
    schema: SchemaRef,
    done: bool,
}

impl CatchPanics {
    /// Guards `inner`.
    pub(crate) fn wrap(inner: SendableRecordBatchStream) -> SendableRecordBatchStream {
        let schema = inner.schema();
        Box::pin(Self {
            inner,
            schema,
            done: false,
        })
    }
}

impl Stream for CatchPanics {
    type Item = DfResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        let inner = &mut this.inner;
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.as_mut().poll_next(cx))) {
            Ok(poll) => poll,
            Err(payload) => {
                this.done = true;
                Poll::Ready(Some(Err(internal(payload.as_ref()).into_datafusion())))
            }
        }
    }
}

impl RecordBatchStream for CatchPanics {
    fn schema(&self) -> SchemaRef {
        std::sync::Arc::clone(&self.schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_panic_while_planning_is_an_internal_error() {
        let outcome: Result<()> = catch_panic(async { panic!("planned badly") }).await;
        let e = outcome.unwrap_err();
        assert_eq!(e.code(), "XX000");
        assert!(e.to_string().contains("planned badly"), "{e}");
        // Without a panic the outcome passes through.
        assert_eq!(catch_panic(async { Ok(7) }).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_panic_in_a_result_stream_ends_it_with_an_error() {
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::empty());
        let panicking = futures::stream::poll_fn(|_| -> Poll<Option<DfResult<RecordBatch>>> {
            panic!("ran badly")
        });
        let inner: SendableRecordBatchStream =
            Box::pin(RecordBatchStreamAdapter::new(schema, panicking));
        let mut guarded = CatchPanics::wrap(inner);
        let first = guarded.next().await.unwrap().unwrap_err();
        assert!(first.to_string().contains("[XX000]"), "{first}");
        assert!(guarded.next().await.is_none());
    }
}
