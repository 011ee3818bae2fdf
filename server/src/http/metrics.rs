//! The server's Prometheus metrics (`/metrics`), with `prometheus-client`: counters and
//! histograms the statement path records as statements end ([`record_statement`]) and logins
//! fail ([`record_login_failure`]), and gauges read at each scrape from the live state —
//! sessions, connections, each device's memory and utilisation (NVML) and the lease queue, from
//! the engine directly (a scrape runs no statement). On a cluster's front end they are its own
//! process's; each node's rows are in the dashboard.

use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;
use std::time::Duration;

use accelsql_engine::Engine;
use accelsql_engine::datafusion::arrow::array::{Array, RecordBatch};
use accelsql_engine::datafusion::arrow::util::display::array_value_to_string;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// Labels: pairs of (name, value).
type Labels = Vec<(String, String)>;

/// Every metric the server exposes.
pub(crate) struct Metrics {
    registry: Registry,
    statements: Family<Labels, Counter>,
    statement_seconds: Histogram,
    lease_wait_seconds: Histogram,
    udf_calls: Family<Labels, Counter>,
    login_failures: Counter,
    sessions: Gauge,
    connections: Gauge,
    device_memory: Family<Labels, Gauge<u64, AtomicU64>>,
    device_utilization: Family<Labels, Gauge>,
    leases: Family<Labels, Gauge>,
    scrapes: Counter,
    spilled: Gauge<u64, AtomicU64>,
    lease_outcomes: Family<Labels, Counter>,
    /// The lease queue's totals at the last scrape, to count on from.
    lease_seen: std::sync::Mutex<[u64; 4]>,
    /// One scrape reads the live state at a time.
    scrape: tokio::sync::Mutex<()>,
    /// Held while a statement's metrics are recorded and while they are encoded, so that a
    /// scrape sees each statement in all of them or in none.
    recording: std::sync::Mutex<()>,
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("accelsql");
        let statements = Family::<Labels, Counter>::default();
        registry.register(
            "statements",
            "Statements ended, by outcome (ok, error, cancelled) and error code",
            statements.clone(),
        );
        let statement_seconds = Histogram::new(exponential_buckets(0.001, 4.0, 10));
        registry.register_with_unit(
            "statement_duration",
            "How long statements took, from start to their last row",
            Unit::Seconds,
            statement_seconds.clone(),
        );
        let lease_wait_seconds = Histogram::new(exponential_buckets(0.001, 4.0, 10));
        registry.register_with_unit(
            "lease_wait",
            "How long GPU calls waited in the node lease queue",
            Unit::Seconds,
            lease_wait_seconds.clone(),
        );
        let udf_calls = Family::<Labels, Counter>::default();
        registry.register(
            "udf_calls",
            "UDF calls of ended statements, by placement (gpu, cpu)",
            udf_calls.clone(),
        );
        let login_failures = Counter::default();
        registry.register(
            "login_failures",
            "Logins refused (wrong password or token, unknown user)",
            login_failures.clone(),
        );
        let sessions = Gauge::default();
        registry.register("sessions", "Open client sessions", sessions.clone());
        let connections = Gauge::default();
        registry.register(
            "connections",
            "Open client connections",
            connections.clone(),
        );
        let device_memory = Family::<Labels, Gauge<u64, AtomicU64>>::default();
        registry.register_with_unit(
            "device_memory",
            "Device memory by node, device and kind (total, free, reserved by leases)",
            Unit::Bytes,
            device_memory.clone(),
        );
        let device_utilization = Family::<Labels, Gauge>::default();
        registry.register(
            "device_utilization_percent",
            "Device utilisation by node and device, in percent (NVML)",
            device_utilization.clone(),
        );
        let leases = Family::<Labels, Gauge>::default();
        registry.register(
            "leases",
            "Node lease queue entries by node, state (holding, waiting) and consumer group",
            leases.clone(),
        );
        let scrapes = Counter::default();
        let spilled = Gauge::<u64, AtomicU64>::default();
        registry.register_with_unit(
            "spilled",
            "Bytes the sessions have spilled to disk now",
            Unit::Bytes,
            spilled.clone(),
        );
        let lease_outcomes = Family::<Labels, Counter>::default();
        registry.register(
            "lease_requests",
            "Node lease requests by how they ended (granted, timed_out, cancelled, refused)",
            lease_outcomes.clone(),
        );
        registry.register("scrapes", "Scrapes of this endpoint", scrapes.clone());
        Self {
            registry,
            statements,
            statement_seconds,
            lease_wait_seconds,
            udf_calls,
            login_failures,
            sessions,
            connections,
            device_memory,
            device_utilization,
            leases,
            scrapes,
            spilled,
            lease_outcomes,
            lease_seen: std::sync::Mutex::new([0; 4]),
            scrape: tokio::sync::Mutex::new(()),
            recording: std::sync::Mutex::new(()),
        }
    }
}

