//! A session's side of scripts: its `SCRIPT_LANGUAGES` (alias → runtime), the script DDL it runs,
//! and keeping its registered script functions in step with the engine's catalog.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use accelsql_udf_runtime::script::{
    ScriptSpec, SingleCall, WorkerContext, find_python3, single_call,
};
use datafusion::prelude::SessionContext;

use super::ddl::{DdlOutput, ScriptDdl, parse, parse_columns};
use super::dynamic::rewrite_dynamic_emits;
use crate::catalog::scripts::ScriptCatalog;
use crate::core::error::EngineError;
use crate::core::names::exasol_name;
use crate::core::privileges::{Grants, SystemPrivilege};
use crate::front::privileges::ScriptRef;
use crate::front::privileges::run::shown_script;
use crate::udf::script::definition::{ConnectionEntry, ScriptEntry, StoredOutput};
use crate::udf::script::links::{ScriptLinks, script_connections, script_imports};
use crate::udf::script::names::{find_script, owns_plain_name, qualified_function};
use crate::udf::script::options::take_options;
use crate::udf::script::origin::{Denied, ScriptOrigin, TravelRuntime};
use crate::udf::script::udf::{ScriptUdf, script_spec, script_udf, script_udf_named};

/// The schema scripts are created in when the statement names none.
use crate::core::tables::DEFAULT_SCHEMA;
use crate::script_err;

/// How an alias runs scripts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Runtime {
    /// `builtin_python3`: the `python3` on PATH.
    BuiltinPython3,
    /// Another Python interpreter, e.g. a CUDA virtualenv's.
    Interpreter(PathBuf),
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BuiltinPython3 => f.write_str("builtin_python3"),
            Self::Interpreter(p) => write!(f, "{}", p.display()),
        }
    }
}

/// What a session last registered its scripts for: the catalog generation, the current
/// schema and the grants, and the function names registered then.
type Synced = (u64, String, Vec<String>, Option<Arc<Grants>>);

/// A session's script state.
#[derive(Debug)]
pub(crate) struct SessionScripts {
    session_id: u64,
    /// The engine's node count (`exa.meta.node_count`).
    node_count: usize,
    languages: Mutex<BTreeMap<String, Runtime>>,
    /// Catalog generation, current schema and grants last registered, and the names
    /// registered then.
    synced: Mutex<Synced>,
    /// What the session may do, as of its current statement: which scripts its scripts may
    /// import and which connections they may read.
    grants: Mutex<Arc<Grants>>,
    /// The current schema (`OPEN SCHEMA`), where unqualified scripts are created and found.
    current_schema: Mutex<String>,
    /// Whether `CLOSE SCHEMA` closed it: names still resolve in the default schema, but
    /// `exa.meta.current_schema` and `CURRENT_SCHEMA` are NULL, as in Exasol.
    schema_closed: AtomicBool,
    /// The session's built-in functions and Rust UDFs: their plain names are never a script's.
    builtins: OnceLock<HashSet<String>>,
    /// `builtin_python3` as this session first found it (`find_python3` asks Python once per
    /// process; a session keeps its answer, so that it does not change under its statements).
    builtin_python3: OnceLock<Result<PathBuf, String>>,
}

const ACCEPTED: &str = "ALIAS=builtin_python3 (the python3 on PATH) or ALIAS=/absolute/path/to/python3, \
                        separated by spaces, e.g. 'PYTHON3=builtin_python3 GPU_PY=/opt/venv/bin/python3'";

impl SessionScripts {
    pub(crate) fn new(session_id: u64, node_count: usize) -> Self {
        Self {
            session_id,
            node_count,
            languages: Mutex::new(BTreeMap::from([(
                "PYTHON3".to_string(),
                Runtime::BuiltinPython3,
            )])),
            synced: Mutex::new((0, String::new(), Vec::new(), None)),
            grants: Mutex::new(Arc::new(Grants::sys())),
            current_schema: Mutex::new(DEFAULT_SCHEMA.to_string()),
            schema_closed: AtomicBool::new(false),
            builtins: OnceLock::new(),
            builtin_python3: OnceLock::new(),
        }
    }

