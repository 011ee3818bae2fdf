//! A statement's result on its way to the client: the DoGet response owns the statement's
//! stream (so the GPU lease lives exactly as long as the client's read), counts rows, turns
//! errors into coded statuses, and writes the statement's log line when it ends.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use accelsql_engine::datafusion::arrow::array::RecordBatch;
use accelsql_engine::{Engine, EngineError, Placement};
use arrow_flight::error::FlightError;
use futures::{Stream, StreamExt};
use tonic::Status;

use crate::error::{ServerError, coded_status};
use crate::sessions::{ClientSession, RunningSlot, lock};

/// Where the server's log lines go.
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// `text` as a log line shows it: as it is when it is a plain word (letters, digits, `_ - . @`),
/// else quoted with its special characters escaped, so that nothing a client sends can forge a
/// field or a line.
pub(crate) fn log_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '@'));
    if plain {
        text.to_string()
    } else {
        format!("{text:?}")
    }
}

/// What the log line says about a statement besides its outcome.
pub(crate) struct StatementLog {
    pub(crate) number: u64,
    pub(crate) statement_id: Option<u64>,
    pub(crate) sql: String,
    pub(crate) started: Instant,
}

impl StatementLog {
    /// The log line: session, statement number, engine statement id, duration, rows, each GPU
    /// call's placement and the lease wait, the outcome, and the start of the SQL text.
    pub(crate) fn line(
        &self,
        engine: &Engine,
        client: &ClientSession,
        rows: u64,
        outcome: &str,
    ) -> String {
        let mut gpu = Vec::new();
        let mut wait = None;
        if let Some(id) = self.statement_id {
            for call in engine
                .recent_calls()
                .iter()
                .filter(|c| c.statement_id == id)
            {
                let place = match call.decision.placement {
                    Placement::Gpu => format!("GPU{:?}", call.devices),
                    Placement::Cpu => "CPU".to_string(),
                };
                gpu.push(format!("{}:{place}", log_word(&call.decision.udf)));
                if call.lease_wait.is_some() {
                    wait = call.lease_wait;
                }
            }
        }
        let text: String = self.sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let text: String = text.chars().take(80).collect();
        format!(
            "session={} user={} stmt={} id={} ms={:.1} rows={rows} udfs=[{}] lease_wait_ms={} outcome={outcome} sql={text:?}",
            client.id,
            log_word(&client.user),
            self.number,
            self.statement_id.map_or("-".to_string(), |i| i.to_string()),
            self.started.elapsed().as_secs_f64() * 1e3,
            gpu.join(","),
            wait.map_or("-".to_string(), |w| format!("{:.1}", w.as_secs_f64() * 1e3)),
        )
    }
}

/// The batches of one statement for the DoGet response.
pub(crate) struct ResultStream {
    slot: Arc<RunningSlot>,
    client: Arc<ClientSession>,
    handle: String,
    log: StatementLog,
    engine: Engine,
    sink: Option<LogSink>,
    rows: u64,
    outcome: Option<String>,
    done: bool,
}

impl ResultStream {
    /// Streams `slot`'s statement, registered in `client` under the ticket `handle`.
    pub(crate) fn new(
        slot: Arc<RunningSlot>,
        client: Arc<ClientSession>,
        handle: String,
        log: StatementLog,
        engine: Engine,
        sink: Option<LogSink>,
    ) -> Self {
        client.start_running(&handle, Arc::clone(&slot));
        Self {
            slot,
            client,
            handle,
            log,
            engine,
            sink,
            rows: 0,
            outcome: None,
            done: false,
        }
    }
}

impl Stream for ResultStream {
    type Item = Result<RecordBatch, FlightError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let slot = Arc::clone(&this.slot);
        slot.waker.register(cx.waker());
        let mut stream = lock(&slot.stream);
        let Some(inner) = stream.as_mut() else {
            drop(stream);
            this.done = true;
            if slot.cancelled.load(std::sync::atomic::Ordering::Acquire) {
                this.outcome = Some("cancelled".into());
                let e = ServerError::Engine(EngineError::Cancelled {
                    reason: "by the client or the server's shutdown".into(),
                });
                return Poll::Ready(Some(Err(FlightError::Tonic(Box::new(e.to_status())))));
            }
            return Poll::Ready(None);
        };
        match inner.poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(batch))) => {
                this.rows += batch.num_rows() as u64;
                Poll::Ready(Some(Ok(batch)))
            }
            Poll::Ready(Some(Err(e))) => {
                *stream = None;
                this.done = true;
                let e = ServerError::Engine(EngineError::from(e));
                this.outcome = Some(format!("error[{}]", e.code()));
                Poll::Ready(Some(Err(FlightError::Tonic(Box::new(e.to_status())))))
            }
            Poll::Ready(None) => {
                *stream = None;
                this.done = true;
                this.outcome = Some("ok".into());
                Poll::Ready(None)
            }
        }
    }
}

impl Drop for ResultStream {
    fn drop(&mut self) {
        // The statement goes first (its lease with it), then the registration.
        drop(lock(&self.slot.stream).take());
        self.client.stop_running(&self.handle);
        if let Some(sink) = &self.sink {
            let outcome = self.outcome.as_deref().unwrap_or("client-gone");
            sink(
                &self
                    .log
                    .line(&self.engine, &self.client, self.rows, outcome),
            );
        }
    }
}

/// The status a client gets for a failure inside the Flight encoder.
pub(crate) fn flight_status(e: FlightError) -> Status {
    match e {
        FlightError::Tonic(status) => *status,
        other => coded_status("XX000", &format!("[XX000] {other}")),
    }
}
