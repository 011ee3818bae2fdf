//! The Exasol dialect on a statement's text (`SET accelsql.sql_dialect = 'exasol'`), before it is
//! parsed: a quoted identifier names the engine's name of the Exasol name it writes
//! (`core/names.rs`: `"A"` is the engine's `a`, what unquoted `a` folds to; `"a"` is `A`), and
//! the empty string literal `''` is NULL, as Exasol has no empty strings. [`exasol_result`]
//! shows a result as Exasol would: its names (`core/names.rs`), no empty strings, and
//! `DESCRIBE`'s rows with Exasol's names and types.
//!
//! Unquoted names are left to DataFusion, which folds them to lower case: the engine's name of
//! the upper-case name Exasol folds them to. The name after `CONNECTION` or `AT` (a connection,
//! which the catalog keeps as Exasol names it) is left as written.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::StreamExt;

use crate::core::names::{exasol_field_type, exasol_shown_name, exasol_type_name, swap_case};
use crate::front::tokens::written_tokens;
use crate::plan::empty_strings::{empty_strings_as_null, nullable_strings};

/// `text` as the engine reads an Exasol-dialect statement (see the module docs); unchanged
/// when it has nothing to change (or does not tokenize: the parser then says why).
pub fn exasol_text(text: &str) -> String {
    let Some(mut tokens) = written_tokens(text) else {
        return text.to_string();
    };
    // `SET x = ''` sets an empty value (the way to clear a setting), not NULL.
    let first = tokens.iter().find_map(|t| match t {
        Token::Word(w) => Some(w.keyword),
        Token::Whitespace(_) => None,
        _ => Some(Keyword::NoKeyword),
    });
    let sets = matches!(first, Some(Keyword::SET | Keyword::RESET));
    // A connection's address, user and password keep `''` (Exasol keeps an empty address).
    let words: Vec<String> = tokens
        .iter()
        .filter_map(|t| match t {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            Token::Whitespace(_) => None,
            _ => Some(String::new()),
        })
        .take(4)
        .collect();
    let connection = matches!(
        words.iter().map(String::as_str).collect::<Vec<_>>()[..],
        ["CREATE" | "ALTER", "CONNECTION", ..] | ["CREATE", "OR", "REPLACE", "CONNECTION"]
    );
    let mut changed = false;
    let mut after_connection = false;
    for token in &mut tokens {
        match token {
            Token::Whitespace(_) => continue,
            Token::Word(w) if w.quote_style == Some('"') && !after_connection => {
                let swapped = swap_case(&w.value);
                if swapped != w.value {
                    w.value = swapped;
                    changed = true;
                }
            }
            Token::SingleQuotedString(s) if s.is_empty() && !sets && !connection => {
                *token = Token::make_keyword("NULL");
                changed = true;
            }
            // A number with an exponent is a DOUBLE in Exasol (`1e35`, `-1.7e-308`), where
            // the dialect reads other numbers as exact decimals.
            Token::Number(n, _) if n.contains(['e', 'E']) => {
                *token = Token::make_word(&format!("CAST('{n}' AS DOUBLE)"), None);
                changed = true;
            }
            _ => {}
        }
        after_connection = matches!(
            token,
            Token::Word(w) if w.quote_style.is_none()
                && matches!(w.keyword, Keyword::CONNECTION | Keyword::AT)
        );
    }
    if !changed {
        return text.to_string();
    }
    tokens.iter().map(|t| t.to_string()).collect()
}

/// A name as the Exasol dialect writes it in a message: the Exasol name of engine name `name`,
/// quoted when unquoted SQL could not say it.
fn shown_in_message(name: &str) -> String {
    let shown = swap_case(name);
    if shown.chars().any(char::is_lowercase) {
        format!("\"{shown}\"")
    } else {
        shown
    }
}

/// A planning error as an Exasol-dialect session shows it: a column or table that does not
/// exist is named as the statement named it (Exasol's "object … not found"), not by the
/// engine's name for it.
pub(crate) fn exasol_plan_error(e: DataFusionError) -> DataFusionError {
    use datafusion::common::SchemaError;
    let missing = match e.find_root() {
        DataFusionError::SchemaError(inner, _) => match inner.as_ref() {
            SchemaError::FieldNotFound { field, .. } => Some(match &field.relation {
                Some(r) => format!(
                    "{}.{}",
                    shown_in_message(r.table()),
                    shown_in_message(&field.name)
                ),
                None => shown_in_message(&field.name),
            }),
            _ => None,
        },
        DataFusionError::Plan(message) => {
            // DataFusion's "Invalid function 'F'.\nDid you mean 'g'?": Exasol names the
            // function as the statement wrote it.
            let function = message
                .strip_prefix("Invalid function '")
                .and_then(|m| m.split_once("'."))
                .map(|(name, _)| {
                    format!("function or script {} not found", shown_in_message(name))
                });
            if let Some(function) = function {
                return DataFusionError::Plan(function);
            }
            message
                .strip_prefix("table '")
                .and_then(|m| m.strip_suffix("' not found"))
                .map(|name| shown_in_message(name.rsplit('.').next().unwrap_or(name)))
        }
        _ => None,
    };
    match missing {
        Some(name) => DataFusionError::Plan(format!("object {name} not found")),
        None => e,
    }
}