    /// `ALIAS=runtime …` as this session's languages shows it.
    fn languages_text(&self) -> String {
        self.languages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(alias, runtime)| format!("{alias}={runtime}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The runtime `alias` names in this session, if it is defined.
    fn runtime(&self, alias: &str) -> Option<Runtime> {
        self.languages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&alias.to_ascii_uppercase())
            .cloned()
    }

    fn interpreter(&self, alias: &str) -> Result<PathBuf, String> {
        match self.runtime(alias) {
            Some(Runtime::BuiltinPython3) => self
                .builtin_python3
                .get_or_init(|| find_python3().map_err(|e| e.to_string()))
                .clone(),
            Some(Runtime::Interpreter(path)) => Ok(path),
            None => Err(format!(
                "language alias {alias} is not defined in this session (SCRIPT_LANGUAGES = '{}')",
                self.languages_text()
            )),
        }
    }

    /// How another process of a cluster finds the interpreter of `alias`.
    fn travel_runtime(&self, alias: &str) -> TravelRuntime {
        match self.runtime(alias) {
            Some(Runtime::BuiltinPython3) => TravelRuntime::BuiltinPython3,
            Some(Runtime::Interpreter(path)) => TravelRuntime::Interpreter(path),
            None => match self.interpreter(alias) {
                Ok(path) => TravelRuntime::Interpreter(path),
                Err(why) => TravelRuntime::Unavailable(why),
            },
        }
    }

    /// Runs one script statement (`CREATE … SCRIPT`, `DROP SCRIPT`, `ALTER SESSION SET
    /// SCRIPT_LANGUAGES`).
    pub(crate) fn execute(
        &self,
        text: &str,
        catalog: &ScriptCatalog,
        allowed: bool,
        taken: &dyn Fn(&str) -> bool,
        grants: &Grants,
        exasol: bool,
    ) -> crate::Result<()> {
        let ddl = exasol_reading(
            parse(text, exasol)?,
            catalog,
            &self.current_schema(),
            exasol,
        );
        if !allowed && !matches!(ddl, ScriptDdl::SetLanguages(_)) {
            return Err(script_err!(
                "script DDL is disabled in this engine (EngineOptions::script_ddl)"
            ));
        }
        self.check_ddl(&ddl, catalog, grants)?;
        match ddl {
            ScriptDdl::SetLanguages(value) => {
                let mut languages = BTreeMap::new();
                for pair in value.split_whitespace() {
                    let Some((alias, runtime)) = pair.split_once('=') else {
                        return Err(bad_languages(pair));
                    };
                    let alias = alias.trim().to_ascii_uppercase();
                    if alias.is_empty()
                        || !alias.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        return Err(bad_languages(pair));
                    }
                    let runtime = match runtime {
                        "builtin_python3" => Runtime::BuiltinPython3,
                        path if path.starts_with('/') => Runtime::Interpreter(PathBuf::from(path)),
                        _ => return Err(bad_languages(pair)),
                    };
                    languages.insert(alias, runtime);
                }
                // PYTHON3 works without any ALTER SESSION.
                languages
                    .entry("PYTHON3".to_string())
                    .or_insert(Runtime::BuiltinPython3);
                *self.languages.lock().unwrap_or_else(|e| e.into_inner()) = languages;
                // Scripts pick up their interpreters again.
                self.synced.lock().unwrap_or_else(|e| e.into_inner()).0 = 0;
                Ok(())
            }
            ScriptDdl::Drop {
                schema,
                name,
                if_exists,
                ..
            } => catalog.drop_script(
                schema.as_deref().unwrap_or(&self.current_schema()),
                &name,
                if_exists,
            ),
            ScriptDdl::Create(create) => {
                if !self
                    .languages
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains_key(&create.language)
                {
                    return Err(script_err!(
                        "unknown language alias {}; this session's SCRIPT_LANGUAGES are '{}' \
                             (add one with ALTER SESSION SET SCRIPT_LANGUAGES = '…')",
                        create.language,
                        self.languages_text()
                    ));
                }
                if taken(&create.name) {
                    return Err(script_err!(
                        "a Rust UDF named {} is registered in the engine; scripts cannot \
                             replace it",
                        create.name
                    ));
                }
                let (options, code) = take_options(&create.body)?;
                let entry = ScriptEntry {
                    schema: create.schema.unwrap_or_else(|| self.current_schema()),
                    name: create.name,
                    language: create.language,
                    set: create.set,
                    params: create.params,
                    output: match create.output {
                        DdlOutput::Returns(t) => StoredOutput::Returns(t),
                        DdlOutput::Emits(cols) => StoredOutput::Emits(cols),
                        DdlOutput::DynamicEmits => StoredOutput::DynamicEmits,
                    },
                    accelerator: options.accelerator,
                    instance_limit: options.instance_limit,
                    device_memory: options.device_memory,
                    env: options.env,
                    code,
                    text: create.text,
                    body: Some(create.body),
                    owner: (!grants.owns(None)).then(|| grants.user.clone()),
                };
                // Types and signature are checked now, not at the first call (an `EMITS (...)`
                // script with a stand-in column: its columns come with each call).
                let mut check = entry.clone();
                if check.output == StoredOutput::DynamicEmits {
                    check.output = StoredOutput::Emits(vec![("c".into(), "INTEGER".into())]);
                }
                script_spec(&check, PathBuf::new(), &ScriptLinks::default())?;
                script_udf(&check, PathBuf::new(), self.session_id)?;
                catalog.create(entry, create.or_replace)
            }
        }
    }

