//! A session's transaction ([`Transaction`]): which version of each table its statements read,
//! and what they wrote and have not committed.
//!
//! - **Autocommit** (the default): each statement reads one snapshot of each table it names
//!   (pinned at its first read, dropped when the next statement begins), and a statement's
//!   writes commit when the statement ends, in one Delta commit per table.
//! - **Explicit** (`SET AUTOCOMMIT OFF`): the snapshots read are pinned until the transaction
//!   ends (snapshot isolation), and the writes wait for `COMMIT`: the session reads its own
//!   uncommitted writes (its view of a table is the version it read, less the files its
//!   statements removed, plus the files they added), others do not. `ROLLBACK`, or the
//!   session's end, deletes the files nobody committed.
//!
//! A commit is Delta's optimistic one: the files are already written, the commit names them in
//! the log's next entry. When another commit came first, delta-rs's conflict checks decide: an
//! append never conflicts; a statement that removed a file another commit also removed (two
//! UPDATEs or DELETEs of the same rows' file), or whose table changed its columns meanwhile,
//! fails with 40001 and keeps nothing. Each table commits atomically; a transaction over
//! several tables commits them one after another (in name order), so a crash between two of
//! them keeps the first.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::Mutex;

use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, Remove};
use deltalake::protocol::{DeltaOperation, SaveMode};

use crate::error::{Result, StorageError};
use crate::table::{DataFile, StoredTable, TableSnapshot};

/// What kind of change a statement made to a table (the commit's operation in the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeKind {
    /// Rows added (`INSERT`, `IMPORT`, `COPY FROM`).
    Append,
    /// Rows deleted.
    Delete,
    /// Rows changed.
    Update,
    /// `MERGE INTO`.
    Merge,
    /// Every row removed (`TRUNCATE TABLE`).
    Truncate,
    /// Every row replaced (`INSERT OVERWRITE`).
    Overwrite,
}

impl ChangeKind {
    /// The statement's name, as the log's history shows it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Append => "INSERT",
            Self::Delete => "DELETE",
            Self::Update => "UPDATE",
            Self::Merge => "MERGE",
            Self::Truncate => "TRUNCATE",
            Self::Overwrite => "INSERT OVERWRITE",
        }
    }
}

/// What one statement changed in one table, against the view it read.
#[derive(Debug, Clone)]
pub struct Change {
    /// The table.
    pub table: Arc<StoredTable>,
    /// The version the statement's view started from.
    pub base: Arc<TableSnapshot>,
    /// Files it wrote.
    pub added: Vec<Add>,
    /// Files of its view it removed (their rows gone or rewritten into `added`).
    pub removed: Vec<DataFile>,
    /// What it was.
    pub kind: ChangeKind,
}

/// A table as one statement of a transaction sees it.
#[derive(Debug, Clone)]
pub struct TableView {
    /// The committed version it starts from.
    pub snapshot: Arc<TableSnapshot>,
    /// Its files: the version's, less those this transaction removed, plus those it added.
    pub files: Arc<Vec<DataFile>>,
}

/// One session's transaction state; the session's config holds it (an extension), where the
/// tables' scans and writes find it.
#[derive(Debug, Default)]
pub struct Transaction {
    state: Mutex<State>,
    /// Who commits (the log's `userName`).
    user: Mutex<Option<String>>,
}

#[derive(Debug, Default)]
struct State {
    /// `SET AUTOCOMMIT OFF` (or `BEGIN`): writes wait for COMMIT.
    explicit: bool,
    /// `BEGIN`/`START TRANSACTION`: autocommit comes back when the transaction ends.
    until_end: bool,
    /// The version of each table read so far (by folder URL).
    pinned: HashMap<String, Arc<TableSnapshot>>,
    /// Uncommitted changes, by folder URL (committed in this order).
    pending: BTreeMap<String, Pending>,
}

