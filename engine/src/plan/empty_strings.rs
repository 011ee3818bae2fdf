//! The Exasol dialect's empty strings (`SET accelsql.sql_dialect = 'exasol'`): Exasol has none,
//! a string of length 0 is NULL. The analyzer rule here makes every string the plan produces
//! follow that: `''` literals are NULL, a string-valued function's result (scripts' and Rust
//! UDFs' included) is `NULLIF(result, '')`, and a table's string columns are read through
//! `NULLIF(column, '')` (files and tables written by other sessions). The session maps what
//! is left (an aggregate's or an `EMITS` call's output) on the result's rows, with
//! [`empty_strings_as_null`].

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, LargeStringArray, StringArray};
use datafusion::arrow::array::{RecordBatch, StringViewArray};
use datafusion::arrow::compute::kernels::nullif::nullif;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::metadata::FieldMetadata;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    DmlStatement, Expr, ExprSchemable, LogicalPlan, Projection, WriteOp, lit,
};
use datafusion::optimizer::AnalyzerRule;

use crate::core::names::{SQL_TYPE_METADATA_KEY, exasol_literal_type};

/// The analyzer rule of the Exasol dialect's empty strings (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct EmptyStringsAreNull;

impl AnalyzerRule for EmptyStringsAreNull {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        // DELETE and UPDATE read their target to find the rows they change: as it is.
        let wrap_scans = !matches!(
            &plan,
            LogicalPlan::Dml(DmlStatement {
                op: WriteOp::Delete | WriteOp::Update,
                ..
            })
        );
        plan.transform_up_with_subqueries(|node| rewrite_node(node, wrap_scans))
            .data()
    }

    fn name(&self) -> &str {
        "accelsql_exasol_empty_strings"
    }
}

fn is_string(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

/// The empty string of `data_type`.
fn empty_of(data_type: &DataType) -> Option<ScalarValue> {
    match data_type {
        DataType::Utf8 => Some(ScalarValue::Utf8(Some(String::new()))),
        DataType::LargeUtf8 => Some(ScalarValue::LargeUtf8(Some(String::new()))),
        DataType::Utf8View => Some(ScalarValue::Utf8View(Some(String::new()))),
        _ => None,
    }
}

fn nullif_empty(expr: Expr, data_type: &DataType) -> Expr {
    match empty_of(data_type) {
        Some(empty) => datafusion::functions::core::expr_fn::nullif(expr, lit(empty)),
        None => expr,
    }
}

fn rewrite_node(node: LogicalPlan, wrap_scans: bool) -> DfResult<Transformed<LogicalPlan>> {
    if let LogicalPlan::TableScan(scan) = &node {
        let schema = Arc::clone(&scan.projected_schema);
        if !wrap_scans || !schema.fields().iter().any(|f| is_string(f.data_type())) {
            return Ok(Transformed::no(node));
        }
        let exprs: Vec<Expr> = schema
            .iter()
            .map(|(qualifier, field)| {
                let column = Expr::Column(datafusion::common::Column::new(
                    qualifier.cloned(),
                    field.name(),
                ));
                if is_string(field.data_type()) {
                    // The column's declared type (`VARCHAR(10)`) stays with it.
                    let metadata = (!field.metadata().is_empty())
                        .then(|| FieldMetadata::from(field.metadata().clone()));
                    nullif_empty(column, field.data_type()).alias_qualified_with_metadata(
                        qualifier.cloned(),
                        field.name(),
                        metadata,
                    )
                } else {
                    column
                }
            })
            .collect();
        let projection = Projection::try_new(exprs, Arc::new(node))?;
        return Ok(Transformed::yes(LogicalPlan::Projection(projection)));
    }
    // The inputs' schema, merged only when an expression needs its type (a function call).
    let inputs = super::InputSchema::of(&node);
    let schema = || inputs.get();
    let is_projection = matches!(node, LogicalPlan::Projection(_));
    let preserver = NamePreserver::new(&node);
    let rewritten = node.map_expressions(|expr| {
        let saved = preserver.save(&expr);
        let mut out = expr.transform_up(|e| rewrite_expr(e, &schema))?;
        if is_projection {
            out = out.transform_data(typed_literal)?;
        }
        Ok(if out.transformed {
            out.update_data(|e| saved.restore(e))
        } else {
            out
        })
    })?;
    if rewritten.transformed {
        rewritten.map_data(|plan| plan.recompute_schema())
    } else {
        Ok(rewritten)
    }
}

/// A select item that is a string literal (`SELECT 'abc'`, `'abc' AS x`) with the type Exasol
/// gives it (`CHAR(3) ASCII`) as its field's metadata.
fn typed_literal(expr: Expr) -> DfResult<Transformed<Expr>> {
    match expr {
        Expr::Alias(alias) => Ok(typed_literal(*alias.expr)?.update_data(|inner| {
            Expr::Alias(datafusion::logical_expr::expr::Alias {
                expr: Box::new(inner),
                ..alias
            })
        })),
        Expr::Literal(value, None) => {
            let text = match &value {
                ScalarValue::Utf8(Some(s))
                | ScalarValue::LargeUtf8(Some(s))
                | ScalarValue::Utf8View(Some(s))
                    if !s.is_empty() =>
                {
                    exasol_literal_type(s)
                }
                _ => return Ok(Transformed::no(Expr::Literal(value, None))),
            };
            let metadata =
                FieldMetadata::from(BTreeMap::from([(SQL_TYPE_METADATA_KEY.to_string(), text)]));
            Ok(Transformed::yes(Expr::Literal(value, Some(metadata))))
        }
        other => Ok(Transformed::no(other)),
    }
}

fn rewrite_expr<'a>(expr: Expr, schema: &dyn Fn() -> &'a DFSchema) -> DfResult<Transformed<Expr>> {
    match &expr {
        Expr::Literal(value, metadata) => match value {
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
                if s.is_empty() =>
            {
                let null = ScalarValue::try_from(value.data_type())?;
                Ok(Transformed::yes(Expr::Literal(null, metadata.clone())))
            }
            _ => Ok(Transformed::no(expr)),
        },
        Expr::ScalarFunction(f) if f.func.name() != "nullif" => {
            let data_type = match expr.get_type(schema()) {
                Ok(t) => t,
                Err(_) => return Ok(Transformed::no(expr)),
            };
            if is_string(&data_type) {
                Ok(Transformed::yes(nullif_empty(expr, &data_type)))
            } else {
                Ok(Transformed::no(expr))
            }
        }
        _ => Ok(Transformed::no(expr)),
    }
}

