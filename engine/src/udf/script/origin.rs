//! What a script's call carries to another process (a cluster's scheduler and executors): the
//! script's definition as the client's catalog had it when the statement was planned, and what it
//! reaches there (other scripts for `exa.import_script`, connections for `exa.get_connection`),
//! so that an executor runs a script created after it started, without a catalog of its own.
//!
//! Connections travel with their passwords: a cluster's processes trust each other (as Exasol's
//! nodes do); keep a cluster's ports off untrusted networks.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use accelsql_udf_runtime::script::find_python3;
use serde::{Deserialize, Serialize};

use super::definition::{ConnectionEntry, ScriptEntry};

/// How the receiving process finds the script's interpreter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum TravelRuntime {
    /// `builtin_python3`: the `python3` on the receiving machine's PATH.
    BuiltinPython3,
    /// The interpreter at this path (it must exist on every machine of the cluster).
    Interpreter(PathBuf),
    /// The script cannot run (its language alias is not defined): every call says why.
    Unavailable(String),
}

/// A script function as another process rebuilds it.
#[derive(Debug)]
pub(crate) struct ScriptOrigin {
    /// The script.
    pub(crate) entry: Arc<ScriptEntry>,
    /// The name it is registered under (`f`, `schema.f`).
    pub(crate) function: String,
    pub(crate) runtime: TravelRuntime,
    /// The client's session (`exa.meta.session_id`).
    pub(crate) session_id: u64,
    /// The session's current schema when the statement was planned.
    pub(crate) current_schema: String,
    /// Whether `CLOSE SCHEMA` had closed it.
    pub(crate) schema_closed: bool,
    /// Every script of the catalog, for `exa.import_script` (shared by a session's scripts).
    pub(crate) scripts: Arc<Vec<Arc<ScriptEntry>>>,
    /// Every connection of the catalog the script may read, for `exa.get_connection`.
    pub(crate) connections: Arc<Vec<ConnectionEntry>>,
    /// What the session's privileges keep out of the script's reach: scripts it may not
    /// import (schema, name) and connections it may not read, so that asking says why.
    pub(crate) denied: Arc<Denied>,
}

/// Scripts (schema, name) and connections a running script may not reach.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Denied {
    /// Scripts the session may not execute.
    pub(crate) scripts: Vec<(String, String)>,
    /// Connections the script may not read.
    pub(crate) connections: Vec<String>,
}

/// [`ScriptOrigin`] as it is written.
#[derive(Serialize)]
struct OriginRef<'a> {
    entry: &'a ScriptEntry,
    function: &'a str,
    runtime: &'a TravelRuntime,
    session_id: u64,
    current_schema: &'a str,
    schema_closed: bool,
    scripts: Vec<&'a ScriptEntry>,
    connections: &'a [ConnectionEntry],
    denied: &'a Denied,
}

/// [`ScriptOrigin`] as it is read.
#[derive(Deserialize)]
struct OriginOwned {
    entry: ScriptEntry,
    function: String,
    runtime: TravelRuntime,
    session_id: u64,
    current_schema: String,
    #[serde(default)]
    schema_closed: bool,
    scripts: Vec<ScriptEntry>,
    connections: Vec<ConnectionEntry>,
    #[serde(default)]
    denied: Denied,
}

impl ScriptOrigin {
    /// The origin as JSON, to travel with a placed call.
    pub(crate) fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(OriginRef {
            entry: &self.entry,
            function: &self.function,
            runtime: &self.runtime,
            session_id: self.session_id,
            current_schema: &self.current_schema,
            schema_closed: self.schema_closed,
            scripts: self.scripts.iter().map(Arc::as_ref).collect(),
            connections: &self.connections,
            denied: &self.denied,
        })
    }

    /// The origin [`to_json`](Self::to_json) wrote.
    pub(crate) fn from_json(value: serde_json::Value) -> serde_json::Result<Self> {
        let owned: OriginOwned = serde_json::from_value(value)?;
        Ok(Self {
            entry: Arc::new(owned.entry),
            function: owned.function,
            runtime: owned.runtime,
            session_id: owned.session_id,
            current_schema: owned.current_schema,
            schema_closed: owned.schema_closed,
            scripts: Arc::new(owned.scripts.into_iter().map(Arc::new).collect()),
            connections: Arc::new(owned.connections),
            denied: Arc::new(owned.denied),
        })
    }
}

/// This process's `python3` for `builtin_python3` scripts that arrived from a client; found
/// once (finding it starts Python).
pub(crate) fn builtin_python3() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| find_python3().map_err(|e| e.to_string()))
        .clone()
}
