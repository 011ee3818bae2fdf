//! The script catalog: every `CREATE … SCRIPT` and `CREATE CONNECTION` that returned OK, shared by
//! the engine's sessions, and — with a data directory — kept in `scripts.json` there.
//!
//! The file is written to a temporary file, fsynced and renamed, so a crash right after CREATE
//! returns never loses or half-writes it. It holds `%env` values and connection passwords, so it
//! is owner-only (`0600`, the directory `0700` when we create it; an existing file that others
//! can read is tightened through its descriptor, with a warning), and it is never reached through
//! a symbolic link.
//!
//! Several processes may share a data directory: a change takes an exclusive `flock` on
//! `scripts.lock` (waiting at most [`LOCK_WAIT`]), reads the file as it is now, applies the
//! change to that (so "already exists" sees the other processes' scripts, and nothing of theirs
//! is overwritten), writes it and publishes it. Reads are fresh to the statement: each
//! statement's [`ScriptCatalog::generation`] check reloads the file when its size, time or inode
//! changed.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::security::SecurityState;
use crate::core::privileges::ObjectKind;
use crate::data_dir_err;
use crate::script_err;
use crate::udf::script::definition::{ConnectionEntry, ScriptEntry};

/// File name of the catalog in the data directory.
pub(crate) const CATALOG_FILE: &str = "scripts.json";
/// File name of the lock that serializes processes changing the catalog.
const LOCK_FILE: &str = "scripts.lock";
/// How long a change waits for another process's change before failing (58E01).
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(30);
const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct CatalogFile {
    version: u32,
    scripts: Vec<ScriptEntry>,
    /// Absent in catalogs written before connections existed.
    #[serde(default)]
    connections: Vec<ConnectionEntry>,
    /// Users, roles, grants and consumer groups; absent in catalogs written before they
    /// existed (then: no users, the predefined roles and groups).
    #[serde(default)]
    security: SecurityState,
}

/// The engine's scripts by (schema, name).
#[derive(Debug, Default)]
pub(crate) struct ScriptCatalog {
    entries: RwLock<BTreeMap<(String, String), Arc<ScriptEntry>>>,
    /// Connections by name.
    connections: RwLock<BTreeMap<String, ConnectionEntry>>,
    /// Users, roles, grants and consumer groups.
    security: RwLock<Arc<SecurityState>>,
    /// Bumped on every change, so sessions know when to refresh their functions.
    generation: AtomicU64,
    file: Option<PathBuf>,
    /// Serializes this process's writers of the file.
    write_lock: Mutex<()>,
    /// The file's (size, mtime ns, inode) when last read or written here.
    seen: Mutex<Option<Stamp>>,
}

impl ScriptCatalog {
    /// An in-memory catalog (no data directory).
    pub(crate) fn in_memory() -> Self {
        Self::default()
    }

    /// The catalog of `data_dir`, created if absent; a damaged file is an error, never dropped.
    pub(crate) fn open(data_dir: &Path) -> crate::Result<Self> {
        let io_err =
            |what: &str, e: std::io::Error| data_dir_err!(data_dir.to_path_buf(), "{what}: {e}");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(data_dir)
            .map_err(|e| io_err("cannot create it", e))?;
        let file = data_dir.join(CATALOG_FILE);
        let (stored, seen) = read_catalog(&file)?;
        let (entries, connections, security) = into_maps(stored);
        Ok(Self {
            entries: RwLock::new(entries),
            connections: RwLock::new(connections),
            security: RwLock::new(Arc::new(security)),
            generation: AtomicU64::new(1),
            file: Some(file),
            write_lock: Mutex::new(()),
            seen: Mutex::new(seen),
        })
    }

    /// Changes seen so far; a session compares it with the one it last synced at. Another
    /// process's change to the file is loaded here first (a failed reload keeps what we have and
    /// is logged: the next change reports it).
    pub(crate) fn generation(&self) -> u64 {
        if let Err(e) = self.reload_if_changed() {
            log::warn!("script catalog not reloaded: {e}");
        }
        self.generation.load(Ordering::Acquire)
    }

