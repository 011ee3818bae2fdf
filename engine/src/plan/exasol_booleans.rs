//! The Exasol dialect's booleans among other types: a BOOLEAN turned into a string is `TRUE` or
//! `FALSE` (DataFusion writes `true`/`false`), in a `CAST`, a concatenation or any other implicit
//! conversion; and where `NVL`, `COALESCE` or `IFNULL` mix a BOOLEAN with numbers, the numbers
//! become BOOLEANs (0 is FALSE, any other TRUE) and so does the result — DataFusion's coercion
//! would turn both into strings. The analyzer rule runs after type coercion, so it sees the
//! casts coercion added.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::logical_expr::expr::{Case, Cast, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, Projection, lit};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule of the Exasol dialect's booleans (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct ExasolBooleans;

impl AnalyzerRule for ExasolBooleans {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let rewritten = plan.transform_up_with_subqueries(rewrite_node)?;
        if !rewritten.transformed {
            return Ok(rewritten.data);
        }
        // A type that changed (NVL's) changes the schemas of the nodes above it too.
        rewritten
            .data
            .transform_up_with_subqueries(|node| with_new_types(node).map(Transformed::yes))
            .data()
    }

    fn name(&self) -> &str {
        "accelsql_exasol_booleans"
    }
}

/// The functions that give the first of their arguments that is not NULL.
const FIRST_NOT_NULL: [&str; 3] = ["nvl", "coalesce", "ifnull"];

fn is_string(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

fn rewrite_node(node: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    let inputs = super::InputSchema::of(&node);
    if inputs.is_empty() {
        return Ok(Transformed::no(node));
    }
    let schema = || inputs.get();
    let preserver = NamePreserver::new(&node);
    let rewritten = node.map_expressions(|expr| {
        let saved = preserver.save(&expr);
        let out = expr.transform_down(|e| rewrite_expr(e, schema()))?;
        Ok(if out.transformed {
            out.update_data(|e| saved.restore(e))
        } else {
            out
        })
    })?;
    Ok(rewritten)
}

/// `plan` with its schema's types as its rewritten expressions give them. A projection keeps its
/// fields' names and qualifiers as they were (a rebuilt projection would check anew names
/// DataFusion's own planning let stand, such as a cast beside the column it casts).
fn with_new_types(plan: LogicalPlan) -> DfResult<LogicalPlan> {
    let LogicalPlan::Projection(projection) = plan else {
        return plan.recompute_schema();
    };
    let input_schema = projection.input.schema();
    let fields = projection
        .schema
        .iter()
        .zip(&projection.expr)
        .map(|((qualifier, field), expr)| {
            let (_, typed) = expr.to_field(input_schema)?;
            let field = field
                .as_ref()
                .clone()
                .with_data_type(typed.data_type().clone())
                .with_nullable(typed.is_nullable() || field.is_nullable());
            Ok((qualifier.cloned(), Arc::new(field)))
        })
        .collect::<DfResult<Vec<_>>>()?;
    let schema = DFSchema::new_with_metadata(fields, projection.schema.metadata().clone())?;
    Ok(LogicalPlan::Projection(Projection::try_new_with_schema(
        projection.expr,
        projection.input,
        Arc::new(schema),
    )?))
}

/// `expr` without the casts to a string type coercion put around it.
fn uncast(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(Cast { expr, field }) if is_string(field.data_type()) => uncast(expr),
        other => other,
    }
}

fn rewrite_expr(expr: Expr, schema: &DFSchema) -> DfResult<Transformed<Expr>> {
    let type_of = |e: &Expr| e.get_type(schema).ok();
    match expr {
        Expr::ScalarFunction(ScalarFunction { func, args })
            if FIRST_NOT_NULL.contains(&func.name()) =>
        {
            let types: Vec<Option<DataType>> = args.iter().map(|a| type_of(uncast(a))).collect();
            let mixes_booleans = types.iter().any(|t| t == &Some(DataType::Boolean))
                && types.iter().all(|t| {
                    t.as_ref()
                        .is_some_and(|t| *t == DataType::Boolean || t.is_numeric() || t.is_null())
                })
                && args.iter().any(|a| matches!(a, Expr::Cast(_)));
            if !mixes_booleans {
                return Ok(Transformed::no(Expr::ScalarFunction(ScalarFunction {
                    func,
                    args,
                })));
            }
            let args = args
                .iter()
                .map(|a| {
                    let inner = uncast(a).clone();
                    match type_of(&inner) {
                        Some(DataType::Boolean) => inner,
                        _ => Expr::Cast(Cast::new(Box::new(inner), DataType::Boolean)),
                    }
                })
                .collect();
            Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction {
                func,
                args,
            })))
        }
        Expr::Cast(Cast { expr, field })
            if is_string(field.data_type()) && type_of(&expr) == Some(DataType::Boolean) =>
        {
            // CASE WHEN b THEN 'TRUE' WHEN NOT b THEN 'FALSE' END: NULL stays NULL.
            let text = |s: &str| Expr::Cast(Cast::new(Box::new(lit(s)), field.data_type().clone()));
            Ok(Transformed::yes(Expr::Case(Case {
                expr: None,
                when_then_expr: vec![
                    (Box::new((*expr).clone()), Box::new(text("TRUE"))),
                    (Box::new(Expr::Not(expr)), Box::new(text("FALSE"))),
                ],
                else_expr: None,
            })))
        }
        other => Ok(Transformed::no(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn rows(sql: &str) -> Vec<String> {
        let ctx = SessionContext::new();
        ctx.add_analyzer_rule(std::sync::Arc::new(ExasolBooleans));
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        text.lines().map(str::to_string).collect()
    }

    #[tokio::test]
    async fn booleans_as_text_are_upper_case_and_null_stays_null() {
        let out = rows(
            "SELECT CAST(b AS VARCHAR) AS s, b || '!' AS c, arrow_typeof(CAST(b AS VARCHAR)) AS t \
             FROM (VALUES (true), (false), (NULL)) v(b)",
        )
        .await;
        assert!(out.iter().any(|l| l.contains("| TRUE  | TRUE!")), "{out:?}");
        assert!(
            out.iter().any(|l| l.contains("| FALSE | FALSE!")),
            "{out:?}"
        );
        assert!(out.iter().all(|l| !l.contains("true")), "{out:?}");
    }

    #[tokio::test]
    async fn nvl_of_a_boolean_and_a_number_is_a_boolean() {
        let out = rows(
            "SELECT nvl(b, 1) AS n, arrow_typeof(nvl(b, 0)) AS t, ifnull(b, 0) AS c \
             FROM (VALUES (CAST(NULL AS BOOLEAN))) v(b)",
        )
        .await;
        assert!(
            out.iter().any(|l| l.contains("| true | Boolean | false |")),
            "{out:?}"
        );
        // A string beside a BOOLEAN keeps DataFusion's reading (a string).
        let out = rows("SELECT arrow_typeof(nvl(true, 'x')) AS t").await;
        assert!(out.iter().any(|l| l.contains("Utf8")), "{out:?}");
    }
}
