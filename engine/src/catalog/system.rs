//! System tables, read fresh at each scan: Exasol's in schema `sys` (`EXA_METADATA`,
//! `EXA_ALL_SCRIPTS`, `EXA_USER_SCRIPTS`, `EXA_ALL_CONNECTIONS`, `EXA_DBA_CONNECTIONS`, `DUAL`,
//! the security views and the table and column views of `table_views.rs`;
//! reachable unqualified from any schema: the front end's `system_tables` pass), and
//! `accelsql.gpu_devices`, `accelsql.gpu_leases`, `accelsql.udf_calls` (see [`node_tables`]),
//! `accelsql.scripts`, `accelsql.script_spares`.
//!
//! [`node_tables`]: super::node_tables

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::{ArrayRef, TimestampMicrosecondArray, UInt32Array, UInt64Array};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::catalog::MemorySchemaProvider;
use datafusion::error::Result as DfResult;
use datafusion::prelude::SessionContext;

use super::columns::{schema, strings};
use super::node_rows::NodeTableProvider;
use super::node_tables::NODE_TABLES;
use crate::core::owners::SessionIdentity;
use crate::core::privileges::{SYS_USER, SystemPrivilege};
use crate::udf::script::definition::{ScriptEntry, StoredOutput};
use crate::udf::script::options::logical_line_starts;

pub(crate) use super::system_table::{Producer, SystemContext, SystemTable, TableMaker};

/// Exasol's system schema, where its system tables and `DUAL` live.
pub(crate) const SYSTEM_SCHEMA: &str = "sys";

/// The tables of [`SYSTEM_SCHEMA`], which an unqualified name reaches from any schema.
pub(crate) const SYSTEM_TABLES: [&str; 8] = [
    "exa_metadata",
    "exa_parameters",
    "exa_all_sessions",
    "exa_all_scripts",
    "exa_user_scripts",
    "exa_all_connections",
    "exa_dba_connections",
    "dual",
];

/// Whether `name` (lower case) is one of Exasol's system views that an unqualified name
/// reaches from any schema.
pub(crate) fn is_system_table(name: &str) -> bool {
    SYSTEM_TABLES.contains(&name)
        || super::security_views::SECURITY_VIEWS.contains(&name)
        || super::table_views::TABLE_VIEWS.contains(&name)
}

