//! The result stream of one statement: takes the node lease before the plan runs when a call was
//! placed on the GPUs, holds it until the stream ends, fails or is dropped, and then records the
//! statement's UDF calls.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use accelsql_gpu_scheduler::{Lease, LeaseRequest};
use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::Result as DfResult;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use tokio::time::Instant;

use accelsql_udf_runtime::AcceleratorRequest;

use crate::core::EngineState;
use crate::core::calls::{Placement, PlacementDecision, UdfCallRecord};
use crate::core::error::EngineError;
use crate::core::groups::GpuClass;
use crate::core::memory::SessionPool;
use crate::core::options::OptionalGpuWhenBusy;
use crate::core::owners::{KillSwitch, lease_label};
use crate::plan::statement::StatementScope;
use crate::udf::call::{LeaseGrant, PlacedCall, statement_demand};
use crate::udf::script::udf::finish_workers;

/// A bound on a running statement: when it passes, the statement is stopped with its error.
#[derive(Debug, Clone, Copy)]
enum Limit {
    /// `EngineOptions::max_lease_hold`: the statement held the lease too long (57G03).
    LeaseHold(Duration),
    /// `accelsql.statement_timeout`: the statement ran too long (57T01).
    Statement(Duration),
    /// `KILL SESSION`: the statement's session (numbered so) was ended (57P01).
    Killed(u64),
}

impl Limit {
    fn error(self) -> EngineError {
        match self {
            Self::LeaseHold(limit) => EngineError::LeaseHeldTooLong { limit },
            Self::Statement(limit) => EngineError::StatementTimeout { limit },
            Self::Killed(session) => EngineError::SessionKilled { session },
        }
    }
}

/// Completes when `kill` (if any) ends the session; never without one.
async fn killed(kill: Option<Arc<KillSwitch>>) {
    match kill {
        Some(kill) => kill.killed().await,
        None => std::future::pending().await,
    }
}

/// The earliest of the deadlines that apply, with the limit it enforces.
fn earliest(
    deadlines: impl IntoIterator<Item = Option<(Instant, Limit)>>,
) -> Option<(Instant, Limit)> {
    deadlines.into_iter().flatten().min_by_key(|(at, _)| *at)
}

