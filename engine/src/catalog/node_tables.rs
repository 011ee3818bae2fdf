//! The system tables that answer for every node of a cluster ([`NodeTable`]):
//! `accelsql.gpu_devices`, `accelsql.gpu_leases`, `accelsql.udf_calls` — their columns, and the
//! rows each node produces from its own engine state.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Float64Array, UInt32Array, UInt64Array};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::error::Result as DfResult;

use super::columns::{millis, schema, strings};
use crate::core::EngineState;
use crate::core::calls::UdfCallRecord;
use crate::core::error::EngineError;
use crate::core::owners::{StatementOwner, Viewer, statement_of_label};

/// One row of `accelsql.gpu_leases`.
struct LeaseRow {
    state: &'static str,
    lease_id: Option<u64>,
    statement: String,
    wait_ms: f64,
    hold_ms: Option<f64>,
    session: Option<u64>,
    user: Option<String>,
    group: Option<String>,
    precedence: Option<u64>,
    /// The devices it holds (`all`, or NVML indices).
    devices: Option<String>,
    /// Device memory: reserved (holding, released) or asked for (waiting); `None`: whole
    /// devices.
    reserved_bytes: Option<u64>,
    /// Why it waits.
    wait_reason: Option<String>,
    /// Whether it started before a waiting head (the backfill rule).
    backfilled: Option<bool>,
}

/// A system table that answers for every node of a cluster: each node produces its own rows
/// (see [`node_rows`](super::node_rows)), and a cluster's client adds those of its own process.
pub(crate) struct NodeTable {
    /// Its qualified name.
    pub(crate) name: &'static str,
    /// Its columns, `node` first.
    pub(crate) schema: fn() -> SchemaRef,
    /// The rows `Rows` names, as columns, as `viewer` may see them (`None`: a cluster node
    /// answering for a client, which sees every row).
    pub(crate) produce: fn(&EngineState, Rows, Option<Viewer>) -> DfResult<Vec<ArrayRef>>,
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
pub(crate) static NODE_TABLES: [&NodeTable; 3] = [&GPU_DEVICES, &GPU_LEASES, &UDF_CALLS];

/// The per-node system table named `name`.
pub(crate) fn node_table(name: &str) -> Option<&'static NodeTable> {
    NODE_TABLES.iter().copied().find(|t| t.name == name)
}

/// The `node` column of `n` rows: this node's number, or NULL for a cluster client's rows.
fn node_column(engine: &EngineState, rows: Rows, n: usize) -> ArrayRef {
    let node = match rows {
        Rows::Node { .. } => u32::try_from(engine.node.id).ok(),
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
        ("gpu_sharing", Utf8),
        ("memory_reserved", UInt64),
        ("memory_reservable", UInt64),
        ("other_processes_memory", UInt64),
        ("per_process_memory", Utf8),
    ])
}

fn gpu_devices_columns(
    engine: &EngineState,
    rows: Rows,
    _viewer: Option<Viewer>,
) -> DfResult<Vec<ArrayRef>> {
    // A cluster's devices are its nodes'; a client's own are not among them.
    let d = match rows {
        Rows::Node { .. } => engine
            .inventory
            .devices()
            .map_err(|e| EngineError::from(e).into_datafusion())?,
        Rows::Client => Vec::new(),
    };
    // What the lease queue counts of each device's memory (reservations, memory sharing).
    let snap = engine.queue.snapshot();
    let sharing = snap.sharing;
    let memory: Vec<Option<&accelsql_gpu_scheduler::DeviceMemorySnapshot>> = d
        .iter()
        .map(|d| snap.memory.iter().find(|m| m.index == d.index))
        .collect();
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
        strings(d.iter().map(|_| Some(sharing.to_string()))),
        Arc::new(
            memory
                .iter()
                .map(|m| m.map(|m| m.reserved))
                .collect::<UInt64Array>(),
        ),
        Arc::new(
            memory
                .iter()
                .map(|m| {
                    m.map(|m| match m.whole {
                        true => 0,
                        false => m.usable.saturating_sub(m.reserved),
                    })
                })
                .collect::<UInt64Array>(),
        ),
        Arc::new(
            memory
                .iter()
                .map(|m| m.map(|m| m.other_processes))
                .collect::<UInt64Array>(),
        ),
        strings(
            memory
                .iter()
                .map(|m| m.map(|m| m.per_process_memory.clone())),
        ),
    ])
}

fn gpu_leases_schema() -> SchemaRef {
    use DataType::{Boolean, Float64, UInt32, UInt64, Utf8};
    schema(&[
        ("node", UInt32),
        ("state", Utf8),
        ("lease_id", UInt64),
        ("statement", Utf8),
        ("wait_ms", Float64),
        ("hold_ms", Float64),
        ("session", UInt64),
        ("user", Utf8),
        ("consumer_group", Utf8),
        ("precedence", UInt64),
        ("devices", Utf8),
        ("reserved_bytes", UInt64),
        ("wait_reason", Utf8),
        ("backfilled", Boolean),
    ])
}

/// What `accelsql.gpu_leases` shows of the statement behind lease label `label`: its id and
/// text to whom may see them (its text hidden from other sessions), its session and user.
fn lease_statement(
    engine: &EngineState,
    label: &str,
    viewer: Option<Viewer>,
) -> (String, Option<u64>, Option<String>) {
    let Some(id) = statement_of_label(label) else {
        // Another kind of label (a cluster task's): no SQL in it.
        return (label.to_string(), None, None);
    };
    match engine.owners.get(id) {
        Some(owner) => {
            let StatementOwner {
                session,
                user,
                text,
            } = owner.clone();
            let shown = if viewer.is_none_or(|v| v.sees(&owner)) {
                format!("{id} {text}").chars().take(80).collect()
            } else {
                id.to_string()
            };
            (shown, Some(session), user)
        }
        None => (id.to_string(), None, None),
    }
}