/// Registers Exasol's script and connection views and `DUAL` in [`SYSTEM_SCHEMA`].
fn register_exasol_views(
    ctx: &SessionContext,
    table: &TableMaker<'_>,
    restricted: &Arc<AtomicBool>,
    who: &Arc<SessionIdentity>,
) -> DfResult<()> {
    use DataType::{Timestamp, UInt64, Utf8};
    let micros = || Timestamp(TimeUnit::Microsecond, None);
    let script_columns = |owner: bool| {
        let mut columns = vec![("script_schema", Utf8), ("script_name", Utf8)];
        if owner {
            columns.push(("script_owner", Utf8));
        }
        columns.extend([
            ("script_object_id", UInt64),
            ("script_type", Utf8),
            ("script_language", Utf8),
            ("script_input_type", Utf8),
            ("script_result_type", Utf8),
            ("script_text", Utf8),
            ("script_comment", Utf8),
        ]);
        columns
    };
    // EXA_ALL_SCRIPTS: those the session may run; EXA_USER_SCRIPTS: those its user owns.
    let scripts = |owner: bool| -> Box<Producer> {
        let restricted = Arc::clone(restricted);
        let who = Arc::clone(who);
        Box::new(move |engine| {
            let restricted = restricted.load(Ordering::Acquire);
            let grants = who.grants();
            let scripts: Vec<_> = if owner {
                runnable_scripts(engine, &grants)
            } else {
                engine
                    .scripts
                    .entries()
                    .into_iter()
                    .filter(|e| grants.owns(e.owner.as_deref()))
                    .collect()
            };
            let column =
                |f: &dyn Fn(&ScriptEntry) -> Option<String>| strings(scripts.iter().map(|e| f(e)));
            let mut columns = vec![
                column(&|e| Some(engine.shown_name(&e.schema))),
                column(&|e| Some(engine.shown_name(&e.name))),
            ];
            if owner {
                columns.push(column(&|e| Some(owner_name(e.owner.as_deref()))));
            }
            columns.extend([
                Arc::new(UInt64Array::from_iter_values(
                    (1..=scripts.len() as u64).map(|i| i + 1_000),
                )) as ArrayRef,
                column(&|_| Some("UDF".to_string())),
                column(&|e| Some(e.language.clone())),
                column(&|e| Some(if e.set { "SET" } else { "SCALAR" }.to_string())),
                column(&|e| {
                    Some(
                        match e.output {
                            StoredOutput::Returns(_) => "RETURNS",
                            _ => "EMITS",
                        }
                        .to_string(),
                    )
                }),
                column(&|e| {
                    let text = e.normalized_text(&|n| engine.shown_name(n));
                    Some(shown_text(&text, restricted))
                }),
                column(&|_| None),
            ]);
            Ok(columns)
        })
    };
    ctx.register_table(
        "sys.exa_all_scripts",
        table(&script_columns(true), scripts(true)),
    )?;
    ctx.register_table(
        "sys.exa_user_scripts",
        table(&script_columns(false), scripts(false)),
    )?;

    // Connections; no view ever shows a password.
    // EXA_ALL_CONNECTIONS: those the session may use; EXA_DBA_CONNECTIONS: every one, for
    // SELECT ANY DICTIONARY.
    let connections = |dba: bool| -> Box<Producer> {
        let restricted = Arc::clone(restricted);
        let who = Arc::clone(who);
        Box::new(move |engine| {
            let hidden = restricted.load(Ordering::Acquire);
            let grants = who.grants();
            if dba && !grants.has(SystemPrivilege::SelectAnyDictionary) {
                return Err(crate::privilege_err!(
                    "reading EXA_DBA_CONNECTIONS needs the SELECT ANY DICTIONARY privilege"
                )
                .into_datafusion());
            }
            let all: Vec<_> = engine
                .scripts
                .connections()
                .into_iter()
                .filter(|c| {
                    dba || grants
                        .may_use_connection(&c.name, c.owner.as_deref())
                        .is_ok()
                })
                .collect();
            let mut columns = vec![strings(all.iter().map(|c| Some(c.name.clone())))];
            if dba {
                columns.push(strings(
                    all.iter().map(|c| (!hidden).then(|| c.address.clone())),
                ));
                columns
                    .push(strings(all.iter().map(|c| {
                        (!hidden && !c.user.is_empty()).then(|| c.user.clone())
                    })));
            }
            columns.push(Arc::new(TimestampMicrosecondArray::from_iter_values(
                all.iter().map(|c| c.created_micros),
            )) as ArrayRef);
            if dba {
                columns.push(strings(
                    all.iter().map(|c| Some(owner_name(c.owner.as_deref()))),
                ));
            }
            columns.push(strings(all.iter().map(|_| None)));
            Ok(columns)
        })
    };
    ctx.register_table(
        "sys.exa_all_connections",
        table(
            &[
                ("connection_name", Utf8),
                ("created", micros()),
                ("connection_comment", Utf8),
            ],
            connections(false),
        ),
    )?;
    ctx.register_table(
        "sys.exa_dba_connections",
        table(
            &[
                ("connection_name", Utf8),
                ("connection_string", Utf8),
                ("user_name", Utf8),
                ("created", micros()),
                ("connection_owner", Utf8),
                ("connection_comment", Utf8),
            ],
            connections(true),
        ),
    )?;
    ctx.register_table(
        "sys.dual",
        table(
            &[("dummy", Utf8)],
            Box::new(|_| Ok(vec![strings([Some("X".to_string())])])),
        ),
    )?;
    Ok(())
}

