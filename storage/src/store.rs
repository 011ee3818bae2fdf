//! The tables under one folder ([`TableStore`]): a schema is a folder, a table a Delta table in
//! its schema's folder (`ROOT/schema/table/_delta_log/…`), an attached Delta table elsewhere a
//! link file (`ROOT/schema/table.link`, its location). The folders are the catalog: every
//! process that opens the root sees the same tables, and DuckDB, Polars or Spark read a table by
//! its folder.
//!
//! Creating a table is one Delta commit (version 0: its columns, owner, and for `CREATE TABLE …
//! AS` its first rows); `CREATE OR REPLACE` of an existing table is one commit too (new columns,
//! every old file out, the new rows in), so readers see the old table or the new one. Dropping
//! one moves its folder aside (one `rename`) before deleting it; renaming one renames its folder.

use std::collections::HashMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex};

use arrow::datatypes::Schema;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use deltalake::kernel::Action;
use deltalake::protocol::SaveMode;
use deltalake::{DeltaTable, DeltaTableError};
use serde::{Deserialize, Serialize};
use url::Url;

use crate::error::{Result, StorageError};
use crate::names::{folder_name, name_of_folder};
use crate::table::{OWNER_PROPERTY, StoredTable, TableSnapshot};
use crate::types::TableSchema;
use crate::write::{FileWriter, write_plan, write_stream};

/// The file in a schema's folder that keeps the schema's owner.
const SCHEMA_FILE: &str = ".schema.json";
/// Commits between two checkpoints of a table accelsql creates (Delta's default is 100).
pub const CHECKPOINT_INTERVAL: u64 = 10;
/// The extension of an attached table's link file.
const LINK_EXTENSION: &str = "link";

/// How `CREATE TABLE` treats an existing table of the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Fail with 42710.
    New,
    /// Leave it as it is (`IF NOT EXISTS`).
    IfNotExists,
    /// Replace its columns and rows in one commit (`CREATE OR REPLACE`).
    Replace,
}

/// The rows a new table starts with (the table's logical columns).
pub enum InitialRows {
    /// A plan (its partitions written at once) and the context to run it in.
    Plan {
        /// The rows.
        plan: Arc<dyn ExecutionPlan>,
        /// Where to run it.
        context: Arc<TaskContext>,
    },
    /// A stream.
    Stream(SendableRecordBatchStream),
}

/// What `CREATE TABLE` made.
#[derive(Debug, Clone)]
pub struct Created {
    /// The table.
    pub table: Arc<StoredTable>,
    /// Whether it was made (false: `IF NOT EXISTS` found one).
    pub created: bool,
    /// The rows it starts with.
    pub rows: u64,
}

/// A schema's entry.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SchemaInfo {
    /// Who created it (`None`: SYS).
    #[serde(default)]
    pub owner: Option<String>,
}

/// An attached table's link file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Link {
    location: String,
}

/// The tables under one folder, shared by every session of an engine.
#[derive(Debug)]
pub struct TableStore {
    root: PathBuf,
    /// Open tables, by folder.
    open: Mutex<HashMap<String, Arc<StoredTable>>>,
}