fn gpu_leases_columns(
    engine: &EngineState,
    rows: Rows,
    viewer: Option<Viewer>,
) -> DfResult<Vec<ArrayRef>> {
    let snap = engine.queue.snapshot();
    let mut leases: Vec<LeaseRow> = Vec::new();
    let row = |state: &'static str, label: &str, wait: f64| {
        let (statement, session, user) = lease_statement(engine, label, viewer);
        LeaseRow {
            state,
            lease_id: None,
            statement,
            wait_ms: wait,
            hold_ms: None,
            session,
            user,
            group: None,
            precedence: None,
            devices: None,
            reserved_bytes: None,
            wait_reason: None,
            backfilled: None,
        }
    };
    for r in &snap.recent {
        leases.push(LeaseRow {
            lease_id: Some(r.lease_id),
            hold_ms: Some(millis(r.held)),
            reserved_bytes: (r.reserved_bytes > 0).then_some(r.reserved_bytes),
            ..row("released", &r.statement, millis(r.waited))
        });
    }
    // A waiter's precedence is its effective one (its group's, risen with its wait); a
    // holder's is its group's.
    for h in &snap.holders {
        let devices = if h.whole {
            "all".to_string()
        } else {
            h.reserved
                .iter()
                .map(|r| r.index.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        leases.push(LeaseRow {
            lease_id: Some(h.lease_id),
            hold_ms: Some(millis(h.held_for)),
            group: h.group.clone(),
            precedence: Some(u64::from(h.precedence)),
            devices: Some(devices),
            reserved_bytes: (!h.whole).then(|| h.reserved.iter().map(|r| r.bytes).sum()),
            backfilled: Some(h.backfilled),
            ..row("holding", &h.statement, millis(h.waited))
        });
    }
    for w in &snap.waiting {
        leases.push(LeaseRow {
            group: w.group.clone(),
            precedence: Some(w.effective_precedence),
            reserved_bytes: (w.demand_bytes > 0).then_some(w.demand_bytes),
            wait_reason: Some(w.reason.clone()),
            ..row("waiting", &w.statement, millis(w.waiting_for))
        });
    }
    Ok(vec![
        node_column(engine, rows, leases.len()),
        strings(leases.iter().map(|r| Some(r.state.to_string()))),
        Arc::new(leases.iter().map(|r| r.lease_id).collect::<UInt64Array>()),
        strings(leases.iter().map(|r| Some(r.statement.clone()))),
        Arc::new(
            leases
                .iter()
                .map(|r| Some(r.wait_ms))
                .collect::<Float64Array>(),
        ),
        Arc::new(leases.iter().map(|r| r.hold_ms).collect::<Float64Array>()),
        Arc::new(leases.iter().map(|r| r.session).collect::<UInt64Array>()),
        strings(leases.iter().map(|r| r.user.clone())),
        strings(leases.iter().map(|r| r.group.clone())),
        Arc::new(leases.iter().map(|r| r.precedence).collect::<UInt64Array>()),
        strings(leases.iter().map(|r| r.devices.clone())),
        Arc::new(
            leases
                .iter()
                .map(|r| r.reserved_bytes)
                .collect::<UInt64Array>(),
        ),
        strings(leases.iter().map(|r| r.wait_reason.clone())),
        Arc::new(
            leases
                .iter()
                .map(|r| r.backfilled)
                .collect::<BooleanArray>(),
        ),
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
        ("session", UInt64),
        ("user", Utf8),
        ("reserved_bytes", UInt64),
    ])
}

fn udf_calls_columns(
    engine: &EngineState,
    rows: Rows,
    viewer: Option<Viewer>,
) -> DfResult<Vec<ArrayRef>> {
    // A node shows the calls it ran for the planning engine's statements; the planning
    // process shows those it ran itself — to a session, only its own statements' calls
    // (unless it may see every session's).
    let c: Vec<_> = engine
        .recent_calls()
        .into_iter()
        .filter(|r| match (rows, &r.run) {
            (Rows::Node { client }, Some(run)) => run.client == client,
            (Rows::Node { .. }, None) => r.node.is_some(),
            (Rows::Client, run) => run.is_none() && r.node.is_none(),
        })
        .map(|r| {
            let owner = engine.owners.get(r.statement_id);
            (r, owner)
        })
        .filter(|(_, owner)| match (viewer, owner) {
            (None, _) => true,
            (Some(v), Some(owner)) => v.sees(owner),
            (Some(v), None) => v.sees_all,
        })
        .collect();
    let owners: Vec<Option<StatementOwner>> = c.iter().map(|(_, o)| o.clone()).collect();
    let c: Vec<UdfCallRecord> = c.into_iter().map(|(r, _)| r).collect();
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
        Arc::new(
            owners
                .iter()
                .map(|o| o.as_ref().map(|o| o.session))
                .collect::<UInt64Array>(),
        ),
        strings(
            owners
                .iter()
                .map(|o| o.as_ref().and_then(|o| o.user.clone())),
        ),
        Arc::new(c.iter().map(|r| r.reserved_bytes).collect::<UInt64Array>()),
    ])
}