    /// Ok when the session may run `ddl`: `CREATE SCRIPT` for a new script and for
    /// `SCRIPT_LANGUAGES` (it names the executables scripts run in), owning the script or
    /// `CREATE ANY SCRIPT` to replace it, owning it or `DROP ANY SCRIPT` to drop it.
    fn check_ddl(
        &self,
        ddl: &ScriptDdl,
        catalog: &ScriptCatalog,
        grants: &Grants,
    ) -> crate::Result<()> {
        use SystemPrivilege::{CreateAnyScript, CreateScript, DropAnyScript};
        let existing = |schema: &Option<String>, name: &str| {
            let schema = schema.clone().unwrap_or_else(|| self.current_schema());
            catalog
                .entries()
                .into_iter()
                .find(|e| e.schema == schema && e.name == name)
        };
        let (what, needs, allowed) = match ddl {
            ScriptDdl::SetLanguages(_) => (
                "ALTER SESSION SET SCRIPT_LANGUAGES (it names the executables scripts run in)"
                    .to_string(),
                "the CREATE SCRIPT privilege",
                grants.check_system(CreateScript),
            ),
            ScriptDdl::Create(create) => match existing(&create.schema, &create.name) {
                Some(old) if create.or_replace => {
                    let owned = grants.owns(old.owner.as_deref());
                    (
                        format!(
                            "CREATE OR REPLACE SCRIPT {}",
                            shown_script(&old.schema, &old.name)
                        ),
                        "owning it, or the CREATE ANY SCRIPT privilege",
                        grants.check(|h, as_owner| {
                            (as_owner && owned && h.has(CreateScript)) || h.has(CreateAnyScript)
                        }),
                    )
                }
                _ => (
                    format!("CREATE SCRIPT {}", exasol_name(&create.name)),
                    "the CREATE SCRIPT privilege",
                    grants.check(|h, _| h.has(CreateScript) || h.has(CreateAnyScript)),
                ),
            },
            ScriptDdl::Drop { schema, name, .. } => match existing(schema, name) {
                Some(old) => {
                    let owned = grants.owns(old.owner.as_deref());
                    (
                        format!("DROP SCRIPT {}", shown_script(&old.schema, &old.name)),
                        "owning it, or the DROP ANY SCRIPT privilege",
                        grants.check(|h, as_owner| (as_owner && owned) || h.has(DropAnyScript)),
                    )
                }
                None => return Ok(()),
            },
        };
        allowed.map_err(|d| crate::front::privileges::refusal(d, &what, needs))
    }