impl TableStore {
    /// The tables under `root` (created if absent).
    pub fn open(root: &FsPath) -> Result<Self> {
        std::fs::create_dir_all(root).map_err(|e| io_error("the tables' folder", root, e))?;
        let root = root
            .canonicalize()
            .map_err(|e| io_error("the tables' folder", root, e))?;
        Ok(Self {
            root,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// The folder the tables live under.
    pub fn root(&self) -> &FsPath {
        &self.root
    }

    fn schema_dir(&self, schema: &str) -> PathBuf {
        self.root.join(folder_name(schema))
    }

    fn table_dir(&self, schema: &str, table: &str) -> PathBuf {
        self.schema_dir(schema).join(folder_name(table))
    }

    fn link_file(&self, schema: &str, table: &str) -> PathBuf {
        self.schema_dir(schema)
            .join(format!("{}.{LINK_EXTENSION}", folder_name(table)))
    }

    /// The schemas, by name.
    pub fn schema_names(&self) -> Vec<String> {
        let mut names: Vec<String> = read_dir_names(&self.root)
            .into_iter()
            .filter(|(_, is_dir)| *is_dir)
            .filter_map(|(n, _)| name_of_folder(&n))
            .collect();
        names.sort();
        names
    }

    /// Whether schema `schema` exists.
    pub fn schema_exists(&self, schema: &str) -> bool {
        self.schema_dir(schema).is_dir()
    }

    /// The owner and other facts of schema `schema`, if it exists.
    pub fn schema_info(&self, schema: &str) -> Option<SchemaInfo> {
        let dir = self.schema_dir(schema);
        if !dir.is_dir() {
            return None;
        }
        Some(
            std::fs::read(dir.join(SCHEMA_FILE))
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                .unwrap_or_default(),
        )
    }

    /// Creates schema `schema` (owned by `owner`); false when it existed.
    pub fn create_schema(&self, schema: &str, owner: Option<&str>) -> Result<bool> {
        let dir = self.schema_dir(schema);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(io_error(&format!("schema {schema}"), &dir, e)),
        }
        let info = SchemaInfo {
            owner: owner.map(str::to_string),
        };
        let bytes = serde_json::to_vec(&info).unwrap_or_default();
        std::fs::write(dir.join(SCHEMA_FILE), bytes)
            .map_err(|e| io_error(&format!("schema {schema}"), &dir, e))?;
        Ok(true)
    }

    /// Drops schema `schema`: with `cascade` its tables too; without, only when it has none
    /// (42000 names them). False when it did not exist.
    pub fn drop_schema(&self, schema: &str, cascade: bool) -> Result<bool> {
        let dir = self.schema_dir(schema);
        if !dir.is_dir() {
            return Ok(false);
        }
        let tables = self.table_names(schema);
        if !tables.is_empty() && !cascade {
            return Err(StorageError::TransactionState {
                detail: format!(
                    "schema {schema} holds tables ({}); drop them first or DROP SCHEMA {schema} \
                     CASCADE",
                    tables.join(", ")
                ),
            });
        }
        for table in &tables {
            self.drop_table(schema, table)?;
        }
        let aside = self.aside(&dir);
        std::fs::rename(&dir, &aside)
            .map_err(|e| io_error(&format!("schema {schema}"), &dir, e))?;
        if let Err(e) = std::fs::remove_dir_all(&aside) {
            log::warn!("dropped schema {schema}: removing {}: {e}", aside.display());
        }
        Ok(true)
    }

    /// The tables of schema `schema` (its Delta tables and attached ones), by name.
    pub fn table_names(&self, schema: &str) -> Vec<String> {
        let dir = self.schema_dir(schema);
        let mut names: Vec<String> = read_dir_names(&dir)
            .into_iter()
            .filter_map(|(name, is_dir)| {
                if is_dir {
                    let table = name_of_folder(&name)?;
                    dir.join(&name).join("_delta_log").is_dir().then_some(table)
                } else {
                    let stem = name.strip_suffix(&format!(".{LINK_EXTENSION}"))?;
                    name_of_folder(stem)
                }
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Whether table `schema.table` exists.
    pub fn table_exists(&self, schema: &str, table: &str) -> bool {
        self.table_dir(schema, table).join("_delta_log").is_dir()
            || self.link_file(schema, table).is_file()
    }

    /// Where table `schema.table` lives (its folder, or an attached table's location).
    pub fn table_location(&self, schema: &str, table: &str) -> Result<Option<Url>> {
        let link = self.link_file(schema, table);
        if link.is_file() {
            let bytes = std::fs::read(&link).map_err(|e| io_error("a table link", &link, e))?;
            let link: Link = serde_json::from_slice(&bytes).map_err(|e| StorageError::Corrupt {
                table: format!("{schema}.{table}"),
                detail: format!("link file {}: {e}", link.display()),
            })?;
            let url = Url::parse(&link.location).map_err(|e| StorageError::Corrupt {
                table: format!("{schema}.{table}"),
                detail: format!("link location {}: {e}", link.location),
            })?;
            return Ok(Some(url));
        }
        let dir = self.table_dir(schema, table);
        if !dir.join("_delta_log").is_dir() {
            return Ok(None);
        }
        Ok(Some(folder_url(&dir)?))
    }

    /// Whether `schema.table` is attached (its files are not under this store's folder).
    pub fn is_attached(&self, schema: &str, table: &str) -> bool {
        self.link_file(schema, table).is_file()
    }

    /// The open handle of table `schema.table`, if it exists.
    pub fn table(&self, schema: &str, table: &str) -> Result<Option<Arc<StoredTable>>> {
        let Some(url) = self.table_location(schema, table)? else {
            return Ok(None);
        };
        Ok(Some(self.handle(&format!("{schema}.{table}"), url)?))
    }

    /// The shared handle of the table at `url`.
    fn handle(&self, name: &str, url: Url) -> Result<Arc<StoredTable>> {
        let key = url.to_string();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(table) = open.get(&key) {
            if table.name() == name {
                return Ok(Arc::clone(table));
            }
        }
        let table = Arc::new(StoredTable::open(name, url)?);
        open.insert(key, Arc::clone(&table));
        Ok(table)
    }

    /// Forgets the open handle of the table at `url` (it was dropped or moved).
    fn forget(&self, url: &Url) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&url.to_string());
    }

    /// `CREATE TABLE schema.table` with `columns` owned by `owner`, holding `rows` if given,
    /// in one commit.
    ///
    /// # Errors
    ///
    /// 42710 when it exists (and `mode` is [`CreateMode::New`]; two sessions creating it at
    /// once: one gets 42710), 42704 when the schema does not exist, 0A000 for a column type a
    /// table cannot hold.
    pub async fn create_table(
        &self,
        schema: &str,
        table: &str,
        columns: &Schema,
        owner: Option<&str>,
        rows: Option<InitialRows>,
        mode: CreateMode,
    ) -> Result<Created> {
        let name = format!("{schema}.{table}");
        if !self.schema_exists(schema) {
            return Err(StorageError::NotFound {
                what: format!("schema {schema}"),
            });
        }
        if self.is_attached(schema, table) {
            return match mode {
                CreateMode::IfNotExists => Ok(Created {
                    table: self
                        .table(schema, table)?
                        .ok_or_else(|| StorageError::NotFound {
                            what: format!("table {name}"),
                        })?,
                    created: false,
                    rows: 0,
                }),
                _ => Err(StorageError::Exists {
                    what: format!("table {name} (attached from elsewhere; DROP it first)"),
                }),
            };
        }
        let table_schema = TableSchema::from_logical(columns)?;
        let dir = self.table_dir(schema, table);
        let exists = dir.join("_delta_log").is_dir();
        if exists && mode == CreateMode::New {
            return Err(StorageError::Exists {
                what: format!("table {name}"),
            });
        }
        let url = folder_url(&dir)?;
        let handle = self.handle(&name, url)?;
        if exists && mode == CreateMode::IfNotExists {
            return Ok(Created {
                table: handle,
                created: false,
                rows: 0,
            });
        }
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&format!("table {name}"), &dir, e))?;
        let (adds, count) = match rows {
            Some(InitialRows::Plan { plan, context }) => {
                write_plan(&handle, &table_schema, None, plan, context).await?
            }
            Some(InitialRows::Stream(stream)) => {
                write_stream(FileWriter::new(&handle, &table_schema, None), stream).await?
            }
            None => (Vec::new(), 0),
        };
        let mut builder = DeltaTable::new(Arc::clone(handle.log_store()))
            .create()
            .with_table_name(table)
            .with_columns(table_schema.delta.fields().cloned())
            .with_actions(adds.iter().cloned().map(Action::Add))
            .with_save_mode(if exists {
                SaveMode::Overwrite
            } else {
                SaveMode::ErrorIfExists
            })
            // A checkpoint every CHECKPOINT_INTERVAL commits: each commit reads back the log
            // since the last checkpoint, which row-by-row INSERTs make long.
            .with_configuration_property(
                deltalake::TableProperty::CheckpointInterval,
                Some(CHECKPOINT_INTERVAL.to_string()),
            );
        if let Some(owner) = owner {
            builder = builder
                .with_raise_if_key_not_exists(false)
                .with_configuration([(OWNER_PROPERTY, Some(owner))]);
        }
        match builder.await {
            Ok(_) => Ok(Created {
                table: handle,
                created: true,
                rows: count,
            }),
            Err(e) => {
                handle.delete_files(&adds).await;
                Err(match e {
                    DeltaTableError::VersionAlreadyExists(_) => StorageError::Exists {
                        what: format!("table {name}"),
                    },
                    DeltaTableError::Generic(text) if text.contains("already exists") => {
                        StorageError::Exists {
                            what: format!("table {name}"),
                        }
                    }
                    other => match StorageError::from_delta(&name, other) {
                        StorageError::Conflict { .. } if !exists => StorageError::Exists {
                            what: format!("table {name}"),
                        },
                        e => e,
                    },
                })
            }
        }
    }

    /// Attaches the Delta table at `location` as `schema.table` (its files stay where they
    /// are; dropping it forgets the link, not the files).
    pub async fn attach(
        &self,
        schema: &str,
        table: &str,
        location: Url,
    ) -> Result<Arc<StoredTable>> {
        let name = format!("{schema}.{table}");
        if !self.schema_exists(schema) {
            return Err(StorageError::NotFound {
                what: format!("schema {schema}"),
            });
        }
        if self.table_exists(schema, table) {
            return Err(StorageError::Exists {
                what: format!("table {name}"),
            });
        }
        let handle = Arc::new(StoredTable::open(&name, location.clone())?);
        if !handle.exists().await? {
            return Err(StorageError::NotFound {
                what: format!("a Delta table at {location}"),
            });
        }
        handle.latest().await?;
        let link = Link {
            location: location.to_string(),
        };
        let path = self.link_file(schema, table);
        let bytes = serde_json::to_vec(&link).unwrap_or_default();
        std::fs::write(&path, bytes).map_err(|e| io_error(&format!("table {name}"), &path, e))?;
        self.forget(&location);
        self.table(schema, table)?
            .ok_or_else(|| StorageError::NotFound {
                what: format!("table {name}"),
            })
    }

    /// `DROP TABLE schema.table`: its folder is moved aside and deleted (an attached table's
    /// link only). False when it did not exist.
    pub fn drop_table(&self, schema: &str, table: &str) -> Result<bool> {
        let name = format!("{schema}.{table}");
        let link = self.link_file(schema, table);
        if link.is_file() {
            if let Ok(Some(url)) = self.table_location(schema, table) {
                self.forget(&url);
            }
            std::fs::remove_file(&link)
                .map_err(|e| io_error(&format!("table {name}"), &link, e))?;
            return Ok(true);
        }
        let dir = self.table_dir(schema, table);
        if !dir.join("_delta_log").is_dir() {
            return Ok(false);
        }
        if let Ok(url) = folder_url(&dir) {
            self.forget(&url);
        }
        let aside = self.aside(&dir);
        std::fs::rename(&dir, &aside).map_err(|e| io_error(&format!("table {name}"), &dir, e))?;
        if let Err(e) = std::fs::remove_dir_all(&aside) {
            log::warn!("dropped table {name}: removing {}: {e}", aside.display());
        }
        Ok(true)
    }

    /// `RENAME TABLE a.t TO b.u`: moves the table's folder (or link).
    ///
    /// # Errors
    ///
    /// 42704 when `from` does not exist or `to`'s schema does not; 42710 when `to` exists.
    pub fn rename_table(&self, from: (&str, &str), to: (&str, &str)) -> Result<()> {
        let from_name = format!("{}.{}", from.0, from.1);
        let to_name = format!("{}.{}", to.0, to.1);
        if !self.table_exists(from.0, from.1) {
            return Err(StorageError::NotFound {
                what: format!("table {from_name}"),
            });
        }
        if !self.schema_exists(to.0) {
            return Err(StorageError::NotFound {
                what: format!("schema {}", to.0),
            });
        }
        if self.table_exists(to.0, to.1) {
            return Err(StorageError::Exists {
                what: format!("table {to_name}"),
            });
        }
        let (source, target) = if self.is_attached(from.0, from.1) {
            (self.link_file(from.0, from.1), self.link_file(to.0, to.1))
        } else {
            (self.table_dir(from.0, from.1), self.table_dir(to.0, to.1))
        };
        if let Ok(Some(url)) = self.table_location(from.0, from.1) {
            self.forget(&url);
        }
        if target.exists() {
            // A leftover folder without a log (a create that failed): out of the way.
            let aside = self.aside(&target);
            std::fs::rename(&target, &aside)
                .map_err(|e| io_error(&format!("table {to_name}"), &target, e))?;
            let _ = std::fs::remove_dir_all(&aside);
        }
        std::fs::rename(&source, &target)
            .map_err(|e| io_error(&format!("table {from_name}"), &source, e))
    }

    /// Every table of every schema with its newest snapshot (a table that cannot be read gives
    /// its error), by schema and name.
    pub async fn snapshots(&self) -> Vec<(String, String, Result<Arc<TableSnapshot>>)> {
        let mut out = Vec::new();
        for schema in self.schema_names() {
            for name in self.table_names(&schema) {
                let snapshot = match self.table(&schema, &name) {
                    Ok(Some(table)) => table.latest().await,
                    Ok(None) => continue,
                    Err(e) => Err(e),
                };
                out.push((schema.clone(), name, snapshot));
            }
        }
        out
    }

    /// The newest snapshot of `schema.table` read so far (no I/O), if any.
    pub fn cached_snapshot(&self, schema: &str, table: &str) -> Option<Arc<TableSnapshot>> {
        self.table(schema, table).ok().flatten()?.cached()
    }

    /// A hidden, unique name beside `path` to move it to before deleting it.
    fn aside(&self, path: &FsPath) -> PathBuf {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        path.with_file_name(format!(".dropped-{name}-{stamp}-{}", std::process::id()))
    }
}

/// The `file://` URL of folder `dir` (ending in `/`).
pub fn folder_url(dir: &FsPath) -> Result<Url> {
    Url::from_directory_path(dir).map_err(|()| StorageError::Io {
        table: dir.display().to_string(),
        detail: "not an absolute path".to_string(),
    })
}

/// The names in folder `dir` (and whether each is a folder); none when it cannot be read.
fn read_dir_names(dir: &FsPath) -> Vec<(String, bool)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let is_dir = e.file_type().ok()?.is_dir();
            Some((name, is_dir))
        })
        .collect()
}

/// An I/O failure on `what` at `path`.
fn io_error(what: &str, path: &FsPath, e: std::io::Error) -> StorageError {
    if let Some(detail) = crate::error::disk_full(&e) {
        return StorageError::DiskFull {
            table: what.to_string(),
            detail,
        };
    }
    StorageError::Io {
        table: what.to_string(),
        detail: format!("{}: {e}", path.display()),
    }
}