/// Drives `inner` in a task of its own and forwards its batches: the statement's consumer then
/// only awaits a channel, so it can cancel (drop the stream) even while a UDF blocks inside the
/// plan — dropping the receiver aborts the task, and the statement's worker processes are killed
/// so that a blocked run returns. The task holds the statement's lease: the GPUs are released
/// when the plan has stopped running, never while a kernel may still use them.
///
/// When the plan has run to its end, the statement's script workers are finished (their
/// `cleanup()` runs) before the stream ends; a failing `cleanup()` fails the statement.
///
/// With `max_hold` (`EngineOptions::max_lease_hold`) a statement holding the lease must be done
/// by then — the plan's progress and the consumer's reading both count — or it is stopped, the
/// lease released, and the consumer's next read gets error 57G03. With `statement_deadline`
/// (`accelsql.statement_timeout`) every statement must be done by then, or it is stopped the
/// same way, its workers killed, and the consumer's next read gets error 57T01.
fn run_off_thread(
    inner: SendableRecordBatchStream,
    lease: Option<Lease>,
    scope: Arc<StatementScope>,
    max_hold: Option<Duration>,
    statement_deadline: Option<(Instant, Duration)>,
    kill: Option<Arc<KillSwitch>>,
) -> SendableRecordBatchStream {
    let mut builder = RecordBatchReceiverStreamBuilder::new(inner.schema(), 2);
    let tx = builder.tx();
    // Only a statement that holds the lease has a hold deadline: the plan's progress and the
    // consumer's reading both count against it, so a consumer that stops reading cannot pin
    // the GPUs.
    let hold = max_hold
        .filter(|_| lease.is_some())
        .map(|limit| (Instant::now() + limit, Limit::LeaseHold(limit)));
    let statement = statement_deadline.map(|(at, limit)| (at, Limit::Statement(limit)));
    let deadline = earliest([hold, statement]);
    // A UDF that blocks inside the plan (a script's run) keeps the task below from seeing its
    // deadline or its session's end: a watchdog kills the statement's workers then, so that the
    // run returns and the task reports why.
    let watchdog = (statement_deadline.is_some() || kill.is_some()).then(|| {
        Watchdog::start(
            statement_deadline.map(|(at, _)| at),
            kill.clone(),
            Arc::clone(&scope),
        )
    });
    let session = scope.session;
    builder.spawn(async move {
        let mut inner = inner;
        let mut lease = lease;
        let timed_out = |e| match (watchdog.as_ref().map(Watchdog::fired), statement_deadline) {
            (Some(Some(Fired::Deadline)), Some((_, limit))) => {
                EngineError::StatementTimeout { limit }.into_datafusion()
            }
            (Some(Some(Fired::Killed)), _) => {
                EngineError::SessionKilled { session }.into_datafusion()
            }
            _ => e,
        };
        // Stops the plan and gives the GPUs back before the consumer hears why: once a failed
        // statement's error is seen, it holds nothing. A timed-out or killed statement's
        // workers are killed too, so that a run blocked in a script ends.
        let stop = |limit: Limit| {
            if matches!(limit, Limit::Statement(_) | Limit::Killed(_)) {
                scope.processes.kill_all();
            }
            limit.error().into_datafusion()
        };
        loop {
            let next = tokio::select! {
                biased;
                () = killed(kill.clone()) => Some(Err(stop(Limit::Killed(session)))),
                next = async {
                    match deadline {
                        None => inner.next().await,
                        Some((at, limit)) => match tokio::time::timeout_at(at, inner.next()).await {
                            Ok(next) => next,
                            Err(_) => Some(Err(stop(limit))),
                        },
                    }
                } => next,
            };
            let batch = match next {
                None => break,
                Some(Ok(batch)) => batch,
                Some(Err(e)) => {
                    let e = timed_out(e);
                    drop(inner);
                    drop(lease.take());
                    let _ = tx.send(Err(e)).await;
                    return Ok(());
                }
            };
            let sent = tokio::select! {
                biased;
                () = killed(kill.clone()) => Err(Limit::Killed(session)),
                sent = async {
                    match deadline {
                        None => Ok(tx.send(Ok(batch)).await.is_ok()),
                        Some((at, limit)) => {
                            match tokio::time::timeout_at(at, tx.send(Ok(batch))).await {
                                Ok(sent) => Ok(sent.is_ok()),
                                Err(_) => Err(limit),
                            }
                        }
                    }
                } => sent,
            };
            let sent = match sent {
                Ok(sent) => sent,
                Err(limit) => {
                    let e = stop(limit);
                    drop(inner);
                    drop(lease.take());
                    let _ = tx.send(Err(e)).await;
                    return Ok(());
                }
            };
            if !sent {
                return Ok(()); // the consumer is gone
            }
        }
        let finished = finish_workers(&scope.processes);
        // The lease goes before the stream ends (the sender goes with this task), so a
        // statement read to its end holds nothing either.
        drop(inner);
        drop(lease);
        if let Err(e) = finished {
            let _ = tx.send(Err(e.into_datafusion())).await;
        }
        Ok(())
    });
    builder.build()
}

/// What made a [`Watchdog`] kill a statement's workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fired {
    /// The statement's deadline passed.
    Deadline,
    /// Its session was ended.
    Killed,
}

/// Kills a statement's workers at its deadline or when its session is ended (see
/// [`run_off_thread`]); stopped when dropped.
struct Watchdog {
    task: tokio::task::JoinHandle<()>,
    fired: Arc<std::sync::atomic::AtomicU8>,
}