#[derive(Debug)]
struct Pending {
    table: Arc<StoredTable>,
    base: Arc<TableSnapshot>,
    /// Files this transaction added that are part of its view.
    added: Vec<Add>,
    /// Files of `base` it removed.
    removed: Vec<Remove>,
    /// Files it added and removed again (never committed; deleted at the end).
    discarded: Vec<Add>,
    kinds: BTreeSet<ChangeKind>,
}

impl Transaction {
    /// A transaction in autocommit mode.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Names the user whose commits these are (the log's commit information).
    pub fn set_user(&self, user: Option<String>) {
        *self.user.lock().unwrap_or_else(|e| e.into_inner()) = user;
    }

    /// Whether writes wait for COMMIT (`SET AUTOCOMMIT OFF`).
    pub fn is_explicit(&self) -> bool {
        self.lock().explicit
    }

    /// Whether uncommitted writes wait.
    pub fn has_pending(&self) -> bool {
        !self.lock().pending.is_empty()
    }

    /// The tables with uncommitted writes (`schema.table`).
    pub fn pending_tables(&self) -> Vec<String> {
        self.lock()
            .pending
            .values()
            .map(|p| p.table.name().to_string())
            .collect()
    }

    /// A statement begins: in autocommit mode it reads fresh snapshots.
    pub fn begin_statement(&self) {
        let mut state = self.lock();
        if !state.explicit {
            state.pinned.clear();
        }
    }

    /// `SET AUTOCOMMIT OFF` (`explicit`) or `ON`. Turning autocommit on commits what waits, as
    /// JDBC's `setAutoCommit(true)` does.
    pub async fn set_explicit(&self, explicit: bool) -> Result<()> {
        if !explicit {
            self.commit().await?;
        }
        let mut state = self.lock();
        state.explicit = explicit;
        state.until_end = false;
        state.pinned.clear();
        Ok(())
    }

    /// `BEGIN` / `START TRANSACTION`: writes wait for COMMIT or ROLLBACK, after which
    /// autocommit is back (when it was on).
    pub fn begin(&self) {
        let mut state = self.lock();
        if !state.explicit {
            state.explicit = true;
            state.until_end = true;
            state.pinned.clear();
        }
    }

    /// The transaction ended: autocommit is back after a `BEGIN`.
    fn ended(state: &mut State) {
        state.pinned.clear();
        if state.until_end {
            state.explicit = false;
            state.until_end = false;
        }
    }

    /// `table` as this statement sees it: the version pinned for it (reading the newest one
    /// and pinning it on first use), with this transaction's own changes.
    pub async fn view(&self, table: &Arc<StoredTable>) -> Result<TableView> {
        let key = table.url().to_string();
        if let Some(view) = self.view_if_known(&key) {
            return Ok(view);
        }
        let latest = table.latest().await?;
        let mut state = self.lock();
        let snapshot = Arc::clone(state.pinned.entry(key.clone()).or_insert(latest));
        drop(state);
        Ok(self.view_if_known(&key).unwrap_or(TableView {
            files: Arc::clone(&snapshot.files),
            snapshot,
        }))
    }

    /// The view of the table at folder URL `key`, if this transaction has read or written it.
    fn view_if_known(&self, key: &str) -> Option<TableView> {
        let state = self.lock();
        if let Some(pending) = state.pending.get(key) {
            let removed: std::collections::HashSet<&str> =
                pending.removed.iter().map(|r| r.path.as_str()).collect();
            let mut files: Vec<DataFile> = pending
                .base
                .files
                .iter()
                .filter(|f| !removed.contains(f.add.path.as_str()))
                .cloned()
                .collect();
            files.extend(pending.added.iter().cloned().map(DataFile::from_add));
            return Some(TableView {
                snapshot: Arc::clone(&pending.base),
                files: Arc::new(files),
            });
        }
        state.pinned.get(key).map(|snapshot| TableView {
            snapshot: Arc::clone(snapshot),
            files: Arc::clone(&snapshot.files),
        })
    }

