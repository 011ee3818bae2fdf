//! The server's Prometheus metrics (served at `/metrics` by `http/`), with `prometheus-client`: counters and
//! histograms the statement path records as statements end ([`record_statement`]) and logins
//! fail ([`record_login_failure`]); sessions and connections; and the node's own — devices,
//! the lease queue, UDF calls, memory pool, spills, script workers — read from the engine at
//! each scrape by [`NodeMetrics`] (a scrape runs no statement). On a cluster's front end they
//! are its own process's; each executor serves its node's (`cluster executor --http`).

use std::sync::OnceLock;
use std::time::Duration;

use accelsql_engine::Engine;
use accelsql_ops::{NodeMetrics, encode_registry};
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
    login_failures: Counter,
    sessions: Gauge,
    connections: Gauge,
    scrapes: Counter,
    /// The node's metrics, read from the engine at each scrape.
    node: NodeMetrics,
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
            "How long statements' GPU calls waited in the node lease queue",
            Unit::Seconds,
            lease_wait_seconds.clone(),
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
        let scrapes = Counter::default();
        registry.register("scrapes", "Scrapes of this endpoint", scrapes.clone());
        let node = NodeMetrics::register(&mut registry);
        Self {
            registry,
            statements,
            statement_seconds,
            lease_wait_seconds,
            login_failures,
            sessions,
            connections,
            scrapes,
            node,
            scrape: tokio::sync::Mutex::new(()),
            recording: std::sync::Mutex::new(()),
        }
    }
}

/// The process's metrics (one server per process; embedded tests share them).
fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// Records an ended statement: its `outcome` (`ok`, `error[CODE]`, `cancelled`), how long it
/// took and its calls' lease wait (its calls are counted by the engine, see [`NodeMetrics`]).
pub(crate) fn record_statement(outcome: &str, elapsed: Duration, lease_wait: Option<Duration>) {
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
}

/// Records a refused login.
pub(crate) fn record_login_failure() {
    metrics().login_failures.inc();
}

/// The exposition text: the node's metrics read from `engine` (its devices, fresh from NVML,
/// and its lease queue), `sessions` and `connections` as given. No statement runs for a scrape.
pub(crate) async fn render(engine: &Engine, sessions: usize, connections: usize) -> String {
    let m = metrics();
    let _one = m.scrape.lock().await;
    m.scrapes.inc();
    m.sessions.set(i64::try_from(sessions).unwrap_or(i64::MAX));
    m.connections
        .set(i64::try_from(connections).unwrap_or(i64::MAX));
    m.node.update(engine).await;
    let _consistent = m.recording.lock().unwrap_or_else(|e| e.into_inner());
    encode_registry(&m.registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_counted_by_outcome_and_code() {
        record_statement("ok", Duration::from_millis(3), None);
        record_statement(
            "error[22069]",
            Duration::from_millis(1),
            Some(Duration::from_millis(2)),
        );
        let text = encode_registry(&metrics().registry);
        assert!(
            text.contains(r#"accelsql_statements_total{outcome="error",code="22069"}"#),
            "{text}"
        );
        assert!(
            text.contains("accelsql_lease_wait_seconds_count "),
            "{text}"
        );
        assert!(
            text.contains("accelsql_statement_duration_seconds_count"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
