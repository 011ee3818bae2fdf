//! System tables, read fresh at each scan: Exasol's in schema `sys` (`EXA_METADATA`,
//! `EXA_ALL_SCRIPTS`, `EXA_USER_SCRIPTS`, `EXA_ALL_CONNECTIONS`, `EXA_DBA_CONNECTIONS`, `DUAL`;
//! reachable unqualified from any schema, see [`qualify_system_tables`]), and
//! `accelsql.gpu_devices`, `accelsql.gpu_leases`, `accelsql.udf_calls`, `accelsql.scripts`.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    UInt32Array, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{MemorySchemaProvider, Session as CatalogSession, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::union::UnionExec;
use datafusion::prelude::SessionContext;

use crate::script::ScriptEntry;
use crate::{Engine, UdfCallRecord};

/// One row of `accelsql.gpu_leases`: state, lease id, statement, wait ms, hold ms.
type LeaseRow = (String, Option<u64>, String, f64, Option<f64>);

type Producer = dyn Fn(&Engine) -> DfResult<Vec<ArrayRef>> + Send + Sync;

/// Makes a system table from its columns and producer.
type TableMaker<'a> = dyn Fn(&[(&str, DataType)], Box<Producer>) -> Arc<SystemTable> + 'a;

/// A table whose rows are produced from the engine's state at scan time.
struct SystemTable {
    schema: SchemaRef,
    engine: Engine,
    produce: Box<Producer>,
}

impl fmt::Debug for SystemTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemTable")
            .field("schema", &self.schema)
            .finish()
    }
}

#[async_trait]
impl TableProvider for SystemTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn CatalogSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let columns = (self.produce)(&self.engine)?;
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        let exec: Arc<dyn ExecutionPlan> = MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            Arc::clone(&self.schema),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}

fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|(n, t)| Field::new(*n, t.clone(), true))
            .collect::<Vec<_>>(),
    ))
}

fn strings<I: IntoIterator<Item = Option<String>>>(values: I) -> ArrayRef {
    Arc::new(values.into_iter().collect::<StringArray>())
}

fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A system table that answers for every node of a cluster: each node produces its own rows
/// (see `node_rows.rs`), and a cluster's client adds those of its own process.
pub(crate) struct NodeTable {
    /// Its qualified name.
    pub(crate) name: &'static str,
    /// Its columns, `node` first.
    pub(crate) schema: fn() -> SchemaRef,
    /// The rows `Rows` names, as columns.
    pub(crate) produce: fn(&Engine, Rows) -> DfResult<Vec<ArrayRef>>,
}

/// Whose rows a [`NodeTable`] produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rows {
    /// This process's, as the node it is, for a scan that the engine `client` planned.
    Node {
        /// The planning engine (`EngineInner::id`).
        client: u64,
    },
    /// A cluster client's own process's (its `node` column is NULL): what ran in the client.
    Client,
}

/// `accelsql.gpu_devices`: one row per device of each node.
static GPU_DEVICES: NodeTable = NodeTable {
    name: "accelsql.gpu_devices",
    schema: gpu_devices_schema,
    produce: gpu_devices_columns,
};

/// `accelsql.gpu_leases`: each node's lease queue (holder, waiters, recently released).
static GPU_LEASES: NodeTable = NodeTable {
    name: "accelsql.gpu_leases",
    schema: gpu_leases_schema,
    produce: gpu_leases_columns,
};

/// `accelsql.udf_calls`: the recent calls of the statements this engine planned, one row per
/// call and node that ran it.
static UDF_CALLS: NodeTable = NodeTable {
    name: "accelsql.udf_calls",
    schema: udf_calls_schema,
    produce: udf_calls_columns,
};

/// The system tables that answer for every node.
static NODE_TABLES: [&NodeTable; 3] = [&GPU_DEVICES, &GPU_LEASES, &UDF_CALLS];

/// The per-node system table named `name`.
pub(crate) fn node_table(name: &str) -> Option<&'static NodeTable> {
    NODE_TABLES.iter().copied().find(|t| t.name == name)
}

/// The `node` column of `n` rows: this node's number, or NULL for a cluster client's rows.
fn node_column(engine: &Engine, rows: Rows, n: usize) -> ArrayRef {
    let node = match rows {
        Rows::Node { .. } => u32::try_from(engine.inner.node.id).ok(),
        Rows::Client => None,
    };
    Arc::new(std::iter::repeat_n(node, n).collect::<UInt32Array>())
}

