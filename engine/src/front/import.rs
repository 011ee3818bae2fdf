//! Loading Arrow record batches into a table (the Python package's `import_from_arrow`, the
//! server's bulk ingestion): a new table when the name is free (stored in the data directory,
//! in one commit, or in memory without one), else an insert into the existing table (columns
//! by position, cast to its types).

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::TableReference;
use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;

use super::session::Session;
use crate::core::error::{EngineError, Result};

impl Session {
    /// Loads `batches` (of `schema`) into `table`: a new in-memory table when the name is free
    /// (its batches spread over the session's partitions), else appended to the existing table
    /// (columns by position, cast to its types; a value that does not fit fails the load).
    /// Returns the number of rows loaded.
    pub async fn import_batches(
        &self,
        table: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<u64> {
        let ctx = self.context();
        let reference = TableReference::from(table);
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let grants = self.refresh_grants();
        self.txn.begin_statement();
        if !ctx.table_exist(reference.clone())? {
            crate::front::privileges::require(
                &grants,
                crate::core::privileges::SystemPrivilege::CreateTable,
                &format!("loading data into a new table {table}"),
            )?;
            let resolved = self.resolve(reference.clone());
            if let Some(store) = self.table_store()
                && !crate::catalog::session_tables::SESSION_SCHEMAS
                    .contains(&resolved.schema.as_ref())
            {
                self.commit_before_ddl().await?;
                let stream = Box::pin(datafusion::physical_plan::memory::MemoryStream::try_new(
                    batches,
                    Arc::clone(&schema),
                    None,
                )?);
                let owner =
                    (grants.user != crate::core::privileges::SYS_USER).then(|| grants.user.clone());
                store
                    .create_table(
                        &resolved.schema,
                        &resolved.table,
                        &schema,
                        owner.as_deref(),
                        Some(accelsql_storage::InitialRows::Stream(stream)),
                        accelsql_storage::CreateMode::New,
                    )
                    .await?;
                return Ok(rows as u64);
            }
            // Spread over the session's partitions, so that UDF calls on the table run in parallel.
            let partitions = ctx.copied_config().target_partitions().max(1);
            let mut parts = vec![Vec::new(); partitions];
            for (i, batch) in batches.into_iter().enumerate() {
                parts[i % partitions].push(batch);
            }
            let memory = MemTable::try_new(schema, parts)?;
            ctx.register_table(reference.clone(), Arc::new(memory))?;
            let resolved = self.resolve(reference);
            self.engine().state().tables.set_memory_owner(
                &format!("{}.{}", resolved.schema, resolved.table),
                (grants.user != crate::core::privileges::SYS_USER).then_some(grants.user.as_str()),
            );
            return Ok(rows as u64);
        }
        let provider = ctx.table_provider(reference.clone()).await?;
        if let Some(who) = self.table_identity(&self.resolve(reference.clone()), &provider) {
            Self::check_table(
                &grants,
                &who,
                Some(crate::core::privileges::ObjectPrivilege::Insert),
                &format!("loading data into table {table}"),
            )?;
        }
        let target = provider.schema();
        if schema.fields().len() != target.fields().len() {
            return Err(plan_error(format!(
                "table {table} has {} columns, the data {}",
                target.fields().len(),
                schema.fields().len()
            )));
        }
        if rows == 0 {
            return Ok(0);
        }
        let options = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        let mut cast = Vec::with_capacity(batches.len());
        for batch in batches {
            let columns = batch
                .columns()
                .iter()
                .zip(target.fields())
                .map(|(column, field)| {
                    cast_with_options(column, field.data_type(), &options).map_err(|e| {
                        plan_error(format!(
                            "column {} of table {table} is {}; the data's {} does not fit: {e}",
                            field.name(),
                            field.data_type(),
                            column.data_type()
                        ))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            cast.push(
                RecordBatch::try_new(Arc::clone(&target), columns)
                    .map_err(|e| EngineError::Sql(e.into()))?,
            );
        }
        ctx.read_batches(cast)?
            .write_table(&reference.to_string(), DataFrameWriteOptions::new())
            .await?;
        Ok(rows as u64)
    }
}

fn plan_error(message: String) -> EngineError {
    EngineError::Sql(DataFusionError::Plan(message))
}
