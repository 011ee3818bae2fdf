//! What a session does to the engine's tables itself: `CREATE TABLE` in the store (one Delta
//! commit, its rows streamed from the statement's query), temporary tables, the statements of
//! [`super::tables`] (transactions, `RENAME`, `OPTIMIZE`, `VACUUM`, `COPY FROM`), `ALTER
//! TABLE`, and who owns a table (for the privilege checks).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use accelsql_storage::{CreateMode, DeltaProvider, InitialRows, TableStore, maintenance};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, SchemaRef};
use datafusion::common::ResolvedTableReference;
use datafusion::common::TableReference;
use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::datasource::{MemTable, TableProvider};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::{CreateMemoryTable, DdlStatement, LogicalPlan};
use datafusion::prelude::{CsvReadOptions, JsonReadOptions, ParquetReadOptions};
use datafusion::sql::sqlparser::ast::{AlterTable, AlterTableOperation, RenameTableNameKind};
use futures::TryStreamExt;

use super::privileges;
use super::results::empty_stream;
use super::session::Session;
use super::tables::{ReportValue, TableStatement, report, stored_table, table_reference};
use crate::catalog::session_tables::SESSION_SCHEMAS;
use crate::core::error::{EngineError, Result};
use crate::core::privileges::{Grants, ObjectPrivilege, SYS_USER, SystemPrivilege};
use crate::exists_err;
use crate::missing_err;

/// Who may do what to a table: its key (`schema.table`) and owner (`None`: SYS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableIdentity {
    /// `schema.table`.
    pub(crate) key: String,
    /// Its owner.
    pub(crate) owner: Option<String>,
}

impl Session {
    /// The engine's store, when its tables are stored.
    pub(super) fn table_store(&self) -> Option<Arc<TableStore>> {
        self.engine().state().tables.store().cloned()
    }

    /// `reference` against the session's default catalog and schema.
    pub(super) fn resolve(&self, reference: TableReference) -> ResolvedTableReference {
        let config = self.context().copied_config();
        let catalog = &config.options().catalog;
        reference.resolve(&catalog.default_catalog, &catalog.default_schema)
    }

    /// Whether `reference` names a table of the engine's shared catalog (not a system table,
    /// not another catalog).
    fn in_engine_catalog(&self, reference: &ResolvedTableReference) -> bool {
        let config = self.context().copied_config();
        reference.catalog.as_ref() == config.options().catalog.default_catalog
            && !SESSION_SCHEMAS.contains(&reference.schema.as_ref())
    }

    /// The owner the session's user gives what it creates (`None`: SYS).
    fn creator(grants: &Grants) -> Option<String> {
        (grants.user != SYS_USER).then(|| grants.user.clone())
    }

    /// Before DDL: the open transaction is committed (DDL commits on its own).
    pub(super) async fn commit_before_ddl(&self) -> Result<()> {
        if self.txn.has_pending() {
            self.txn.commit().await?;
        }
        Ok(())
    }

    /// Who may use table `reference` (a table of the engine's catalog, stored or in memory);
    /// `None` for tables privileges do not cover (system tables, temporary tables, files).
    pub(super) fn table_identity(
        &self,
        reference: &ResolvedTableReference,
        provider: &Arc<dyn TableProvider>,
    ) -> Option<TableIdentity> {
        if let Some(delta) = provider.downcast_ref::<DeltaProvider>() {
            return Some(TableIdentity {
                key: delta.table().name().to_string(),
                owner: delta.owner().map(str::to_string),
            });
        }
        if !self.in_engine_catalog(reference)
            || self
                .temporary
                .get(&reference.schema, &reference.table)
                .is_some()
            || provider.downcast_ref::<MemTable>().is_none()
        {
            return None;
        }
        let key = format!("{}.{}", reference.schema, reference.table);
        let owner = self.engine().state().tables.memory_owner(&key);
        Some(TableIdentity { key, owner })
    }

