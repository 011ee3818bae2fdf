//! Helpers that build system tables' columns.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

/// A schema of nullable columns `fields`.
pub(crate) fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|(n, t)| Field::new(*n, t.clone(), true))
            .collect::<Vec<_>>(),
    ))
}

/// A string column of `values`.
pub(crate) fn strings<I: IntoIterator<Item = Option<String>>>(values: I) -> ArrayRef {
    Arc::new(values.into_iter().collect::<StringArray>())
}

/// `d` in milliseconds.
pub(crate) fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