    /// Takes a statement's change: commits it now in autocommit mode (the committed version is
    /// returned), or keeps it for COMMIT.
    ///
    /// # Errors
    ///
    /// 40001 when another commit conflicts (nothing of the change is kept: its files are
    /// deleted).
    pub async fn apply(&self, change: Change) -> Result<Option<u64>> {
        let key = change.table.url().to_string();
        {
            let mut state = self.lock();
            if state.explicit {
                let pending = state.pending.entry(key.clone()).or_insert_with(|| Pending {
                    table: Arc::clone(&change.table),
                    base: Arc::clone(&change.base),
                    added: Vec::new(),
                    removed: Vec::new(),
                    discarded: Vec::new(),
                    kinds: BTreeSet::new(),
                });
                for file in change.removed {
                    match pending.added.iter().position(|a| a.path == file.add.path) {
                        Some(i) => {
                            let add = pending.added.swap_remove(i);
                            pending.discarded.push(add);
                        }
                        None => pending.removed.push(remove_of(&file.add)),
                    }
                }
                pending.added.extend(change.added);
                pending.kinds.insert(change.kind);
                return Ok(None);
            }
            // Autocommit: later reads of this statement see what it wrote.
            state.pinned.remove(&key);
        }
        let user = self.user.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // An append commits with the appends of other statements arriving meanwhile.
        if change.kind == ChangeKind::Append && change.removed.is_empty() {
            if change.added.is_empty() {
                return Ok(Some(change.base.version));
            }
            return change.table.append(change.added, user).await.map(Some);
        }
        let pending = Pending {
            table: Arc::clone(&change.table),
            base: change.base,
            removed: change.removed.iter().map(|f| remove_of(&f.add)).collect(),
            added: change.added,
            discarded: Vec::new(),
            kinds: BTreeSet::from([change.kind]),
        };
        commit_pending(pending, user.as_deref(), 1).await.map(Some)
    }

    /// `COMMIT`: every table's pending changes, one commit each, in name order. The
    /// transaction's snapshots are dropped, so the next statement reads fresh ones.
    ///
    /// # Errors
    ///
    /// 40001 when another commit conflicts with a table's changes: that table's changes and
    /// those of the tables after it are dropped (their files deleted), and the message names
    /// the tables committed before it.
    pub async fn commit(&self) -> Result<()> {
        let pending = {
            let mut state = self.lock();
            Self::ended(&mut state);
            std::mem::take(&mut state.pending)
        };
        let user = self.user.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut committed: Vec<String> = Vec::new();
        let mut iter = pending.into_values();
        while let Some(p) = iter.next() {
            let name = p.table.name().to_string();
            let statements = p.kinds.len();
            if let Err(e) = commit_pending(p, user.as_deref(), statements).await {
                for rest in iter {
                    discard(rest).await;
                }
                return Err(match (e, committed.is_empty()) {
                    (e, true) => e,
                    (StorageError::Conflict { table, detail }, false) => StorageError::Conflict {
                        table,
                        detail: format!(
                            "{detail} (the changes to {} were committed before)",
                            committed.join(", ")
                        ),
                    },
                    (e, false) => e,
                });
            }
            committed.push(name);
        }
        Ok(())
    }

    /// `ROLLBACK` (and a session's end): forgets every pending change, deleting its files.
    pub async fn rollback(&self) {
        let pending = {
            let mut state = self.lock();
            Self::ended(&mut state);
            std::mem::take(&mut state.pending)
        };
        for p in pending.into_values() {
            discard(p).await;
        }
    }

    /// Forgets the pinned snapshot of `table` (after DDL changed it).
    pub fn unpin(&self, table: &StoredTable) {
        self.lock().pinned.remove(&table.url().to_string());
    }

