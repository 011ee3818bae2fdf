//! The script catalog: every `CREATE … SCRIPT` and `CREATE CONNECTION` that returned OK, shared by
//! the engine's sessions, and — with a data directory — kept in `scripts.json` there (owner-only) (written to a temporary file,
//! fsynced and renamed, so a crash right after CREATE returns never loses or half-writes it).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};

use crate::EngineError;

/// File name of the catalog in the data directory.
pub(crate) const CATALOG_FILE: &str = "scripts.json";
const FORMAT_VERSION: u32 = 1;

/// One stored script: its definition as parsed, options already taken out of the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ScriptEntry {
    pub(crate) schema: String,
    pub(crate) name: String,
    /// The language alias it was created with (e.g. `PYTHON3`).
    pub(crate) language: String,
    /// SET (else SCALAR).
    pub(crate) set: bool,
    /// Parameters as (name, type); `None`: `...`.
    pub(crate) params: Option<Vec<(String, String)>>,
    /// `RETURNS type`, `EMITS (cols)`, or `EMITS (...)`.
    pub(crate) output: StoredOutput,
    /// `%perInstanceRequiredAcceleratorDevices`, as written (`None` when absent).
    pub(crate) accelerator: Option<String>,
    /// `%perNodeAndCallInstanceLimit`.
    pub(crate) instance_limit: Option<usize>,
    /// `%env NAME=value` pairs, in order.
    pub(crate) env: Vec<(String, String)>,
    /// The code to run: the body with option lines blanked (line numbers unchanged).
    pub(crate) code: String,
    /// The statement as the user wrote it.
    pub(crate) text: String,
}

/// The output clause of a stored script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum StoredOutput {
    /// `RETURNS type`.
    Returns(String),
    /// `EMITS (col type, …)`.
    Emits(Vec<(String, String)>),
    /// `EMITS (...)`.
    DynamicEmits,
}

impl ScriptEntry {
    /// `SCALAR RETURNS`, `SET EMITS`, …
    pub(crate) fn kind(&self) -> &'static str {
        match (self.set, &self.output) {
            (false, StoredOutput::Returns(_)) => "SCALAR RETURNS",
            (false, _) => "SCALAR EMITS",
            (true, StoredOutput::Returns(_)) => "SET RETURNS",
            (true, _) => "SET EMITS",
        }
    }

    /// The parameters as written: `x DOUBLE, y VARCHAR(10)`, or `...`.
    pub(crate) fn inputs_text(&self) -> String {
        match &self.params {
            None => "...".to_string(),
            Some(params) => columns_text(params),
        }
    }

    /// `RETURNS type` or `EMITS (…)`.
    pub(crate) fn output_text(&self) -> String {
        match &self.output {
            StoredOutput::Returns(t) => format!("RETURNS {t}"),
            StoredOutput::Emits(cols) => format!("EMITS ({})", columns_text(cols)),
            StoredOutput::DynamicEmits => "EMITS (...)".to_string(),
        }
    }

    /// The options, as `%key value;` lines joined by spaces.
    pub(crate) fn options_text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(a) = &self.accelerator {
            parts.push(format!("%perInstanceRequiredAcceleratorDevices {a};"));
        }
        if let Some(n) = self.instance_limit {
            parts.push(format!("%perNodeAndCallInstanceLimit {n};"));
        }
        for (k, v) in &self.env {
            parts.push(format!("%env {k}={v};"));
        }
        parts.join(" ")
    }
}

