//! A node's Prometheus metrics, read from its engine at each scrape: device memory and
//! utilisation (NVML), the lease queue's holders and waiters by consumer group and its requests
//! by outcome, UDF calls by placement and reason, the memory pool, spills, and script workers.
//! Every series carries the node's number (`node`), so that a cluster's executors, scraped
//! one by one, add up in Prometheus.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use accelsql_engine::Engine;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// The content type of [`encode_registry`]'s text (OpenMetrics, which Prometheus reads).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Labels: pairs of (name, value).
type Labels = Vec<(String, String)>;

/// A byte gauge (u64).
type Bytes = Gauge<u64, AtomicU64>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// Totals read from the engine at the last scrape, to count on from: an engine's totals only
/// grow, a counter grows by what they grew since.
#[derive(Default)]
struct Seen {
    lease: [u64; 4],
    calls: std::collections::BTreeMap<(&'static str, &'static str), u64>,
    workers: [u64; 2],
}

/// One node's metrics, registered in a process's registry (see the module docs).
pub struct NodeMetrics {
    device_memory: Family<Labels, Bytes>,
    device_utilization: Family<Labels, Gauge>,
    leases: Family<Labels, Gauge>,
    lease_requests: Family<Labels, Counter>,
    udf_calls: Family<Labels, Counter>,
    memory_pool: Family<Labels, Bytes>,
    spilled: Family<Labels, Bytes>,
    workers_alive: Family<Labels, Gauge>,
    workers: Family<Labels, Counter>,
    seen: Mutex<Seen>,
}

impl std::fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMetrics").finish_non_exhaustive()
    }
}

impl NodeMetrics {
    /// Registers a node's metrics in `registry` (whose prefix names them, e.g. `accelsql`);
    /// the engine given to [`NodeMetrics::update`] says which node.
    pub fn register(registry: &mut Registry) -> Self {
        let device_memory = Family::<Labels, Bytes>::default();
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
        let lease_requests = Family::<Labels, Counter>::default();
        registry.register(
            "lease_requests",
            "Node lease requests by node and how they ended (granted, timed_out, cancelled, refused)",
            lease_requests.clone(),
        );
        let udf_calls = Family::<Labels, Counter>::default();
        registry.register(
            "udf_calls",
            "Finished UDF calls by node, placement (gpu, cpu, fallback) and reason",
            udf_calls.clone(),
        );
        let memory_pool = Family::<Labels, Bytes>::default();
        registry.register_with_unit(
            "memory_pool",
            "The engine's memory pool by node and kind (reserved now, limit)",
            Unit::Bytes,
            memory_pool.clone(),
        );
        let spilled = Family::<Labels, Bytes>::default();
        registry.register_with_unit(
            "spilled",
            "Bytes the node's sessions have spilled to disk now",
            Unit::Bytes,
            spilled.clone(),
        );
        let workers_alive = Family::<Labels, Gauge>::default();
        registry.register(
            "script_workers",
            "Script worker processes alive now (counted per process)",
            workers_alive.clone(),
        );
        let workers = Family::<Labels, Counter>::default();
        registry.register(
            "script_worker_events",
            "Script worker processes started, and ended by a signal (killed or crashed), per process",
            workers.clone(),
        );
        Self {
            device_memory,
            device_utilization,
            leases,
            lease_requests,
            udf_calls,
            memory_pool,
            spilled,
            workers_alive,
            workers,
            seen: Mutex::default(),
        }
    }

