//! How a statement's result is printed: an aligned table, CSV with a header, or JSON lines.

use std::io::Write;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::json::writer::LineDelimited;

/// How results are printed (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    /// An aligned table with a header line, as arrow prints it.
    #[default]
    Table,
    /// CSV with a header line.
    Csv,
    /// One JSON object per row (JSON lines); a NULL is written as `null`.
    Json,
}

/// Writes one statement's result to `out`. A result without columns (DDL, `SET`) prints nothing;
/// a result with columns but no rows prints the header (table, CSV) or nothing (JSON).
pub(crate) fn write_result(
    format: OutputFormat,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    out: &mut dyn Write,
) -> Result<(), ArrowError> {
    if schema.fields().is_empty() {
        return Ok(());
    }
    match format {
        OutputFormat::Table => {
            let table = arrow::util::pretty::pretty_format_batches_with_schema(
                Arc::clone(schema),
                batches,
            )?;
            writeln!(out, "{table}")?;
        }
        OutputFormat::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut *out);
            if batches.is_empty() {
                // The writer prints the header with the first batch; an empty one still has it.
                writer.write(&RecordBatch::new_empty(Arc::clone(schema)))?;
            }
            for batch in batches {
                writer.write(batch)?;
            }
        }
        OutputFormat::Json => {
            let mut writer = arrow::json::WriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, LineDelimited>(&mut *out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use arrow::array::{Float64Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn cities() -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("city", DataType::Utf8, true),
            Field::new("lat", DataType::Float64, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("Berlin, DE"), None])),
                Arc::new(Float64Array::from(vec![Some(52.52), None])),
            ],
        )
        .unwrap();
        (schema, batch)
    }

    fn render(format: OutputFormat, schema: &SchemaRef, batches: &[RecordBatch]) -> String {
        let mut out = Vec::new();
        write_result(format, schema, batches, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn table_is_arrows_pretty_table() {
        let (schema, batch) = cities();
        let text = render(OutputFormat::Table, &schema, &[batch]);
        assert_eq!(
            text,
            "+----+------------+-------+\n\
             | id | city       | lat   |\n\
             +----+------------+-------+\n\
             | 1  | Berlin, DE | 52.52 |\n\
             | 2  |            |       |\n\
             +----+------------+-------+\n"
        );
    }

    #[test]
    fn csv_has_a_header_and_quotes_where_needed() {
        let (schema, batch) = cities();
        let text = render(OutputFormat::Csv, &schema, &[batch.clone(), batch]);
        assert_eq!(
            text,
            "id,city,lat\n1,\"Berlin, DE\",52.52\n2,,\n1,\"Berlin, DE\",52.52\n2,,\n"
        );
    }

    #[test]
    fn json_is_one_object_per_row_with_explicit_nulls() {
        let (schema, batch) = cities();
        let text = render(OutputFormat::Json, &schema, &[batch]);
        assert_eq!(
            text,
            "{\"id\":1,\"city\":\"Berlin, DE\",\"lat\":52.52}\n{\"id\":2,\"city\":null,\"lat\":null}\n"
        );
    }

    #[test]
    fn an_empty_result_keeps_its_header() {
        let (schema, _) = cities();
        assert_eq!(render(OutputFormat::Csv, &schema, &[]), "id,city,lat\n");
        assert!(render(OutputFormat::Table, &schema, &[]).contains("| id | city | lat |"));
        assert_eq!(render(OutputFormat::Json, &schema, &[]), "");
    }

    #[test]
    fn a_result_without_columns_prints_nothing() {
        let schema = Arc::new(Schema::empty());
        for format in [OutputFormat::Table, OutputFormat::Csv, OutputFormat::Json] {
            assert_eq!(render(format, &schema, &[]), "");
        }
    }
}
