//! accelsql's views of the stored tables: `accelsql.tables` (each table's newest version: its
//! files, rows, bytes, small files, location, owner) and `accelsql.table_versions` (each
//! table's commits: version, time, operation, the statement that made it, who). Read from the
//! Delta logs at each scan; a table the session may not read is left out, and one whose log
//! cannot be read shows its error in `error`.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, RecordBatch, StringArray, TimestampMillisecondArray, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session as CatalogSession, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;

use crate::core::EngineState;
use crate::core::owners::SessionIdentity;
use crate::core::privileges::{ObjectPrivilege, SYS_USER};

/// Which of the two views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    Tables,
    Versions,
}

/// A view of the stored tables, read at each scan.
#[derive(Debug)]
struct StoredView {
    view: View,
    schema: SchemaRef,
    state: Arc<EngineState>,
    who: Arc<SessionIdentity>,
}

fn text(values: Vec<Option<String>>) -> ArrayRef {
    Arc::new(StringArray::from(values))
}

fn numbers(values: Vec<Option<u64>>) -> ArrayRef {
    Arc::new(UInt64Array::from(values))
}

impl StoredView {
    /// Whether the session may read table `key` owned by `owner`.
    fn visible(&self, key: &str, owner: Option<&str>) -> bool {
        self.who
            .grants()
            .may_use_table(key, owner, Some(ObjectPrivilege::Select))
            .is_ok()
    }

    async fn rows(&self) -> DfResult<Vec<ArrayRef>> {
        let Some(store) = self.state.tables.store() else {
            return Ok(self
                .schema
                .fields()
                .iter()
                .map(|f| datafusion::arrow::array::new_empty_array(f.data_type()))
                .collect());
        };
        let snapshots = store.snapshots().await;
        match self.view {
            View::Tables => {
                let mut schema = Vec::new();
                let mut table = Vec::new();
                let mut owner = Vec::new();
                let mut location = Vec::new();
                let mut version = Vec::new();
                let mut files = Vec::new();
                let mut rows = Vec::new();
                let mut bytes = Vec::new();
                let mut small = Vec::new();
                let mut committed = Vec::new();
                let mut error = Vec::new();
                for (s, t, snapshot) in snapshots {
                    let key = format!("{s}.{t}");
                    let place = store
                        .table_location(&s, &t)
                        .ok()
                        .flatten()
                        .map(|u| u.to_string());
                    match snapshot {
                        Ok(snap) => {
                            if !self.visible(&key, snap.owner.as_deref()) {
                                continue;
                            }
                            owner.push(Some(snap.owner.clone().unwrap_or_else(|| SYS_USER.into())));
                            version.push(Some(snap.version));
                            files.push(Some(snap.files.len() as u64));
                            rows.push(snap.rows());
                            bytes.push(Some(snap.bytes()));
                            small.push(Some(
                                accelsql_storage::maintenance::small_files(&snap) as u64
                            ));
                            committed.push(snap.committed_at);
                            error.push(None);
                        }
                        Err(e) => {
                            if !self.who.grants().is_all() {
                                continue;
                            }
                            owner.push(None);
                            version.push(None);
                            files.push(None);
                            rows.push(None);
                            bytes.push(None);
                            small.push(None);
                            committed.push(None);
                            error.push(Some(e.to_string()));
                        }
                    }
                    schema.push(Some(s));
                    table.push(Some(t));
                    location.push(place);
                }
                Ok(vec![
                    text(schema),
                    text(table),
                    text(owner),
                    text(location),
                    numbers(version),
                    numbers(files),
                    numbers(rows),
                    numbers(bytes),
                    numbers(small),
                    Arc::new(TimestampMillisecondArray::from(committed).with_timezone("UTC")),
                    text(error),
                ])
            }
            View::Versions => {
                let mut schema = Vec::new();
                let mut table = Vec::new();
                let mut version = Vec::new();
                let mut at = Vec::new();
                let mut operation = Vec::new();
                let mut statement = Vec::new();
                let mut user = Vec::new();
                let mut parameters = Vec::new();
                for (s, t, snapshot) in snapshots {
                    let Ok(snap) = snapshot else {
                        continue;
                    };
                    if !self.visible(&format!("{s}.{t}"), snap.owner.as_deref()) {
                        continue;
                    }
                    let Ok(Some(handle)) = store.table(&s, &t) else {
                        continue;
                    };
                    let Ok(commits) = handle.history(None).await else {
                        continue;
                    };
                    for c in commits {
                        let info: serde_json::Value =
                            serde_json::from_str(&c.info).unwrap_or_default();
                        let field =
                            |k: &str| info.get(k).and_then(|v| v.as_str()).map(str::to_string);
                        schema.push(Some(s.clone()));
                        table.push(Some(t.clone()));
                        version.push(Some(c.version));
                        at.push(c.timestamp);
                        operation.push(c.operation.clone());
                        statement.push(field("accelsql.statement"));
                        user.push(field("userName"));
                        let mut p: Vec<String> = c
                            .parameters
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect();
                        p.sort();
                        parameters.push(Some(p.join(", ")));
                    }
                }
                Ok(vec![
                    text(schema),
                    text(table),
                    numbers(version),
                    Arc::new(TimestampMillisecondArray::from(at).with_timezone("UTC")),
                    text(operation),
                    text(statement),
                    text(user),
                    text(parameters),
                ])
            }
        }
    }
}

#[async_trait]
impl TableProvider for StoredView {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn CatalogSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let columns = self.rows().await?;
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            Arc::clone(&self.schema),
            projection.cloned(),
        )?)
    }
}

/// Registers `accelsql.tables` and `accelsql.table_versions` in `ctx`.
pub(crate) fn register(
    ctx: &SessionContext,
    state: &Arc<EngineState>,
    who: &Arc<SessionIdentity>,
) -> DfResult<()> {
    let utc = || DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    let tables = Schema::new(vec![
        Field::new("schema", DataType::Utf8, true),
        Field::new("table", DataType::Utf8, true),
        Field::new("owner", DataType::Utf8, true),
        Field::new("location", DataType::Utf8, true),
        Field::new("version", DataType::UInt64, true),
        Field::new("files", DataType::UInt64, true),
        Field::new("rows", DataType::UInt64, true),
        Field::new("bytes", DataType::UInt64, true),
        Field::new("small_files", DataType::UInt64, true),
        Field::new("last_commit", utc(), true),
        Field::new("error", DataType::Utf8, true),
    ]);
    let versions = Schema::new(vec![
        Field::new("schema", DataType::Utf8, true),
        Field::new("table", DataType::Utf8, true),
        Field::new("version", DataType::UInt64, true),
        Field::new("committed_at", utc(), true),
        Field::new("operation", DataType::Utf8, true),
        Field::new("statement", DataType::Utf8, true),
        Field::new("user", DataType::Utf8, true),
        Field::new("parameters", DataType::Utf8, true),
    ]);
    for (name, view, schema) in [
        ("accelsql.tables", View::Tables, tables),
        ("accelsql.table_versions", View::Versions, versions),
    ] {
        ctx.register_table(
            name,
            Arc::new(StoredView {
                view,
                schema: Arc::new(schema),
                state: Arc::clone(state),
                who: Arc::clone(who),
            }),
        )?;
    }
    Ok(())
}