/// `stream` as an Exasol-dialect session shows it: its columns named as Exasol names them, its
/// empty strings NULL, and for `DESCRIBE` of a table of schema `described`, each column's name
/// and type as Exasol shows them (a declared type, `VARCHAR(10) UTF8`, as declared).
pub(crate) fn exasol_result(
    stream: SendableRecordBatchStream,
    described: Option<SchemaRef>,
) -> SendableRecordBatchStream {
    let input = stream.schema();
    let fields: Vec<Field> = nullable_strings(&input)
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_name(exasol_shown_name(f.name())))
        .collect();
    let schema: SchemaRef = Arc::new(Schema::new_with_metadata(fields, input.metadata().clone()));
    let out = Arc::clone(&schema);
    Box::pin(RecordBatchStreamAdapter::new(
        out,
        stream.map(move |batch| {
            let batch = batch?;
            let batch = if let Some(described) = &described {
                described_as_exasol(&batch, described)?
            } else {
                batch
            };
            empty_strings_as_null(&batch, &schema).map_err(DataFusionError::from)
        }),
    ))
}

/// `DESCRIBE`'s rows (`column_name`, `data_type`, …) of a table of schema `described`, with
/// Exasol's names and types: row `i` describes the table's column `i`.
fn described_as_exasol(
    batch: &RecordBatch,
    described: &Schema,
) -> datafusion::error::Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    let schema = batch.schema();
    for (i, field) in schema.fields().iter().enumerate() {
        let Some(values) = columns[i].as_any().downcast_ref::<StringArray>() else {
            continue;
        };
        let mapped: StringArray = match field.name().as_str() {
            "column_name" => values.iter().map(|v| v.map(swap_case)).collect(),
            "data_type" => values
                .iter()
                .enumerate()
                .map(|(row, v)| {
                    v.map(|t| match described.fields().get(row) {
                        Some(column) => exasol_field_type(column).name,
                        None => t
                            .parse::<DataType>()
                            .map(|t| exasol_type_name(&t))
                            .unwrap_or_else(|_| t.to_string()),
                    })
                })
                .collect(),
            _ => continue,
        };
        columns[i] = Arc::new(mapped);
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn exponent_literals_are_doubles_and_connections_keep_empty_strings() {
        assert_eq!(
            super::exasol_text("SELECT -1.7e-308, 1E35 - 1, 1.5, 'e5'"),
            "SELECT -CAST('1.7e-308' AS DOUBLE), CAST('1E35' AS DOUBLE) - 1, 1.5, 'e5'"
        );
        assert_eq!(
            super::exasol_text("CREATE OR REPLACE CONNECTION c TO '' USER 'u' IDENTIFIED BY ''"),
            "CREATE OR REPLACE CONNECTION c TO '' USER 'u' IDENTIFIED BY ''"
        );
        assert_eq!(super::exasol_text("SELECT ''"), "SELECT NULL");
    }

    use super::*;

    #[test]
    fn quoted_names_swap_case_and_unquoted_ones_stay() {
        assert_eq!(
            exasol_text(r#"SELECT "A", a, "a", "MixEd" FROM "T" t"#),
            r#"SELECT "a", a, "A", "mIXeD" FROM "t" t"#
        );
        // Strings and comments keep their text.
        let kept = "SELECT 'A \"b\"' -- \"C\"\nFROM t";
        assert_eq!(exasol_text(kept), kept);
    }

    #[test]
    fn the_empty_string_is_null_except_in_set() {
        assert_eq!(
            exasol_text("SELECT '' IS NULL, 'x', ''''"),
            "SELECT NULL IS NULL, 'x', ''''"
        );
        assert_eq!(
            exasol_text("SET accelsql.udf_timeout = ''"),
            "SET accelsql.udf_timeout = ''"
        );
    }

    #[test]
    fn connection_names_are_kept_as_written() {
        assert_eq!(
            exasol_text(r#"IMPORT INTO "t" FROM SCRIPT s AT "my_conn""#),
            r#"IMPORT INTO "T" FROM SCRIPT s AT "my_conn""#
        );
        assert_eq!(
            exasol_text(r#"CREATE CONNECTION "c" TO 'x'"#),
            r#"CREATE CONNECTION "c" TO 'x'"#
        );
    }
}
