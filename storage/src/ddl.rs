//! Changing a table's columns: `ADD COLUMN` is one commit of new metadata (the files already
//! there read NULL for the column); `DROP COLUMN` and `RENAME COLUMN` rewrite every file with
//! the new columns and commit the new metadata, the old files' removal and the new files' adds
//! together — readers see the table before or after, never between. A rewrite that another
//! commit overtook (a concurrent INSERT, say) fails with 40001 and changes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema};
use datafusion::catalog::Session;
use deltalake::kernel::transaction::CommitBuilder;
use deltalake::kernel::{Action, MetadataExt};
use deltalake::protocol::DeltaOperation;
use futures::StreamExt;

use crate::error::{Result, StorageError};
use crate::scan::scan_files;
use crate::table::{StoredTable, TableSnapshot};
use crate::txn::remove_of;
use crate::types::TableSchema;
use crate::write::{FileWriter, write_stream};

/// Commits `actions` against `base` as `statement` (the log's `accelsql.statement`).
async fn commit(
    table: &StoredTable,
    base: &TableSnapshot,
    actions: Vec<Action>,
    operation: DeltaOperation,
    statement: &str,
) -> Result<u64> {
    let mut app = HashMap::new();
    app.insert(
        "accelsql.statement".to_string(),
        serde_json::Value::String(statement.to_string()),
    );
    let done = CommitBuilder::default()
        .with_actions(actions)
        .with_app_metadata(app)
        .build(Some(&base.state), Arc::clone(table.log_store()), operation)
        .await
        .map_err(|e| StorageError::from_delta(table.name(), e))?;
    Ok(done.version())
}

/// `base`'s metadata with the columns of `schema`.
fn metadata_with(
    table: &StoredTable,
    base: &TableSnapshot,
    schema: &TableSchema,
) -> Result<deltalake::kernel::Metadata> {
    base.state
        .metadata()
        .clone()
        .with_schema(&schema.delta)
        .map_err(|e| StorageError::from_delta(table.name(), e.into()))
}

/// `ALTER TABLE t ADD COLUMN field`: the new version.
///
/// # Errors
///
/// 42710 when the column exists.
pub async fn add_column(table: &StoredTable, field: &Field) -> Result<u64> {
    let base = table.latest_read().await?;
    if base.schema.logical.field_with_name(field.name()).is_ok() {
        return Err(StorageError::Exists {
            what: format!("column {} of table {}", field.name(), table.name()),
        });
    }
    let schema = base.schema.with_column(field)?;
    let metadata = metadata_with(table, base.as_ref(), &schema)?;
    let added: Vec<_> = schema
        .delta
        .fields()
        .filter(|f| f.name() == field.name())
        .cloned()
        .collect();
    commit(
        table,
        &base,
        vec![Action::Metadata(metadata)],
        DeltaOperation::AddColumn { fields: added },
        &format!("ALTER TABLE … ADD COLUMN {}", field.name()),
    )
    .await
}

/// `ALTER TABLE t DROP COLUMN a, …`: the new version.
///
/// # Errors
///
/// 42704 for a column that does not exist; 0A000 when no column would be left.
pub async fn drop_columns(
    table: &Arc<StoredTable>,
    state: &dyn Session,
    names: &[String],
) -> Result<u64> {
    let base = table.latest_read().await?;
    let logical = &base.schema.logical;
    for name in names {
        logical
            .field_with_name(name)
            .map_err(|_| StorageError::NotFound {
                what: format!("column {name} of table {}", table.name()),
            })?;
    }
    let kept: Vec<usize> = (0..logical.fields().len())
        .filter(|&i| !names.contains(logical.field(i).name()))
        .collect();
    if kept.is_empty() {
        return Err(StorageError::Unsupported {
            what: format!("dropping every column of table {}", table.name()),
        });
    }
    let fields: Vec<Field> = kept
        .iter()
        .map(|&i| logical.field(i).as_ref().clone())
        .collect();
    rewrite(
        table,
        state,
        &base,
        Schema::new(fields),
        &kept,
        &format!("ALTER TABLE … DROP COLUMN {}", names.join(", ")),
    )
    .await
}