    /// Drops what waits without an async runtime to delete files with (a session dropped
    /// outside one): the files stay for `VACUUM`.
    pub fn abandon(&self) -> bool {
        let mut state = self.lock();
        let had = !state.pending.is_empty();
        state.pending.clear();
        state.pinned.clear();
        had
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        let pending = std::mem::take(&mut self.lock().pending);
        if pending.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    for p in pending.into_values() {
                        discard(p).await;
                    }
                });
            }
            Err(_) => log::warn!(
                "a session ended with uncommitted writes and no runtime to delete their files \
                 with; VACUUM removes them"
            ),
        }
    }
}

/// The `remove` action of the file `add` names.
pub(crate) fn remove_of(add: &Add) -> Remove {
    Remove {
        path: add.path.clone(),
        data_change: true,
        deletion_timestamp: Some(chrono::Utc::now().timestamp_millis()),
        extended_file_metadata: Some(true),
        partition_values: Some(add.partition_values.clone()),
        size: Some(add.size),
        tags: add.tags.clone(),
        deletion_vector: add.deletion_vector.clone(),
        base_row_id: add.base_row_id,
        default_row_commit_version: add.default_row_commit_version,
    }
}

/// Deletes the files of changes that will not be committed.
async fn discard(p: Pending) {
    p.table.delete_files(&p.added).await;
    p.table.delete_files(&p.discarded).await;
}

/// Commits one table's changes; the version made. On failure the changes' files are deleted.
async fn commit_pending(p: Pending, user: Option<&str>, statements: usize) -> Result<u64> {
    if p.added.is_empty() && p.removed.is_empty() {
        p.table.delete_files(&p.discarded).await;
        return Ok(p.base.version);
    }
    let kind = p.kinds.iter().copied().max().unwrap_or(ChangeKind::Append);
    let operation = match (kind, p.removed.is_empty()) {
        (ChangeKind::Append, true) => DeltaOperation::Write {
            mode: SaveMode::Append,
            partition_by: None,
            predicate: None,
        },
        (ChangeKind::Overwrite | ChangeKind::Truncate, _) => DeltaOperation::Write {
            mode: SaveMode::Overwrite,
            partition_by: None,
            predicate: None,
        },
        (ChangeKind::Delete, _) => DeltaOperation::Delete { predicate: None },
        (ChangeKind::Merge, _) => DeltaOperation::Merge {
            predicate: None,
            merge_predicate: None,
            matched_predicates: Vec::new(),
            not_matched_predicates: Vec::new(),
            not_matched_by_source_predicates: Vec::new(),
        },
        _ => DeltaOperation::Update { predicate: None },
    };
    let mut actions: Vec<Action> = Vec::with_capacity(p.added.len() + p.removed.len());
    actions.extend(p.removed.iter().cloned().map(Action::Remove));
    actions.extend(p.added.iter().cloned().map(Action::Add));
    let mut app = HashMap::new();
    app.insert(
        "accelsql.statement".to_string(),
        serde_json::Value::String(
            p.kinds
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", "),
        ),
    );
    app.insert(
        "accelsql.statements".to_string(),
        serde_json::Value::from(statements),
    );
    if let Some(user) = user {
        app.insert(
            "userName".to_string(),
            serde_json::Value::String(user.to_string()),
        );
    }
    // Log entries past their retention are cleaned up by OPTIMIZE and VACUUM, not by every
    // commit (each cleanup lists the whole log).
    let properties = CommitProperties::default()
        .with_cleanup_expired_logs(Some(false))
        .with_max_retries(1000);
    let commit = CommitBuilder::from(properties)
        .with_actions(actions)
        .with_app_metadata(app)
        .build(
            Some(&p.base.state),
            Arc::clone(p.table.log_store()),
            operation,
        )
        .await;
    match commit {
        Ok(done) => {
            p.table.delete_files(&p.discarded).await;
            let version = done.version();
            p.table.install(done.snapshot()).await;
            Ok(version)
        }
        Err(e) => {
            let e = StorageError::from_delta(p.table.name(), e);
            discard(p).await;
            Err(e)
        }
    }
}