/// A script's text as a session may see it: in a restricted one, each `%env NAME=value;` option
/// shows `NAME=***` (the value may be a secret).
fn shown_text(text: &str, restricted: bool) -> String {
    if !restricted {
        return text.to_string();
    }
    let starts = logical_line_starts(text);
    text.split('\n')
        .enumerate()
        .map(|(i, line)| {
            let trimmed = line.trim_start();
            let is_env = starts.get(i).copied().unwrap_or(false)
                && trimmed.len() > 4
                && trimmed[..4].eq_ignore_ascii_case("%env")
                && trimmed[4..].starts_with(char::is_whitespace);
            match line.split_once('=') {
                Some((name, _)) if is_env => format!("{name}=***;"),
                _ => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The options column (`%key value;` items joined by spaces) as a session may see it: `%env`
/// values hidden in a restricted one (a value may itself hold `;`, so items are split where the
/// next one starts).
fn shown_options(text: &str, restricted: bool) -> String {
    if !restricted {
        return text.to_string();
    }
    text.split("; %")
        .map(|item| match item.split_once('=') {
            Some((name, _)) if item.trim_start_matches('%').starts_with("env") => {
                format!("{name}=***")
            }
            _ => item.trim_end_matches(';').to_string(),
        })
        .collect::<Vec<_>>()
        .join("; %")
        + if text.is_empty() { "" } else { ";" }
}

/// Who owns every script and connection: accelsql has no users yet.
/// The scripts a session with `grants` may run (owning them, or granted EXECUTE).
fn runnable_scripts(
    engine: &SystemContext,
    grants: &crate::core::privileges::Grants,
) -> Vec<Arc<ScriptEntry>> {
    engine
        .scripts
        .entries()
        .into_iter()
        .filter(|e| {
            let key = format!("{}.{}", e.schema, e.name);
            grants.may_execute(&key, e.owner.as_deref()).is_ok()
        })
        .collect()
}

/// An object's owner as the views show it (`None`: SYS).
fn owner_name(owner: Option<&str>) -> String {
    owner.unwrap_or(SYS_USER).to_string()
}

/// Registers the system tables in `ctx`.
///
/// While `restricted` is set (a restricted session), script texts show `%env` values as `***`
/// and the DBA connection view shows no addresses or users: they may hold secrets.
pub(crate) fn register(
    ctx: &SessionContext,
    engine: &SystemContext,
    restricted: &Arc<AtomicBool>,
    who: &Arc<SessionIdentity>,
) -> DfResult<()> {
    if let Some(catalog) = ctx.catalog("datafusion") {
        catalog.register_schema("accelsql", Arc::new(MemorySchemaProvider::new()))?;
        catalog.register_schema(SYSTEM_SCHEMA, Arc::new(MemorySchemaProvider::new()))?;
    }
    let table = |fields: &[(&str, DataType)], produce: Box<Producer>| {
        Arc::new(SystemTable::new(schema(fields), engine.clone(), produce))
    };
    use DataType::Utf8;
    register_exasol_views(ctx, &table, restricted, who)?;
    super::security_views::register(ctx, &table, who)?;
    super::table_views::register(
        ctx,
        &table,
        who,
        &[SYSTEM_SCHEMA, "accelsql", "information_schema"],
    )?;
    super::stored_views::register(ctx, &engine.state, who)?;

    ctx.register_table(
        "sys.exa_metadata",
        table(
            &[
                ("param_name", Utf8),
                ("param_value", Utf8),
                ("param_description", Utf8),
            ],
            Box::new(|engine| {
                let n = engine.state.devices.len();
                let rows = [
                    (
                        "databaseProductVersion",
                        env!("CARGO_PKG_VERSION").to_string(),
                        "accelsql version",
                    ),
                    (
                        "databaseName",
                        "accelsql".to_string(),
                        "name of the database",
                    ),
                    (
                        "acceleratorDeviceDetected",
                        (n > 0).to_string(),
                        "whether any accelerator device is usable",
                    ),
                    (
                        "acceleratorDeviceGpuNvidiaDetected",
                        (n > 0).to_string(),
                        "whether an NVIDIA GPU is usable",
                    ),
                    (
                        "acceleratorDeviceGpuNvidiaCount",
                        n.to_string(),
                        "number of usable NVIDIA GPUs on this node",
                    ),
                    (
                        "acceleratorDeviceBackend",
                        engine.state.inventory.backend_name().to_string(),
                        "where devices come from: nvml or simulated",
                    ),
                    (
                        "nodeCount",
                        engine.state.node.count.to_string(),
                        "number of nodes (nproc())",
                    ),
                    (
                        "nodeId",
                        engine.state.node.id.to_string(),
                        "this node's number (iproc())",
                    ),
                ];
                Ok(vec![
                    strings(rows.iter().map(|r| Some(r.0.to_string()))),
                    strings(rows.iter().map(|r| Some(r.1.clone()))),
                    strings(rows.iter().map(|r| Some(r.2.to_string()))),
                ])
            }),
        ),
    )?;

    // The engine's live sessions: all of them for a session that sees every session's SQL
    // (the embedding program's, a server's admin), else its own user's.
    let viewer = Arc::clone(who);
    ctx.register_table(
        "sys.exa_all_sessions",
        table(
            &[
                ("session_id", DataType::UInt64),
                ("user_name", Utf8),
                ("status", Utf8),
                (
                    "login_time",
                    DataType::Timestamp(TimeUnit::Microsecond, None),
                ),
                ("client", Utf8),
            ],
            Box::new(move |engine| {
                let sees_all = viewer.viewer().sees_all;
                let mut sessions: Vec<_> = engine
                    .state
                    .sessions
                    .all()
                    .into_iter()
                    .filter(|s| {
                        sees_all
                            || s.id == viewer.id
                            || (s.account() == viewer.account() && s.user() == viewer.user())
                    })
                    .collect();
                sessions.sort_by_key(|s| s.id);
                let micros = |t: std::time::SystemTime| {
                    t.duration_since(std::time::UNIX_EPOCH)
                        .ok()
                        .and_then(|d| i64::try_from(d.as_micros()).ok())
                };
                Ok(vec![
                    Arc::new(UInt64Array::from_iter_values(sessions.iter().map(|s| s.id)))
                        as ArrayRef,
                    strings(sessions.iter().map(|s| {
                        Some(crate::core::names::exasol_name(
                            &s.user().unwrap_or_else(|| s.account()),
                        ))
                    })),
                    strings(sessions.iter().map(|s| {
                        Some(
                            if s.kill.is_killed() {
                                "KILLED"
                            } else {
                                "ACTIVE"
                            }
                            .to_string(),
                        )
                    })),
                    Arc::new(
                        sessions
                            .iter()
                            .map(|s| micros(s.opened))
                            .collect::<TimestampMicrosecondArray>(),
                    ) as ArrayRef,
                    strings(sessions.iter().map(|s| s.client())),
                ])
            }),
        ),
    )?;

    // The formats in which the engine's Exasol clients (the Exasol port, the shell) show
    // dates, timestamps and numbers; drivers check them before they parse values.
    ctx.register_table(
        "sys.exa_parameters",
        table(
            &[
                ("parameter_name", Utf8),
                ("session_value", Utf8),
                ("system_value", Utf8),
            ],
            Box::new(|_| {
                let rows = [
                    ("NLS_DATE_FORMAT", "YYYY-MM-DD"),
                    ("NLS_TIMESTAMP_FORMAT", "YYYY-MM-DD HH24:MI:SS.FF6"),
                    ("NLS_NUMERIC_CHARACTERS", ".,"),
                ];
                Ok(vec![
                    strings(rows.iter().map(|r| Some(r.0.to_string()))),
                    strings(rows.iter().map(|r| Some(r.1.to_string()))),
                    strings(rows.iter().map(|r| Some(r.1.to_string()))),
                ])
            }),
        ),
    )?;

    for table in NODE_TABLES {
        ctx.register_table(
            table.name,
            Arc::new(NodeTableProvider {
                table,
                engine: Arc::clone(&engine.state),
            }),
        )?;
    }

    ctx.register_table(
        "accelsql.scripts",
        table(
            &[
                ("schema", Utf8),
                ("name", Utf8),
                ("language", Utf8),
                ("kind", Utf8),
                ("inputs", Utf8),
                ("output", Utf8),
                ("options", Utf8),
                ("text", Utf8),
            ],
            Box::new({
                let restricted = Arc::clone(restricted);
                let who = Arc::clone(who);
                move |engine| {
                    let restricted = restricted.load(Ordering::Acquire);
                    // The scripts the session may run, as EXA_ALL_SCRIPTS shows them.
                    let scripts = runnable_scripts(engine, &who.grants());
                    let column = |f: &dyn Fn(&ScriptEntry) -> String| {
                        strings(scripts.iter().map(|e| Some(f(e))))
                    };
                    Ok(vec![
                        column(&|e| e.schema.clone()),
                        column(&|e| e.name.clone()),
                        column(&|e| e.language.clone()),
                        column(&|e| e.kind().to_string()),
                        column(&|e| e.inputs_text()),
                        column(&|e| e.output_text()),
                        column(&|e| shown_options(&e.options_text(), restricted)),
                        column(&|e| shown_text(&e.text, restricted)),
                    ])
                }
            }),
        ),
    )?;

    // This process's script fork servers and the spare worker each keeps (no statement's).
    ctx.register_table(
        "accelsql.script_spares",
        table(
            &[
                ("interpreter", Utf8),
                ("server_pid", DataType::UInt32),
                ("state", Utf8),
                ("spare_pid", DataType::UInt32),
            ],
            Box::new(|_| {
                let servers = accelsql_udf_runtime::script::warm_starts();
                let pids = |f: &dyn Fn(&accelsql_udf_runtime::script::WarmStart) -> Option<u32>| {
                    Arc::new(servers.iter().map(f).collect::<UInt32Array>()) as ArrayRef
                };
                Ok(vec![
                    strings(
                        servers
                            .iter()
                            .map(|w| Some(w.interpreter.display().to_string())),
                    ),
                    pids(&|w| w.server_pid),
                    strings(servers.iter().map(|w| Some(w.state.to_string()))),
                    pids(&|w| w.spare_pid),
                ])
            }),
        ),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_sessions_see_no_env_values() {
        let options = "%perNodeAndCallInstanceLimit 2; %env TOKEN=s3cr;et; %env MODE=fast;";
        assert_eq!(shown_options(options, false), options);
        assert_eq!(
            shown_options(options, true),
            "%perNodeAndCallInstanceLimit 2; %env TOKEN=***; %env MODE=***;"
        );
        assert_eq!(shown_options("", true), "");
        let text = "%env TOKEN=s3cret;\nHELP = \"\"\"\n%env NOT_AN_OPTION=1;\n\"\"\"\n  %ENV B=2;";
        assert_eq!(
            shown_text(text, true),
            "%env TOKEN=***;\nHELP = \"\"\"\n%env NOT_AN_OPTION=1;\n\"\"\"\n  %ENV B=***;"
        );
        assert_eq!(shown_text(text, false), text);
    }
}
