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
use datafusion::arrow::datatypes::{Field, SchemaRef};
use datafusion::common::metadata::FieldMetadata;
use datafusion::common::{Column, DFSchema, TableReference};
use datafusion::datasource::{MemTable, provider_as_source, source_as_provider};
use datafusion::logical_expr::{
    CreateMemoryTable, DdlStatement, DmlStatement, EmptyRelation, Expr, LogicalPlan,
    LogicalPlanBuilder, WriteOp,
};

use crate::core::error::Result;
use crate::core::names::SQL_TYPE_METADATA_KEY;
use crate::plan::placement::has_udf_calls;

/// The `CREATE TABLE … AS` and its query, when the query calls accelsql UDFs (or `always`: the
/// Exasol dialect, whose rules every query must go through) and will run, given whether the
/// table exists. `None` for other plans; for a CTAS without UDF calls, which
/// DataFusion's context runs as it always has (the table keeps the query's output partitions,
/// which upstream's EXPLAIN tests show); and for a CTAS that ends without running its query
/// (the table exists and is not replaced, a temporary table, `IF NOT EXISTS` with `OR
/// REPLACE`): the context then returns at once or says why.
pub(crate) fn ctas_query(
    plan: &LogicalPlan,
    exists: bool,
    always: bool,
) -> Option<(CreateMemoryTable, LogicalPlan)> {
    let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) = plan else {
        return None;
    };
    let runs = !c.temporary && !(c.if_not_exists && c.or_replace) && (!exists || c.or_replace);
    (runs && (always || has_udf_calls(&c.input))).then(|| (c.clone(), c.input.as_ref().clone()))
}