    /// Reloads the file if another process changed it since we last read or wrote it.
    fn reload_if_changed(&self) -> crate::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let now = std::fs::symlink_metadata(file).ok().map(|m| stamp(&m));
        if now == *self.seen.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(());
        }
        let _writer = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        let (stored, seen) = read_catalog(file)?;
        self.publish(stored, seen);
        Ok(())
    }

    /// Makes `stored` (read or written at `seen`) what this process's sessions see.
    fn publish(&self, stored: CatalogFile, seen: Option<Stamp>) {
        let (entries, connections, security) = into_maps(stored);
        *self.entries.write().unwrap_or_else(|e| e.into_inner()) = entries;
        *self.connections.write().unwrap_or_else(|e| e.into_inner()) = connections;
        *self.security.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(security);
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = seen;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Every script, by (schema, name).
    pub(crate) fn entries(&self) -> Vec<Arc<ScriptEntry>> {
        self.entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Stores `entry`; without `replace`, an existing script of that name is an error.
    pub(crate) fn create(&self, entry: ScriptEntry, replace: bool) -> crate::Result<()> {
        self.change(|entries| {
            let key = (entry.schema.clone(), entry.name.clone());
            if !replace && entries.contains_key(&key) {
                return Err(script_err!(
                    "script {}.{} already exists; use CREATE OR REPLACE to change it",
                    key.0,
                    key.1
                ));
            }
            entries.insert(key, Arc::new(entry));
            Ok(())
        })
    }

    /// Removes a script; a missing one is an error unless `if_exists`.
    pub(crate) fn drop_script(
        &self,
        schema: &str,
        name: &str,
        if_exists: bool,
    ) -> crate::Result<()> {
        self.change_all(|entries, _, security| {
            if entries
                .remove(&(schema.to_string(), name.to_string()))
                .is_none()
                && !if_exists
            {
                return Err(script_err!("script {schema}.{name} does not exist"));
            }
            security.forget_object(ObjectKind::Script, &format!("{schema}.{name}"));
            Ok(())
        })
    }

    /// Removes every script of `schema` (`DROP SCHEMA … CASCADE`).
    pub(crate) fn drop_schema_scripts(&self, schema: &str) -> crate::Result<()> {
        self.change_all(|entries, _, security| {
            for (s, name) in entries.keys() {
                if s == schema {
                    security.forget_object(ObjectKind::Script, &format!("{s}.{name}"));
                }
            }
            entries.retain(|(s, _), _| s != schema);
            Ok(())
        })
    }

    /// The names of the scripts in `schema`.
    pub(crate) fn scripts_in(&self, schema: &str) -> Vec<String> {
        self.entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .filter(|(s, _)| s == schema)
            .map(|(s, n)| format!("{s}.{n}"))
            .collect()
    }

    /// Applies `f` to the entries as they are now (re-read from the file, under the
    /// cross-process lock), saves the result, and only then publishes it.
    fn change(
        &self,
        f: impl FnOnce(&mut BTreeMap<(String, String), Arc<ScriptEntry>>) -> crate::Result<()>,
    ) -> crate::Result<()> {
        self.change_all(|entries, _, _| f(entries))
    }

    /// Applies `f` to fresh copies of the entries, the connections and the security section,
    /// saves the catalog with them, and only then publishes them; sessions then register their
    /// scripts again.
    pub(crate) fn change_all(
        &self,
        f: impl FnOnce(
            &mut BTreeMap<(String, String), Arc<ScriptEntry>>,
            &mut BTreeMap<String, ConnectionEntry>,
            &mut SecurityState,
        ) -> crate::Result<()>,
    ) -> crate::Result<()> {
        let _writer = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(file) = &self.file else {
            let mut entries = self
                .entries
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let mut connections = self
                .connections
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let mut security = (*self.security()).clone();
            f(&mut entries, &mut connections, &mut security)?;
            *self.entries.write().unwrap_or_else(|e| e.into_inner()) = entries;
            *self.connections.write().unwrap_or_else(|e| e.into_inner()) = connections;
            *self.security.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(security);
            self.generation.fetch_add(1, Ordering::AcqRel);
            return Ok(());
        };
        let _lock = lock_catalog(file)?;
        let (stored, _) = read_catalog(file)?;
        let (mut entries, mut connections, mut security) = into_maps(stored);
        f(&mut entries, &mut connections, &mut security)?;
        let stored = CatalogFile {
            version: FORMAT_VERSION,
            scripts: entries.values().map(|e| (**e).clone()).collect(),
            connections: connections.into_values().collect(),
            security,
        };
        let seen = persist(file, &stored)?;
        self.publish(stored, seen);
        Ok(())
    }

    /// The connection `name`, if there is one.
    pub(crate) fn connection(&self, name: &str) -> Option<ConnectionEntry> {
        self.connections
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Every connection, by name.
    pub(crate) fn connections(&self) -> Vec<ConnectionEntry> {
        self.connections
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Stores a connection; without `replace`, an existing one of that name is an error.
    pub(crate) fn create_connection(
        &self,
        connection: ConnectionEntry,
        replace: bool,
    ) -> crate::Result<()> {
        self.change_connections(|all| {
            if !replace && all.contains_key(&connection.name) {
                return Err(script_err!(
                    "connection {} already exists; use CREATE OR REPLACE CONNECTION to change it",
                    connection.name
                ));
            }
            all.insert(connection.name.clone(), connection);
            Ok(())
        })
    }

    /// Removes a connection; a missing one is an error unless `if_exists`.
    pub(crate) fn drop_connection(&self, name: &str, if_exists: bool) -> crate::Result<()> {
        self.change_connections(|all| {
            if all.remove(name).is_none() && !if_exists {
                return Err(script_err!("connection {name} does not exist"));
            }
            Ok(())
        })
    }

    /// As [`ScriptCatalog::change`], for the connections.
    fn change_connections(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, ConnectionEntry>) -> crate::Result<()>,
    ) -> crate::Result<()> {
        self.change_all(|_, connections, _| f(connections))
    }

    /// The users, roles, grants and consumer groups as they are now.
    pub(crate) fn security(&self) -> Arc<SecurityState> {
        Arc::clone(&self.security.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// As [`ScriptCatalog::change`], for the security section.
    pub(crate) fn change_security(
        &self,
        f: impl FnOnce(&mut SecurityState) -> crate::Result<()>,
    ) -> crate::Result<()> {
        self.change_all(|_, _, security| f(security))
    }
}

/// The (size, mtime ns, inode) by which a change of the file is noticed.
type Stamp = (u64, i64, u64);

/// The catalog's scripts by (schema, name), connections by name, and security section.
type Maps = (
    BTreeMap<(String, String), Arc<ScriptEntry>>,
    BTreeMap<String, ConnectionEntry>,
    SecurityState,
);

/// The stamp of `meta`.
fn stamp(meta: &std::fs::Metadata) -> Stamp {
    (
        meta.len(),
        meta.mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec()),
        meta.ino(),
    )
}

/// The scripts and connections of `stored`, keyed.
fn into_maps(stored: CatalogFile) -> Maps {
    let entries = stored
        .scripts
        .into_iter()
        .map(|e| ((e.schema.clone(), e.name.clone()), Arc::new(e)))
        .collect();
    let connections = stored
        .connections
        .into_iter()
        .map(|c| (c.name.clone(), c))
        .collect();
    (entries, connections, stored.security)
}

/// Reads the catalog file (empty when there is none) and its stamp. A damaged file is an error,
/// never dropped; a symbolic link is refused; a file others can read is made owner-only.
fn read_catalog(file: &Path) -> crate::Result<(CatalogFile, Option<Stamp>)> {
    let fail = |message: String| data_dir_err!(file.to_path_buf(), "{message}");
    let mut handle = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(file)
    {
        Ok(handle) => handle,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let empty = CatalogFile {
                version: FORMAT_VERSION,
                scripts: Vec::new(),
                connections: Vec::new(),
                security: SecurityState::default(),
            };
            return Ok((empty, None));
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(fail(
                "is a symbolic link; the script catalog is never read or written through one"
                    .into(),
            ));
        }
        Err(e) => return Err(fail(format!("cannot read the script catalog: {e}"))),
    };
    let meta = handle
        .metadata()
        .map_err(|e| fail(format!("cannot read the script catalog: {e}")))?;
    if !meta.is_file() {
        return Err(fail("is not a regular file".into()));
    }
    if meta.mode() & 0o077 != 0 {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let mine = meta.uid() == unsafe { libc::geteuid() };
        if mine
            && handle
                .set_permissions(std::fs::Permissions::from_mode(0o600))
                .is_ok()
        {
            log::warn!(
                "{}: the script catalog was readable by others (mode {:o}); made it owner-only",
                file.display(),
                meta.mode() & 0o777
            );
        }
    }
    let mut bytes = Vec::new();
    handle
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("cannot read the script catalog: {e}")))?;
    let stored: CatalogFile = serde_json::from_slice(&bytes).map_err(|e| {
        fail(format!(
            "the script catalog is damaged ({e}); nothing was loaded or changed — restore the \
             file from a backup or move it away to start empty"
        ))
    })?;
    if stored.version != FORMAT_VERSION {
        return Err(fail(format!(
            "catalog format version {} is not the supported {FORMAT_VERSION}",
            stored.version
        )));
    }
    Ok((stored, Some(stamp(&meta))))
}