    /// 42501 unless the session may do `privilege` (`None`: drop) on table `who`.
    pub(super) fn check_table(
        grants: &Grants,
        who: &TableIdentity,
        privilege: Option<ObjectPrivilege>,
        what: &str,
    ) -> Result<()> {
        grants
            .may_use_table(&who.key, who.owner.as_deref(), privilege)
            .map_err(|d| {
                let needs = match privilege {
                    Some(p) => format!(
                        "owning it, {} on it or its schema, or the {} ANY TABLE privilege",
                        p.name(),
                        match p {
                            ObjectPrivilege::Select
                            | ObjectPrivilege::Insert
                            | ObjectPrivilege::Update
                            | ObjectPrivilege::Delete => p.name(),
                            _ => "ALTER",
                        }
                    ),
                    None => "owning it, or the DROP ANY TABLE privilege".to_string(),
                };
                privileges::refusal(d, what, &needs)
            })
    }

    /// The identity of table `name` for a statement on it; 42704 when it does not exist.
    async fn named_table(
        &self,
        name: &str,
    ) -> Result<(ResolvedTableReference, Arc<dyn TableProvider>)> {
        let reference = self.resolve(table_reference(name));
        let provider = self
            .context()
            .table_provider(TableReference::from(reference.clone()))
            .await
            .map_err(|_| missing_err!("table {}.{}", reference.schema, reference.table))?;
        Ok((reference, provider))
    }

