//! `NativeConnection`: one session on the process's shared engine; runs SQL with the GIL
//! released and hands results to pyarrow through the Arrow C stream interface.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use accelsql_engine::datafusion::arrow::array::{
    RecordBatch, RecordBatchIterator, RecordBatchReader,
};
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::datafusion::arrow::ffi_stream::ArrowArrayStreamReader;
use accelsql_engine::datafusion::common::ScalarValue;
use accelsql_engine::splitter::split_statements;
use accelsql_engine::{EngineError, ScalarUdf, Session};
use arrow_pyarrow::{FromPyArrow, IntoPyArrow, PyArrowType};
use futures::TryStreamExt;
use pyo3::prelude::*;

use crate::callable::PythonCallable;
use crate::error::{CONNECTION_CLOSED, coded_error, engine_error};
use crate::process::{EngineKey, run, run_cancellable, shared_engine};

/// A session on the engine shared by every connection of this process with the same simulated
/// GPUs and data directory. Use `accelsql.connect()`, which wraps it.
#[pyclass(module = "accelsql._accelsql", frozen)]
pub(crate) struct NativeConnection {
    session: Mutex<Option<Arc<Session>>>,
    /// Bumped by `cancel()`: a statement running when it changes is stopped.
    cancels: AtomicU64,
}

impl NativeConnection {
    fn session(&self) -> PyResult<Arc<Session>> {
        self.session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(Arc::clone)
            .ok_or_else(|| coded_error(CONNECTION_CLOSED, "the connection is closed"))
    }
}

#[pymethods]
impl NativeConnection {
    /// Opens a session on the shared engine for (`simulated_gpus`, `data_dir`): the engine's
    /// own (SYS, every privilege), or with `user` a session of that catalog user
    /// (`Engine::session_as`: 42704 when there is none, 42501 without CREATE SESSION).
    #[new]
    #[pyo3(signature = (simulated_gpus=None, data_dir=None, user=None))]
    fn new(
        py: Python<'_>,
        simulated_gpus: Option<usize>,
        data_dir: Option<PathBuf>,
        user: Option<String>,
    ) -> PyResult<Self> {
        // One spelling per directory, so that its connections share one engine: made first
        // (the engine would make it), then resolved. A directory that cannot be made is the
        // engine's error to report.
        let data_dir = data_dir.map(|d| {
            let _ = std::fs::create_dir_all(&d);
            d.canonicalize()
                .unwrap_or_else(|_| std::path::absolute(&d).unwrap_or(d))
        });
        let key = EngineKey {
            simulated_gpus,
            data_dir,
        };
        let engine = py.detach(|| shared_engine(&key))?;
        let session = {
            let runtime = crate::process::runtime()?;
            let _entered = runtime.enter();
            match user {
                Some(user) => engine.session_as(&user).map_err(engine_error)?,
                None => engine.session(),
            }
        };
        Ok(Self {
            session: Mutex::new(Some(Arc::new(session))),
            cancels: AtomicU64::new(0),
        })
    }