impl Watchdog {
    fn start(
        at: Option<Instant>,
        kill: Option<Arc<KillSwitch>>,
        scope: Arc<StatementScope>,
    ) -> Self {
        let fired = Arc::new(std::sync::atomic::AtomicU8::new(0));
        let flag = Arc::clone(&fired);
        let task = tokio::spawn(async move {
            let deadline = async {
                match at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let why = tokio::select! {
                () = deadline => 1,
                () = killed(kill) => 2,
            };
            flag.store(why, std::sync::atomic::Ordering::Release);
            scope.processes.kill_all();
        });
        Self { task, fired }
    }

    /// Whether it fired (and the workers were killed), and why.
    fn fired(&self) -> Option<Fired> {
        match self.fired.load(std::sync::atomic::Ordering::Acquire) {
            1 => Some(Fired::Deadline),
            2 => Some(Fired::Killed),
            _ => None,
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

enum State {
    /// Waiting for the lease; the plan has not started.
    Waiting {
        lease: BoxFuture<'static, accelsql_gpu_scheduler::Result<Lease>>,
        /// Fires at the statement's deadline (`accelsql.statement_timeout`), if it has one.
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
        /// Completes when the session is ended (`KILL SESSION`).
        killed: BoxFuture<'static, ()>,
        plan: Arc<dyn ExecutionPlan>,
        task: Arc<TaskContext>,
    },
    /// The plan runs in its own task, which holds the lease (if any).
    Running {
        inner: SendableRecordBatchStream,
    },
    Done,
}

/// A statement's record batches, with its lease and its call accounting attached.
pub(crate) struct StatementStream {
    schema: SchemaRef,
    state: State,
    scope: Arc<StatementScope>,
    engine: Arc<EngineState>,
    recorded: bool,
    /// EXPLAIN ANALYZE: after the plan's rows, one row with each call's placement and counters.
    report_calls: bool,
    /// When the statement must be done (`accelsql.statement_timeout`), and the limit.
    deadline: Option<(Instant, Duration)>,
    /// Ends the statement when its session is ended (`KILL SESSION`).
    kill: Option<Arc<KillSwitch>>,
    /// The result batch handed out last, counted against the session's memory budget until the
    /// next is asked for (a batch past the budget fails the statement with 53200).
    result_memory: Option<MemoryReservation>,
}

impl StatementStream {
    /// Starts `plan`; when the statement needs the GPUs, only after the lease is granted. With
    /// `statement_timeout`, the statement is stopped (57T01) when it has not ended that long
    /// after now, whether it waits for the lease, runs, or waits for its consumer to read.
    pub(crate) fn start(
        engine: Arc<EngineState>,
        scope: Arc<StatementScope>,
        plan: Arc<dyn ExecutionPlan>,
        task: Arc<TaskContext>,
        wait_timeout: Option<Duration>,
        statement_timeout: Option<Duration>,
        kill: Option<Arc<KillSwitch>>,
    ) -> DfResult<Self> {
        let deadline = statement_timeout.map(|limit| (Instant::now() + limit, limit));
        let schema = plan.schema();
        // Counted against the session's budget; a session that set DataFusion's own runtime
        // (`SET datafusion.runtime.memory_limit`) keeps DataFusion's rules.
        let result_memory = task
            .memory_pool()
            .downcast_ref::<SessionPool>()
            .is_some()
            .then(|| {
                MemoryConsumer::new("the statement's result batch").register(task.memory_pool())
            });
        let queue = engine.queue.clone();
        let max_hold = engine.max_lease_hold;
        // The statement's id and session, not its text: the label reaches other sessions (their
        // lease-wait errors) and other processes (device lock files); `accelsql.gpu_leases`
        // shows the text to whom may see it.
        let label = lease_label(scope.id, scope.session);
        // What its GPU calls ask of the lease: memory per instance when each declares it.
        let (demand, layout) = statement_demand(&scope.calls());
        let state = if scope.must_wait_for_lease() {
            let request =
                lease_request(label, wait_timeout, scope.gpu_class.as_ref()).demand(demand);
            State::Waiting {
                lease: async move { queue.acquire(request).await }.boxed(),
                timer: deadline.map(|(at, _)| Box::pin(tokio::time::sleep_until(at))),
                killed: killed(kill.clone()).boxed(),
                plan,
                task,
            }
        } else if scope.needs_lease() {
            // Only optional GPU calls and `optional_gpu_when_busy = 'cpu'`: never wait; a busy
            // lease sends them to the CPU.
            let lease = queue
                .try_acquire_request(LeaseRequest::new(label).demand(demand))
                .map_err(|e| EngineError::from(e).into_datafusion())?;
            match &lease {
                Some(l) => {
                    *scope.lease_wait.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(Duration::ZERO);
                    let _ = scope.lease_devices.set(LeaseGrant::of_lease(l, &layout));
                }
                None => {
                    let _ = scope.fell_back.set(
                        "optional; the GPU lease was busy, so it ran on the CPU \
                         (accelsql.optional_gpu_when_busy = 'cpu')"
                            .into(),
                    );
                    let _ = scope.lease_devices.set(LeaseGrant::default());
                }
            }
            State::Running {
                inner: run_off_thread(
                    execute_stream(plan, task)?,
                    lease,
                    Arc::clone(&scope),
                    max_hold,
                    deadline,
                    kill.clone(),
                ),
            }
        } else {
            State::Running {
                inner: run_off_thread(
                    execute_stream(plan, task)?,
                    None,
                    Arc::clone(&scope),
                    None,
                    deadline,
                    kill.clone(),
                ),
            }
        };
        Ok(Self {
            schema,
            state,
            scope,
            engine,
            recorded: false,
            report_calls: false,
            deadline,
            kill,
            result_memory,
        })
    }

    /// Appends the `gpu_calls` row of EXPLAIN ANALYZE (whose schema is `plan_type, plan`).
    pub(crate) fn with_call_report(mut self) -> Self {
        self.report_calls = self.schema.fields().len() == 2;
        self
    }

    /// The `gpu_calls` row: each call's placement, devices, instances, rows, time, lease wait.
    fn call_report(&self, records: &[UdfCallRecord]) -> DfResult<RecordBatch> {
        let mut text = if records.is_empty() {
            "no accelsql UDF calls".to_string()
        } else {
            records
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        };
        if self.scope.is_remote() && !records.is_empty() {
            text.push_str(
                "\n(ran on the cluster's nodes: what each did is in accelsql.udf_calls, \
                 one row per node)",
            );
        }
        let columns: Vec<datafusion::arrow::array::ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["gpu_calls"])),
            Arc::new(StringArray::from(vec![text])),
        ];
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    fn finish(&mut self) -> Vec<UdfCallRecord> {
        self.state = State::Done;
        if let Some(r) = &mut self.result_memory {
            r.free();
        }
        if self.recorded {
            return Vec::new();
        }
        self.recorded = true;
        let lease_wait = *self
            .scope
            .lease_wait
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let grant = self.scope.lease_devices.get().cloned().unwrap_or_default();
        let records = self
            .scope
            .calls()
            .iter()
            .map(|call| {
                let mut decision = call.decision.clone();
                let fell_back = self.scope.fell_back.get();
                if decision.placement == Placement::Gpu
                    && let Some(why) = fell_back
                {
                    decision.placement = Placement::Cpu;
                    decision.reason = why.clone();
                } else if decision.placement == Placement::Gpu
                    && decision.request != AcceleratorRequest::Required
                    && self.scope.optional_when_busy == OptionalGpuWhenBusy::Wait
                {
                    decision.reason = format!(
                        "{}; waited for the GPU lease (accelsql.optional_gpu_when_busy = 'wait')",
                        decision.reason
                    );
                }
                let devices = grant.call_device_indices(call.decision.call_id);
                let mut record = call_record(call, decision, &devices, lease_wait);
                record.node = match &self.engine.distributor {
                    Some(_) => None,
                    None => Some(self.engine.node.id),
                };
                record
            })
            .collect::<Vec<_>>();
        // A plan that ran on a cluster's nodes is recorded there, with what it did.
        if !self.scope.is_remote() {
            self.engine.record_calls(records.clone());
        }
        records
    }
}

/// The record of `call` as `decision` finally placed it, its instances pinned round-robin to
/// `lease_devices` (device indices) when it ran on the GPUs; the caller says where it ran.
pub(crate) fn call_record(
    call: &PlacedCall,
    decision: PlacementDecision,
    lease_devices: &[u32],
    lease_wait: Option<Duration>,
) -> UdfCallRecord {
    let s = &call.stats;
    let ordering = std::sync::atomic::Ordering::Relaxed;
    let instances = s.instances.lock().map(|i| i.clone()).unwrap_or_default();
    let gpu = decision.placement == Placement::Gpu;
    let pinned: Vec<u32> = if gpu && !lease_devices.is_empty() {
        let mut used: Vec<u32> = instances
            .iter()
            .map(|i| lease_devices[i % lease_devices.len()])
            .collect();
        used.sort_unstable();
        used.dedup();
        used
    } else {
        Vec::new()
    };
    UdfCallRecord {
        statement_id: call.statement.statement_id,
        decision,
        devices: pinned,
        instances: instances.len(),
        rows_in: s.rows_in.load(ordering),
        rows_out: s.rows_out.load(ordering),
        elapsed: Duration::from_nanos(s.nanos.load(ordering)),
        lease_wait: if gpu { lease_wait } else { None },
        gpu_batches: s.gpu_impl_batches.load(ordering),
        cpu_fallback_batches: s.cpu_fallback_batches.load(ordering),
        fallback_reason: s
            .fallback_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
        node: None,
        run: None,
        reserved_bytes: if gpu {
            call.devices
                .get()
                .and_then(|g| g.for_call(call.decision.call_id).1)
        } else {
            None
        },
    }
}

impl Stream for StatementStream {
    type Item = DfResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Waiting {
                    lease,
                    timer,
                    killed,
                    plan,
                    task,
                } => {
                    if killed.poll_unpin(cx).is_ready() {
                        // Dropping the wait takes the statement out of the queue.
                        this.finish();
                        return Poll::Ready(Some(Err(EngineError::SessionKilled {
                            session: this.scope.session,
                        }
                        .into_datafusion())));
                    }
                    if let Some(timer) = timer
                        && timer.poll_unpin(cx).is_ready()
                        && let Some((_, limit)) = this.deadline
                    {
                        // Dropping the wait takes the statement out of the queue.
                        this.finish();
                        return Poll::Ready(Some(Err(
                            EngineError::StatementTimeout { limit }.into_datafusion()
                        )));
                    }
                    let lease = match lease.poll_unpin(cx) {
                        Poll::Pending => return Poll::Pending,
                        // Optional calls only: a wait that timed out runs them on the CPU.
                        Poll::Ready(Err(
                            e @ accelsql_gpu_scheduler::SchedulerError::LeaseTimeout { .. },
                        )) if !this.scope.has_required_gpu_call() => {
                            let _ = this.scope.fell_back.set(format!(
                                "optional; waiting for the GPU lease timed out \
                                 (accelsql.gpu_wait_timeout), so it ran on the CPU: {e}"
                            ));
                            let _ = this.scope.lease_devices.set(LeaseGrant::default());
                            None
                        }
                        Poll::Ready(Err(e)) => {
                            this.finish();
                            return Poll::Ready(Some(Err(EngineError::from(e).into_datafusion())));
                        }
                        Poll::Ready(Ok(lease)) => Some(lease),
                    };
                    if let Some(lease) = &lease {
                        *this
                            .scope
                            .lease_wait
                            .lock()
                            .unwrap_or_else(|e| e.into_inner()) = Some(lease.waited());
                        let layout = statement_demand(&this.scope.calls()).1;
                        let _ = this
                            .scope
                            .lease_devices
                            .set(LeaseGrant::of_lease(lease, &layout));
                    }
                    match execute_stream(Arc::clone(plan), Arc::clone(task)) {
                        Ok(inner) => {
                            this.state = State::Running {
                                inner: run_off_thread(
                                    inner,
                                    lease,
                                    Arc::clone(&this.scope),
                                    hold_limit(
                                        this.engine.max_lease_hold,
                                        this.scope.gpu_class.as_ref(),
                                    ),
                                    this.deadline,
                                    this.kill.clone(),
                                ),
                            }
                        }
                        Err(e) => {
                            this.finish();
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                }
                State::Running { inner, .. } => {
                    return match inner.poll_next_unpin(cx) {
                        Poll::Ready(None) => {
                            let records = this.finish();
                            if this.report_calls {
                                Poll::Ready(Some(this.call_report(&records)))
                            } else {
                                Poll::Ready(None)
                            }
                        }
                        Poll::Ready(Some(Err(e))) => {
                            // A failed statement releases its devices at once.
                            this.finish();
                            Poll::Ready(Some(Err(e)))
                        }
                        Poll::Ready(Some(Ok(batch))) => {
                            if let Some(Err(e)) = this
                                .result_memory
                                .as_mut()
                                .map(|r| r.try_resize(batch.get_array_memory_size()))
                            {
                                this.finish();
                                return Poll::Ready(Some(Err(e)));
                            }
                            Poll::Ready(Some(Ok(batch)))
                        }
                        Poll::Pending => Poll::Pending,
                    };
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }
}

impl RecordBatchStream for StatementStream {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

impl Drop for StatementStream {
    fn drop(&mut self) {
        if !matches!(self.state, State::Done) {
            // Dropped early (cancelled query): kill its script workers, even mid-run, so that
            // the tasks still running its plan end at once.
            self.scope.processes.kill_all();
        }
        // Release the lease and still account for the calls.
        self.finish();
    }
}

/// The node lease request of statement `label`: waiting at most `timeout`, with its consumer
/// group's precedence and waiter cap when it has a group.
pub(crate) fn lease_request(
    label: String,
    timeout: Option<Duration>,
    class: Option<&GpuClass>,
) -> LeaseRequest {
    let request = LeaseRequest::new(label).timeout_opt(timeout);
    match class {
        None => request,
        Some(class) => request
            .precedence(class.precedence)
            .group(class.group.clone())
            .max_group_waiters(class.max_waiters),
    }
}

/// The longest a statement may hold the lease: the engine's bound or its group's
/// `GPU_LEASE_HOLD_LIMIT`, whichever is smaller.
pub(crate) fn hold_limit(engine: Option<Duration>, class: Option<&GpuClass>) -> Option<Duration> {
    match (engine, class.and_then(GpuClass::hold_limit)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