    /// Runs one of [`TableStatement`]'s statements.
    pub(super) async fn run_table_statement(
        &self,
        statement: TableStatement,
        grants: &Grants,
    ) -> Result<SendableRecordBatchStream> {
        match statement {
            TableStatement::Begin => self.txn.begin(),
            TableStatement::Commit => self.txn.commit().await?,
            TableStatement::Rollback => self.txn.rollback().await,
            TableStatement::Autocommit(on) => self.txn.set_explicit(!on).await?,
            TableStatement::Rename { from, to } => {
                self.commit_before_ddl().await?;
                let (source, provider) = self.named_table(&from).await?;
                let target = self.resolve(table_reference(&to));
                let what = format!("RENAME TABLE {from}");
                if let Some(who) = self.table_identity(&source, &provider) {
                    Self::check_table(grants, &who, Some(ObjectPrivilege::Alter), &what)?;
                }
                match (
                    &self.table_store(),
                    provider.downcast_ref::<DeltaProvider>(),
                ) {
                    (Some(store), Some(_)) => store.rename_table(
                        (&source.schema, &source.table),
                        (&target.schema, &target.table),
                    )?,
                    _ => {
                        let ctx = self.context();
                        if ctx.table_exist(TableReference::from(target.clone()))? {
                            return Err(exists_err!("table {}.{}", target.schema, target.table));
                        }
                        ctx.deregister_table(TableReference::from(source.clone()))?;
                        ctx.register_table(TableReference::from(target.clone()), provider)?;
                        let tables = &self.engine().state().tables;
                        let old = format!("{}.{}", source.schema, source.table);
                        let owner = tables.memory_owner(&old);
                        tables.set_memory_owner(&old, None);
                        tables.set_memory_owner(
                            &format!("{}.{}", target.schema, target.table),
                            owner.as_deref(),
                        );
                    }
                }
            }
            TableStatement::Optimize(name) => {
                self.commit_before_ddl().await?;
                let (reference, provider) = self.named_table(&name).await?;
                let store = self.stored_only(&provider, "OPTIMIZE")?;
                if let Some(who) = self.table_identity(&reference, &provider) {
                    Self::check_table(
                        grants,
                        &who,
                        Some(ObjectPrivilege::Alter),
                        &format!("OPTIMIZE {name}"),
                    )?;
                }
                let table = stored_table(&store, &reference)?;
                let done = maintenance::optimize(&table).await?;
                return report(vec![
                    ("files_removed", ReportValue::Count(done.files_removed)),
                    ("files_added", ReportValue::Count(done.files_added)),
                ]);
            }
            TableStatement::Vacuum {
                table: name,
                retain_hours,
                dry_run,
            } => {
                self.commit_before_ddl().await?;
                let (reference, provider) = self.named_table(&name).await?;
                let store = self.stored_only(&provider, "VACUUM")?;
                if let Some(who) = self.table_identity(&reference, &provider) {
                    Self::check_table(
                        grants,
                        &who,
                        Some(ObjectPrivilege::Alter),
                        &format!("VACUUM {name}"),
                    )?;
                }
                let table = stored_table(&store, &reference)?;
                let done = maintenance::vacuum(&table, retain_hours, dry_run).await?;
                return report(vec![(
                    if dry_run {
                        "files_to_delete"
                    } else {
                        "files_deleted"
                    },
                    ReportValue::Count(done.files_deleted.len() as u64),
                )]);
            }
            TableStatement::CopyFrom {
                table,
                path,
                format,
            } => {
                privileges::require(
                    grants,
                    SystemPrivilege::ReadServerFiles,
                    &format!("COPY {table} FROM '{path}' reads a file on the server"),
                )?;
                if !grants.is_all() {
                    crate::core::privileges::check_outside_data_dir(
                        &path,
                        self.engine().state().data_dir.as_deref(),
                    )?;
                }
                let (reference, provider) = self.named_table(&table).await?;
                if let Some(who) = self.table_identity(&reference, &provider) {
                    Self::check_table(
                        grants,
                        &who,
                        Some(ObjectPrivilege::Insert),
                        &format!("COPY {table} FROM"),
                    )?;
                }
                let format = format.unwrap_or_else(|| {
                    let lower = path.to_ascii_lowercase();
                    if lower.ends_with(".csv") || lower.contains(".csv.") {
                        "csv".into()
                    } else if lower.ends_with(".json") || lower.ends_with(".ndjson") {
                        "json".into()
                    } else {
                        "parquet".into()
                    }
                });
                let ctx = self.context();
                let frame = match format.as_str() {
                    "parquet" => {
                        ctx.read_parquet(path.as_str(), ParquetReadOptions::default())
                            .await?
                    }
                    "csv" => ctx.read_csv(path.as_str(), CsvReadOptions::new()).await?,
                    "json" | "ndjson" => {
                        ctx.read_json(path.as_str(), JsonReadOptions::default())
                            .await?
                    }
                    other => {
                        return Err(EngineError::UnknownFileFormat {
                            path: path.clone(),
                            message: format!(
                                "STORED AS {other}: COPY … FROM reads PARQUET, CSV or JSON"
                            ),
                        });
                    }
                };
                let written = frame
                    .write_table(
                        &TableReference::from(reference).to_string(),
                        DataFrameWriteOptions::new(),
                    )
                    .await?;
                let rows = written
                    .iter()
                    .filter_map(|b| {
                        b.column(0)
                            .as_any()
                            .downcast_ref::<datafusion::arrow::array::UInt64Array>()
                    })
                    .flat_map(|a| a.iter().flatten())
                    .sum();
                return report(vec![("count", ReportValue::Count(rows))]);
            }
        }
        empty_stream()
    }

    /// The store, when `provider` is one of its tables; 0A000 for `what` on another table.
    fn stored_only(
        &self,
        provider: &Arc<dyn TableProvider>,
        what: &str,
    ) -> Result<Arc<TableStore>> {
        match (self.table_store(), provider.downcast_ref::<DeltaProvider>()) {
            (Some(store), Some(_)) => Ok(store),
            _ => Err(EngineError::Sql(
                datafusion::error::DataFusionError::NotImplemented(format!(
                    "{what} works on tables stored in the data directory (an engine without one \
                     keeps its tables in memory)"
                )),
            )),
        }
    }