/// Takes the exclusive cross-process lock of the catalog beside `file`, waiting at most
/// [`LOCK_WAIT`]; released when the returned file is dropped (or the process dies).
fn lock_catalog(file: &Path) -> crate::Result<File> {
    let path = file.with_file_name(LOCK_FILE);
    let fail = |message: String| data_dir_err!(path.clone(), "{message}");
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| fail(format!("cannot open the catalog lock: {e}")))?;
    let started = Instant::now();
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(lock),
            Err(TryLockError::WouldBlock) if started.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(fail(format!(
                    "another process has held the script catalog's lock for {LOCK_WAIT:?}; \
                     nothing was changed"
                )));
            }
            Err(TryLockError::Error(e)) => {
                return Err(fail(format!("cannot lock the script catalog: {e}")));
            }
        }
    }
}

/// Writes the catalog durably: temp file, fsync, rename over the old one, fsync the directory.
/// Returns the new file's stamp.
fn persist(file: &Path, stored: &CatalogFile) -> crate::Result<Option<Stamp>> {
    let fail = |e: std::io::Error| {
        data_dir_err!(file.to_path_buf(), "cannot write the script catalog: {e}")
    };
    let json = serde_json::to_vec_pretty(stored).map_err(|e| fail(std::io::Error::other(e)))?;
    let tmp = file.with_extension(format!("json.tmp-{}", std::process::id()));
    // A temp file of ours left by a crash: replaced (never written through).
    let _ = std::fs::remove_file(&tmp);
    let meta = {
        // Owner-only: the file holds `%env` values and connection passwords. A fresh file
        // (create_new, no symlink followed), so its mode is ours whatever the umask.
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(fail)?;
        out.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(fail)?;
        out.write_all(&json).map_err(fail)?;
        out.sync_all().map_err(fail)?;
        out.metadata().map_err(fail)?
    };
    std::fs::rename(&tmp, file).map_err(fail)?;
    if let Some(dir) = file.parent() {
        File::open(dir).and_then(|d| d.sync_all()).map_err(fail)?;
    }
    Ok(Some(stamp(&meta)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udf::script::definition::StoredOutput;

    fn entry(name: &str) -> ScriptEntry {
        ScriptEntry {
            schema: "public".into(),
            name: name.into(),
            language: "PYTHON3".into(),
            set: false,
            params: Some(vec![("x".into(), "INT".into())]),
            output: StoredOutput::Returns("INT".into()),
            accelerator: None,
            instance_limit: None,
            device_memory: None,
            env: Vec::new(),
            code: "def run(ctx):\n  return ctx.x".into(),
            text: "CREATE PYTHON3 SCALAR SCRIPT f(x INT) RETURNS INT AS …".into(),
            body: None,
            owner: None,
        }
    }

    #[test]
    fn scripts_survive_a_reopen_and_damage_is_reported() {
        let dir = std::env::temp_dir().join(format!("accelsql-catalog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let catalog = ScriptCatalog::open(&dir).unwrap();
        catalog.create(entry("f"), false).unwrap();
        catalog.create(entry("g"), false).unwrap();
        let e = catalog.create(entry("f"), false).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
        catalog.create(entry("f"), true).unwrap();
        catalog.drop_script("public", "g", false).unwrap();
        assert!(catalog.drop_script("public", "g", false).is_err());
        catalog.drop_script("public", "g", true).unwrap();
        drop(catalog);
        let reopened = ScriptCatalog::open(&dir).unwrap();
        let names: Vec<_> = reopened.entries().iter().map(|e| e.name.clone()).collect();
        assert_eq!(names, ["f"]);
        std::fs::write(dir.join(CATALOG_FILE), b"{\"version\": 1, \"scri").unwrap();
        let e = ScriptCatalog::open(&dir).unwrap_err();
        assert!(e.to_string().contains("damaged"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn two_catalogs_on_one_directory_lose_nothing_and_see_each_other() {
        let dir = tempfile::tempdir().unwrap();
        // Two processes, as two catalogs of one data directory.
        let a = ScriptCatalog::open(dir.path()).unwrap();
        let b = ScriptCatalog::open(dir.path()).unwrap();
        a.create(entry("from_a"), false).unwrap();
        b.create(entry("from_b"), false).unwrap();
        let names = |c: &ScriptCatalog| -> Vec<String> {
            c.generation();
            c.entries().iter().map(|e| e.name.clone()).collect()
        };
        assert_eq!(
            names(&ScriptCatalog::open(dir.path()).unwrap()),
            ["from_a", "from_b"]
        );
        // A sees B's script at its next statement, and "already exists" sees it too.
        assert_eq!(names(&a), ["from_a", "from_b"]);
        let e = a.create(entry("from_b"), false).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
        // Sessions notice: the generation moves when another process changes the file.
        let seen = a.generation();
        b.drop_script("public", "from_a", false).unwrap();
        assert!(a.generation() > seen);
        assert_eq!(names(&a), ["from_b"]);
    }

    #[test]
    fn the_file_is_owner_only_and_never_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let catalog = ScriptCatalog::open(&data).unwrap();
        catalog.create(entry("f"), false).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data.join(CATALOG_FILE)), 0o600);
        assert_eq!(mode(&data.join(LOCK_FILE)), 0o600);
        assert_eq!(mode(&data), 0o700);
        // An existing catalog others can read is tightened when it is opened.
        std::fs::set_permissions(
            data.join(CATALOG_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        drop(ScriptCatalog::open(&data).unwrap());
        assert_eq!(mode(&data.join(CATALOG_FILE)), 0o600);
        // A symlinked catalog is refused, naming the file; its target is untouched.
        let other = dir.path().join("other");
        let target = dir.path().join("target.json");
        std::fs::write(&target, "not a catalog").unwrap();
        std::fs::create_dir(&other).unwrap();
        std::os::unix::fs::symlink(&target, other.join(CATALOG_FILE)).unwrap();
        let e = ScriptCatalog::open(&other).unwrap_err();
        assert!(
            e.to_string().contains("symbolic link") && e.to_string().contains(CATALOG_FILE),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "not a catalog");
    }
}