    /// Registers the catalog's scripts in `ctx` if the catalog changed since the last time.
    pub(crate) fn sync(
        &self,
        ctx: &SessionContext,
        catalog: &ScriptCatalog,
        register: &dyn Fn(&SessionContext, ScriptUdf),
    ) {
        let generation = catalog.generation();
        let current = self.current_schema();
        let closed = self.schema_closed();
        // The key the registered scripts were made for: schema, and whether it was closed.
        let key = format!("{}{current}", if closed { "-" } else { "+" });
        let grants = self.grants();
        let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        if synced.0 == generation && synced.1 == key && synced.3.as_ref() == Some(&grants) {
            return;
        }
        for name in synced.2.drain(..) {
            ctx.deregister_udf(&name);
            ctx.deregister_udaf(&name);
        }
        let entries = catalog.entries();
        let connections = catalog.connections();
        let builtins = self.builtins();
        for entry in &entries {
            if entry.output == StoredOutput::DynamicEmits {
                // Registered per call site (see `rewrite_dynamic`).
                continue;
            }
            let mut functions = vec![qualified_function(&entry.schema, &entry.name)];
            if !builtins.contains(&entry.name) && owns_plain_name(entry, &entries, &current) {
                functions.push(entry.name.clone());
            }
            // Registered even when its language cannot run here, so that a call says why.
            let interpreter = self.interpreter(&entry.language);
            let mut reach = self.reach(entry, &entries, &connections, &current, &grants);
            reach.links.schema_closed = closed;
            for function in functions {
                let origin = ScriptOrigin {
                    entry: Arc::clone(entry),
                    function: function.clone(),
                    runtime: self.travel_runtime(&entry.language),
                    session_id: self.session_id,
                    current_schema: current.clone(),
                    schema_closed: closed,
                    scripts: Arc::clone(&reach.scripts),
                    connections: Arc::clone(&reach.connections),
                    denied: Arc::clone(&reach.denied),
                };
                match script_udf_named(
                    entry,
                    &function,
                    interpreter.clone(),
                    self.session_id,
                    &reach.links,
                ) {
                    Ok(udf) => {
                        let udf = udf.travelling(Arc::new(origin));
                        register(ctx, udf);
                        synced.2.push(function);
                    }
                    Err(e) => log::error!("script {function} unavailable: {e}"),
                }
            }
        }
        synced.0 = generation;
        synced.1 = key;
        synced.3 = Some(grants);
    }

