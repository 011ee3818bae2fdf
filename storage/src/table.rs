//! One stored table ([`StoredTable`]): its Delta log and files at a location, the newest state
//! this process has read of it, and its snapshots ([`TableSnapshot`]): a version's columns and
//! data files, as a statement reads them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use datafusion::object_store::ObjectStoreExt;
use deltalake::kernel::Add;
use deltalake::logstore::LogStoreRef;
use deltalake::table::state::DeltaTableState;
use deltalake::{DeltaTable, DeltaTableBuilder, ObjectStore, Path};
use url::Url;

use crate::error::{Result, StorageError};
use crate::types::TableSchema;

/// The Delta table property that names a table's owner (the user who created it).
pub const OWNER_PROPERTY: &str = "accelsql.owner";

/// One data file of a snapshot.
#[derive(Debug, Clone)]
pub struct DataFile {
    /// Its `add` action: path (relative to the table, URL-encoded), size, statistics.
    pub add: Add,
    /// Its rows, when the log's statistics say.
    pub rows: Option<u64>,
}

impl DataFile {
    /// A file from its `add` action, its row count read from the action's statistics.
    pub fn from_add(add: Add) -> Self {
        let rows = add
            .stats
            .as_deref()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
            .and_then(|v| v.get("numRecords").and_then(|n| n.as_u64()));
        Self { add, rows }
    }
}

/// A version of a table: what one statement reads.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    /// The table's version (0 for the version that created it).
    pub version: u64,
    /// delta-rs's state of that version (a commit's conflict checks read it).
    pub state: DeltaTableState,
    /// Its columns.
    pub schema: TableSchema,
    /// Its data files.
    pub files: Arc<Vec<DataFile>>,
    /// Its owner ([`OWNER_PROPERTY`]), if it has one.
    pub owner: Option<String>,
    /// When the version was committed (milliseconds since the epoch), if known.
    pub committed_at: Option<i64>,
}

impl TableSnapshot {
    /// The snapshot delta-rs's `state` describes, for table `name`.
    pub(crate) fn from_state(name: &str, state: DeltaTableState) -> Result<Self> {
        let schema = TableSchema::from_delta(&state.schema()).map_err(|e| match e {
            StorageError::Corrupt { detail, .. } => StorageError::Corrupt {
                table: name.to_string(),
                detail,
            },
            other => other,
        })?;
        let log = state
            .snapshot()
            .try_log_data()
            .map_err(|e| StorageError::from_delta(name, e))?;
        let files: Vec<DataFile> = log
            .iter()
            .map(|view| {
                #[allow(deprecated)]
                let add = view.add_action();
                let rows = view.num_records().map(|n| n as u64);
                DataFile { add, rows }
            })
            .collect();
        if let Some(feature) = unsupported_reader_feature(&state) {
            return Err(StorageError::Unsupported {
                what: format!(
                    "table {name} uses the Delta reader feature {feature}, which accelsql does not \
                     read yet"
                ),
            });
        }
        let owner = state
            .metadata()
            .configuration()
            .get(OWNER_PROPERTY)
            .cloned();
        let version = state.version();
        let committed_at = state.version_timestamp(version);
        Ok(Self {
            version,
            state,
            schema,
            files: Arc::new(files),
            owner,
            committed_at,
        })
    }

    /// The rows of this version, when every file's statistics count them.
    pub fn rows(&self) -> Option<u64> {
        self.files.iter().map(|f| f.rows).sum()
    }

    /// The bytes of this version's data files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.add.size.max(0) as u64).sum()
    }
}

/// A reader feature of the table that this crate's scan does not honour (deletion vectors,
/// column mapping), if it uses one.
fn unsupported_reader_feature(state: &DeltaTableState) -> Option<String> {
    let protocol = state.protocol();
    let features = protocol.reader_features()?;
    features
        .iter()
        .map(|f| f.to_string())
        .find(|f| f == "deletionVectors" || f == "columnMapping" || f == "v2Checkpoint")
}