fn gpu_devices_schema() -> SchemaRef {
    use DataType::{Boolean, Float64, UInt32, UInt64, Utf8};
    schema(&[
        ("node", UInt32),
        ("index", UInt32),
        ("uuid", Utf8),
        ("name", Utf8),
        ("memory_total", UInt64),
        ("memory_free", UInt64),
        ("utilization", UInt32),
        ("memory_utilization", UInt32),
        ("processes", UInt32),
        ("temperature_c", UInt32),
        ("power_w", Float64),
        ("simulated", Boolean),
    ])
}

fn gpu_devices_columns(engine: &Engine, rows: Rows) -> DfResult<Vec<ArrayRef>> {
    // A cluster's devices are its nodes'; a client's own are not among them.
    let d = match rows {
        Rows::Node { .. } => engine
            .inventory()
            .devices()
            .map_err(|e| crate::EngineError::from(e).into_datafusion())?,
        Rows::Client => Vec::new(),
    };
    Ok(vec![
        node_column(engine, rows, d.len()),
        Arc::new(d.iter().map(|d| Some(d.index)).collect::<UInt32Array>()),
        strings(d.iter().map(|d| Some(d.uuid.clone()))),
        strings(d.iter().map(|d| Some(d.name.clone()))),
        Arc::new(
            d.iter()
                .map(|d| Some(d.memory_total))
                .collect::<UInt64Array>(),
        ),
        Arc::new(
            d.iter()
                .map(|d| Some(d.memory_free))
                .collect::<UInt64Array>(),
        ),
        Arc::new(d.iter().map(|d| d.utilization).collect::<UInt32Array>()),
        Arc::new(
            d.iter()
                .map(|d| d.memory_utilization)
                .collect::<UInt32Array>(),
        ),
        Arc::new(d.iter().map(|d| d.processes).collect::<UInt32Array>()),
        Arc::new(d.iter().map(|d| d.temperature_c).collect::<UInt32Array>()),
        Arc::new(d.iter().map(|d| d.power_w).collect::<Float64Array>()),
        Arc::new(
            d.iter()
                .map(|d| Some(d.simulated))
                .collect::<BooleanArray>(),
        ),
    ])
}

fn gpu_leases_schema() -> SchemaRef {
    use DataType::{Float64, UInt32, UInt64, Utf8};
    schema(&[
        ("node", UInt32),
        ("state", Utf8),
        ("lease_id", UInt64),
        ("statement", Utf8),
        ("wait_ms", Float64),
        ("hold_ms", Float64),
    ])
}

fn gpu_leases_columns(engine: &Engine, rows: Rows) -> DfResult<Vec<ArrayRef>> {
    let snap = engine.lease_queue().snapshot();
    let mut leases: Vec<LeaseRow> = Vec::new();
    for r in &snap.recent {
        leases.push((
            "released".into(),
            Some(r.lease_id),
            r.statement.clone(),
            millis(r.waited),
            Some(millis(r.held)),
        ));
    }
    if let Some(h) = &snap.holder {
        leases.push((
            "holding".into(),
            Some(h.lease_id),
            h.statement.clone(),
            millis(h.waited),
            Some(millis(h.held_for)),
        ));
    }
    for w in &snap.waiting {
        leases.push((
            "waiting".into(),
            None,
            w.statement.clone(),
            millis(w.waiting_for),
            None,
        ));
    }
    Ok(vec![
        node_column(engine, rows, leases.len()),
        strings(leases.iter().map(|r| Some(r.0.clone()))),
        Arc::new(leases.iter().map(|r| r.1).collect::<UInt64Array>()),
        strings(leases.iter().map(|r| Some(r.2.clone()))),
        Arc::new(leases.iter().map(|r| Some(r.3)).collect::<Float64Array>()),
        Arc::new(leases.iter().map(|r| r.4).collect::<Float64Array>()),
    ])
}

fn udf_calls_schema() -> SchemaRef {
    use DataType::{Float64, UInt32, UInt64, Utf8};
    schema(&[
        ("node", UInt32),
        ("statement_id", UInt64),
        ("call_id", UInt64),
        ("block", UInt64),
        ("udf", Utf8),
        ("requested", Utf8),
        ("placement", Utf8),
        ("reason", Utf8),
        ("devices", Utf8),
        ("instances", UInt64),
        ("rows_in", UInt64),
        ("rows_out", UInt64),
        ("elapsed_ms", Float64),
        ("lease_wait_ms", Float64),
        ("gpu_batches", UInt64),
        ("cpu_fallback_batches", UInt64),
        ("fallback_reason", Utf8),
    ])
}

