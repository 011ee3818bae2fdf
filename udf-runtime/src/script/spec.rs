//! What a script is (its signature, body and language) and where one instance of it runs.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::DataType;

use accelsql_gpu_scheduler::DeviceInfo;

use super::{RunChunking, SqlType};

/// Whether `run(ctx)` sees one row (SCALAR) or one group of rows (SET).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScriptInputType {
    /// `SCALAR SCRIPT`: `run(ctx)` once per input row.
    Scalar,
    /// `SET SCRIPT`: `run(ctx)` once per group, iterating with `ctx.next()`.
    Set,
}

/// One named, typed column of a script's parameters or `EMITS` list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ColumnSpec {
    /// The name as the signature writes it; `ctx.<name>` in Python.
    pub name: String,
    /// Its type.
    pub sql_type: SqlType,
}

impl ColumnSpec {
    /// A column `name` of type `sql_type`.
    pub fn new(name: impl Into<String>, sql_type: SqlType) -> Self {
        Self {
            name: name.into(),
            sql_type,
        }
    }
}

/// What a script produces.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ScriptOutput {
    /// `RETURNS type`: `run(ctx)` returns one value (per row, or per group for SET).
    Returns(SqlType),
    /// `EMITS (cols)`: `run(ctx)` calls `ctx.emit(...)` any number of times.
    Emits(Vec<ColumnSpec>),
}

/// A script as the engine's `CREATE … SCRIPT` defined it: everything a worker needs to run it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptSpec {
    /// The schema the script lives in (may be empty).
    pub schema: String,
    /// The script's name.
    pub name: String,
    /// The language alias it was created with, e.g. `PYTHON3` (`exa.meta.script_language`).
    pub language: String,
    /// The interpreter that runs it (for `PYTHON3`: [`find_python3`](super::find_python3)).
    pub interpreter: PathBuf,
    /// SCALAR or SET.
    pub input_type: ScriptInputType,
    /// The parameters; `None` for a variadic script (`...`), whose columns are named `0`, `1`, …
    /// and typed after the call's arguments ([`SqlType::from_arrow`]).
    pub inputs: Option<Vec<ColumnSpec>>,
    /// RETURNS or EMITS.
    pub output: ScriptOutput,
    /// The script's text after `AS`, with its `%option …;` lines replaced by empty lines so that
    /// line numbers in errors match the text the user wrote.
    pub body: String,
    /// `%env NAME=VALUE;` settings, given to the worker process.
    pub env: Vec<(String, String)>,
    /// How `exa.import_script(name)` finds the code of other scripts.
    pub imports: ScriptImports,
    /// How `exa.get_connection(name)` finds a connection (`CREATE CONNECTION`).
    pub connections: ScriptConnections,
}

/// A connection as `exa.get_connection(name)` returns it (`exa.ConnectionInformation`): what
/// `CREATE CONNECTION name TO 'address' USER 'user' IDENTIFIED BY 'password'` stored. Its
/// `Debug` leaves the password out.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The connection's kind; `password` for every connection `CREATE CONNECTION` makes.
    pub kind: String,
    /// The `TO` text.
    pub address: String,
    /// The `USER` text.
    pub user: String,
    /// The `IDENTIFIED BY` text.
    pub password: String,
}

impl ConnectionInfo {
    /// A `password` connection to `address` as `user` with `password`.
    pub fn password(
        address: impl Into<String>,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        Self {
            kind: "password".to_string(),
            address: address.into(),
            user: user.into(),
            password: password.into(),
        }
    }
}

impl std::fmt::Debug for ConnectionInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionInfo")
            .field("kind", &self.kind)
            .field("address", &self.address)
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// The lookup behind `exa.get_connection(name)`: the name as the script wrote it in, the
/// connection or why there is none out (the message follows Exasol's `get_connection for
/// connection name NAME failed: `). Without one ([`ScriptConnections::none`]) every lookup fails.
#[derive(Clone, Default)]
pub struct ScriptConnections(Option<Arc<ConnectionLookup>>);

/// The function behind [`ScriptConnections`].
type ConnectionLookup = dyn Fn(&str) -> Result<ConnectionInfo, String> + Send + Sync;

impl ScriptConnections {
    /// No connections can be read.
    pub fn none() -> Self {
        Self(None)
    }

    /// Connections found by `lookup`, e.g. `|name| Err(format!("connection {name} does not
    /// exist"))` for a name the catalog does not know.
    pub fn new(
        lookup: impl Fn(&str) -> Result<ConnectionInfo, String> + Send + Sync + 'static,
    ) -> Self {
        Self(Some(Arc::new(lookup)))
    }

    /// The connection `name` names, or why there is none.
    pub fn find(&self, name: &str) -> Result<ConnectionInfo, String> {
        match &self.0 {
            Some(lookup) => lookup(name),
            None => Err(format!("connection {name} does not exist")),
        }
    }
}

impl std::fmt::Debug for ScriptConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "ScriptConnections(catalog)"
        } else {
            "ScriptConnections(none)"
        })
    }
}

