// Licensed to the Apache Software Foundation (ASF) under one
// or more contributor license agreements.  See the NOTICE file
// distributed with this work for additional information
// regarding copyright ownership.  The ASF licenses this file
// to you under the Apache License, Version 2.0 (the
// "License"); you may not use this file except in compliance
// with the License.  You may obtain a copy of the License at
//
//   http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing,
// software distributed under the License is distributed on an
// "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
// KIND, either express or implied.  See the License for the
// specific language governing permissions and limitations
// under the License.
//
// Vendored from datafusion-sqllogictest 55.2.0, src/engines/datafusion_engine/normalize.rs.
// Changes for accelsql:
// - errors are `DataFusionError` (upstream wraps them in its `DFSqlLogicTestError`; the texts
//   are the same: "Internal error: Schema mismatch…", "Arrow error: …");
// - `expand_row` returns a `Vec` instead of an `itertools::Either` iterator (no itertools);
// - `normalize_paths` replaces accelsql's workspace root (the parent of this crate's folder) with
//   `WORKSPACE_ROOT` by plain text replacement (upstream uses `object_store::path::Path`, and
//   the parent of the parent of its crate folder), after replacing the folder that stands for
//   upstream's repository root (`crate::workspace`: scratch folders and vendored data) with
//   `WORKSPACE_ROOT`, after writing paths that a statement wrote relative back as it wrote them
//   (`crate::workspace::as_written`);
// - cells are read with arrow's `AsArray` helpers instead of `downcast_ref().unwrap()` (same
//   behaviour: the type is known from the `match` on the data type), and the two `unwrap()`s on
//   the format options became `?`;
// - arrow reached through `accelsql_engine::datafusion::arrow` (the same arrow 59).

//! Converts record batches to the rows of text a `.slt` file expects, exactly as upstream
//! DataFusion's sqllogictest driver does: one cell per column, multi-line cells (EXPLAIN plans)
//! expanded into numbered rows, workspace paths replaced by `WORKSPACE_ROOT`.

use std::path::Path;
use std::sync::LazyLock;

use accelsql_engine::datafusion::arrow::array::{Array, ArrayRef, AsArray};
use accelsql_engine::datafusion::arrow::datatypes::{
    DataType, Decimal32Type, Decimal64Type, Decimal128Type, Decimal256Type, Fields, Float16Type,
    Float32Type, Float64Type, Schema,
};
use accelsql_engine::datafusion::arrow::record_batch::RecordBatch;
use accelsql_engine::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use accelsql_engine::datafusion::common::internal_datafusion_err;
use accelsql_engine::datafusion::config::ConfigField;
use accelsql_engine::datafusion::error::Result;

use super::conversion::*;
use super::output::DFColumnType;

/// Converts `batches` to a result as expected by sqllogictest.
pub fn convert_batches(
    schema: &Schema,
    batches: Vec<RecordBatch>,
    is_spark_path: bool,
) -> Result<Vec<Vec<String>>> {
    let mut rows = vec![];
    for batch in batches {
        // Verify schema
        if !schema.contains(&batch.schema()) {
            return Err(internal_datafusion_err!(
                "Schema mismatch. Previously had\n{:#?}\n\nGot:\n{:#?}",
                &schema,
                batch.schema()
            ));
        }

        // Convert a single batch to a `Vec<Vec<String>>` for comparison, flatten expanded rows, and normalize each.
        let new_rows = (0..batch.num_rows())
            .map(|row| {
                batch
                    .columns()
                    .iter()
                    .map(|col| cell_to_string(col, row, is_spark_path))
                    .collect::<Result<Vec<String>>>()
            })
            .collect::<Result<Vec<Vec<String>>>>()?
            .into_iter()
            .flat_map(expand_row)
            .map(normalize_paths);
        rows.extend(new_rows);
    }
    Ok(rows)
}

/// special case rows that have newlines in them (like explain plans)
//
/// Transform inputs like:
/// ```text
/// [
///   "logical_plan",
///   "Sort: d.b ASC NULLS LAST\n  Projection: d.b, MAX(d.a) AS max_a",
/// ]
/// ```
///
/// Into one cell per line, adding lines if necessary
/// ```text
/// [
///   "logical_plan",
/// ]
/// [
///   "Sort: d.b ASC NULLS LAST",
/// ]
/// [ <--- newly added row
///   "|-- Projection: d.b, MAX(d.a) AS max_a",
/// ]
/// ```
fn expand_row(mut row: Vec<String>) -> Vec<Vec<String>> {
    // check last cell
    if let Some(cell) = row.pop() {
        let lines: Vec<_> = cell.split('\n').collect();

        // no newlines in last cell
        if lines.len() < 2 {
            row.push(cell);
            return vec![row];
        }

        // form new rows with each additional line
        let new_lines = lines.into_iter().enumerate().map(|(idx, l)| {
            // replace any leading spaces with '-' as
            // `sqllogictest` ignores whitespace differences
            //
            // See https://github.com/apache/datafusion/issues/6328
            let content = l.trim_start();
            let new_prefix = "-".repeat(l.len() - content.len());
            // maintain for each line a number, so
            // reviewing explain result changes is easier
            let line_num = idx + 1;
            vec![format!("{line_num:02}){new_prefix}{content}")]
        });

        std::iter::once(row).chain(new_lines).collect()
    } else {
        vec![row]
    }
}