/// `ALTER TABLE t RENAME COLUMN old TO new`: the new version.
///
/// # Errors
///
/// 42704 when `old` does not exist, 42710 when `new` does.
pub async fn rename_column(
    table: &Arc<StoredTable>,
    state: &dyn Session,
    old: &str,
    new: &str,
) -> Result<u64> {
    let base = table.latest_read().await?;
    let logical = &base.schema.logical;
    let at = logical.index_of(old).map_err(|_| StorageError::NotFound {
        what: format!("column {old} of table {}", table.name()),
    })?;
    if old != new && logical.field_with_name(new).is_ok() {
        return Err(StorageError::Exists {
            what: format!("column {new} of table {}", table.name()),
        });
    }
    let fields: Vec<Field> = logical
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if i == at {
                f.as_ref().clone().with_name(new)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    let all: Vec<usize> = (0..fields.len()).collect();
    rewrite(
        table,
        state,
        &base,
        Schema::new(fields),
        &all,
        &format!("ALTER TABLE … RENAME COLUMN {old} TO {new}"),
    )
    .await
}

/// Every file of `base` written anew with `columns` (column `i` from `sources[i]` of the old
/// ones), committed with the new metadata in one version.
async fn rewrite(
    table: &Arc<StoredTable>,
    state: &dyn Session,
    base: &TableSnapshot,
    columns: Schema,
    sources: &[usize],
    statement: &str,
) -> Result<u64> {
    let schema = TableSchema::from_logical(&columns)?;
    let context = state.task_ctx();
    let mut added = Vec::new();
    let outcome: Result<()> = async {
        for file in base.files.iter() {
            let plan = scan_files(
                state,
                table,
                &base.schema,
                std::slice::from_ref(file),
                None,
                None,
            )
            .await
            .map_err(StorageError::DataFusion)?;
            let stream = plan
                .execute(0, Arc::clone(&context))
                .map_err(StorageError::DataFusion)?;
            let columns = Arc::clone(&schema.logical);
            let name = table.name().to_string();
            let sources = sources.to_vec();
            let moved = stream.map(move |batch| {
                let batch = batch?;
                let arrays = sources
                    .iter()
                    .map(|&i| Arc::clone(batch.column(i)))
                    .collect();
                RecordBatch::try_new(Arc::clone(&columns), arrays).map_err(|e| {
                    datafusion::error::DataFusionError::Execution(format!(
                        "rewriting table {name}: {e}"
                    ))
                })
            });
            let moved = Box::pin(
                datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                    Arc::clone(&schema.logical),
                    moved,
                ),
            );
            let writer = FileWriter::new(table, &schema, Some(&base.state));
            let (adds, _) = write_stream(writer, moved).await?;
            added.extend(adds);
        }
        Ok(())
    }
    .await;
    if let Err(e) = outcome {
        table.delete_files(&added).await;
        return Err(e);
    }
    let metadata = metadata_with(table, base, &schema)?;
    let mut actions = vec![Action::Metadata(metadata)];
    actions.extend(base.files.iter().map(|f| Action::Remove(remove_of(&f.add))));
    actions.extend(added.iter().cloned().map(Action::Add));
    // A merge reads the whole table: any commit since `base` conflicts (files appended with
    // the old columns would otherwise stay).
    let operation = DeltaOperation::Merge {
        predicate: None,
        merge_predicate: None,
        matched_predicates: Vec::new(),
        not_matched_predicates: Vec::new(),
        not_matched_by_source_predicates: Vec::new(),
    };
    match commit(table, base, actions, operation, statement).await {
        Ok(v) => Ok(v),
        Err(e) => {
            table.delete_files(&added).await;
            Err(e)
        }
    }
}
