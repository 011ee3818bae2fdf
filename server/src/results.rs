//! A statement's result on its way to the client: the DoGet responses of its endpoints share
//! the statement's stream (so the GPU lease lives exactly as long as the client's reads), count
//! rows, turn errors into coded statuses, and write the statement's log line when the last one
//! ends.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use accelsql_engine::datafusion::arrow::array::RecordBatch;
use accelsql_engine::datafusion::arrow::compute::concat_batches;
use accelsql_engine::{Engine, EngineError, Placement};
use arrow_flight::error::FlightError;
use futures::{Stream, StreamExt};
use tonic::Status;

use crate::error::{ServerError, coded_status, status_code};
use crate::sessions::{ClientSession, RunningSlot, SlotState, lock};

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

/// Whether statement log lines are JSON objects (`serve --log-format json`) rather than
/// `key=value` text; one format per process.
pub(crate) static LOG_JSON: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

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
            for call in engine.calls_of(id) {
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
        let elapsed = self.started.elapsed();
        crate::metrics::record_statement(outcome, elapsed, wait);
        let text: String = self.sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let text: String = text.chars().take(80).collect();
        let ms = elapsed.as_secs_f64() * 1e3;
        let wait_ms = wait.map(|w| w.as_secs_f64() * 1e3);
        if LOG_JSON.load(std::sync::atomic::Ordering::Relaxed) {
            return serde_json::json!({
                "session": client.id,
                "user": client.user,
                "stmt": self.number,
                "statement_id": self.statement_id,
                "duration_ms": (ms * 10.0).round() / 10.0,
                "rows": rows,
                "udfs": gpu,
                "lease_wait_ms": wait_ms.map(|w| (w * 10.0).round() / 10.0),
                "outcome": outcome,
                "sql": text,
            })
            .to_string();
        }
        format!(
            "session={} user={} stmt={} id={} ms={:.1} rows={rows} udfs=[{}] lease_wait_ms={} outcome={outcome} sql={text:?}",
            client.id,
            log_word(&client.user),
            self.number,
            self.statement_id.map_or("-".to_string(), |i| i.to_string()),
            ms,
            gpu.join(","),
            wait_ms.map_or("-".to_string(), |w| format!("{w:.1}")),
        )
    }
}

/// The batches one endpoint of a statement's result hands to its DoGet response.
pub(crate) struct ResultStream {
    slot: Arc<RunningSlot>,
    client: Arc<ClientSession>,
    handle: String,
    index: usize,
    engine: Engine,
    sink: Option<LogSink>,
    /// Batches taken but not yet sent, joined into the next message.
    held: Vec<RecordBatch>,
    held_bytes: usize,
    done: bool,
}

/// The size a result's messages aim at: a statement's smaller batches are joined up to it
/// before encoding (fewer, larger messages: less per-message work in every client). Well below
/// the encoder's 2 MiB split and the 4 MiB a gRPC client accepts by default.
pub(crate) const MESSAGE_TARGET_BYTES: usize = 1 << 20;

impl ResultStream {
    /// Reads endpoint `index` of `slot` (claimed for this reader), the result registered in
    /// `client` under `handle`.
    pub(crate) fn new(
        slot: Arc<RunningSlot>,
        client: Arc<ClientSession>,
        handle: String,
        index: usize,
        engine: Engine,
        sink: Option<LogSink>,
    ) -> Self {
        Self {
            slot,
            client,
            handle,
            index,
            engine,
            sink,
            held: Vec::new(),
            held_bytes: 0,
            done: false,
        }
    }

    /// Ends this reader with `item`.
    fn end(
        &mut self,
        item: Option<Result<RecordBatch, FlightError>>,
    ) -> Poll<Option<Result<RecordBatch, FlightError>>> {
        self.done = true;
        Poll::Ready(item)
    }
}

/// The status each reader of a stopped result gets.
fn stopped(state: &SlotState) -> Option<Status> {
    let e = match state {
        SlotState::Running(_) | SlotState::Ended => return None,
        SlotState::Failed(status) => return Some(status.clone()),
        SlotState::Cancelled => EngineError::Cancelled {
            reason: "by the client or the server's shutdown".into(),
        },
        SlotState::Abandoned => EngineError::Cancelled {
            reason: "every reader of the result stopped before its end".into(),
        },
    };
    Some(ServerError::Engine(e).to_status())
}