    /// `CREATE EXTERNAL TABLE t STORED AS DELTA LOCATION '…'`: attaches the Delta table there
    /// (kept in the store as a link; in an engine without a data directory, until the process
    /// ends). Its files stay where they are; `DROP TABLE` forgets the link.
    pub(super) async fn attach_delta(
        &self,
        create: &datafusion::logical_expr::CreateExternalTable,
    ) -> Result<()> {
        let [location] = create.locations.as_slice() else {
            return Err(unsupported(
                "CREATE EXTERNAL TABLE … STORED AS DELTA with several locations",
            ));
        };
        let url = match url::Url::parse(location) {
            Ok(url) if url.scheme().len() > 1 => url,
            _ => {
                let path = std::path::Path::new(location);
                let path = path.canonicalize().map_err(|e| EngineError::FileNotFound {
                    path: location.clone(),
                    message: e.to_string(),
                })?;
                url::Url::from_directory_path(&path).map_err(|()| EngineError::FileNotFound {
                    path: location.clone(),
                    message: "not a folder".into(),
                })?
            }
        };
        let reference = self.resolve(create.name.clone());
        let exists = self
            .context()
            .table_exist(TableReference::from(reference.clone()))?;
        if exists && create.if_not_exists {
            return Ok(());
        }
        if exists {
            return Err(exists_err!(
                "table {}.{}",
                reference.schema,
                reference.table
            ));
        }
        match self.table_store() {
            Some(store) if self.in_engine_catalog(&reference) => {
                store
                    .attach(&reference.schema, &reference.table, url)
                    .await?;
            }
            _ => {
                let name = format!("{}.{}", reference.schema, reference.table);
                let table = Arc::new(accelsql_storage::StoredTable::open(&name, url)?);
                if !table.exists().await? {
                    return Err(missing_err!("a Delta table at {location}"));
                }
                let provider = DeltaProvider::latest(table).await?;
                self.context()
                    .register_table(TableReference::from(reference), Arc::new(provider))?;
            }
        }
        Ok(())
    }

    /// The CREATE TABLE `create` resolves to the engine's store: its schema and name there.
    pub(super) fn stored_target(
        &self,
        create: &CreateMemoryTable,
    ) -> Option<ResolvedTableReference> {
        let reference = self.resolve(create.name.clone());
        (self.table_store().is_some()
            && !self.next_temporary.load(Ordering::Acquire)
            && self.in_engine_catalog(&reference))
        .then_some(reference)
    }

