//! UDF parameter and result types as Python gives them: SQL type names (`'DOUBLE'`,
//! `'VARCHAR(100)'`, `'DECIMAL(18,2)'`, parsed as script signatures are) or pyarrow types.

use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::udf_runtime::script::SqlType;
use arrow_pyarrow::PyArrowType;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::error::engine_error;

/// The Arrow type of `spec`: a SQL type name, or a `pyarrow.DataType`.
pub(crate) fn data_type(spec: &Bound<'_, PyAny>) -> PyResult<DataType> {
    if let Ok(text) = spec.extract::<String>() {
        return SqlType::parse(&text)
            .map(|t| t.arrow_type())
            .map_err(|e| engine_error(e.into()));
    }
    match spec.extract::<PyArrowType<DataType>>() {
        Ok(PyArrowType(data_type)) => Ok(data_type),
        Err(_) => Err(PyTypeError::new_err(format!(
            "a UDF type is a SQL type name such as 'DOUBLE' or 'VARCHAR(100)', or a pyarrow \
             DataType; got {}",
            spec.repr()
                .map_or_else(|_| "?".to_string(), |r| r.to_string())
        ))),
    }
}