fn udf_calls_columns(engine: &Engine, rows: Rows) -> DfResult<Vec<ArrayRef>> {
    // A node shows the calls it ran for the planning engine's statements; the planning
    // process shows those it ran itself.
    let c: Vec<_> = engine
        .recent_calls()
        .into_iter()
        .filter(|r| match (rows, &r.run) {
            (Rows::Node { client }, Some(run)) => run.client == client,
            (Rows::Node { .. }, None) => r.node.is_some(),
            (Rows::Client, run) => run.is_none() && r.node.is_none(),
        })
        .collect();
    let list = |v: &[u32]| {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let u64s = |f: &dyn Fn(&UdfCallRecord) -> u64| -> ArrayRef {
        Arc::new(c.iter().map(|r| Some(f(r))).collect::<UInt64Array>())
    };
    Ok(vec![
        node_column(engine, rows, c.len()),
        u64s(&|r| r.statement_id),
        u64s(&|r| r.decision.call_id as u64),
        u64s(&|r| r.decision.block as u64),
        strings(c.iter().map(|r| Some(r.decision.udf.clone()))),
        strings(c.iter().map(|r| Some(r.decision.request.to_string()))),
        strings(c.iter().map(|r| Some(r.decision.placement.to_string()))),
        strings(c.iter().map(|r| Some(r.decision.reason.clone()))),
        strings(c.iter().map(|r| Some(list(&r.devices)))),
        u64s(&|r| r.instances as u64),
        u64s(&|r| r.rows_in),
        u64s(&|r| r.rows_out),
        Arc::new(
            c.iter()
                .map(|r| Some(millis(r.elapsed)))
                .collect::<Float64Array>(),
        ),
        Arc::new(
            c.iter()
                .map(|r| r.lease_wait.map(millis))
                .collect::<Float64Array>(),
        ),
        u64s(&|r| r.gpu_batches),
        u64s(&|r| r.cpu_fallback_batches),
        strings(c.iter().map(|r| r.fallback_reason.clone())),
    ])
}

/// The table of a [`NodeTable`]: on a cluster its scan has one partition per node.
struct NodeTableProvider {
    table: &'static NodeTable,
    engine: Engine,
}

impl fmt::Debug for NodeTableProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTableProvider")
            .field("table", &self.table.name)
            .finish()
    }
}

#[async_trait]
impl TableProvider for NodeTableProvider {
    fn schema(&self) -> SchemaRef {
        (self.table.schema)()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn CatalogSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let engine = &self.engine;
        let nodes = Arc::new(crate::node_rows::NodeRowsExec::try_new(
            self.table,
            engine.clone(),
            projection.cloned(),
            engine
                .inner
                .distributor
                .as_ref()
                .map_or(1, |_| engine.inner.node.count),
            engine.inner.id,
        )?);
        if engine.inner.distributor.is_none() {
            return Ok(nodes);
        }
        // A cluster's client adds what ran in its own process, read now.
        let schema = (self.table.schema)();
        let own = RecordBatch::try_new(
            Arc::clone(&schema),
            (self.table.produce)(engine, Rows::Client)?,
        )?;
        if own.num_rows() == 0 {
            return Ok(nodes);
        }
        let own = MemorySourceConfig::try_new_exec(&[vec![own]], schema, projection.cloned())?;
        Ok(UnionExec::try_new(vec![nodes, own])?)
    }
}

/// Exasol's system schema, where its system tables and `DUAL` live.
pub(crate) const SYSTEM_SCHEMA: &str = "sys";

/// The tables of [`SYSTEM_SCHEMA`], which an unqualified name reaches from any schema.
pub(crate) const SYSTEM_TABLES: [&str; 6] = [
    "exa_metadata",
    "exa_all_scripts",
    "exa_user_scripts",
    "exa_all_connections",
    "exa_dba_connections",
    "dual",
];

/// A name as Exasol shows a name it folded: accelsql keeps unquoted names in lower case, so an
/// all-lower-case name is shown in upper case, any other as it is.
pub(crate) fn exasol_name(name: &str) -> String {
    if name.chars().any(|c| c.is_uppercase()) {
        name.to_string()
    } else {
        name.to_uppercase()
    }
}

