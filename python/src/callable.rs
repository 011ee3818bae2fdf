//! A Python callable as an engine scalar UDF: the kernel takes the GIL, calls the callable with
//! pyarrow arrays (vectorized) or once per row with Python values, and checks what it returns.

use accelsql_engine::datafusion::arrow::array::{Array, ArrayRef, make_array};
use accelsql_engine::datafusion::arrow::compute::{CastOptions, can_cast_types, cast_with_options};
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::datafusion::error::Result as DfResult;
use accelsql_engine::datafusion::logical_expr::ColumnarValue;
use accelsql_engine::udf_runtime::{PythonExceptionInfo, RuntimeError};
use accelsql_engine::{EngineError, InstanceContext, ScalarKernel};
use arrow_pyarrow::{FromPyArrow, ToPyArrow};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::context::UdfContext;

/// A registered Python callable.
pub(crate) struct PythonCallable {
    /// The UDF's SQL name.
    pub(crate) name: String,
    /// The callable.
    pub(crate) func: Py<PyAny>,
    /// Whole columns (pyarrow arrays) per call, or one call per row.
    pub(crate) vectorized: bool,
    /// Whether to pass `ctx=UdfContext` (the callable declares a `ctx` parameter).
    pub(crate) pass_ctx: bool,
    /// The result type.
    pub(crate) returns: DataType,
}

impl ScalarKernel for PythonCallable {
    fn evaluate(
        &self,
        instance: &InstanceContext,
        num_rows: usize,
        args: &[ColumnarValue],
    ) -> DfResult<ArrayRef> {
        let arrays = args
            .iter()
            .map(|a| a.to_array(num_rows))
            .collect::<DfResult<Vec<_>>>()?;
        Python::attach(|py| self.call(py, instance, num_rows, &arrays))
            .map_err(EngineError::into_datafusion)
    }
}

type Outcome<T> = Result<T, EngineError>;

impl PythonCallable {
    fn call(
        &self,
        py: Python<'_>,
        instance: &InstanceContext,
        num_rows: usize,
        arrays: &[ArrayRef],
    ) -> Outcome<ArrayRef> {
        let kwargs = PyDict::new(py);
        if self.pass_ctx {
            let ctx = Bound::new(py, UdfContext::new(instance, num_rows))
                .map_err(|e| self.raised(py, instance, e, None))?;
            kwargs
                .set_item("ctx", ctx)
                .map_err(|e| self.raised(py, instance, e, None))?;
        }
        let func = self.func.bind(py);
        let result = if self.vectorized {
            let columns = arrays
                .iter()
                .map(|a| a.to_data().to_pyarrow(py))
                .collect::<PyResult<Vec<_>>>()
                .map_err(|e| self.raised(py, instance, e, None))?;
            let args = PyTuple::new(py, columns).map_err(|e| self.raised(py, instance, e, None))?;
            func.call(args, Some(&kwargs))
                .map_err(|e| self.raised(py, instance, e, None))?
        } else {
            self.call_per_row(py, instance, num_rows, arrays, &kwargs)?
        };
        let array = self.to_arrow(py, &result)?;
        if array.len() != num_rows {
            return Err(self.bad(format!(
                "{} values for a batch of {num_rows} rows (a vectorized callable returns one value per row of its input arrays)",
                array.len()
            )));
        }
        Ok(array)
    }