/// normalize path references
///
/// ```text
/// DataSourceExec: files={1 group: [[path/to/accelsql/sql-tests/data/t.csv]]}, ...
/// ```
///
/// into:
///
/// ```text
/// DataSourceExec: files={1 group: [[WORKSPACE_ROOT/sql-tests/data/t.csv]]}, ...
/// ```
fn normalize_paths(mut row: Vec<String>) -> Vec<String> {
    row.iter_mut().for_each(|s| {
        let upstream_root = crate::workspace::upstream_root_in_plans();
        if s.contains(upstream_root) {
            *s = crate::workspace::as_written(s).replace(upstream_root, "WORKSPACE_ROOT");
        }
        let workspace_root: &str = WORKSPACE_ROOT.as_ref();
        if !workspace_root.is_empty() && s.contains(workspace_root) {
            *s = s.replace(workspace_root, "WORKSPACE_ROOT");
        }
    });
    row
}

/// The location of the accelsql checkout (the parent of this crate's folder), without a leading
/// `/` as object-store paths print it.
static WORKSPACE_ROOT: LazyLock<String> = LazyLock::new(|| {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = dir.parent().unwrap_or(dir).to_string_lossy();
    let root = if cfg!(windows) {
        root.replace(std::path::MAIN_SEPARATOR, "/")
    } else {
        root.to_string()
    };
    root.trim_start_matches('/').to_string()
});

/// Normalizes the content of a single cell in RecordBatch prior to printing.
///
/// This is to make the output comparable to the semi-standard .slt format
///
/// Normalizations applied to [NULL Values and empty strings]
///
/// [NULL Values and empty strings]: https://duckdb.org/dev/sqllogictest/result_verification#null-values-and-empty-strings
///
/// Floating numbers are rounded to have a consistent representation with the Postgres runner.
pub fn cell_to_string(col: &ArrayRef, row: usize, is_spark_path: bool) -> Result<String> {
    if col.is_null(row) {
        // represent any null value with the string "NULL"
        return Ok(NULL_STR.to_string());
    }
    Ok(match col.data_type() {
        DataType::Null => NULL_STR.to_string(),
        DataType::Boolean => bool_to_str(col.as_boolean().value(row)),
        DataType::Float16 => f16_to_str(col.as_primitive::<Float16Type>().value(row)),
        DataType::Float32 => f32_to_str(col.as_primitive::<Float32Type>().value(row)),
        DataType::Float64 => {
            let result = col.as_primitive::<Float64Type>().value(row);
            if is_spark_path {
                spark_f64_to_str(result)
            } else {
                f64_to_str(result)
            }
        }
        DataType::Decimal32(_, scale) => {
            let value = col.as_primitive::<Decimal32Type>().value(row);
            arrow_decimal_to_str::<Decimal32Type>(value, *scale)
        }
        DataType::Decimal64(_, scale) => {
            let value = col.as_primitive::<Decimal64Type>().value(row);
            arrow_decimal_to_str::<Decimal64Type>(value, *scale)
        }
        DataType::Decimal128(_, scale) => {
            let value = col.as_primitive::<Decimal128Type>().value(row);
            arrow_decimal_to_str::<Decimal128Type>(value, *scale)
        }
        DataType::Decimal256(_, scale) => {
            let value = col.as_primitive::<Decimal256Type>().value(row);
            arrow_decimal_to_str::<Decimal256Type>(value, *scale)
        }
        DataType::LargeUtf8 => varchar_to_str(col.as_string::<i64>().value(row)),
        DataType::Utf8 => varchar_to_str(col.as_string::<i32>().value(row)),
        DataType::Utf8View => varchar_to_str(col.as_string_view().value(row)),
        DataType::Dictionary(_, _) => {
            let dict = col.as_any_dictionary();
            let key = dict.normalized_keys()[row];
            cell_to_string(dict.values(), key, is_spark_path)?
        }
        _ => {
            let mut datafusion_format_options =
                accelsql_engine::datafusion::config::FormatOptions::default();

            datafusion_format_options.set("null", "NULL")?;

            let arrow_format_options: FormatOptions<'_> =
                (&datafusion_format_options).try_into()?;

            let f = ArrayFormatter::try_new(col.as_ref(), &arrow_format_options)?;

            f.value(row).to_string()
        }
    })
}

/// Converts columns to a result as expected by sqllogictest.
pub fn convert_schema_to_types(columns: &Fields) -> Vec<DFColumnType> {
    columns
        .iter()
        .map(|f| f.data_type())
        .map(|data_type| match data_type {
            DataType::Boolean => DFColumnType::Boolean,
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => DFColumnType::Integer,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => DFColumnType::Float,
            DataType::Decimal32(_, _)
            | DataType::Decimal64(_, _)
            | DataType::Decimal128(_, _)
            | DataType::Decimal256(_, _) => DFColumnType::Float,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DFColumnType::Text,
            DataType::Date32 | DataType::Date64 | DataType::Time32(_) | DataType::Time64(_) => {
                DFColumnType::DateTime
            }
            DataType::Timestamp(_, _) => DFColumnType::Timestamp,
            DataType::Dictionary(key_type, value_type) => {
                if key_type.is_integer() {
                    // mapping dictionary string types to Text
                    match value_type.as_ref() {
                        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                            DFColumnType::Text
                        }
                        _ => DFColumnType::Another,
                    }
                } else {
                    DFColumnType::Another
                }
            }
            _ => DFColumnType::Another,
        })
        .collect()
}