    /// `CREATE [OR REPLACE] TABLE … [AS …]` in the store: `columns`, and the rows of `rows`
    /// when given, in one commit.
    pub(super) async fn create_stored(
        &self,
        create: &CreateMemoryTable,
        target: &ResolvedTableReference,
        columns: SchemaRef,
        rows: Option<SendableRecordBatchStream>,
        grants: &Grants,
    ) -> Result<()> {
        let Some(store) = self.table_store() else {
            return Ok(());
        };
        if !create.column_defaults.is_empty() {
            return Err(EngineError::Sql(
                datafusion::error::DataFusionError::NotImplemented(format!(
                    "DEFAULT values of columns ({}) are not kept by stored tables yet; create \
                     the table without them and give the values in INSERT",
                    create
                        .column_defaults
                        .iter()
                        .map(|(c, _)| c.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            ));
        }
        if create.or_replace && store.table_exists(&target.schema, &target.table) {
            let reference = self.resolve(create.name.clone());
            if let Ok((_, provider)) = self
                .named_table(&TableReference::from(reference.clone()).to_string())
                .await
            {
                if let Some(who) = self.table_identity(&reference, &provider) {
                    Self::check_table(
                        grants,
                        &who,
                        None,
                        &format!("CREATE OR REPLACE TABLE {}", create.name),
                    )?;
                }
            }
        }
        let mode = match (create.or_replace, create.if_not_exists) {
            (true, _) => CreateMode::Replace,
            (false, true) => CreateMode::IfNotExists,
            (false, false) => CreateMode::New,
        };
        let owner = Self::creator(grants);
        let rows = rows.map(InitialRows::Stream);
        store
            .create_table(
                &target.schema,
                &target.table,
                &columns,
                owner.as_deref(),
                rows,
                mode,
            )
            .await?;
        Ok(())
    }

    /// `CREATE TEMPORARY TABLE`: a memory table of this session only.
    pub(super) fn create_temporary(
        &self,
        create: &CreateMemoryTable,
        columns: SchemaRef,
        rows: Vec<RecordBatch>,
    ) -> Result<()> {
        let reference = self.resolve(create.name.clone());
        let exists = self
            .temporary
            .get(&reference.schema, &reference.table)
            .is_some();
        if exists && create.if_not_exists && !create.or_replace {
            return Ok(());
        }
        if exists && !create.or_replace {
            return Err(exists_err!(
                "temporary table {}.{}",
                reference.schema,
                reference.table
            ));
        }
        let table = MemTable::try_new(columns, vec![rows])?;
        self.temporary
            .insert(&reference.schema, &reference.table, Arc::new(table));
        Ok(())
    }

    /// Records the owner of a memory table `create` made (engines without a data directory).
    pub(super) fn created_in_memory(&self, create: &CreateMemoryTable, grants: &Grants) {
        let reference = self.resolve(create.name.clone());
        if self.in_engine_catalog(&reference) {
            self.engine().state().tables.set_memory_owner(
                &format!("{}.{}", reference.schema, reference.table),
                Self::creator(grants).as_deref(),
            );
        }
    }

    /// `ALTER TABLE t ADD [COLUMN] c type | DROP [COLUMN] c | RENAME COLUMN a TO b | RENAME TO
    /// u` on a stored table; `added` is the planned field of an added column.
    pub(super) async fn alter_table(
        &self,
        alter: &AlterTable,
        added: Option<Field>,
        grants: &Grants,
    ) -> Result<SendableRecordBatchStream> {
        self.commit_before_ddl().await?;
        let name = alter.name.to_string();
        let (reference, provider) = match self.named_table(&name).await {
            Ok(found) => found,
            Err(_) if alter.if_exists => return empty_stream(),
            Err(e) => return Err(e),
        };
        let store = self.stored_only(&provider, "ALTER TABLE")?;
        if let Some(who) = self.table_identity(&reference, &provider) {
            Self::check_table(
                grants,
                &who,
                Some(ObjectPrivilege::Alter),
                &format!("ALTER TABLE {name}"),
            )?;
        }
        let table = stored_table(&store, &reference)?;
        let [operation] = alter.operations.as_slice() else {
            return Err(unsupported(
                "ALTER TABLE with several changes at once; one per statement",
            ));
        };
        let state = self.context().state();
        match operation {
            AlterTableOperation::AddColumn { if_not_exists, .. } => {
                let Some(field) = added else {
                    return Err(unsupported("ALTER TABLE … ADD of this column"));
                };
                let exists = provider.schema().field_with_name(field.name()).is_ok();
                if exists && *if_not_exists {
                    return empty_stream();
                }
                accelsql_storage::ddl::add_column(&table, &field).await?;
            }
            AlterTableOperation::DropColumn {
                column_names,
                if_exists,
                ..
            } => {
                let names: Vec<String> = column_names
                    .iter()
                    .map(|c| crate::udf::script::names::folded(c))
                    .collect();
                let schema = provider.schema();
                let present: Vec<String> = names
                    .iter()
                    .filter(|n| schema.field_with_name(n).is_ok())
                    .cloned()
                    .collect();
                if present.len() != names.len() && !*if_exists {
                    return Err(missing_err!(
                        "column {} of table {}",
                        names
                            .iter()
                            .find(|n| !present.contains(n))
                            .cloned()
                            .unwrap_or_default(),
                        table.name()
                    ));
                }
                if present.is_empty() {
                    return empty_stream();
                }
                accelsql_storage::ddl::drop_columns(&table, &state, &present).await?;
            }
            AlterTableOperation::RenameColumn {
                old_column_name,
                new_column_name,
            } => {
                let old = crate::udf::script::names::folded(old_column_name);
                let new = crate::udf::script::names::folded(new_column_name);
                accelsql_storage::ddl::rename_column(&table, &state, &old, &new).await?;
            }
            AlterTableOperation::RenameTable { table_name } => {
                let to = match table_name {
                    RenameTableNameKind::To(n) | RenameTableNameKind::As(n) => n.to_string(),
                };
                let target = self.resolve(table_reference(&to));
                let target = if to.contains('.') {
                    target
                } else {
                    ResolvedTableReference {
                        schema: reference.schema.clone(),
                        ..target
                    }
                };
                store.rename_table(
                    (&reference.schema, &reference.table),
                    (&target.schema, &target.table),
                )?;
            }
            other => {
                return Err(unsupported(&format!("ALTER TABLE … {other}")));
            }
        }
        self.txn.unpin(&table);
        empty_stream()
    }

    /// The rows of `stream`, collected (a temporary table's).
    pub(super) async fn collect(stream: SendableRecordBatchStream) -> Result<Vec<RecordBatch>> {
        Ok(stream.try_collect().await?)
    }

    /// Whether `plan` is a CREATE TABLE without rows (`CREATE TABLE t (a INT, …)`).
    pub(super) fn creates_empty(create: &CreateMemoryTable) -> bool {
        matches!(create.input.as_ref(), LogicalPlan::EmptyRelation(e) if !e.produce_one_row)
    }
}

/// 0A000 for `what`.
fn unsupported(what: &str) -> EngineError {
    EngineError::Sql(datafusion::error::DataFusionError::NotImplemented(format!(
        "{what} is not supported"
    )))
}

impl Session {
    /// Refuses `plan` unless the session may read the tables it scans, write the table it
    /// writes and drop the table it drops.
    pub(super) async fn check_table_access(
        &self,
        plan: &LogicalPlan,
        grants: &Grants,
    ) -> Result<()> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        use datafusion::datasource::source_as_provider;
        use datafusion::logical_expr::{DmlStatement, WriteOp};
        let mut checks: Vec<(
            ResolvedTableReference,
            Arc<dyn TableProvider>,
            Option<ObjectPrivilege>,
            String,
        )> = Vec::new();
        // The target of an UPDATE or DELETE is scanned by its own statement: its privilege is
        // the statement's, not SELECT.
        let mut written: Option<ResolvedTableReference> = None;
        plan.apply_with_subqueries(|node| {
            match node {
                LogicalPlan::Dml(DmlStatement {
                    table_name,
                    target,
                    op,
                    ..
                }) => {
                    let privilege = match op {
                        WriteOp::Insert(_) | WriteOp::Ctas => ObjectPrivilege::Insert,
                        WriteOp::Update => ObjectPrivilege::Update,
                        WriteOp::Delete | WriteOp::Truncate => ObjectPrivilege::Delete,
                        _ => ObjectPrivilege::Update,
                    };
                    if let Ok(provider) = source_as_provider(target) {
                        let reference = self.resolve(table_name.clone());
                        if matches!(
                            op,
                            WriteOp::Update | WriteOp::Delete | WriteOp::MergeInto(_)
                        ) {
                            written = Some(reference.clone());
                        }
                        checks.push((
                            reference,
                            provider,
                            Some(privilege),
                            format!("{op} on {table_name}"),
                        ));
                    }
                }
                LogicalPlan::TableScan(scan) => {
                    if let Ok(provider) = source_as_provider(&scan.source) {
                        let reference = self.resolve(scan.table_name.clone());
                        checks.push((
                            reference,
                            provider,
                            Some(ObjectPrivilege::Select),
                            format!("reading table {}", scan.table_name),
                        ));
                    }
                }
                _ => {}
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        for (reference, provider, privilege, what) in checks {
            let what: &str = &what;
            if privilege == Some(ObjectPrivilege::Select) && written.as_ref() == Some(&reference) {
                continue;
            }
            if let Some(who) = self.table_identity(&reference, &provider) {
                Self::check_table(grants, &who, privilege, &what)?;
            }
        }
        if let LogicalPlan::Ddl(DdlStatement::DropTable(drop)) = plan {
            let reference = self.resolve(drop.name.clone());
            if let Ok(provider) = self
                .context()
                .table_provider(TableReference::from(reference.clone()))
                .await
                && let Some(who) = self.table_identity(&reference, &provider)
            {
                Self::check_table(grants, &who, None, &format!("DROP TABLE {}", drop.name))?;
            }
        }
        Ok(())
    }
}