    /// Calls the callable once per row with Python values (None for NULL); returns the list of
    /// results.
    fn call_per_row<'py>(
        &self,
        py: Python<'py>,
        instance: &InstanceContext,
        num_rows: usize,
        arrays: &[ArrayRef],
        kwargs: &Bound<'py, PyDict>,
    ) -> Outcome<Bound<'py, PyAny>> {
        let columns = arrays
            .iter()
            .map(|a| {
                a.to_data()
                    .to_pyarrow(py)?
                    .call_method0("to_pylist")?
                    .cast_into::<PyList>()
                    .map_err(PyErr::from)
            })
            .collect::<PyResult<Vec<_>>>()
            .map_err(|e| self.raised(py, instance, e, None))?;
        let func = self.func.bind(py);
        let out = PyList::empty(py);
        for row in 0..num_rows {
            let values = columns
                .iter()
                .map(|c| c.get_item(row))
                .collect::<PyResult<Vec<_>>>()
                .map_err(|e| self.raised(py, instance, e, Some(row)))?;
            let args = PyTuple::new(py, values).map_err(|e| self.raised(py, instance, e, None))?;
            let value = func
                .call(args, Some(kwargs))
                .map_err(|e| self.raised(py, instance, e, Some(row)))?;
            out.append(value)
                .map_err(|e| self.raised(py, instance, e, None))?;
        }
        Ok(out.into_any())
    }

    /// The callable's result as an array of the result type: a pyarrow Array (or anything with
    /// `__arrow_c_array__`), a ChunkedArray, or a sequence pyarrow can convert (list, numpy
    /// array, pandas Series); other Arrow types are cast when Arrow can.
    fn to_arrow(&self, py: Python<'_>, result: &Bound<'_, PyAny>) -> Outcome<ArrayRef> {
        let converted = (|| -> PyResult<Bound<'_, PyAny>> {
            if result.hasattr("__arrow_c_array__")? {
                return Ok(result.clone());
            }
            if result.is_instance(chunked_array_class(py)?)? {
                return result.call_method0("combine_chunks");
            }
            let kwargs = PyDict::new(py);
            kwargs.set_item("type", self.returns.to_pyarrow(py)?)?;
            kwargs.set_item("from_pandas", true)?;
            pyarrow(py)?.call_method("array", (result,), Some(&kwargs))
        })()
        .map_err(|e| {
            self.bad(format!(
                "it cannot become an array of {}: {}",
                self.returns,
                describe(py, &e)
            ))
        })?;
        let data =
            accelsql_engine::datafusion::arrow::array::ArrayData::from_pyarrow_bound(&converted)
                .map_err(|e| self.bad(format!("it is not an Arrow array: {}", describe(py, &e))))?;
        let array = make_array(data);
        if array.data_type() == &self.returns {
            return Ok(array);
        }
        if !can_cast_types(array.data_type(), &self.returns) {
            return Err(self.bad(format!(
                "type {} where the UDF returns {}",
                array.data_type(),
                self.returns
            )));
        }
        let options = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        cast_with_options(&array, &self.returns, &options).map_err(|e| {
            self.bad(format!(
                "type {} does not cast to {}: {e}",
                array.data_type(),
                self.returns
            ))
        })
    }

    fn bad(&self, message: String) -> EngineError {
        EngineError::BadUdfResult {
            udf: self.name.clone(),
            message,
        }
    }

    /// The error of an exception the callable raised (22U10, as a script's).
    fn raised(
        &self,
        py: Python<'_>,
        instance: &InstanceContext,
        e: PyErr,
        row: Option<usize>,
    ) -> EngineError {
        let (exception, message) = type_and_message(py, &e);
        let traceback = e
            .traceback(py)
            .and_then(|tb| tb.format().ok())
            .unwrap_or_default();
        let phase = match row {
            Some(row) => format!("the registered callable (row {row} of its batch)"),
            None => "the registered callable".to_string(),
        };
        EngineError::Runtime(RuntimeError::PythonException(Box::new(
            PythonExceptionInfo {
                script: self.name.clone(),
                vm_id: instance.instance_id,
                phase,
                line: None,
                exception,
                message,
                traceback: traceback.trim_end().to_string(),
            },
        )))
    }
}

/// `Type: message` of a Python exception.
fn describe(py: Python<'_>, e: &PyErr) -> String {
    let (kind, message) = type_and_message(py, e);
    format!("{kind}: {message}")
}

/// A Python exception's type name and message (`Exception` and empty when they cannot be read).
fn type_and_message(py: Python<'_>, e: &PyErr) -> (String, String) {
    let kind = e
        .get_type(py)
        .name()
        .map_or_else(|_| "Exception".to_string(), |n| n.to_string());
    let message = e
        .value(py)
        .str()
        .map_or_else(|_| String::new(), |s| s.to_string());
    (kind, message)
}

fn pyarrow(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || Ok::<_, PyErr>(py.import("pyarrow")?.unbind()))
        .map(|m| m.bind(py))
}

fn chunked_array_class(py: Python<'_>) -> PyResult<&Bound<'_, pyo3::types::PyType>> {
    static TYPE: PyOnceLock<Py<pyo3::types::PyType>> = PyOnceLock::new();
    TYPE.import(py, "pyarrow", "ChunkedArray")
}
