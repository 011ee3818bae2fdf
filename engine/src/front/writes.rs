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
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
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
    let is_geometry = |field: &Field| {
        field
            .metadata()
            .get(SQL_TYPE_METADATA_KEY)
            .is_some_and(|t| t.starts_with("GEOMETRY"))
    };
    if input.fields().len() != target.fields().len()
        || input
            .fields()
            .iter()
            .zip(target.fields())
            .all(|(i, t)| i.metadata() == t.metadata() && !is_geometry(t))
    {
        return Ok(plan);
    }
    let exprs: Vec<Expr> = input
        .iter()
        .zip(target.fields())
        .map(|((qualifier, field), target)| {
            let mut column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
            if field.metadata() == target.metadata() && !is_geometry(target) {
                return column;
            }
            if is_geometry(target) {
                // GEOMETRY's text as Exasol writes it (`POINT (1 1)`).
                column =
                    Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction::new_udf(
                        Arc::new(crate::udf::wkt::geometry_function()),
                        vec![Expr::Cast(datafusion::logical_expr::Cast::new(
                            Box::new(column),
                            DataType::Utf8,
                        ))],
                    ));
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

/// The `DELETE` or `UPDATE` of `plan` with its uncorrelated subqueries replaced by what they
/// answer (`id IN (SELECT …)` by the list of values, `(SELECT max(…))` by the value, `EXISTS
/// (…)` by true or false), evaluated first in `state`; other plans unchanged.
///
/// DataFusion hands a table's `delete_from`/`update` only the conditions on the table itself:
/// one a subquery became (a semi join) would be lost, and the statement would change every row.
///
/// # Errors
///
/// 0A000 for a correlated subquery (`EXISTS (… WHERE u.id = t.id)`: write it as `MERGE INTO t
/// USING u ON … WHEN MATCHED THEN DELETE|UPDATE`) or one of more than 100,000 values; 21000
/// for a scalar subquery of more than one row.
pub(crate) async fn dml_without_subqueries(
    plan: LogicalPlan,
    state: &datafusion::execution::session_state::SessionState,
) -> Result<LogicalPlan> {
    use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{Subquery, expr::InList};
    let LogicalPlan::Dml(dml) = &plan else {
        return Ok(plan);
    };
    if !matches!(dml.op, WriteOp::Delete | WriteOp::Update) {
        return Ok(plan);
    }
    // The subqueries, in the order the rewrite below meets them.
    let mut found: Vec<Subquery> = Vec::new();
    dml.input.apply(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                match e {
                    Expr::InSubquery(s) => found.push(s.subquery.clone()),
                    Expr::Exists(s) => found.push(s.subquery.clone()),
                    Expr::ScalarSubquery(s) => found.push(s.clone()),
                    _ => return Ok(TreeNodeRecursion::Continue),
                }
                Ok(TreeNodeRecursion::Jump)
            })
        })
    })?;
    if found.is_empty() {
        return Ok(plan);
    }
    let unsupported = |what: &str| {
        crate::core::error::EngineError::Sql(datafusion::error::DataFusionError::NotImplemented(
            format!(
                "{} with {what}: write it as MERGE INTO t USING (…) s ON … WHEN MATCHED THEN \
                 {}",
                if dml.op == WriteOp::Delete {
                    "DELETE"
                } else {
                    "UPDATE"
                },
                if dml.op == WriteOp::Delete {
                    "DELETE"
                } else {
                    "UPDATE SET …"
                }
            ),
        ))
    };
    let mut answers: Vec<Vec<datafusion::common::ScalarValue>> = Vec::with_capacity(found.len());
    for subquery in &found {
        if !subquery.outer_ref_columns.is_empty() {
            return Err(unsupported("a correlated subquery"));
        }
        let frame = datafusion::dataframe::DataFrame::new(
            state.clone(),
            subquery.subquery.as_ref().clone(),
        );
        let batches = frame.collect().await?;
        let mut values = Vec::new();
        for batch in &batches {
            for row in 0..batch.num_rows() {
                values.push(datafusion::common::ScalarValue::try_from_array(
                    batch.column(0),
                    row,
                )?);
            }
            if values.len() > 100_000 {
                return Err(unsupported("a subquery of more than 100,000 values"));
            }
        }
        answers.push(values);
    }
    let mut next = 0usize;
    let mut take = || {
        let values = answers.get(next).cloned().unwrap_or_default();
        next += 1;
        values
    };
    let input = Arc::unwrap_or_clone(Arc::clone(&dml.input))
        .transform_down(|node| {
            node.map_expressions(|e| {
                e.transform_down(|e| {
                    let replaced = match e {
                        Expr::InSubquery(s) => Expr::InList(InList::new(
                            s.expr,
                            take().into_iter().map(|v| Expr::Literal(v, None)).collect(),
                            s.negated,
                        )),
                        Expr::Exists(s) => Expr::Literal(
                            datafusion::common::ScalarValue::Boolean(Some(
                                take().is_empty() == s.negated,
                            )),
                            None,
                        ),
                        Expr::ScalarSubquery(s) => {
                            let values = take();
                            if values.len() > 1 {
                                return Err(datafusion::error::DataFusionError::Execution(
                                    "[21000] a subquery used as a value returned more than one \
                                     row"
                                    .into(),
                                ));
                            }
                            let value = match values.into_iter().next() {
                                Some(v) => v,
                                None => datafusion::common::ScalarValue::try_from(
                                    s.subquery.schema().field(0).data_type(),
                                )?,
                            };
                            Expr::Literal(value, None)
                        }
                        other => return Ok(Transformed::no(other)),
                    };
                    Ok(Transformed::new(replaced, true, TreeNodeRecursion::Jump))
                })
            })
        })?
        .data;
    Ok(LogicalPlan::Dml(DmlStatement {
        input: Arc::new(input),
        ..dml.clone()
    }))
}

