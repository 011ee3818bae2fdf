//! How a statement's result is printed: an aligned table, CSV with a header, JSON lines, a
//! Markdown table or a Parquet file; and expanded display (`\x`), a record per row.

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
    /// A Markdown (GitHub) table: a header row, a `---` row, a row per result row; `|` in a value
    /// is escaped, NULL is empty.
    Markdown,
    /// A Parquet file (needs `-o FILE`): the file holds the last result that has columns.
    Parquet,
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
        OutputFormat::Markdown => write_markdown(schema, batches, out)?,
        OutputFormat::Parquet => {
            let mut buffer = Vec::new();
            let mut writer =
                parquet::arrow::ArrowWriter::try_new(&mut buffer, Arc::clone(schema), None)
                    .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            for batch in batches {
                writer
                    .write(batch)
                    .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            }
            writer
                .close()
                .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            out.write_all(&buffer)?;
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

/// Each value of `batches` as text, as the table format shows it (NULL empty).
fn cell_texts(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, ArrowError> {
    let options = arrow::util::display::FormatOptions::default();
    let mut rows = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .map(|f| f.value(row).to_string())
                    .collect(),
            );
        }
    }
    Ok(rows)
}

fn write_markdown(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    out: &mut dyn Write,
) -> Result<(), ArrowError> {
    let cell = |text: &str| text.replace('|', "\\|").replace('\n', "<br>");
    let names: Vec<String> = schema.fields().iter().map(|f| cell(f.name())).collect();
    writeln!(out, "| {} |", names.join(" | "))?;
    writeln!(out, "|{}", " --- |".repeat(names.len()))?;
    for row in cell_texts(batches)? {
        let row: Vec<String> = row.iter().map(|v| cell(v)).collect();
        writeln!(out, "| {} |", row.join(" | "))?;
    }
    Ok(())
}

/// Writes a result in expanded display (psql's `\x`): for each row a `-[ RECORD n ]-` line, then
/// a `column | value` line per column, the names padded to one width. Nothing for a result
/// without columns; `(0 rows)` for one without rows.
pub(crate) fn write_expanded(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    out: &mut dyn Write,
) -> Result<(), ArrowError> {
    if schema.fields().is_empty() {
        return Ok(());
    }
    let width = schema
        .fields()
        .iter()
        .map(|f| f.name().chars().count())
        .max()
        .unwrap_or(0);
    let rows = cell_texts(batches)?;
    if rows.is_empty() {
        writeln!(out, "(0 rows)")?;
    }
    for (i, row) in rows.iter().enumerate() {
        writeln!(out, "-[ RECORD {} ]-", i + 1)?;
        for (field, value) in schema.fields().iter().zip(row) {
            writeln!(out, "{:<width$} | {value}", field.name())?;
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
    fn markdown_is_a_github_table_with_escaped_bars() {
        let (schema, batch) = cities();
        let text = render(OutputFormat::Markdown, &schema, &[batch]);
        assert_eq!(
            text,
            "| id | city | lat |\n| --- | --- | --- |\n| 1 | Berlin, DE | 52.52 |\n| 2 |  |  |\n"
        );
        let schema = Arc::new(Schema::new(vec![Field::new("a|b", DataType::Utf8, true)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(StringArray::from(vec!["x|y"]))],
        )
        .unwrap();
        assert!(render(OutputFormat::Markdown, &schema, &[batch]).contains("| x\\|y |"));
    }

    #[test]
    fn parquet_reads_back_as_the_result() {
        let (schema, batch) = cities();
        let mut out = Vec::new();
        write_result(OutputFormat::Parquet, &schema, &[batch.clone()], &mut out).unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&out).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let read: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
        assert_eq!(read, vec![batch]);
    }

    #[test]
    fn expanded_display_is_a_record_per_row() {
        let (schema, batch) = cities();
        let mut out = Vec::new();
        write_expanded(&schema, &[batch], &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "-[ RECORD 1 ]-\nid   | 1\ncity | Berlin, DE\nlat  | 52.52\n\
             -[ RECORD 2 ]-\nid   | 2\ncity | \nlat  | \n"
        );
    }

    #[test]
    fn a_result_without_columns_prints_nothing() {
        let schema = Arc::new(Schema::empty());
        for format in [
            OutputFormat::Table,
            OutputFormat::Csv,
            OutputFormat::Json,
            OutputFormat::Markdown,
            OutputFormat::Parquet,
        ] {
            assert_eq!(render(format, &schema, &[]), "");
        }
    }
}
