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

/// One row of `accelsql.gpu_leases`: state, lease id, statement, wait ms, hold ms, session,
/// user.
type LeaseRow = (
    String,
    Option<u64>,
    String,
    f64,
    Option<f64>,
    Option<u64>,
    Option<String>,
    Option<String>,
    Option<u64>,
);

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
        ("session", UInt64),
        ("user", Utf8),
        ("consumer_group", Utf8),
        ("precedence", UInt64),
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
    // A waiter's precedence is its effective one (its group's, risen with its wait); a
    // holder's is its group's.
    let mut push = |state: &str, id, label: &str, wait, hold, group: Option<String>, rank| {
        let (statement, session, user) = lease_statement(engine, label, viewer);
        leases.push((
            state.into(),
            id,
            statement,
            wait,
            hold,
            session,
            user,
            group,
            rank,
        ));
    };
    for r in &snap.recent {
        push(
            "released",
            Some(r.lease_id),
            &r.statement,
            millis(r.waited),
            Some(millis(r.held)),
            None,
            None,
        );
    }
    if let Some(h) = &snap.holder {
        push(
            "holding",
            Some(h.lease_id),
            &h.statement,
            millis(h.waited),
            Some(millis(h.held_for)),
            h.group.clone(),
            Some(u64::from(h.precedence)),
        );
    }
    for w in &snap.waiting {
        push(
            "waiting",
            None,
            &w.statement,
            millis(w.waiting_for),
            None,
            w.group.clone(),
            Some(w.effective_precedence),
        );
    }
    Ok(vec![
        node_column(engine, rows, leases.len()),
        strings(leases.iter().map(|r| Some(r.0.clone()))),
        Arc::new(leases.iter().map(|r| r.1).collect::<UInt64Array>()),
        strings(leases.iter().map(|r| Some(r.2.clone()))),
        Arc::new(leases.iter().map(|r| Some(r.3)).collect::<Float64Array>()),
        Arc::new(leases.iter().map(|r| r.4).collect::<Float64Array>()),
        Arc::new(leases.iter().map(|r| r.5).collect::<UInt64Array>()),
        strings(leases.iter().map(|r| r.6.clone())),
        strings(leases.iter().map(|r| r.7.clone())),
        Arc::new(leases.iter().map(|r| r.8).collect::<UInt64Array>()),
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
    ])
}
