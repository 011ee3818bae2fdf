//! A stored table as DataFusion sees it ([`DeltaProvider`]): scans read the session's view of
//! the table (its transaction's pinned version and own writes), and `INSERT`, `DELETE`,
//! `UPDATE` and `TRUNCATE` plan the writes of [`crate::dml`]. A provider pinned to a version
//! (time travel) reads that version and refuses writes.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use crate::dml::{FileScan, Rewrite, RewriteExec, WriteExec};
use crate::error::StorageError;
use crate::scan::scan_files;
use crate::table::{StoredTable, TableSnapshot};
use crate::txn::{TableView, Transaction};
use crate::types::TableSchema;

/// A stored table for DataFusion: its columns as of the version read when the statement
/// named it, its rows as of the statement's view.
#[derive(Debug, Clone)]
pub struct DeltaProvider {
    table: Arc<StoredTable>,
    schema: TableSchema,
    /// A fixed version (time travel): read only.
    pinned: Option<Arc<TableSnapshot>>,
    /// Its owner, as of the version read.
    owner: Option<String>,
}

impl DeltaProvider {
    /// The table with the columns of its newest version.
    pub async fn latest(table: Arc<StoredTable>) -> crate::Result<Self> {
        let snapshot = table.latest().await?;
        Ok(Self {
            schema: snapshot.schema.clone(),
            owner: snapshot.owner.clone(),
            table,
            pinned: None,
        })
    }

    /// The table as of `snapshot` (time travel): scans read that version, writes are refused.
    pub fn at(table: Arc<StoredTable>, snapshot: Arc<TableSnapshot>) -> Self {
        Self {
            schema: snapshot.schema.clone(),
            owner: snapshot.owner.clone(),
            table,
            pinned: Some(snapshot),
        }
    }

    /// The stored table.
    pub fn table(&self) -> &Arc<StoredTable> {
        &self.table
    }

    /// The columns, logical and stored.
    pub fn table_schema(&self) -> &TableSchema {
        &self.schema
    }

    /// The table's owner (`None`: SYS, or a table accelsql did not create).
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The version this provider is pinned to (time travel), if it is.
    pub fn pinned_version(&self) -> Option<u64> {
        self.pinned.as_ref().map(|s| s.version)
    }

    /// The session's transaction (a fresh autocommit one when the session has none).
    fn transaction(state: &dyn Session) -> Arc<Transaction> {
        state
            .config()
            .get_extension::<Transaction>()
            .unwrap_or_else(|| Arc::new(Transaction::new()))
    }

    /// The files the statement reads.
    async fn view(&self, state: &dyn Session) -> DfResult<TableView> {
        if let Some(snapshot) = &self.pinned {
            return Ok(TableView {
                files: Arc::clone(&snapshot.files),
                snapshot: Arc::clone(snapshot),
            });
        }
        Self::transaction(state)
            .view(&self.table)
            .await
            .map_err(StorageError::into_datafusion)
    }

    /// Refuses a write to a pinned version.
    fn writable(&self) -> DfResult<()> {
        match &self.pinned {
            Some(s) => Err(StorageError::Unsupported {
                what: format!(
                    "version {} of table {} is read only (time travel); write to the table itself",
                    s.version,
                    self.table.name()
                ),
            }
            .into_datafusion()),
            None => Ok(()),
        }
    }

    /// A rewrite of the rows `filters` select.
    async fn rewrite(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
        rewrite: impl FnOnce(&DFSchema) -> DfResult<Rewrite>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable()?;
        let txn = Self::transaction(state);
        let view = txn
            .view(&self.table)
            .await
            .map_err(StorageError::into_datafusion)?;
        let df_schema = DFSchema::try_from(Arc::clone(&self.schema.logical))?;
        let predicate = match conjunction(filters) {
            Some(expr) => Some(state.create_physical_expr(expr, &df_schema)?),
            None => None,
        };
        let rewrite = rewrite(&df_schema)?;
        let mut files = Vec::with_capacity(view.files.len());
        if !matches!(rewrite, Rewrite::Truncate) {
            for file in view.files.iter() {
                let plan = scan_files(
                    state,
                    &self.table,
                    &self.schema,
                    std::slice::from_ref(file),
                    None,
                    None,
                )
                .await?;
                files.push(FileScan {
                    file: file.clone(),
                    plan,
                });
            }
        }
        Ok(Arc::new(RewriteExec::new(
            Arc::clone(&self.table),
            self.schema.clone(),
            view,
            files,
            predicate,
            rewrite,
            txn,
        )))
    }
}

#[async_trait]
impl TableProvider for DeltaProvider {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema.logical)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let view = self.view(state).await?;
        scan_files(
            state,
            &self.table,
            &self.schema,
            &view.files,
            projection,
            limit,
        )
        .await
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable()?;
        let overwrite = match insert_op {
            InsertOp::Append => false,
            InsertOp::Overwrite => true,
            InsertOp::Replace => {
                return Err(StorageError::Unsupported {
                    what: format!("REPLACE INTO table {}", self.table.name()),
                }
                .into_datafusion());
            }
        };
        Ok(Arc::new(WriteExec::new(
            Arc::clone(&self.table),
            self.schema.clone(),
            input,
            overwrite,
            Self::transaction(state),
        )))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.rewrite(state, filters, |_| Ok(Rewrite::Delete)).await
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let logical = Arc::clone(&self.schema.logical);
        let table = self.table.name().to_string();
        self.rewrite(state, filters, move |df_schema| {
            let mut planned = Vec::with_capacity(assignments.len());
            for (name, expr) in assignments {
                let index = logical.index_of(&name).map_err(|_| {
                    StorageError::NotFound {
                        what: format!("column {name} of table {table}"),
                    }
                    .into_datafusion()
                })?;
                // An assignment of the column to itself changes nothing.
                if matches!(&expr, Expr::Column(c) if c.name == name) {
                    continue;
                }
                planned.push((index, state.create_physical_expr(expr, df_schema)?));
            }
            Ok(Rewrite::Update(planned))
        })
        .await
    }

    async fn merge_into(
        &self,
        state: &dyn Session,
        source: Arc<dyn ExecutionPlan>,
        merge_schema: datafusion::common::DFSchemaRef,
        on: Expr,
        clauses: Vec<datafusion::logical_expr::dml::MergeIntoClause>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable()?;
        let txn = Self::transaction(state);
        let view = txn
            .view(&self.table)
            .await
            .map_err(StorageError::into_datafusion)?;
        let plan = crate::merge::merge_plan(
            state,
            &self.table,
            &self.schema,
            &view,
            source,
            &merge_schema,
            on,
            &clauses,
        )
        .await?;
        Ok(Arc::new(crate::merge::MergeExec::new(
            Arc::clone(&self.table),
            self.schema.clone(),
            view,
            plan,
            txn,
        )))
    }

    async fn truncate(&self, state: &dyn Session) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.rewrite(state, Vec::new(), |_| Ok(Rewrite::Truncate))
            .await
    }
}