/// Whether the `DELETE` or `UPDATE` of `plan` has a condition that no row can meet (`WHERE 1 =
/// 0`, `WHERE NOT EXISTS (…)` of a non-empty query): DataFusion's optimizer turns such a
/// condition into an empty relation, and the table's `delete_from`/`update` would then be
/// handed no condition at all — every row. The session answers 0 rows instead.
pub(crate) fn dml_never_matches(plan: &LogicalPlan) -> Result<bool> {
    use datafusion::common::ScalarValue;
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::simplify::SimplifyContext;
    use datafusion::optimizer::simplify_expressions::ExprSimplifier;
    let LogicalPlan::Dml(dml) = plan else {
        return Ok(false);
    };
    if !matches!(dml.op, WriteOp::Delete | WriteOp::Update) {
        return Ok(false);
    }
    let mut never = false;
    dml.input.apply(|node| {
        if let LogicalPlan::Filter(filter) = node {
            let context = SimplifyContext::builder()
                .with_schema(Arc::clone(filter.input.schema()))
                .build();
            let simplified = ExprSimplifier::new(context).simplify(filter.predicate.clone())?;
            if matches!(
                simplified,
                Expr::Literal(
                    ScalarValue::Boolean(Some(false)) | ScalarValue::Boolean(None),
                    _
                ) | Expr::Literal(ScalarValue::Null, _)
            ) {
                never = true;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(never)
}

/// A DML statement's one-row result: `count` rows affected.
pub(crate) fn count_stream(rows: u64) -> Result<datafusion::execution::SendableRecordBatchStream> {
    use datafusion::arrow::array::UInt64Array;
    use datafusion::arrow::datatypes::{DataType, Schema};
    let schema = Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(UInt64Array::from(vec![rows]))],
    )
    .map_err(|e| crate::core::error::EngineError::Sql(e.into()))?;
    Ok(Box::pin(
        datafusion::physical_plan::memory::MemoryStream::try_new(vec![batch], schema, None)?,
    ))
}
