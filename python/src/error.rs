//! `AccelsqlError`: the Python exception that carries an engine error's code and message.

use accelsql_engine::EngineError;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

pyo3::create_exception!(
    accelsql,
    AccelsqlError,
    PyException,
    "An error of the accelsql engine: `code` is its stable code (e.g. '22069'), `message` its text \
     without the code; str(e) is '[code] message'."
);

/// SQLSTATE of "the connection is closed".
pub(crate) const CONNECTION_CLOSED: &str = "08003";

/// An `AccelsqlError` with `code` and `message` set; `text` may start with `[code] `.
pub(crate) fn coded_error(code: &str, text: &str) -> PyErr {
    let prefix = format!("[{code}] ");
    let message = text.strip_prefix(&prefix).unwrap_or(text);
    let full = format!("{prefix}{message}");
    Python::attach(|py| {
        let err = AccelsqlError::new_err(full);
        let value = err.value(py);
        if let Err(e) = value
            .setattr("code", code)
            .and_then(|()| value.setattr("message", message))
        {
            return e;
        }
        err
    })
}

/// The Python exception of an engine error.
pub(crate) fn engine_error(e: EngineError) -> PyErr {
    coded_error(e.code(), &e.to_string())
}