fn columns_text(columns: &[(String, String)]) -> String {
    columns
        .iter()
        .map(|(n, t)| format!("{n} {t}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A connection (`CREATE CONNECTION`): what `exa.get_connection(name)` gives a script.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConnectionEntry {
    /// The name, folded as Exasol folds it (unquoted: upper case).
    pub(crate) name: String,
    /// `TO 'address'`.
    pub(crate) address: String,
    /// `USER 'user'` (empty when absent).
    pub(crate) user: String,
    /// `IDENTIFIED BY 'password'` (empty when absent); never shown by a system table.
    pub(crate) password: String,
    /// When it was created, in microseconds since the Unix epoch (`CREATED` of the system views).
    pub(crate) created_micros: i64,
}

/// The password stays out of logs and debug output.
impl std::fmt::Debug for ConnectionEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionEntry")
            .field("name", &self.name)
            .field("address", &self.address)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
struct CatalogFile {
    version: u32,
    scripts: Vec<ScriptEntry>,
    /// Absent in catalogs written before connections existed.
    #[serde(default)]
    connections: Vec<ConnectionEntry>,
}

/// The engine's scripts by (schema, name).
#[derive(Debug, Default)]
pub(crate) struct ScriptCatalog {
    entries: RwLock<BTreeMap<(String, String), Arc<ScriptEntry>>>,
    /// Connections by name.
    connections: RwLock<BTreeMap<String, ConnectionEntry>>,
    /// Bumped on every change, so sessions know when to refresh their functions.
    generation: AtomicU64,
    file: Option<PathBuf>,
    /// Serializes writers of the file.
    write_lock: Mutex<()>,
}

impl ScriptCatalog {
    /// An in-memory catalog (no data directory).
    pub(crate) fn in_memory() -> Self {
        Self::default()
    }

    /// The catalog of `data_dir`, created if absent; a damaged file is an error, never dropped.
    pub(crate) fn open(data_dir: &Path) -> crate::Result<Self> {
        let io_err = |what: &str, e: std::io::Error| EngineError::DataDirectory {
            path: data_dir.to_path_buf(),
            message: format!("{what}: {e}"),
        };
        std::fs::create_dir_all(data_dir).map_err(|e| io_err("cannot create it", e))?;
        let file = data_dir.join(CATALOG_FILE);
        let mut entries = BTreeMap::new();
        let mut connections = BTreeMap::new();
        match std::fs::read(&file) {
            Ok(bytes) => {
                let stored: CatalogFile =
                    serde_json::from_slice(&bytes).map_err(|e| EngineError::DataDirectory {
                        path: file.clone(),
                        message: format!(
                            "the script catalog is damaged ({e}); nothing was loaded or changed — \
                             restore the file from a backup or move it away to start empty"
                        ),
                    })?;
                if stored.version != FORMAT_VERSION {
                    return Err(EngineError::DataDirectory {
                        path: file,
                        message: format!(
                            "catalog format version {} is not the supported {FORMAT_VERSION}",
                            stored.version
                        ),
                    });
                }
                for entry in stored.scripts {
                    entries.insert((entry.schema.clone(), entry.name.clone()), Arc::new(entry));
                }
                for connection in stored.connections {
                    connections.insert(connection.name.clone(), connection);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("cannot read the script catalog", e)),
        }
        Ok(Self {
            entries: RwLock::new(entries),
            connections: RwLock::new(connections),
            generation: AtomicU64::new(1),
            file: Some(file),
            write_lock: Mutex::new(()),
        })
    }

    /// Changes seen so far; a session compares it with the one it last synced at.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
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
                return Err(EngineError::ScriptDefinition {
                    message: format!(
                        "script {}.{} already exists; use CREATE OR REPLACE to change it",
                        key.0, key.1
                    ),
                });
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
        self.change(|entries| {
            if entries
                .remove(&(schema.to_string(), name.to_string()))
                .is_none()
                && !if_exists
            {
                return Err(EngineError::ScriptDefinition {
                    message: format!("script {schema}.{name} does not exist"),
                });
            }
            Ok(())
        })
    }

    /// Removes every script of `schema` (`DROP SCHEMA … CASCADE`).
    pub(crate) fn drop_schema_scripts(&self, schema: &str) -> crate::Result<()> {
        self.change(|entries| {
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

    /// Applies `f` to a copy of the entries, persists the copy, and only then publishes it.
    fn change(
        &self,
        f: impl FnOnce(&mut BTreeMap<(String, String), Arc<ScriptEntry>>) -> crate::Result<()>,
    ) -> crate::Result<()> {
        self.change_in(&self.entries, f, |file, next| {
            let connections = self.connections.read().unwrap_or_else(|e| e.into_inner());
            persist(file, next, &connections)
        })
    }

    /// Applies `f` to a copy of `map` (the entries or the connections), saves the catalog with
    /// the copy (`save`), and only then publishes it; sessions then register their scripts again.
    fn change_in<T: Clone>(
        &self,
        map: &RwLock<T>,
        f: impl FnOnce(&mut T) -> crate::Result<()>,
        save: impl FnOnce(&Path, &T) -> crate::Result<()>,
    ) -> crate::Result<()> {
        let _writer = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = map.read().unwrap_or_else(|e| e.into_inner()).clone();
        f(&mut next)?;
        if let Some(file) = &self.file {
            save(file, &next)?;
        }
        *map.write().unwrap_or_else(|e| e.into_inner()) = next;
        self.generation.fetch_add(1, Ordering::AcqRel);
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
                return Err(EngineError::ScriptDefinition {
                    message: format!(
                        "connection {} already exists; use CREATE OR REPLACE CONNECTION to change it",
                        connection.name
                    ),
                });
            }
            all.insert(connection.name.clone(), connection);
            Ok(())
        })
    }

    /// Removes a connection; a missing one is an error unless `if_exists`.
    pub(crate) fn drop_connection(&self, name: &str, if_exists: bool) -> crate::Result<()> {
        self.change_connections(|all| {
            if all.remove(name).is_none() && !if_exists {
                return Err(EngineError::ScriptDefinition {
                    message: format!("connection {name} does not exist"),
                });
            }
            Ok(())
        })
    }

    /// As [`ScriptCatalog::change`], for the connections.
    fn change_connections(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, ConnectionEntry>) -> crate::Result<()>,
    ) -> crate::Result<()> {
        self.change_in(&self.connections, f, |file, next| {
            let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
            persist(file, &entries, next)
        })
    }
}

/// Writes the catalog durably: temp file, fsync, rename over the old one, fsync the directory.
fn persist(
    file: &Path,
    entries: &BTreeMap<(String, String), Arc<ScriptEntry>>,
    connections: &BTreeMap<String, ConnectionEntry>,
) -> crate::Result<()> {
    let stored = CatalogFile {
        version: FORMAT_VERSION,
        scripts: entries.values().map(|e| (**e).clone()).collect(),
        connections: connections.values().cloned().collect(),
    };
    let fail = |e: std::io::Error| EngineError::DataDirectory {
        path: file.to_path_buf(),
        message: format!("cannot write the script catalog: {e}"),
    };
    let json = serde_json::to_vec_pretty(&stored).map_err(|e| fail(std::io::Error::other(e)))?;
    let tmp = file.with_extension(format!("json.tmp-{}", std::process::id()));
    {
        // Owner-only: the file holds `%env` values and connection passwords.
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(fail)?;
        out.write_all(&json).map_err(fail)?;
        out.sync_all().map_err(fail)?;
    }
    std::fs::rename(&tmp, file).map_err(fail)?;
    if let Some(dir) = file.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(fail)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
            env: Vec::new(),
            code: "def run(ctx):\n  return ctx.x".into(),
            text: "CREATE PYTHON3 SCALAR SCRIPT f(x INT) RETURNS INT AS …".into(),
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
}