/// Registers Exasol's script and connection views and `DUAL` in [`SYSTEM_SCHEMA`].
fn register_exasol_views(
    ctx: &SessionContext,
    table: &TableMaker<'_>,
    restricted: &Arc<AtomicBool>,
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
    let scripts = |owner: bool| -> Box<Producer> {
        let restricted = Arc::clone(restricted);
        Box::new(move |engine| {
            let restricted = restricted.load(Ordering::Acquire);
            let scripts = engine.inner.scripts.entries();
            let column =
                |f: &dyn Fn(&ScriptEntry) -> Option<String>| strings(scripts.iter().map(|e| f(e)));
            let mut columns = vec![
                column(&|e| Some(exasol_name(&e.schema))),
                column(&|e| Some(exasol_name(&e.name))),
            ];
            if owner {
                columns.push(column(&|_| Some(SCRIPT_OWNER.to_string())));
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
                            crate::script::StoredOutput::Returns(_) => "RETURNS",
                            _ => "EMITS",
                        }
                        .to_string(),
                    )
                }),
                column(&|e| Some(shown_text(&e.text, restricted))),
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
    let connections = |dba: bool| -> Box<Producer> {
        let restricted = Arc::clone(restricted);
        Box::new(move |engine| {
            let hidden = restricted.load(Ordering::Acquire);
            let all = engine.inner.scripts.connections();
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
                columns.push(strings(all.iter().map(|_| Some(SCRIPT_OWNER.to_string()))));
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
    let starts = crate::script::logical_line_starts(text);
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
const SCRIPT_OWNER: &str = "SYS";

/// Rewrites unqualified references to [`SYSTEM_TABLES`] as `sys.<name>`, unless `has_table`
/// says the current schema has a table of that name, so that Exasol's system tables and `DUAL`
/// are found from any schema, as in Exasol.
pub(crate) fn qualify_system_tables(
    statement: &mut datafusion::sql::parser::Statement,
    has_table: &dyn Fn(&str) -> bool,
) {
    use datafusion::sql::parser::Statement as DfStatement;
    use datafusion::sql::sqlparser::ast::{
        Ident, ObjectName, ObjectNamePart, VisitMut, VisitorMut,
    };
    use std::ops::ControlFlow;

    struct Qualifier<'a> {
        has_table: &'a dyn Fn(&str) -> bool,
    }
    impl VisitorMut for Qualifier<'_> {
        type Break = ();
        fn pre_visit_relation(&mut self, relation: &mut ObjectName) -> ControlFlow<()> {
            if let [ObjectNamePart::Identifier(ident)] = relation.0.as_slice() {
                let name = if ident.quote_style.is_some() {
                    ident.value.clone()
                } else {
                    ident.value.to_ascii_lowercase()
                };
                if SYSTEM_TABLES.contains(&name.as_str()) && !(self.has_table)(&name) {
                    *relation = ObjectName::from(vec![
                        Ident::new(SYSTEM_SCHEMA),
                        Ident::with_quote('"', name),
                    ]);
                }
            }
            ControlFlow::Continue(())
        }
    }
    match statement {
        DfStatement::Statement(inner) => {
            let _ = inner.visit(&mut Qualifier { has_table });
        }
        DfStatement::Explain(explain) => qualify_system_tables(&mut explain.statement, has_table),
        _ => {}
    }
}

/// Registers the system tables in `ctx`.
///
/// While `restricted` is set (a restricted session), script texts show `%env` values as `***`
/// and the DBA connection view shows no addresses or users: they may hold secrets.
pub(crate) fn register(
    ctx: &SessionContext,
    engine: &Engine,
    restricted: &Arc<AtomicBool>,
) -> DfResult<()> {
    if let Some(catalog) = ctx.catalog("datafusion") {
        catalog.register_schema("accelsql", Arc::new(MemorySchemaProvider::new()))?;
        catalog.register_schema(SYSTEM_SCHEMA, Arc::new(MemorySchemaProvider::new()))?;
    }
    let table = |fields: &[(&str, DataType)], produce: Box<Producer>| {
        Arc::new(SystemTable {
            schema: schema(fields),
            engine: engine.clone(),
            produce,
        })
    };
    use DataType::Utf8;
    register_exasol_views(ctx, &table, restricted)?;

    ctx.register_table(
        "sys.exa_metadata",
        table(
            &[
                ("param_name", Utf8),
                ("param_value", Utf8),
                ("param_description", Utf8),
            ],
            Box::new(|engine| {
                let n = engine.devices().len();
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
                        engine.inventory().backend_name().to_string(),
                        "where devices come from: nvml or simulated",
                    ),
                    (
                        "nodeCount",
                        engine.inner.node.count.to_string(),
                        "number of nodes (nproc())",
                    ),
                    (
                        "nodeId",
                        engine.inner.node.id.to_string(),
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

    for table in NODE_TABLES {
        ctx.register_table(
            table.name,
            Arc::new(NodeTableProvider {
                table,
                engine: engine.clone(),
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
                move |engine| {
                    let restricted = restricted.load(Ordering::Acquire);
                    let scripts = engine.inner.scripts.entries();
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