    /// Runs `sql` (one or more `;`-separated statements) and returns the last one's result as a
    /// `pyarrow.Table` (no columns for statements without a result), and whether that statement
    /// is DML (INSERT/UPDATE/DELETE: its one row holds the affected-row count).
    ///
    /// `params`: a one-row `pyarrow.RecordBatch` whose columns are the values of the last
    /// statement's placeholders `$1`, `$2`, … in order (bound in the plan, not pasted).
    #[pyo3(signature = (sql, params=None))]
    fn query<'py>(
        &self,
        py: Python<'py>,
        sql: String,
        params: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyAny>, bool)> {
        let session = self.session()?;
        let params: Vec<ScalarValue> = match params {
            None => Vec::new(),
            Some(batch) => {
                let batch = RecordBatch::from_pyarrow_bound(&batch)?;
                batch
                    .columns()
                    .iter()
                    .map(|c| ScalarValue::try_from_array(c, 0))
                    .collect::<Result<_, _>>()
                    .map_err(|e| engine_error(EngineError::Sql(e)))?
            }
        };
        let dml = split_statements(&sql)
            .last()
            .is_some_and(|s| is_dml(&s.text));
        let epoch = self.cancels.load(Ordering::Acquire);
        let cancelled = || self.cancels.load(Ordering::Acquire) != epoch;
        let (schema, batches) = run_cancellable(
            py,
            async move {
                let stream = session.sql_stream_with_params(&sql, &params).await?;
                let schema = stream.schema();
                let batches: Vec<RecordBatch> = stream.try_collect().await?;
                Ok::<_, EngineError>((schema, batches))
            },
            &cancelled,
        )?
        .map_err(engine_error)?;
        let reader: Box<dyn RecordBatchReader + Send> = Box::new(RecordBatchIterator::new(
            batches.into_iter().map(Ok),
            schema,
        ));
        let table = reader.into_pyarrow(py)?.call_method0("read_all")?;
        Ok((table, dml))
    }

    /// Loads an Arrow stream (a `pyarrow.Table`, `RecordBatchReader`, or anything with
    /// `__arrow_c_stream__`) into `table`: creates it when the name is free, else appends
    /// (columns by position, cast to the table's types). Returns the number of rows loaded.
    fn import_arrow(
        &self,
        py: Python<'_>,
        data: PyArrowType<ArrowArrayStreamReader>,
        table: String,
    ) -> PyResult<u64> {
        let session = self.session()?;
        let reader = data.0;
        let schema = reader.schema();
        let batches = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| engine_error(EngineError::Sql(e.into())))?;
        run(py, async move {
            session.import_batches(&table, schema, batches).await
        })?
        .map_err(engine_error)
    }

    /// Registers `func` as the scalar UDF `name` of this connection (see
    /// `accelsql.Connection.register_udf`).
    #[pyo3(signature = (func, name, inputs, returns, accelerator, vectorized, instance_limit, pass_ctx))]
    #[allow(clippy::too_many_arguments)]
    fn register_udf(
        &self,
        func: Py<PyAny>,
        name: String,
        inputs: Vec<Bound<'_, PyAny>>,
        returns: Bound<'_, PyAny>,
        accelerator: &str,
        vectorized: bool,
        instance_limit: Option<usize>,
        pass_ctx: bool,
    ) -> PyResult<()> {
        let session = self.session()?;
        let inputs = inputs
            .iter()
            .map(crate::types::data_type)
            .collect::<PyResult<Vec<DataType>>>()?;
        let returns = crate::types::data_type(&returns)?;
        let mut builder = ScalarUdf::builder(name.as_str())
            .castable_inputs(inputs)
            .returns(returns.clone())
            .accelerator(accelerator)
            .map_err(engine_error)?;
        if let Some(n) = instance_limit {
            builder = builder.instance_limit(n);
        }
        let udf = builder
            .cpu(PythonCallable {
                name: name.to_ascii_lowercase(),
                func,
                vectorized,
                pass_ctx,
                returns,
            })
            .build()
            .map_err(engine_error)?;
        session.register_scalar_udf(udf).map_err(engine_error)
    }

    /// Restricts the session for SQL from untrusted users, for good (`Session::restrict`): script
    /// DDL, SCRIPT_LANGUAGES changes, connections, file access and settings that could lift a
    /// limit are refused with error 42501.
    fn restrict(&self) -> PyResult<()> {
        self.session()?.restrict();
        Ok(())
    }

    /// Whether the session is restricted.
    #[getter]
    fn restricted(&self) -> PyResult<bool> {
        Ok(self.session()?.is_restricted())
    }

    /// Cancels the statement running now on this connection (from another thread), if any: it
    /// stops with `[57014] statement cancelled`, releasing its GPU lease and script workers.
    fn cancel(&self) {
        self.cancels.fetch_add(1, Ordering::AcqRel);
    }

    /// Ends the session (its tables and UDFs go with it). Closing twice is allowed.
    fn close(&self) {
        self.session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// The number of GPUs the connection's engine hands out (simulated or real).
    #[getter]
    fn gpu_count(&self) -> PyResult<usize> {
        Ok(self.session()?.engine().devices().len())
    }
}

/// Whether a statement's first keyword (after comments) makes it DML.
fn is_dml(text: &str) -> bool {
    let mut rest = text.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else {
            break;
        }
    }
    let keyword: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
    ["INSERT", "UPDATE", "DELETE", "MERGE"]
        .iter()
        .any(|k| keyword.eq_ignore_ascii_case(k))
}