    /// Reads `engine`'s state into the metrics: its devices fresh from NVML (on a blocking
    /// thread), its lease queue, calls, memory pool, spills, and the process's workers. Runs no
    /// statement.
    pub async fn update(&self, engine: &Engine) {
        let probe = engine.clone();
        let devices = tokio::task::spawn_blocking(move || probe.inventory().devices())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let node = engine.node_id().to_string();
        let node = node.as_str();
        let queue = engine.lease_queue().snapshot();
        self.device_memory.clear();
        self.device_utilization.clear();
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
                self.device_memory
                    .get_or_create(&labels(&[
                        ("node", node),
                        ("device", &device),
                        ("kind", kind),
                    ]))
                    .set(bytes);
            }
            if let Some(percent) = d.utilization {
                self.device_utilization
                    .get_or_create(&labels(&[("node", node), ("device", &device)]))
                    .set(i64::from(percent));
            }
        }
        self.leases.clear();
        let entries = queue
            .holders
            .iter()
            .map(|h| ("holding", &h.group))
            .chain(queue.waiting.iter().map(|w| ("waiting", &w.group)));
        for (state, group) in entries {
            self.leases
                .get_or_create(&labels(&[
                    ("node", node),
                    ("state", state),
                    ("consumer_group", group.as_deref().unwrap_or_default()),
                ]))
                .inc();
        }
        let (reserved, limit) = engine.memory_pool_usage();
        let pool = |kind: &str| labels(&[("node", node), ("kind", kind)]);
        self.memory_pool
            .get_or_create(&pool("reserved"))
            .set(reserved as u64);
        if let Some(limit) = limit {
            self.memory_pool
                .get_or_create(&pool("limit"))
                .set(limit as u64);
        }
        self.spilled
            .get_or_create(&labels(&[("node", node)]))
            .set(engine.spilled_bytes());
        let workers = accelsql_engine::udf_runtime::script::worker_counts();
        self.workers_alive
            .get_or_create(&labels(&[("node", node)]))
            .set(i64::try_from(workers.alive()).unwrap_or(i64::MAX));
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let t = &queue.totals;
        let lease_now = [t.granted, t.timed_out, t.cancelled, t.refused];
        for ((outcome, now), last) in ["granted", "timed_out", "cancelled", "refused"]
            .iter()
            .zip(lease_now)
            .zip(seen.lease.iter_mut())
        {
            self.lease_requests
                .get_or_create(&labels(&[("node", node), ("outcome", outcome)]))
                .inc_by(now.saturating_sub(*last));
            *last = (*last).max(now);
        }
        for ((placement, reason), now) in engine.udf_call_totals() {
            let last = seen.calls.entry((placement, reason)).or_default();
            self.udf_calls
                .get_or_create(&labels(&[
                    ("node", node),
                    ("placement", placement),
                    ("reason", reason),
                ]))
                .inc_by(now.saturating_sub(*last));
            *last = (*last).max(now);
        }
        for ((event, now), last) in ["started", "killed"]
            .iter()
            .zip([workers.started, workers.killed])
            .zip(seen.workers.iter_mut())
        {
            self.workers
                .get_or_create(&labels(&[("node", node), ("event", event)]))
                .inc_by(now.saturating_sub(*last));
            *last = (*last).max(now);
        }
    }
}

/// `registry` in the OpenMetrics text format (ending `# EOF`); an encoding failure is logged
/// and what was encoded returned.
pub fn encode_registry(registry: &Registry) -> String {
    let mut text = String::new();
    if let Err(e) = encode(&mut text, registry) {
        log::warn!("metrics: {e}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use accelsql_engine::{EngineOptions, SchedulerConfig};

    #[tokio::test]
    async fn a_nodes_devices_and_lease_queue_are_read_at_each_scrape() {
        let engine = Engine::with_options(EngineOptions {
            scheduler: SchedulerConfig::default().with_simulated_gpus(2),
            ..EngineOptions::default()
        })
        .unwrap();
        let mut registry = Registry::with_prefix("accelsql");
        let metrics = NodeMetrics::register(&mut registry);
        metrics.update(&engine).await;
        let text = encode_registry(&registry);
        assert!(
            text.contains(r#"accelsql_device_memory_bytes{node="0",device="1",kind="total"}"#),
            "{text}"
        );
        assert!(
            text.contains(r#"accelsql_lease_requests_total{node="0",outcome="granted"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"accelsql_memory_pool_bytes{node="0",kind="reserved"}"#),
            "{text}"
        );
        assert!(
            text.contains("accelsql_script_workers{node=\"0\"}"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
