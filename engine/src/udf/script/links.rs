//! What a running script reaches besides its own code ([`ScriptLinks`]): other scripts
//! (`exa.import_script`), connections (`exa.get_connection`), the current schema and the node
//! count (`exa.meta`).

use std::collections::BTreeMap;
use std::sync::Arc;

use accelsql_udf_runtime::script::{
    ConnectionInfo, ImportedScript, ScriptConnections, ScriptImports,
};

use super::definition::{ConnectionEntry, ScriptEntry, folded_connection_name};
use super::names::{plain_candidates, qualified_function, split_script_name};

/// What a session's scripts reach besides their own code: other scripts
/// (`exa.import_script`), connections (`exa.get_connection`) and the current schema
/// (`exa.meta.current_schema`).
#[derive(Debug, Clone)]
pub(crate) struct ScriptLinks {
    pub(crate) imports: ScriptImports,
    pub(crate) connections: ScriptConnections,
    pub(crate) current_schema: String,
    /// Whether `CLOSE SCHEMA` closed it (`exa.meta.current_schema` is then NULL).
    pub(crate) schema_closed: bool,
    /// How many nodes the engine's cluster has (`exa.meta.node_count`).
    pub(crate) node_count: usize,
}

impl Default for ScriptLinks {
    fn default() -> Self {
        Self {
            imports: ScriptImports::default(),
            connections: ScriptConnections::default(),
            current_schema: String::new(),
            schema_closed: false,
            node_count: 1,
        }
    }
}

impl ScriptLinks {
    /// `exa.meta.current_schema`: the open schema as Exasol names it, `None` once closed.
    pub(crate) fn meta_schema(&self) -> Option<String> {
        (!self.schema_closed).then(|| crate::core::names::exasol_name(&self.current_schema))
    }
}

/// What `exa.import_script(name)` finds among `entries`: the script `schema.name` names, or the
/// one a plain `name` calls in SQL. Scripts in `denied` (schema, name) exist but the session
/// may not execute them: importing one says so.
pub(crate) fn script_imports(
    entries: Vec<Arc<ScriptEntry>>,
    current: String,
    denied: Vec<(String, String)>,
) -> ScriptImports {
    ScriptImports::new(move |text| {
        let readings = split_script_name(text)?;
        // The first reading that names a script (or, with none, the first).
        let (schema, name) = readings
            .iter()
            .find(|(schema, name)| {
                entries
                    .iter()
                    .any(|e| e.name == *name && schema.as_ref().is_none_or(|s| &e.schema == s))
            })
            .or(readings.first())
            .cloned()
            .ok_or_else(|| format!("{text:?} is not a script name"))?;
        let target = (
            schema.clone().unwrap_or_else(|| current.clone()),
            name.clone(),
        );
        if denied.contains(&target) {
            return Err(format!(
                "insufficient privileges: importing script {} needs EXECUTE on it (or EXECUTE \
                 ANY SCRIPT)",
                qualified_function(&target.0, &target.1)
            ));
        }
        let found: Vec<&ScriptEntry> = match &schema {
            Some(schema) => entries
                .iter()
                .filter(|e| &e.schema == schema && e.name == name)
                .map(Arc::as_ref)
                .collect(),
            None => plain_candidates(&name, &entries, &current),
        };
        match found.as_slice() {
            // As Exasol documents: the accelerator annotation belongs on the script a
            // statement calls; a script only imported cannot ask for devices.
            [entry] if requested_devices(entry).is_some() => Err(format!(
                "script {} declares %perInstanceRequiredAcceleratorDevices {}, which only a \
                 script that is called may declare: remove it there, or call that script",
                qualified_function(&entry.schema, &entry.name),
                requested_devices(entry).unwrap_or_default()
            )),
            [entry] => Ok(ImportedScript {
                qualified_name: qualified_function(&entry.schema, &entry.name),
                code: entry.code.clone(),
            }),
            [] => {
                // Named as the script wrote it (its last reading).
                let (schema, name) = readings.last().cloned().unwrap_or((schema, name));
                Err(format!(
                    "script {} does not exist",
                    qualified_function(schema.as_deref().unwrap_or(&current), &name)
                ))
            }
            several => Err(format!(
                "script name {name} is ambiguous: scripts {} exist; name its schema",
                several
                    .iter()
                    .map(|e| qualified_function(&e.schema, &e.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    })
}

/// The accelerator devices `entry` asks for (`GpuNvidia`, `GpuNvidia|None`), if any (`None`
/// asks for none).
fn requested_devices(entry: &ScriptEntry) -> Option<&str> {
    let devices = entry
        .accelerator
        .as_deref()?
        .trim()
        .trim_end_matches(';')
        .trim();
    (!devices.eq_ignore_ascii_case("none")).then_some(devices)
}

/// `exa.get_connection(name)`'s lookup: a snapshot of the catalog's connections (a change to
/// them bumps the catalog's generation, so sessions register their scripts again). Those named
/// in `denied` exist but the script may not read them: asking for one says so.
pub(crate) fn script_connections(
    connections: Vec<ConnectionEntry>,
    denied: Vec<String>,
    script: String,
) -> ScriptConnections {
    let by_name: BTreeMap<String, ConnectionEntry> = connections
        .into_iter()
        .map(|c| (c.name.clone(), c))
        .collect();
    ScriptConnections::new(move |name| {
        let folded = folded_connection_name(name);
        if denied.contains(&folded) {
            // Exasol's words, then what would allow it.
            return Err(format!(
                "insufficient privileges for using connection {folded} in script {script}: it \
                 needs ACCESS ON CONNECTION {folded} (for this script or any) or ACCESS ANY \
                 CONNECTION"
            ));
        }
        by_name
            .get(&folded)
            .map(|c| {
                ConnectionInfo::password(c.address.clone(), c.user.clone(), c.password.clone())
            })
            .ok_or_else(|| format!("connection {folded} does not exist"))
    })
}
