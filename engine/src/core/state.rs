//! [`EngineState`]: what every layer of one engine shares and may read — the node's devices and
//! lease queue, its place in a cluster, the statement and session counters, the log of recent
//! UDF calls, and the options sessions start from. The [`Engine`](crate::Engine) handle owns
//! one, beside the UDF registry and the script catalog; lower layers are handed the state, never
//! the engine.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accelsql_gpu_scheduler::{DeviceInfo, DeviceLockDir, Inventory, LeaseQueue};

use super::calls::{RECENT_CALLS, UdfCallRecord};
use super::distribute::PlanDistributor;
use super::engine_options::{EngineOptions, NodeIdentity};
use super::error::Result;
use super::node_leases::NodeLeases;

/// The state of one engine that its sessions, statements and system tables share.
#[derive(Debug)]
pub(crate) struct EngineState {
    /// Tells this engine from others: the calls it plans carry it to a cluster's nodes, whose
    /// `accelsql.udf_calls` rows it then reads back as its own.
    pub(crate) id: u64,
    pub(crate) inventory: Inventory,
    pub(crate) devices: Vec<DeviceInfo>,
    pub(crate) queue: LeaseQueue,
    pub(crate) default_wait_timeout: Option<Duration>,
    /// [`EngineOptions::max_lease_hold`].
    pub(crate) max_lease_hold: Option<Duration>,
    /// [`EngineOptions::statement_timeout`].
    pub(crate) statement_timeout: Option<Duration>,
    /// [`EngineOptions::max_statement_depth`].
    pub(crate) max_statement_depth: usize,
    /// [`EngineOptions::max_value_bytes`].
    pub(crate) max_value_bytes: usize,
    /// [`EngineOptions::session_memory_limit`].
    pub(crate) session_memory_limit: Option<usize>,
    /// [`EngineOptions::sql_dialect`].
    pub(crate) sql_dialect: crate::core::options::SqlDialect,
    /// The memory pool and spill folder every session's runtime shares.
    pub(crate) runtime: Arc<datafusion::execution::runtime_env::RuntimeEnv>,
    /// [`EngineOptions::node`].
    pub(crate) node: NodeIdentity,
    /// [`EngineOptions::password_rounds`].
    pub(crate) password_rounds: u32,
    /// [`EngineOptions::data_dir`], resolved (links followed) when it exists.
    pub(crate) data_dir: Option<std::path::PathBuf>,
    /// The spill quotas of the engine, its users and its sessions, and each session's disk
    /// manager.
    pub(crate) spill: super::spill::SpillQuotas,
    /// The memory budgets users' and consumer groups' sessions share.
    pub(crate) shared_budgets: super::memory::SharedBudgets,
    /// [`EngineOptions::distributor`].
    pub(crate) distributor: Option<Arc<dyn PlanDistributor>>,
    next_statement: AtomicU64,
    next_session: AtomicU64,
    /// Whether sessions may run script DDL.
    pub(crate) script_ddl: bool,
    /// Whether every session starts restricted ([`EngineOptions::restricted`]).
    pub(crate) restricted: bool,
    /// Whether sessions resolve unknown table names as files ([`EngineOptions::url_tables`]).
    pub(crate) url_tables: bool,
    recent_calls: Mutex<VecDeque<UdfCallRecord>>,
    /// Finished calls counted by [`UdfCallRecord::metric_labels`], since the engine started.
    call_totals: Mutex<std::collections::BTreeMap<(&'static str, &'static str), u64>>,
    /// The session, user and text of recent statements (what system tables may show whom).
    pub(crate) owners: super::owners::StatementOwners,
    /// The sessions alive now (`KILL SESSION`).
    pub(crate) sessions: super::owners::LiveSessions,
    /// The node leases of the statements whose tasks run here (a cluster's executor), by the
    /// statement's key: every task of a statement on this node shares one lease.
    pub(crate) node_leases: NodeLeases,
    /// The engine's tables, shared by its sessions.
    pub(crate) tables: super::tables::Tables,
}