/// `schema` with its string columns nullable (an empty string in them becomes NULL).
pub(crate) fn nullable_strings(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let f = f.as_ref().clone();
            if is_string(f.data_type()) {
                f.with_nullable(true)
            } else {
                f
            }
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `batch` with each empty string of its string columns NULL, under `schema` (from
/// [`nullable_strings`]).
pub(crate) fn empty_strings_as_null(
    batch: &RecordBatch,
    schema: &SchemaRef,
) -> datafusion::arrow::error::Result<RecordBatch> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| {
            let empty: Option<BooleanArray> = match c.data_type() {
                DataType::Utf8 => c
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .map(|a| a.iter().map(|v| v.map(str::is_empty)).collect()),
                DataType::LargeUtf8 => c
                    .as_any()
                    .downcast_ref::<LargeStringArray>()
                    .map(|a| a.iter().map(|v| v.map(str::is_empty)).collect()),
                DataType::Utf8View => c
                    .as_any()
                    .downcast_ref::<StringViewArray>()
                    .map(|a| a.iter().map(|v| v.map(str::is_empty)).collect()),
                _ => None,
            };
            match empty {
                Some(mask) if mask.true_count() > 0 => nullif(c.as_ref(), &mask),
                _ => Ok(Arc::clone(c)),
            }
        })
        .collect::<datafusion::arrow::error::Result<_>>()?;
    RecordBatch::try_new(Arc::clone(schema), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    #[test]
    fn empty_strings_of_a_batch_become_null() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, false),
            Field::new("v", DataType::Utf8View, true),
            Field::new("n", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(vec!["", "a"])),
                Arc::new(StringViewArray::from(vec![Some("b"), Some("")])),
                Arc::new(Int64Array::from(vec![1, 2])),
            ],
        )
        .unwrap();
        let out_schema = nullable_strings(&schema);
        assert!(out_schema.field(0).is_nullable());
        assert!(!out_schema.field(2).is_nullable());
        let out = empty_strings_as_null(&batch, &out_schema).unwrap();
        assert_eq!(out.column(0).null_count(), 1);
        assert!(out.column(0).is_null(0));
        assert!(out.column(1).is_null(1));
        assert_eq!(out.column(2).null_count(), 0);
    }
}
