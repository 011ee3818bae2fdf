//! What a script is (its signature, body and language) and where one instance of it runs.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::DataType;

use accelsql_gpu_scheduler::DeviceInfo;

use super::SqlType;

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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerContext {
    /// `exa.meta.session_id`.
    pub session_id: u64,
    /// `exa.meta.statement_id`.
    pub statement_id: u64,
    /// `exa.meta.node_count` (1 on a single node).
    pub node_count: usize,
    /// `exa.meta.node_id` (0 on a single node).
    pub node_id: usize,
    /// `exa.meta.vm_id`: the instance number within the call; errors name it.
    pub vm_id: usize,
    /// The GPU this instance is pinned to; `None` runs it on the CPU with no GPU visible.
    pub device: Option<DeviceInfo>,
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