/// Two lookups are equal when they are the same one.
impl PartialEq for ScriptConnections {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// A found script for `exa.import_script`: its qualified name and its code (option lines
/// blanked, as in [`ScriptSpec::body`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedScript {
    /// `schema.name`: the imported module's name, and how tracebacks name its file.
    pub qualified_name: String,
    /// The code the module runs.
    pub code: String,
}

/// The lookup behind `exa.import_script(name)`: the name as the script wrote it in, the script
/// or why there is none out. Without one ([`ScriptImports::none`]) every import fails.
#[derive(Clone, Default)]
pub struct ScriptImports(Option<Arc<ImportLookup>>);

/// The function behind [`ScriptImports`].
type ImportLookup = dyn Fn(&str) -> Result<ImportedScript, String> + Send + Sync;

impl ScriptImports {
    /// No other scripts can be imported.
    pub fn none() -> Self {
        Self(None)
    }

    /// Imports found by `lookup`.
    pub fn new(
        lookup: impl Fn(&str) -> Result<ImportedScript, String> + Send + Sync + 'static,
    ) -> Self {
        Self(Some(Arc::new(lookup)))
    }

    /// The script `name` names, or why there is none.
    pub fn find(&self, name: &str) -> Result<ImportedScript, String> {
        match &self.0 {
            Some(lookup) => lookup(name),
            None => Err(format!(
                "script {name} cannot be imported here (no script catalog)"
            )),
        }
    }
}

impl std::fmt::Debug for ScriptImports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "ScriptImports(catalog)"
        } else {
            "ScriptImports(none)"
        })
    }
}

/// Two lookups are equal when they are the same one.
impl PartialEq for ScriptImports {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl ScriptSpec {
    /// `SCHEMA.NAME`, or `NAME` when the schema is empty: how errors name the script.
    pub fn qualified_name(&self) -> String {
        if self.schema.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.schema, self.name)
        }
    }

    /// The output columns: the EMITS list, or for RETURNS one column named after the script.
    pub fn output_columns(&self) -> Vec<ColumnSpec> {
        match &self.output {
            ScriptOutput::Returns(t) => vec![ColumnSpec::new(self.name.clone(), *t)],
            ScriptOutput::Emits(cols) => cols.clone(),
        }
    }
}

/// Where one instance of a script runs: the values of `exa.meta` that describe the call, and the
/// device the instance is pinned to.
///
/// Construct it with `..Default::default()` for the fields a caller does not know: new fields
/// may be added.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerContext {
    /// `exa.meta.session_id` (a decimal string in Python, as in Exasol).
    pub session_id: u64,
    /// `exa.meta.statement_id` (an `int` in Python).
    pub statement_id: u64,
    /// `exa.meta.current_user`: the user running the statement, as SQL names it (unquoted
    /// names upper-case, e.g. `SYS`).
    pub current_user: String,
    /// `exa.meta.scope_user`: the user whose rights the script runs with; the same as
    /// `current_user` unless a view owned by another user calls it (then that owner).
    pub scope_user: String,
    /// `exa.meta.current_schema`: the session's open schema; `None` (no schema open) is the
    /// string `'NULL'` in Python, as in Exasol.
    pub current_schema: Option<String>,
    /// `exa.meta.memory_limit`, in bytes: the memory this instance may use (Exasol passes its
    /// UDF VM's limit). The worker's resident memory is checked against it while the engine
    /// waits on the worker; past it the worker is killed (53U25). 0: no limit.
    pub memory_limit: u64,
    /// `exa.meta.node_count` (1 on a single node).
    pub node_count: usize,
    /// `exa.meta.node_id` (0 on a single node).
    pub node_id: usize,
    /// `exa.meta.vm_id`: the instance number within the call (a decimal string in Python, as in
    /// Exasol); errors name it.
    pub vm_id: usize,
    /// The GPU this instance is pinned to; `None` runs it on the CPU with no GPU visible.
    pub device: Option<DeviceInfo>,
    /// Under memory sharing, what the instance declared of its device: a worker that uses
    /// more (as the probe reads it, every 50 ms while the engine waits on it) is stopped with
    /// 53U26.
    pub device_memory: Option<crate::DeviceMemoryLimit>,
    /// How each run's rows and output travel (in chunks, so that a group of any size costs the
    /// worker about one chunk of memory).
    pub chunking: RunChunking,
}

impl ScriptOutput {
    /// The Arrow types of the output columns.
    pub fn arrow_types(&self) -> Vec<DataType> {
        match self {
            ScriptOutput::Returns(t) => vec![t.arrow_type()],
            ScriptOutput::Emits(cols) => cols.iter().map(|c| c.sql_type.arrow_type()).collect(),
        }
    }
}

impl ScriptInputType {
    /// `SCALAR` or `SET`, as `exa.meta.input_type` says.
    pub fn as_str(&self) -> &'static str {
        match self {
            ScriptInputType::Scalar => "SCALAR",
            ScriptInputType::Set => "SET",
        }
    }
}
