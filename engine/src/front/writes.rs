//! Writes to session tables that the session runs itself rather than DataFusion's context:
//! `CREATE TABLE … AS SELECT` runs its query as a statement of its own kind (placed on the
//! devices, leased, bounded by the statement's limits, distributed on a cluster), and `TRUNCATE
//! TABLE` of a memory table empties it.
//!
//! DataFusion's `SessionContext` runs a CTAS's query itself, with none of accelsql's analyzer
//! rules: a GPU call in it was never placed, so a required one failed with "No GPU is present"
//! even on a node with GPUs. Here the query goes through the session's query path first and
//! the table is then made from its rows, with DataFusion's rules for `IF NOT EXISTS`, `OR
//! REPLACE`, constraints and column defaults.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::datasource::{MemTable, provider_as_source, source_as_provider};
use datafusion::logical_expr::{
    CreateMemoryTable, DdlStatement, DmlStatement, LogicalPlan, LogicalPlanBuilder, WriteOp,
};

use crate::core::error::Result;
use crate::plan::placement::has_udf_calls;

/// The `CREATE TABLE … AS` and its query, when the query calls accelsql UDFs and will run,
/// given whether the table exists. `None` for other plans; for a CTAS without UDF calls, which
/// DataFusion's context runs as it always has (the table keeps the query's output partitions,
/// which upstream's EXPLAIN tests show); and for a CTAS that ends without running its query
/// (the table exists and is not replaced, a temporary table, `IF NOT EXISTS` with `OR
/// REPLACE`): the context then returns at once or says why.
pub(crate) fn ctas_query(
    plan: &LogicalPlan,
    exists: bool,
) -> Option<(CreateMemoryTable, LogicalPlan)> {
    let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) = plan else {
        return None;
    };
    let runs = !c.temporary && !(c.if_not_exists && c.or_replace) && (!exists || c.or_replace);
    (runs && has_udf_calls(&c.input)).then(|| (c.clone(), c.input.as_ref().clone()))
}

/// The `CREATE TABLE … AS` of `create` with its query replaced by the rows it produced, for
/// DataFusion's context to make the table from (a scan of those rows, in one partition).
pub(crate) fn ctas_with_rows(
    create: CreateMemoryTable,
    query: &LogicalPlan,
    rows: Vec<RecordBatch>,
) -> Result<LogicalPlan> {
    let schema = Arc::clone(query.schema().inner());
    let rows = MemTable::try_new(schema, vec![rows])?;
    let scan =
        LogicalPlanBuilder::scan("ctas_rows", provider_as_source(Arc::new(rows)), None)?.build()?;
    Ok(LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(
        CreateMemoryTable {
            input: Arc::new(scan),
            ..create
        },
    )))
}

/// `TRUNCATE TABLE t` of a memory table as the `DELETE FROM t` (no condition) that memory
/// tables run; other plans, and truncates of other tables (DataFusion then says which cannot),
/// unchanged.
pub(crate) fn truncate_as_delete(plan: LogicalPlan) -> LogicalPlan {
    let LogicalPlan::Dml(dml) = &plan else {
        return plan;
    };
    let is_memory =
        source_as_provider(&dml.target).is_ok_and(|t| t.downcast_ref::<MemTable>().is_some());
    if dml.op != WriteOp::Truncate || !is_memory {
        return plan;
    }
    LogicalPlan::Dml(DmlStatement::new(
        dml.table_name.clone(),
        Arc::clone(&dml.target),
        WriteOp::Delete,
        Arc::clone(&dml.input),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use datafusion::arrow::array::Int64Array;
    use datafusion::logical_expr::ScalarUDF;
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::udf::AccelScalarUdf;

    /// A context with the fixture UDF `cpu_probe()`, an accelsql UDF.
    fn context() -> SessionContext {
        let ctx = SessionContext::new();
        for udf in crate::testing::fixtures().unwrap() {
            ctx.register_udf(ScalarUDF::new_from_impl(AccelScalarUdf::new(Arc::new(udf))));
        }
        ctx
    }

    async fn plan(ctx: &SessionContext, sql: &str) -> LogicalPlan {
        ctx.state().create_logical_plan(sql).await.unwrap()
    }

    #[tokio::test]
    async fn a_ctas_with_udf_calls_runs_its_query_unless_the_table_stays() {
        let ctx = context();
        let create = plan(&ctx, "CREATE TABLE t AS SELECT cpu_probe() AS a").await;
        let (c, query) = ctas_query(&create, false).unwrap();
        assert_eq!(c.name.table(), "t");
        assert_eq!(query.schema().field(0).name(), "a");
        // The table exists: only OR REPLACE runs the query.
        assert!(ctas_query(&create, true).is_none());
        let replace = plan(&ctx, "CREATE OR REPLACE TABLE t AS SELECT cpu_probe() AS a").await;
        assert!(ctas_query(&replace, true).is_some());
        let keep = plan(
            &ctx,
            "CREATE TABLE IF NOT EXISTS t AS SELECT cpu_probe() AS a",
        )
        .await;
        assert!(ctas_query(&keep, true).is_none());
        assert!(ctas_query(&keep, false).is_some());
        // A call in a subquery counts; a CTAS without calls is DataFusion's.
        let nested = "CREATE TABLE t AS SELECT 1 AS a WHERE 'x' IN (SELECT cpu_probe())";
        assert!(ctas_query(&plan(&ctx, nested).await, false).is_some());
        let plain = plan(&ctx, "CREATE TABLE t AS SELECT 1 AS a").await;
        assert!(ctas_query(&plain, false).is_none());
        assert!(ctas_query(&plan(&ctx, "SELECT cpu_probe()").await, false).is_none());
    }

    #[tokio::test]
    async fn the_table_is_made_from_the_rows_the_query_produced() {
        let ctx = context();
        let create = plan(
            &ctx,
            "CREATE TABLE t AS SELECT CAST(length(cpu_probe()) AS BIGINT) AS a",
        )
        .await;
        let (c, query) = ctas_query(&create, false).unwrap();
        let schema = Arc::clone(query.schema().inner());
        let rows =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![7, 8]))]).unwrap();
        let made = ctas_with_rows(c, &query, vec![rows]).unwrap();
        ctx.execute_logical_plan(made)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let out = ctx
            .sql("SELECT sum(a) FROM t")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let sum = out[0]
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(sum.value(0), 15);
    }

    #[tokio::test]
    async fn truncate_of_a_memory_table_deletes_every_row() {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let truncate = plan(&ctx, "TRUNCATE TABLE t").await;
        let LogicalPlan::Dml(dml) = truncate_as_delete(truncate) else {
            panic!("not a DML plan");
        };
        assert_eq!(dml.op, WriteOp::Delete);
        // Other statements are left as they are.
        let select = plan(&ctx, "SELECT 1").await;
        assert!(matches!(
            truncate_as_delete(select),
            LogicalPlan::Projection(_)
        ));
    }
}