    /// What the session may do, as of its current statement.
    pub(crate) fn grants(&self) -> Arc<Grants> {
        Arc::clone(&self.grants.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Sets what the session may do (at the start of each statement).
    pub(crate) fn set_grants(&self, grants: Arc<Grants>) {
        *self.grants.lock().unwrap_or_else(|e| e.into_inner()) = grants;
    }

    /// What script `entry` reaches when this session runs it: the scripts it may import (those
    /// the session may execute) and the connections it may read (`ACCESS` on them, for it or
    /// for any script); the others say why they are out of reach. Also returned: those lists,
    /// as its calls carry them to a cluster's processes.
    fn reach(
        &self,
        entry: &ScriptEntry,
        entries: &[Arc<ScriptEntry>],
        connections: &[ConnectionEntry],
        current: &str,
        grants: &Grants,
    ) -> Reach {
        let key = format!("{}.{}", entry.schema, entry.name);
        let (allowed, denied): (Vec<_>, Vec<_>) = entries
            .iter()
            .cloned()
            .partition(|e| crate::front::privileges::check_execute(grants, &script_ref(e)).is_ok());
        let (readable, hidden): (Vec<_>, Vec<_>) = connections.iter().cloned().partition(|c| {
            grants
                .may_access_connection(&c.name, c.owner.as_deref(), &key)
                .is_ok()
        });
        let denied = Denied {
            scripts: denied
                .iter()
                .map(|e| (e.schema.clone(), e.name.clone()))
                .collect(),
            connections: hidden.into_iter().map(|c| c.name).collect(),
        };
        let links = ScriptLinks {
            imports: script_imports(allowed.clone(), current.to_string(), denied.scripts.clone()),
            connections: script_connections(
                readable.clone(),
                denied.connections.clone(),
                crate::core::names::exasol_name(&entry.name),
            ),
            current_schema: current.to_string(),
            schema_closed: self.schema_closed(),
            node_count: self.node_count,
        };
        Reach {
            links,
            scripts: Arc::new(allowed),
            connections: Arc::new(readable),
            denied: Arc::new(denied),
        }
    }

    /// The session's number, as scripts see it (`exa.meta.session_id`).
    pub(crate) fn session_id(&self) -> u64 {
        self.session_id
    }

    /// The runtime's view of the script `name` names (`s`, `schema.s`), for a single call of
    /// one of its functions (`generate_sql_for_import_spec`, …): its imports and connections
    /// reachable as in a call.
    pub(crate) fn single_call_spec(
        &self,
        catalog: &ScriptCatalog,
        name: &str,
    ) -> crate::Result<ScriptSpec> {
        let entries = catalog.entries();
        let current = self.current_schema();
        let entry = find_script(name, &entries, &current)?;
        let grants = self.grants();
        crate::front::privileges::check_execute(&grants, &script_ref(&entry))?;
        let interpreter = self
            .interpreter(&entry.language)
            .map_err(|why| script_err!("script {}.{}: {why}", entry.schema, entry.name))?;
        let links = self
            .reach(&entry, &entries, &catalog.connections(), &current, &grants)
            .links;
        let mut entry = entry.as_ref().clone();
        if entry.output == StoredOutput::DynamicEmits {
            // Its columns are not needed for a single call.
            entry.output = StoredOutput::Emits(Vec::new());
        }
        script_spec(&entry, interpreter, &links)
    }

    /// The current schema: where unqualified scripts are created and found first.
    pub(crate) fn current_schema(&self) -> String {
        self.current_schema
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Makes `schema` the current schema (`OPEN SCHEMA`, `CREATE SCHEMA`), or, with `open`
    /// false, the schema names resolve in once `CLOSE SCHEMA` closed the current one.
    pub(crate) fn set_current_schema(&self, schema: &str, open: bool) {
        *self
            .current_schema
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = schema.to_string();
        self.schema_closed.store(!open, Ordering::Relaxed);
    }

    /// Whether `CLOSE SCHEMA` left the session without an open schema.
    pub(crate) fn schema_closed(&self) -> bool {
        self.schema_closed.load(Ordering::Relaxed)
    }

    /// The open schema, as `exa.meta.current_schema` and `CURRENT_SCHEMA` show it: `None`
    /// after `CLOSE SCHEMA`.
    pub(crate) fn open_schema(&self) -> Option<String> {
        (!self.schema_closed()).then(|| self.current_schema())
    }

    /// Records the session's built-in function names (once, before any script is registered).
    pub(crate) fn set_builtins(&self, names: HashSet<String>) {
        let _ = self.builtins.set(names);
    }

    /// The session's built-in function names.
    pub(crate) fn builtins(&self) -> &HashSet<String> {
        static NONE: OnceLock<HashSet<String>> = OnceLock::new();
        self.builtins
            .get()
            .unwrap_or_else(|| NONE.get_or_init(HashSet::new))
    }
}

impl SessionScripts {
    /// Rewrites the calls of `EMITS (...)` scripts in `text` (see `dynamic.rs`); returns the
    /// statement to parse and the UDFs its calls need, for this statement only.
    pub(crate) async fn rewrite_dynamic(
        &self,
        text: &str,
        catalog: &ScriptCatalog,
        insert_target: Option<&[(String, String)]>,
        exasol: bool,
    ) -> crate::Result<(String, Vec<ScriptUdf>)> {
        let dynamic: Vec<_> = catalog
            .entries()
            .into_iter()
            .filter(|e| matches!(e.output, StoredOutput::DynamicEmits))
            .collect();
        // Without such scripts only a misplaced EMITS list (after another function) matters.
        let mentions_emits = text
            .as_bytes()
            .windows(5)
            .any(|w| w.eq_ignore_ascii_case(b"emits"));
        if dynamic.is_empty() && !mentions_emits {
            return Ok((text.to_string(), Vec::new()));
        }
        let all = catalog.entries();
        let current = self.current_schema();
        let builtins = self.builtins();
        // The dynamic script a call names, if it names one: `schema.name`, or a plain name
        // that calls it (see `names.rs`).
        let find = |schema: Option<&str>, name: &str| {
            dynamic
                .iter()
                .find(|e| match schema {
                    Some(schema) => e.schema == schema && e.name == name,
                    None => {
                        e.name == name
                            && !builtins.contains(name)
                            && owns_plain_name(e, &all, &current)
                    }
                })
                .map(|e| qualified_function(&e.schema, &e.name))
        };
        let is_script = |schema: Option<&str>, name: &str| {
            all.iter().any(|e| match schema {
                Some(schema) => e.schema == schema && e.name == name,
                None => e.name == name && !builtins.contains(name),
            })
        };
        let (rewritten, calls) = rewrite_dynamic_emits(text, &find, &is_script)?;
        let inserts = text
            .trim_start()
            .get(..6)
            .is_some_and(|w| w.eq_ignore_ascii_case("INSERT"));
        if inserts && calls.iter().any(|c| c.columns.is_some()) {
            // Exasol's rule and words: INSERT … SELECT takes the columns from its table.
            return Err(script_err!(
                "The return arguments for EMITS functions are inferred from the table \
                          to insert into. Specification of EMITS is not allowed in this case."
            ));
        }
        let mut udfs = Vec::with_capacity(calls.len());
        let connections = catalog.connections();
        let grants = self.grants();
        for call in calls {
            let Some(entry) = dynamic
                .iter()
                .find(|e| qualified_function(&e.schema, &e.name) == call.script)
            else {
                continue;
            };
            crate::front::privileges::check_execute(&grants, &script_ref(entry))?;
            let reach = self.reach(entry, &all, &connections, &current, &grants);
            let mut entry = (**entry).clone();
            let interpreter = self
                .interpreter(&entry.language)
                .map_err(|message| EngineError::ScriptDefinition { message })?;
            // The call's EMITS list; else, in `INSERT INTO t SELECT f(…)`, t's columns; else the
            // script's default_output_columns().
            let columns = match (call.columns, insert_target) {
                (Some(columns), _) => columns,
                (None, Some(target)) if !target.is_empty() => target.to_vec(),
                (None, _) => {
                    default_output_columns(
                        &entry,
                        interpreter.clone(),
                        &reach.links,
                        self.session_id,
                        &grants.user,
                        exasol,
                    )
                    .await?
                }
            };
            entry.output = StoredOutput::Emits(columns);
            // The call site's columns travel with the script to a cluster's nodes.
            let origin = ScriptOrigin {
                entry: Arc::new(entry.clone()),
                function: call.function.clone(),
                runtime: self.travel_runtime(&entry.language),
                session_id: self.session_id,
                current_schema: current.clone(),
                schema_closed: reach.links.schema_closed,
                scripts: Arc::clone(&reach.scripts),
                connections: Arc::clone(&reach.connections),
                denied: Arc::clone(&reach.denied),
            };
            udfs.push(
                script_udf_named(
                    &entry,
                    &call.function,
                    Ok(interpreter),
                    self.session_id,
                    &reach.links,
                )?
                .travelling(Arc::new(origin)),
            );
        }
        Ok((rewritten, udfs))
    }
}

/// The EMITS columns of a call of `entry` (an `EMITS (...)` script) that gives none: what its
/// `default_output_columns()` returns, called once in a worker of its own, as Exasol does; its
/// quoted names are read as the session's dialect reads them (`exasol`).
async fn default_output_columns(
    entry: &ScriptEntry,
    interpreter: PathBuf,
    links: &ScriptLinks,
    session_id: u64,
    user: &str,
    exasol: bool,
) -> crate::Result<Vec<(String, String)>> {
    let dynamic_err =
        |message: &str| script_err!("script {}.{}: {message}", entry.schema, entry.name);
    if !entry.code.contains("default_output_columns") {
        // Exasol's words.
        return Err(dynamic_err(
            "The script has dynamic return arguments. Either specify the return arguments in \
             the query via EMITS or implement the method default_output_columns in the UDF.",
        ));
    }
    let mut spec_entry = entry.clone();
    spec_entry.output = StoredOutput::Emits(Vec::new());
    let spec = script_spec(&spec_entry, interpreter, links)?;
    let ctx = WorkerContext {
        session_id,
        current_user: user.to_string(),
        scope_user: user.to_string(),
        current_schema: links.meta_schema(),
        node_count: links.node_count,
        ..WorkerContext::default()
    };
    let text = tokio::task::spawn_blocking(move || {
        single_call(&spec, &ctx, &SingleCall::DefaultOutputColumns)
    })
    .await
    .map_err(|e| dynamic_err(&format!("default_output_columns() did not finish: {e}")))??;
    if text.trim().is_empty() {
        return Err(dynamic_err("Empty default output columns"));
    }
    parse_columns(&text, exasol).map_err(|e| {
        dynamic_err(&format!(
            "default_output_columns() returned {text:?}, which is no column list: {e}"
        ))
    })
}

fn bad_languages(pair: &str) -> EngineError {
    script_err!("SCRIPT_LANGUAGES entry {pair:?} is not understood; accepted: {ACCEPTED}")
}

/// The privilege checks' view of a script.
pub(crate) fn script_ref(entry: &ScriptEntry) -> ScriptRef {
    ScriptRef {
        key: format!("{}.{}", entry.schema, entry.name),
        owner: entry.owner.clone(),
    }
}

/// What a script reaches when a session runs it ([`SessionScripts::reach`]).
struct Reach {
    /// Its links in this process.
    links: ScriptLinks,
    /// The scripts it may import, as its calls carry them.
    scripts: Arc<Vec<Arc<ScriptEntry>>>,
    /// The connections it may read, as its calls carry them.
    connections: Arc<Vec<ConnectionEntry>>,
    /// What it may not reach.
    denied: Arc<Denied>,
}

/// A quoted `DROP SCRIPT` name in the default dialect that names no script as written is read
/// as Exasol's name when that names one (`"ADD_ONE"` is the script made as unquoted `add_one`),
/// as script calls are (`front/passes/script_calls.rs`). The Exasol dialect's quoted names are
/// Exasol's exactly, and [`parse`] already read them so.
fn exasol_reading(
    ddl: ScriptDdl,
    catalog: &ScriptCatalog,
    current_schema: &str,
    exasol: bool,
) -> ScriptDdl {
    match ddl {
        ScriptDdl::Drop {
            schema,
            name,
            quoted: quoted @ (_, true),
            if_exists,
        } if !exasol => {
            let in_schema = schema.clone().unwrap_or_else(|| current_schema.to_string());
            let exists = |n: &str| {
                catalog
                    .entries()
                    .iter()
                    .any(|e| e.schema == in_schema && e.name == n)
            };
            let swapped = crate::core::names::swap_case(&name);
            let name = if !exists(&name) && exists(&swapped) {
                swapped
            } else {
                name
            };
            ScriptDdl::Drop {
                schema,
                name,
                quoted,
                if_exists,
            }
        }
        other => other,
    }
}