/// The process's metrics (one server per process; embedded tests share them).
pub(crate) fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// Records an ended statement: its `outcome` (`ok`, `error[CODE]`, `cancelled`), how long it
/// took, its calls' placements and the lease wait.
pub(crate) fn record_statement(
    outcome: &str,
    elapsed: Duration,
    placements: &[&str],
    lease_wait: Option<Duration>,
) {
    let m = metrics();
    let _one = m.recording.lock().unwrap_or_else(|e| e.into_inner());
    let (kind, code) = match outcome
        .strip_prefix("error[")
        .and_then(|c| c.strip_suffix(']'))
    {
        Some(code) => ("error", code),
        None => (outcome, ""),
    };
    m.statements
        .get_or_create(&labels(&[("outcome", kind), ("code", code)]))
        .inc();
    m.statement_seconds.observe(elapsed.as_secs_f64());
    if let Some(wait) = lease_wait {
        m.lease_wait_seconds.observe(wait.as_secs_f64());
    }
    for placement in placements {
        m.udf_calls
            .get_or_create(&labels(&[("placement", placement)]))
            .inc();
    }
}

/// Records a refused login.
pub(crate) fn record_login_failure() {
    metrics().login_failures.inc();
}

/// The rows of `batches`, each as (column, value text) pairs.
pub(crate) fn batch_rows(batches: &[RecordBatch]) -> Vec<Vec<(String, Option<String>)>> {
    let mut out = Vec::new();
    for batch in batches {
        let schema = batch.schema();
        for row in 0..batch.num_rows() {
            out.push(
                schema
                    .fields()
                    .iter()
                    .zip(batch.columns())
                    .map(|(f, c)| {
                        let value = (!c.is_null(row))
                            .then(|| array_value_to_string(c, row).ok())
                            .flatten();
                        (f.name().clone(), value)
                    })
                    .collect(),
            );
        }
    }
    out
}

/// The exposition text: the live gauges read from `engine` (its devices, fresh from NVML, and
/// its lease queue), `sessions` and `connections` as given. No statement runs for a scrape.
pub(crate) async fn render(engine: &Engine, sessions: usize, connections: usize) -> String {
    let m = metrics();
    let _one = m.scrape.lock().await;
    m.scrapes.inc();
    m.sessions.set(i64::try_from(sessions).unwrap_or(i64::MAX));
    m.connections
        .set(i64::try_from(connections).unwrap_or(i64::MAX));
    let probe = engine.clone();
    let devices = tokio::task::spawn_blocking(move || probe.inventory().devices())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let queue = engine.lease_queue().snapshot();
    let node = "0";
    m.device_memory.clear();
    m.device_utilization.clear();
    for d in &devices {
        let device = d.index.to_string();
        let reserved = queue
            .memory
            .iter()
            .find(|q| q.index == d.index)
            .map_or(0, |q| if q.whole { q.total } else { q.reserved });
        for (kind, bytes) in [
            ("total", d.memory_total),
            ("free", d.memory_free),
            ("reserved", reserved),
        ] {
            m.device_memory
                .get_or_create(&labels(&[("node", node), ("device", &device), ("kind", kind)]))
                .set(bytes);
        }
        if let Some(percent) = d.utilization {
            m.device_utilization
                .get_or_create(&labels(&[("node", node), ("device", &device)]))
                .set(i64::from(percent));
        }
    }
    m.spilled.set(engine.spilled_bytes());
    {
        // The queue's totals only grow: count on by what they grew since the last scrape.
        let t = &queue.totals;
        let now = [t.granted, t.timed_out, t.cancelled, t.refused];
        let mut seen = m.lease_seen.lock().unwrap_or_else(|e| e.into_inner());
        for ((name, value), last) in ["granted", "timed_out", "cancelled", "refused"]
            .iter()
            .zip(now)
            .zip(seen.iter_mut())
        {
            m.lease_outcomes
                .get_or_create(&labels(&[("outcome", name)]))
                .inc_by(value.saturating_sub(*last));
            *last = (*last).max(value);
        }
    }
    m.leases.clear();
    let group = |g: &Option<String>| g.clone().unwrap_or_default();
    for h in &queue.holders {
        m.leases
            .get_or_create(&labels(&[
                ("node", node),
                ("state", "holding"),
                ("consumer_group", &group(&h.group)),
            ]))
            .inc();
    }
    for w in &queue.waiting {
        m.leases
            .get_or_create(&labels(&[
                ("node", node),
                ("state", "waiting"),
                ("consumer_group", &group(&w.group)),
            ]))
            .inc();
    }
    let mut text = String::new();
    let _consistent = m.recording.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = encode(&mut text, &m.registry) {
        log::warn!("metrics: {e}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_counted_by_outcome_and_code() {
        record_statement("ok", Duration::from_millis(3), &["gpu", "cpu"], None);
        record_statement(
            "error[22069]",
            Duration::from_millis(1),
            &[],
            Some(Duration::from_millis(2)),
        );
        let mut text = String::new();
        encode(&mut text, &metrics().registry).unwrap();
        assert!(
            text.contains(r#"accelsql_statements_total{outcome="error",code="22069"}"#),
            "{text}"
        );
        assert!(
            text.contains(r#"accelsql_udf_calls_total{placement="gpu"}"#),
            "{text}"
        );
        assert!(text.contains("accelsql_statement_duration_seconds_count"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