/// One table's location and the newest state this process has read of it. Shared by every
/// session; cheap to ask for the latest snapshot when nothing changed (one `stat` of the next
/// log entry).
#[derive(Debug)]
pub struct StoredTable {
    /// `schema.table`, for messages.
    name: String,
    /// The table's folder.
    url: Url,
    log_store: LogStoreRef,
    /// The newest state loaded here, and its snapshot.
    latest: tokio::sync::Mutex<Option<(DeltaTable, Arc<TableSnapshot>)>>,
    /// A compaction of this table runs in the background (see `maintenance`).
    pub(crate) compacting: AtomicBool,
    /// Appends of autocommit statements waiting for the next commit (group commit).
    appends: std::sync::Mutex<Vec<QueuedAppend>>,
    /// Held by the task committing queued appends.
    committer: tokio::sync::Mutex<()>,
}

/// One statement's files, waiting to be committed with others'.
#[derive(Debug)]
struct QueuedAppend {
    adds: Vec<Add>,
    user: Option<String>,
    done: tokio::sync::oneshot::Sender<Result<u64>>,
}

impl StoredTable {
    /// The table at `url` (a folder URL), named `name` in messages. Reads nothing yet.
    pub fn open(name: &str, url: Url) -> Result<Self> {
        let log_store = DeltaTableBuilder::from_url(url.clone())
            .and_then(|b| b.build_storage())
            .map_err(|e| StorageError::from_delta(name, e))?;
        Ok(Self {
            name: name.to_string(),
            url,
            log_store,
            latest: tokio::sync::Mutex::new(None),
            compacting: AtomicBool::new(false),
            appends: std::sync::Mutex::new(Vec::new()),
            committer: tokio::sync::Mutex::new(()),
        })
    }

    /// The table's name in messages (`schema.table`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table's folder.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The table's log store (delta-rs).
    pub fn log_store(&self) -> &LogStoreRef {
        &self.log_store
    }