impl EngineState {
    /// The state of an engine built with `options`: its node identity checked, its devices read
    /// from the inventory `options.scheduler` configures, its lease queue over them.
    pub(crate) fn new(options: &EngineOptions) -> Result<Self> {
        options.node.check()?;
        let config = &options.scheduler;
        let inventory = Inventory::from_config(config)?;
        let devices = inventory.devices()?;
        let locks = config
            .device_lock_dir
            .as_ref()
            .map(DeviceLockDir::open)
            .transpose()?;
        let queue = LeaseQueue::with_options(devices.clone(), locks, None)
            .with_precedence_aging(options.gpu_precedence_aging)
            .with_sharing(config.gpu_sharing, config.headroom_percent());
        // Under memory sharing, what other processes use of each device is not ours to reserve.
        queue.watch_other_processes(inventory.clone(), std::time::Duration::from_millis(500));
        let pool_bytes = options
            .memory_limit
            .unwrap_or_else(super::memory::default_memory_limit);
        let runtime = super::memory::engine_runtime(pool_bytes, options.data_dir.as_deref())?;
        let tables = super::tables::Tables::open(
            options.data_dir.as_deref(),
            &runtime.memory_pool,
            pool_bytes,
        )?;
        let spill_dir = options
            .data_dir
            .as_deref()
            .map(|d| d.join(super::memory::SPILL_DIR));
        let spill_limit = options
            .spill_limit
            .unwrap_or_else(|| super::spill::default_spill_limit(spill_dir.as_deref()));
        let spill = super::spill::SpillQuotas::new(
            spill_dir,
            spill_limit,
            options.user_spill_limit.unwrap_or(spill_limit / 2),
            options.session_spill_limit.unwrap_or(spill_limit / 4),
        );
        Ok(Self {
            data_dir: options
                .data_dir
                .as_ref()
                .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.clone())),
            spill,
            tables,
            id: std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                (std::process::id(), std::time::SystemTime::now()),
            ),
            inventory,
            devices,
            queue,
            default_wait_timeout: config.lease_wait_timeout,
            max_lease_hold: options.max_lease_hold,
            statement_timeout: options.statement_timeout,
            max_statement_depth: options.max_statement_depth,
            max_value_bytes: options.max_value_bytes,
            session_memory_limit: options.session_memory_limit,
            sql_dialect: options.sql_dialect,
            runtime,
            node: options.node,
            password_rounds: options.password_rounds,
            shared_budgets: Default::default(),
            distributor: options.distributor.clone(),
            next_statement: AtomicU64::new(1),
            next_session: AtomicU64::new(1),
            script_ddl: options.script_ddl,
            url_tables: options.url_tables,
            restricted: options.restricted,
            node_leases: NodeLeases::default(),
            recent_calls: Mutex::new(VecDeque::new()),
            call_totals: Mutex::default(),
            owners: Default::default(),
            sessions: Default::default(),
        })
    }

    /// A new session's id.
    pub(crate) fn next_session_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// A new statement's id.
    pub(crate) fn next_statement_id(&self) -> u64 {
        self.next_statement.fetch_add(1, Ordering::Relaxed)
    }

    /// The last [`RECENT_CALLS`] finished UDF calls, oldest first.
    pub(crate) fn recent_calls(&self) -> Vec<UdfCallRecord> {
        self.recent_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Finished calls by placement and reason ([`UdfCallRecord::metric_labels`]) since the
    /// engine started; a cluster task's call counts once per node, with its first task.
    pub(crate) fn call_totals(&self) -> Vec<((&'static str, &'static str), u64)> {
        self.call_totals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }

    /// The recent calls of statement `id`, oldest first (a filter under the lock: no copy of
    /// the others).
    pub(crate) fn calls_of(&self, id: u64) -> Vec<UdfCallRecord> {
        self.recent_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|c| c.statement_id == id)
            .cloned()
            .collect()
    }

    /// Adds finished calls to the log (the oldest go past [`RECENT_CALLS`]); a cluster task's
    /// call joins the record of its job's other tasks on this node.
    pub(crate) fn record_calls(&self, records: Vec<UdfCallRecord>) {
        let mut recent = self.recent_calls.lock().unwrap_or_else(|e| e.into_inner());
        for r in records {
            if let Some(run) = &r.run
                && let Some(known) = recent.iter_mut().rev().find(|k| {
                    k.decision.call_id == r.decision.call_id
                        && k.run.as_ref().is_some_and(|k| k.same_call(run))
                })
            {
                known.absorb(r);
                continue;
            }
            *self
                .call_totals
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(r.metric_labels())
                .or_default() += 1;
            if recent.len() == RECENT_CALLS {
                recent.pop_front();
            }
            recent.push_back(r);
        }
    }
}