/// What one poll of the statement's shared stream gave an endpoint.
enum Step {
    Batch(RecordBatch),
    Pending,
    /// The result has ended (or failed, or was stopped): the item this reader ends with.
    End(Option<Result<RecordBatch, FlightError>>),
}

impl ResultStream {
    /// Takes the statement's next batch, if it is this endpoint's turn and one is ready.
    fn step(&mut self, cx: &mut Context<'_>) -> Step {
        let slot = Arc::clone(&self.slot);
        slot.wakers.register(self.index, cx.waker());
        let mut state = lock(&slot.state);
        let SlotState::Running(inner) = &mut *state else {
            let status = stopped(&state);
            return Step::End(status.map(|s| Err(FlightError::Tonic(Box::new(s)))));
        };
        // The statement's stream wakes every endpoint's task: whichever polls next takes the
        // next batch.
        let waker = Waker::from(Arc::clone(&slot.wakers));
        match inner.poll_next_unpin(&mut Context::from_waker(&waker)) {
            Poll::Pending => Step::Pending,
            Poll::Ready(Some(Ok(batch))) => {
                slot.rows
                    .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                Step::Batch(batch)
            }
            Poll::Ready(Some(Err(e))) => {
                drop(state);
                let status = ServerError::Engine(EngineError::from(e)).to_status();
                slot.finish(SlotState::Failed(status.clone()));
                Step::End(Some(Err(FlightError::Tonic(Box::new(status)))))
            }
            Poll::Ready(None) => {
                drop(state);
                slot.finish(SlotState::Ended);
                Step::End(None)
            }
        }
    }

    /// The batches held for the next message, as one.
    fn flush(&mut self) -> Result<RecordBatch, FlightError> {
        self.held_bytes = 0;
        let held = std::mem::take(&mut self.held);
        match <[RecordBatch; 1]>::try_from(held) {
            Ok([one]) => Ok(one),
            Err(held) => {
                let schema = held[0].schema();
                concat_batches(&schema, &held).map_err(FlightError::Arrow)
            }
        }
    }
}

impl Stream for ResultStream {
    type Item = Result<RecordBatch, FlightError>;

    /// The next message's batch: the statement's small batches joined up to
    /// [`MESSAGE_TARGET_BYTES`], sent as soon as no further batch is ready (so that a slow
    /// statement's rows are never held back).
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match this.step(cx) {
                Step::Batch(batch) => {
                    let bytes = batch.get_array_memory_size();
                    if this.held.is_empty() && bytes >= MESSAGE_TARGET_BYTES {
                        return Poll::Ready(Some(Ok(batch)));
                    }
                    this.held.push(batch);
                    this.held_bytes += bytes;
                    if this.held_bytes >= MESSAGE_TARGET_BYTES {
                        return Poll::Ready(Some(this.flush()));
                    }
                }
                // The held rows go first; the next poll finds the end again.
                Step::Pending | Step::End(_) if !this.held.is_empty() => {
                    return Poll::Ready(Some(this.flush()));
                }
                Step::Pending => return Poll::Pending,
                Step::End(item) => return this.end(item),
            }
        }
    }
}

impl Drop for ResultStream {
    fn drop(&mut self) {
        if !self.slot.leave() {
            return;
        }
        // The last reader has stopped, and the statement with it (its lease released). The
        // registration stays while endpoints are left unread, to tell their readers how the
        // result ended (until it expires).
        let outcome = match &*lock(&self.slot.state) {
            SlotState::Ended => "ok".to_string(),
            SlotState::Failed(status) => format!(
                "error[{}]",
                status_code(status).unwrap_or_else(|| "XX000".into())
            ),
            SlotState::Cancelled => "cancelled".to_string(),
            SlotState::Abandoned | SlotState::Running(_) => "client-gone".to_string(),
        };
        if self.slot.all_claimed() {
            self.client.stop_running(&self.handle);
        }
        if self.slot.logged.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(sink) = &self.sink {
            let log = StatementLog {
                number: self.slot.number,
                statement_id: self.slot.statement_id,
                sql: self.slot.sql.clone(),
                started: self.slot.started,
            };
            let rows = self.slot.rows.load(Ordering::Relaxed);
            sink(&log.line(&self.engine, &self.client, rows, &outcome));
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