    /// The object store rooted at the table's folder.
    pub(crate) fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.log_store.object_store(None)
    }

    /// Whether the folder holds a Delta table (its first log entry is there).
    pub async fn exists(&self) -> Result<bool> {
        self.log_store
            .is_delta_table_location()
            .await
            .map_err(|e| StorageError::from_delta(&self.name, e))
    }

    /// The newest committed version. Asks the log whether a newer entry than the last one read
    /// here exists (one `stat`), and reads only the entries after it.
    pub async fn latest(&self) -> Result<Arc<TableSnapshot>> {
        let mut latest = self.latest.lock().await;
        if let Some((table, snapshot)) = latest.as_mut() {
            let next = Path::from(format!("_delta_log/{:020}.json", snapshot.version + 1));
            match self.object_store().head(&next).await {
                Err(deltalake::ObjectStoreError::NotFound { .. }) => {
                    return Ok(Arc::clone(snapshot));
                }
                Err(e) => {
                    return Err(StorageError::Io {
                        table: self.name.clone(),
                        detail: e.to_string(),
                    });
                }
                Ok(_) => {}
            }
            if let Err(e) = table.update_incremental(None).await {
                return Err(self.load_error(e).await);
            }
            let state = table
                .snapshot()
                .map_err(|e| StorageError::from_delta(&self.name, e))?
                .clone();
            *snapshot = Arc::new(TableSnapshot::from_state(&self.name, state)?);
            return Ok(Arc::clone(snapshot));
        }
        let mut table = DeltaTable::new(Arc::clone(&self.log_store));
        if let Err(e) = table.load().await {
            return Err(self.load_error(e).await);
        }
        let state = table
            .snapshot()
            .map_err(|e| StorageError::from_delta(&self.name, e))?
            .clone();
        let snapshot = Arc::new(TableSnapshot::from_state(&self.name, state)?);
        *latest = Some((table, Arc::clone(&snapshot)));
        Ok(snapshot)
    }

    /// Takes the state a commit of this process left (delta-rs's post-commit state) as the
    /// newest read here, when it is newer: the next statement then need not read the log
    /// entry it just wrote.
    pub async fn install(&self, state: DeltaTableState) {
        let version = state.version();
        let mut latest = self.latest.lock().await;
        let Some((table, snapshot)) = latest.as_mut() else {
            return;
        };
        if version <= snapshot.version {
            return;
        }
        match TableSnapshot::from_state(&self.name, state.clone()) {
            Ok(fresh) => {
                table.state = Some(state);
                *snapshot = Arc::new(fresh);
            }
            Err(e) => log::debug!("table {}: keeping the cached state: {e}", self.name),
        }
    }

    /// The newest version, its delta-rs state read from the log (not advanced by this
    /// process's own appends): for changes whose conflict checks read the whole table.
    pub async fn latest_read(&self) -> Result<Arc<TableSnapshot>> {
        let snapshot = self.latest().await?;
        if snapshot.state.version() == snapshot.version {
            return Ok(snapshot);
        }
        self.forget().await;
        self.latest().await
    }

    /// The newest snapshot read here so far, if one was read and nobody is reading one now
    /// (no I/O; for views that must not wait).
    pub fn cached(&self) -> Option<Arc<TableSnapshot>> {
        self.latest
            .try_lock()
            .ok()
            .and_then(|l| l.as_ref().map(|(_, s)| Arc::clone(s)))
    }

    /// Forgets the state read here (after this process committed through another handle, or
    /// to recover from a damaged read).
    pub async fn forget(&self) {
        *self.latest.lock().await = None;
    }

    /// Version `version` of the table (time travel).
    ///
    /// # Errors
    ///
    /// 42704 when the version does not exist (never committed, or its log entry was cleaned
    /// up).
    pub async fn at_version(&self, version: u64) -> Result<Arc<TableSnapshot>> {
        let latest = self.latest().await?;
        if version == latest.version {
            return Ok(latest);
        }
        if version > latest.version {
            return Err(StorageError::NotFound {
                what: format!(
                    "version {version} of table {} (its versions are 0 to {})",
                    self.name, latest.version
                ),
            });
        }
        let mut table = DeltaTable::new(Arc::clone(&self.log_store));
        if let Err(e) = table.load_version(version).await {
            return Err(match e {
                deltalake::DeltaTableError::InvalidVersion(_) => StorageError::NotFound {
                    what: format!(
                        "version {version} of table {} (its log entry was cleaned up)",
                        self.name
                    ),
                },
                other => self.load_error(other).await,
            });
        }
        let state = table
            .snapshot()
            .map_err(|e| StorageError::from_delta(&self.name, e))?
            .clone();
        Ok(Arc::new(TableSnapshot::from_state(&self.name, state)?))
    }

    /// The version of the table that was current at `at` (time travel).
    ///
    /// # Errors
    ///
    /// 42704 when the table did not exist yet at `at`.
    pub async fn as_of(&self, at: DateTime<Utc>) -> Result<Arc<TableSnapshot>> {
        let mut table = DeltaTable::new(Arc::clone(&self.log_store));
        if let Err(e) = table.load_with_datetime(at).await {
            return Err(match e {
                deltalake::DeltaTableError::InvalidVersion(_)
                | deltalake::DeltaTableError::NotATable(_) => StorageError::NotFound {
                    what: format!("a version of table {} as of {at}", self.name),
                },
                other => self.load_error(other).await,
            });
        }
        let state = table
            .snapshot()
            .map_err(|e| StorageError::from_delta(&self.name, e))?
            .clone();
        let snapshot = TableSnapshot::from_state(&self.name, state)?;
        // A time before the table's first commit finds no version.
        if snapshot.version == 0
            && snapshot
                .committed_at
                .is_some_and(|created| created > at.timestamp_millis())
        {
            return Err(StorageError::NotFound {
                what: format!(
                    "a version of table {} as of {at} (it was created later)",
                    self.name
                ),
            });
        }
        Ok(Arc::new(snapshot))
    }

    /// The commits of the table, newest first (at most `limit`).
    pub async fn history(&self, limit: Option<usize>) -> Result<Vec<Commit>> {
        use futures::TryStreamExt;
        let mut table = DeltaTable::new(Arc::clone(&self.log_store));
        if let Err(e) = table.load().await {
            return Err(self.load_error(e).await);
        }
        let newest = table.version().unwrap_or_default();
        let infos: Vec<_> = table
            .history(limit)
            .try_collect()
            .await
            .map_err(|e| StorageError::from_delta(&self.name, e))?;
        Ok(infos
            .into_iter()
            .enumerate()
            .map(|(i, info)| Commit {
                version: newest.saturating_sub(i as u64),
                timestamp: info.timestamp,
                operation: info.operation.clone(),
                parameters: info
                    .operation_parameters
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| match v {
                        serde_json::Value::String(s) => (k, s),
                        other => (k, other.to_string()),
                    })
                    .collect(),
                info: serde_json::to_string(&info.info).unwrap_or_default(),
            })
            .collect())
    }

    /// A load failure, as a damaged log (naming the entry that does not parse) when the log
    /// cannot be read as one.
    async fn load_error(&self, e: deltalake::DeltaTableError) -> StorageError {
        match StorageError::from_delta(&self.name, e) {
            StorageError::Corrupt { table, detail } => StorageError::Corrupt {
                table,
                detail: self.damaged_entry().await.unwrap_or(detail),
            },
            other => other,
        }
    }

    /// The first log entry that is not valid JSON (`_delta_log/….json, line n: …`), if one is.
    async fn damaged_entry(&self) -> Option<String> {
        use futures::TryStreamExt;
        let store = self.object_store();
        let mut entries: Vec<Path> = store
            .list(Some(&Path::from("_delta_log")))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .ok()?;
        entries.retain(|p| p.as_ref().ends_with(".json"));
        entries.sort();
        for entry in entries {
            let bytes = store.get(&entry).await.ok()?.bytes().await.ok()?;
            let text = String::from_utf8_lossy(&bytes);
            for (n, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                if let Err(e) = serde_json::from_str::<serde_json::Value>(line) {
                    return Some(format!("log entry {entry}, line {}: {e}", n + 1));
                }
            }
        }
        None
    }

    /// The object-store path of a data file of this table (its `add` path is relative to the
    /// table's folder and URL-encoded), as the scan of the root object store reads it.
    pub fn file_path(&self, add_path: &str) -> Result<Path> {
        let url = self.url.join(add_path).map_err(|e| StorageError::Corrupt {
            table: self.name.clone(),
            detail: format!("data file path {add_path:?} in the log: {e}"),
        })?;
        Path::from_url_path(url.path()).map_err(|e| StorageError::Corrupt {
            table: self.name.clone(),
            detail: format!("data file path {add_path:?} in the log: {e}"),
        })
    }

    /// Commits `adds` (an autocommit statement's new files, nothing removed): with the appends of
    /// other statements that arrive meanwhile, in one commit (group commit). The commit runs on
    /// a task of its own, so a statement dropped while it waits cannot leave the others, or
    /// the log, in between. The version that holds the files.
    ///
    /// # Errors
    ///
    /// As a commit fails (a full disk, a protocol change); the files are then deleted.
    pub(crate) async fn append(
        self: &Arc<Self>,
        adds: Vec<Add>,
        user: Option<String>,
    ) -> Result<u64> {
        let (done, answer) = tokio::sync::oneshot::channel();
        let first = {
            let mut queue = self.appends.lock().unwrap_or_else(|e| e.into_inner());
            queue.push(QueuedAppend { adds, user, done });
            queue.len() == 1
        };
        if first {
            let table = Arc::clone(self);
            tokio::spawn(async move { table.commit_appends().await });
        }
        answer.await.unwrap_or_else(|_| {
            Err(StorageError::Internal {
                table: self.name.clone(),
                detail: "the commit of this statement's rows was abandoned".into(),
            })
        })
    }

    /// Commits what the append queue holds, batch after batch, until it is empty.
    async fn commit_appends(self: Arc<Self>) {
        let _one = self.committer.lock().await;
        loop {
            let batch: Vec<QueuedAppend> =
                std::mem::take(&mut *self.appends.lock().unwrap_or_else(|e| e.into_inner()));
            if batch.is_empty() {
                return;
            }
            let outcome = self.commit_batch(&batch).await;
            for queued in batch {
                let answer = match &outcome {
                    Ok(version) => Ok(*version),
                    Err(e) => Err(e.duplicate()),
                };
                let _ = queued.done.send(answer);
            }
        }
    }

    /// One commit of the files of `batch`.
    async fn commit_batch(&self, batch: &[QueuedAppend]) -> Result<u64> {
        use deltalake::kernel::Action;
        use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
        use deltalake::protocol::{DeltaOperation, SaveMode};
        let adds: Vec<Add> = batch.iter().flat_map(|q| q.adds.iter().cloned()).collect();
        let outcome = async {
            let base = self.latest().await?;
            let mut app = HashMap::new();
            app.insert(
                "accelsql.statement".to_string(),
                serde_json::Value::String("INSERT".into()),
            );
            app.insert(
                "accelsql.statements".to_string(),
                serde_json::Value::from(batch.len()),
            );
            let mut users: Vec<&str> = batch.iter().filter_map(|q| q.user.as_deref()).collect();
            users.sort();
            users.dedup();
            if !users.is_empty() {
                app.insert(
                    "userName".to_string(),
                    serde_json::Value::String(users.join(", ")),
                );
            }
            let properties = CommitProperties::default()
                .with_cleanup_expired_logs(Some(false))
                .with_max_retries(1000);
            let done = CommitBuilder::from(properties)
                .with_actions(adds.iter().cloned().map(Action::Add).collect())
                .with_app_metadata(app)
                .build(
                    Some(&base.state),
                    Arc::clone(&self.log_store),
                    DeltaOperation::Write {
                        mode: SaveMode::Append,
                        partition_by: None,
                        predicate: None,
                    },
                )
                .await
                .map_err(|e| StorageError::from_delta(&self.name, e))?;
            let version = done.version();
            self.install(done.snapshot()).await;
            Ok(version)
        }
        .await;
        if outcome.is_err() {
            self.delete_files(&adds).await;
        }
        outcome
    }

    /// Deletes the data files `adds` name (written by a statement that did not commit them).
    /// Failures are logged: `VACUUM` removes what is left.
    pub(crate) async fn delete_files(&self, adds: &[Add]) {
        let store = self.object_store();
        for add in adds {
            let path = match deltalake::Path::from_url_path(&add.path) {
                Ok(path) => path,
                Err(e) => {
                    log::warn!("table {}: file {}: {e}", self.name(), add.path);
                    continue;
                }
            };
            if let Err(e) = store.delete(&path).await {
                log::warn!(
                    "table {}: deleting uncommitted file {}: {e}",
                    self.name(),
                    add.path
                );
            }
        }
    }

    /// Tries to start a background compaction: false when one runs already.
    pub(crate) fn start_compacting(&self) -> bool {
        !self.compacting.swap(true, Ordering::AcqRel)
    }

    /// A background compaction ended.
    pub(crate) fn stop_compacting(&self) {
        self.compacting.store(false, Ordering::Release);
    }
}

/// One commit of a table's history.
#[derive(Debug, Clone)]
pub struct Commit {
    /// The version it made.
    pub version: u64,
    /// When (milliseconds since the epoch).
    pub timestamp: Option<i64>,
    /// Delta's name of its operation (`WRITE`, `DELETE`, `UPDATE`, `OPTIMIZE`, …).
    pub operation: Option<String>,
    /// The operation's parameters.
    pub parameters: HashMap<String, String>,
    /// The rest of its commit information, as JSON.
    pub info: String,
}
