//! What the module keeps per process: its tokio runtime and one engine per (simulated GPUs, data
//! directory), shared by the connections that ask for it; and running a statement on the runtime
//! with the GIL released.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accelsql_engine::{Engine, EngineError, EngineOptions, SchedulerConfig};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::error::engine_error;

/// Which engine a connection uses: connections with equal keys share one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EngineKey {
    /// `Some(n)`: n simulated GPUs; `None`: from the environment (`ACCELSQL_SIMULATED_GPUS`,
    /// NVML, `CUDA_VISIBLE_DEVICES`).
    pub(crate) simulated_gpus: Option<usize>,
    /// Where scripts persist, as an absolute path.
    pub(crate) data_dir: Option<PathBuf>,
}

/// The runtime and engines of one process. A child made by `fork` (multiprocessing) inherits
/// the parent's, without the runtime's threads: it makes its own (the inherited ones are leaked,
/// never dropped, since dropping them would wait for threads that do not exist there).
struct PerProcess {
    pid: u32,
    runtime: Arc<Runtime>,
    engines: HashMap<EngineKey, Engine>,
}

static STATE: Mutex<Option<PerProcess>> = Mutex::new(None);

fn with_state<T>(f: impl FnOnce(&mut PerProcess) -> PyResult<T>) -> PyResult<T> {
    let mut guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if guard.as_ref().is_some_and(|s| s.pid != pid)
        && let Some(inherited) = guard.take()
    {
        std::mem::forget(inherited);
    }
    if guard.is_none() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            // Statements plan and run on these threads (see STATEMENT_STACK_BYTES).
            .thread_stack_size(accelsql_engine::STATEMENT_STACK_BYTES)
            .thread_name("accelsql")
            .build()
            .map_err(|e| {
                PyRuntimeError::new_err(format!("cannot start accelsql's runtime: {e}"))
            })?;
        *guard = Some(PerProcess {
            pid,
            runtime: Arc::new(runtime),
            engines: HashMap::new(),
        });
    }
    match guard.as_mut() {
        Some(state) => f(state),
        None => Err(PyRuntimeError::new_err("accelsql's runtime is missing")),
    }
}

/// The process's runtime.
pub(crate) fn runtime() -> PyResult<Arc<Runtime>> {
    with_state(|s| Ok(Arc::clone(&s.runtime)))
}

/// The engine for `key`, created on first use (devices are probed then).
pub(crate) fn shared_engine(key: &EngineKey) -> PyResult<Engine> {
    with_state(|s| {
        if let Some(engine) = s.engines.get(key) {
            return Ok(engine.clone());
        }
        let _entered = s.runtime.enter();
        let mut scheduler = SchedulerConfig::from_env().map_err(|e| engine_error(e.into()))?;
        if let Some(n) = key.simulated_gpus {
            scheduler = scheduler.with_simulated_gpus(n);
        }
        let engine = Engine::with_options(EngineOptions {
            scheduler,
            data_dir: key.data_dir.clone(),
            // Files as tables (`SELECT * FROM 'x.parquet'`), as in datafusion-cli.
            url_tables: true,
            ..EngineOptions::default()
        })
        .map_err(engine_error)?;
        s.engines.insert(key.clone(), engine.clone());
        Ok(engine)
    })
}

/// How often a waiting statement lets Python handle signals (Ctrl-C).
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Runs `future` on the process's runtime and waits for it with the GIL released, so that other
/// Python threads (and Python UDFs of this statement) run meanwhile. Every [`SIGNAL_CHECK`] the
/// wait takes the GIL back to let Python handle signals: on Ctrl-C the statement is dropped
/// (which releases its GPU lease and kills its script workers) and `KeyboardInterrupt` raised.
pub(crate) fn run<T, F>(py: Python<'_>, future: F) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    run_cancellable(py, future, &|| false)
}

/// [`run`], also stopped when `cancelled()` turns true (checked as often as signals): the
/// statement is dropped as on Ctrl-C, and the error is `[57014] statement cancelled` (DB-API's
/// `Cursor.cancel()` from another thread).
pub(crate) fn run_cancellable<T, F>(
    py: Python<'_>,
    future: F,
    cancelled: &dyn Fn() -> bool,
) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let runtime = runtime()?;
    let (tx, rx) = sync_channel(1);
    // Shared with the detached closure (a Receiver is Send but not Sync).
    let rx = Mutex::new(rx);
    let task = runtime.spawn(async move {
        // The receiver is gone only when the caller gave up (interrupted): nothing to report.
        let _ = tx.send(future.await);
    });
    loop {
        let received = py.detach(|| {
            rx.lock()
                .unwrap_or_else(|e| e.into_inner())
                .recv_timeout(SIGNAL_CHECK)
        });
        match received {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Timeout) => {
                if let Err(interrupt) = py.check_signals() {
                    task.abort();
                    return Err(interrupt);
                }
                if cancelled() {
                    task.abort();
                    return Err(crate::error::coded_error(
                        EngineError::CANCELLED,
                        "statement cancelled (Cursor.cancel())",
                    ));
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(
                    "accelsql: the statement's task ended without a result (a panic in the engine; see stderr)",
                ));
            }
        }
    }
}
