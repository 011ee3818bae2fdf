//! The Exasol dialect's strings in arithmetic (`SET accelsql.sql_dialect = 'exasol'`): Exasol
//! converts a string operand of `+ - * / %` to a number, where DataFusion fails with "Cannot
//! coerce arithmetic expression Utf8 + Int64". The expression planner here, registered for the
//! Exasol dialect's statements, sees each binary operation as SQL is planned (before any type
//! is checked) and casts such an operand (a string column or expression; literals were made
//! numbers by the front end's conversions pass) to `DOUBLE`. A value that is no number fails
//! the statement with the cast's error, as in Exasol.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{Expr, ExprSchemable, cast};
use datafusion::sql::sqlparser::ast::BinaryOperator;

/// The expression planner of the Exasol dialect's strings in arithmetic (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct StringsInArithmetic;

impl ExprPlanner for StringsInArithmetic {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> DfResult<PlannerResult<RawBinaryExpr>> {
        let arithmetic = matches!(
            expr.op,
            BinaryOperator::Plus
                | BinaryOperator::Minus
                | BinaryOperator::Multiply
                | BinaryOperator::Divide
                | BinaryOperator::Modulo
        );
        if !arithmetic {
            return Ok(PlannerResult::Original(expr));
        }
        let type_of = |e: &Expr| e.get_type(schema).ok();
        let (left_type, right_type) = (type_of(&expr.left), type_of(&expr.right));
        let numeric = |t: &Option<DataType>| t.as_ref().is_some_and(DataType::is_numeric);
        let string = |t: &Option<DataType>| t.as_ref().is_some_and(is_string);
        // A string beside a number, or two strings (`s1 + s2` adds their numbers in Exasol).
        let cast_left = string(&left_type) && (numeric(&right_type) || string(&right_type));
        let cast_right = string(&right_type) && (numeric(&left_type) || string(&left_type));
        let to_number = |e: Expr, yes: bool| if yes { cast(e, DataType::Float64) } else { e };
        Ok(PlannerResult::Original(RawBinaryExpr {
            op: expr.op,
            left: to_number(expr.left, cast_left),
            right: to_number(expr.right, cast_right),
        }))
    }
}

fn is_string(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use datafusion::execution::FunctionRegistry;
    use datafusion::logical_expr::LogicalPlan;
    use datafusion::prelude::SessionContext;

    use super::*;

    async fn planned(sql: &str, exasol: bool) -> DfResult<LogicalPlan> {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (s VARCHAR, n BIGINT) AS VALUES ('2.5', 4)")
            .await?
            .collect()
            .await?;
        let mut state = ctx.state();
        if exasol {
            state.register_expr_planner(Arc::new(StringsInArithmetic))?;
        }
        state.create_logical_plan(sql).await
    }

    #[tokio::test]
    async fn string_operands_of_arithmetic_become_doubles_in_the_exasol_dialect() {
        let plan = planned("SELECT s + n, n * s, s - s, s || 'x' FROM t", true)
            .await
            .unwrap();
        let text = plan.display_indent().to_string();
        assert!(text.contains("CAST(t.s AS Float64) + t.n"), "{text}");
        assert!(text.contains("t.n * CAST(t.s AS Float64)"), "{text}");
        assert!(
            text.contains("CAST(t.s AS Float64) - CAST(t.s AS Float64)"),
            "{text}"
        );
        // Not arithmetic: unchanged.
        assert!(text.contains("t.s || Utf8(\"x\")"), "{text}");
        // The default dialect: DataFusion's error.
        let plain = planned("SELECT s + n FROM t", false).await.unwrap_err();
        assert!(plain.to_string().contains("Cannot coerce"), "{plain}");
    }
}