/// The `CREATE TABLE … AS` of `create` with its query replaced by the rows it produced
/// (`schema`: the executed query's, with the field metadata its plan gave), for DataFusion's
/// context to make the table from (a scan of those rows, in one partition).
pub(crate) fn ctas_with_rows(
    create: CreateMemoryTable,
    schema: SchemaRef,
    rows: Vec<RecordBatch>,
) -> Result<LogicalPlan> {
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

/// A `CREATE TABLE t (a VARCHAR(10), …)` whose columns carry the SQL types they were declared
/// with (`declared`, engine names with Exasol's type names) as field metadata
/// ([`SQL_TYPE_METADATA_KEY`]), so the table, its scans and its results keep them; other plans
/// unchanged. (Arrow has no `VARCHAR(10)` or `CHAR(3)`; `DESCRIBE` and `EXA_ALL_COLUMNS` show
/// what was declared.)
pub(crate) fn with_declared_types(
    plan: LogicalPlan,
    declared: &[(String, String)],
) -> Result<LogicalPlan> {
    let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) = &plan else {
        return Ok(plan);
    };
    if declared.is_empty() {
        return Ok(plan);
    }
    let typed = |field: &Arc<Field>| -> Option<FieldMetadata> {
        let (_, sql_type) = declared.iter().find(|(name, _)| name == field.name())?;
        let mut metadata = field.metadata().clone();
        metadata.insert(SQL_TYPE_METADATA_KEY.to_string(), sql_type.clone());
        Some(FieldMetadata::from(metadata))
    };
    let input = match create.input.as_ref() {
        // `CREATE TABLE t (a INT, …)`: the columns' fields themselves.
        LogicalPlan::EmptyRelation(empty) => {
            let fields: Vec<(Option<TableReference>, Arc<Field>)> = empty
                .schema
                .iter()
                .map(|(qualifier, field)| {
                    let field = match typed(field) {
                        Some(metadata) => {
                            Arc::new(field.as_ref().clone().with_metadata(metadata.to_hashmap()))
                        }
                        None => Arc::clone(field),
                    };
                    (qualifier.cloned(), field)
                })
                .collect();
            let schema = DFSchema::new_with_metadata(fields, empty.schema.metadata().clone())?;
            LogicalPlan::EmptyRelation(EmptyRelation {
                produce_one_row: empty.produce_one_row,
                schema: Arc::new(schema),
            })
        }
        // `CREATE TABLE t (a INT, …) AS …`: the rows go through a projection that types them.
        input => {
            let exprs: Vec<Expr> = input
                .schema()
                .iter()
                .map(|(qualifier, field)| {
                    let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
                    match typed(field) {
                        Some(metadata) => column.alias_qualified_with_metadata(
                            qualifier.cloned(),
                            field.name(),
                            Some(metadata),
                        ),
                        None => column,
                    }
                })
                .collect();
            LogicalPlanBuilder::from(input.clone())
                .project(exprs)?
                .build()?
        }
    };
    Ok(LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(
        CreateMemoryTable {
            input: Arc::new(input),
            ..create.clone()
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

/// An `INSERT` whose rows carry field metadata other than the target table's columns (a script's
/// declared output types, a declared column of another table) gets a last projection that gives
/// each column exactly the target's field (a cast to the same type, with the target's metadata),
/// so that the batches the table keeps match its schema; other plans unchanged.
pub(crate) fn insert_with_table_fields(plan: LogicalPlan) -> Result<LogicalPlan> {
    let LogicalPlan::Dml(dml) = &plan else {
        return Ok(plan);
    };
    if !matches!(dml.op, WriteOp::Insert(_)) {
        return Ok(plan);
    }
    let target = dml.target.schema();
    let input = dml.input.schema();
    if input.fields().len() != target.fields().len()
        || input
            .fields()
            .iter()
            .zip(target.fields())
            .all(|(i, t)| i.metadata() == t.metadata())
    {
        return Ok(plan);
    }
    let exprs: Vec<Expr> = input
        .iter()
        .zip(target.fields())
        .map(|((qualifier, field), target)| {
            let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
            if field.metadata() == target.metadata() {
                return column;
            }
            let to = Field::new(field.name(), field.data_type().clone(), field.is_nullable())
                .with_metadata(target.metadata().clone());
            Expr::Cast(datafusion::logical_expr::Cast::new_from_field(
                Box::new(column),
                Arc::new(to),
            ))
            .alias_qualified(qualifier.cloned(), field.name())
        })
        .collect();
    let input = LogicalPlanBuilder::from(dml.input.as_ref().clone())
        .project(exprs)?
        .build()?;
    Ok(LogicalPlan::Dml(DmlStatement::new(
        dml.table_name.clone(),
        Arc::clone(&dml.target),
        dml.op.clone(),
        Arc::new(input),
    )))
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
        let (c, query) = ctas_query(&create, false, false).unwrap();
        assert_eq!(c.name.table(), "t");
        assert_eq!(query.schema().field(0).name(), "a");
        // The table exists: only OR REPLACE runs the query.
        assert!(ctas_query(&create, true, false).is_none());
        let replace = plan(&ctx, "CREATE OR REPLACE TABLE t AS SELECT cpu_probe() AS a").await;
        assert!(ctas_query(&replace, true, false).is_some());
        let keep = plan(
            &ctx,
            "CREATE TABLE IF NOT EXISTS t AS SELECT cpu_probe() AS a",
        )
        .await;
        assert!(ctas_query(&keep, true, false).is_none());
        assert!(ctas_query(&keep, false, false).is_some());
        // A call in a subquery counts; a CTAS without calls is DataFusion's.
        let nested = "CREATE TABLE t AS SELECT 1 AS a WHERE 'x' IN (SELECT cpu_probe())";
        assert!(ctas_query(&plan(&ctx, nested).await, false, false).is_some());
        let plain = plan(&ctx, "CREATE TABLE t AS SELECT 1 AS a").await;
        assert!(ctas_query(&plain, false, false).is_none());
        assert!(ctas_query(&plan(&ctx, "SELECT cpu_probe()").await, false, false).is_none());
    }

    #[tokio::test]
    async fn the_table_is_made_from_the_rows_the_query_produced() {
        let ctx = context();
        let create = plan(
            &ctx,
            "CREATE TABLE t AS SELECT CAST(length(cpu_probe()) AS BIGINT) AS a",
        )
        .await;
        let (c, query) = ctas_query(&create, false, false).unwrap();
        let schema = Arc::clone(query.schema().inner());
        let rows =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![7, 8]))]).unwrap();
        let made = ctas_with_rows(c, Arc::clone(query.schema().inner()), vec![rows]).unwrap();
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
