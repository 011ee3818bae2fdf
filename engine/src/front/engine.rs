//! The [`Engine`]: one per process; owns the device inventory, the node lease queue, the UDF
//! registry and the recent-call log, and opens [`Session`]s.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use accelsql_gpu_scheduler::{DeviceInfo, DeviceLockDir, Inventory, LeaseQueue, SchedulerConfig};

use crate::distribute::PlanDistributor;
use crate::placement::PlacementDecision;
use crate::script::ScriptCatalog;
use crate::session::Session;
use crate::udf::{ScalarUdf, SetUdf};
use crate::{Result, definition_err};

/// How many finished UDF calls `accelsql.udf_calls` keeps.
pub const RECENT_CALLS: usize = 1000;

/// One finished UDF call, as `accelsql.udf_calls` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct UdfCallRecord {
    /// The statement.
    pub statement_id: u64,
    /// The placement decision.
    pub decision: PlacementDecision,
    /// Indices of the devices its instances were pinned to (empty on the CPU).
    pub devices: Vec<u32>,
    /// How many distinct instances ran.
    pub instances: usize,
    /// Rows in.
    pub rows_in: u64,
    /// Rows out.
    pub rows_out: u64,
    /// Time spent in the implementation.
    pub elapsed: Duration,
    /// How long the statement waited for the GPU lease (if it needed it).
    pub lease_wait: Option<Duration>,
    /// Batches that ran the GPU implementation (0 on simulated devices: they run the CPU one).
    pub gpu_batches: u64,
    /// Batches whose GPU implementation found no usable GPU (driver failure, out of device
    /// memory) and ran the CPU implementation instead (optional calls only).
    pub cpu_fallback_batches: u64,
    /// Why the last of those fell back.
    pub fallback_reason: Option<String>,
    /// The node that ran it: this process's node number, or on a cluster the executor's;
    /// `None` for a call that a cluster's client ran itself (a plan the cluster cannot carry).
    pub node: Option<usize>,
    /// On a cluster's node: the engine that planned the call and the job that ran it here.
    pub(crate) run: Option<crate::remote::NodeRun>,
}

impl std::fmt::Display for UdfCallRecord {
    /// One line per call, as `EXPLAIN ANALYZE` shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "{}: devices {:?}, instances {}, rows in {} out {}, time {:.3} ms",
            self.decision,
            self.devices,
            self.instances,
            self.rows_in,
            self.rows_out,
            ms(self.elapsed)
        )?;
        if let Some(wait) = self.lease_wait {
            write!(f, ", lease wait {:.3} ms", ms(wait))?;
        }
        write!(f, ", GPU-implementation batches {}", self.gpu_batches)?;
        if self.cpu_fallback_batches > 0 {
            write!(
                f,
                ", CPU fallback batches {} ({})",
                self.cpu_fallback_batches,
                self.fallback_reason
                    .as_deref()
                    .unwrap_or("no reason recorded")
            )?;
        }
        Ok(())
    }
}

/// The embedded engine: devices, GPU lease queue, UDF registry.
///
/// ```
/// use accelsql_engine::{Engine, SchedulerConfig};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let engine = Engine::with_config(SchedulerConfig::default().with_simulated_gpus(2)).unwrap();
/// let session = engine.session();
/// let batches = session.sql("SELECT iproc(), nproc()").await.unwrap();
/// assert_eq!(batches[0].num_rows(), 1);
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) inner: Arc<EngineInner>,
}

#[derive(Debug)]
pub(crate) struct EngineInner {
    /// Tells this engine from others: the calls it plans carry it to a cluster's nodes, whose
    /// `accelsql.udf_calls` rows it then reads back as its own.
    pub(crate) id: u64,
    pub(crate) inventory: Inventory,
    pub(crate) devices: Vec<DeviceInfo>,
    pub(crate) queue: LeaseQueue,
    pub(crate) default_wait_timeout: Option<Duration>,
    /// [`EngineOptions::max_lease_hold`].
    pub(crate) max_lease_hold: Option<Duration>,
    /// [`EngineOptions::node`].
    pub(crate) node: NodeIdentity,
    /// [`EngineOptions::distributor`].
    pub(crate) distributor: Option<Arc<dyn PlanDistributor>>,
    pub(crate) udfs: RwLock<Registry>,
    pub(crate) next_statement: AtomicU64,
    pub(crate) next_session: AtomicU64,
    /// The scripts created with `CREATE … SCRIPT` (kept in the data directory, if any).
    pub(crate) scripts: ScriptCatalog,
    /// Whether sessions may run script DDL.
    pub(crate) script_ddl: bool,
    /// Whether every session starts restricted ([`EngineOptions::restricted`]).
    pub(crate) restricted: bool,
    /// Whether sessions resolve unknown table names as files ([`EngineOptions::url_tables`]).
    pub(crate) url_tables: bool,
    pub(crate) recent_calls: Mutex<VecDeque<UdfCallRecord>>,
    /// The node leases of the statements whose tasks run here (a cluster's executor), by the
    /// statement's key: every task of a statement on this node shares one lease.
    pub(crate) node_leases: crate::remote::NodeLeases,
}

/// How to build an [`Engine`].
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Devices, lease timeout, lock directory.
    pub scheduler: SchedulerConfig,
    /// Where `CREATE … SCRIPT` definitions persist (`scripts.json`); `None`: in memory only.
    pub data_dir: Option<std::path::PathBuf>,
    /// Whether sessions may run `CREATE/DROP SCRIPT` (turn off for untrusted SQL: scripts run
    /// arbitrary code on this machine).
    pub script_ddl: bool,
    /// Whether a file, folder or glob may be named where a table goes, as in datafusion-cli:
    /// `SELECT * FROM 'data/x.parquet'`, `FROM 'logs/*.csv'`, `FROM 'data/'` (the format comes
    /// from the extension: parquet, csv, json, arrow; compressed files such as `x.csv.gz` too).
    /// Off by default: an embedding opts in (the `accelsql` shell and the Python package do).
    /// `CREATE EXTERNAL TABLE` and `COPY … TO` work either way.
    ///
    /// With it off, such a name is an unknown table (42000).
    pub url_tables: bool,
    /// Whether every session is restricted from the start, for SQL from untrusted users (see
    /// [`Session::restrict`](crate::Session::restrict): no script DDL, no SCRIPT_LANGUAGES
    /// change, no file access, no settings that lift a limit). Off by default; to restrict only
    /// some sessions, call `restrict()` on them.
    pub restricted: bool,
    /// The longest a statement may hold the node's GPU lease; past it the statement stops with
    /// error 57G03 and the lease goes to the next in line. For servers, whose clients may stop
    /// reading a result without closing it. `None` (the default): no limit.
    pub max_lease_hold: Option<Duration>,
    /// Which node of a cluster this engine is (`iproc()`, `exa.meta.node_id`) and how many there
    /// are (`nproc()`, `exa.meta.node_count`); one node of one by default.
    pub node: NodeIdentity,
    /// Where queries run: `None` (the default) in this process; a distributor (such as a
    /// Ballista cluster's client) to run each query's placed physical plan elsewhere. Set
    /// [`node`](Self::node)`.count` to the cluster's node count, so that `nproc()` and
    /// `EXA_METADATA` agree with the executors.
    pub distributor: Option<Arc<dyn PlanDistributor>>,
}

/// A node's place in a cluster: its number (0-based) and the number of nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeIdentity {
    /// This node's number, `0..count`.
    pub id: usize,
    /// How many nodes there are (at least 1).
    pub count: usize,
}

impl Default for NodeIdentity {
    fn default() -> Self {
        Self { id: 0, count: 1 }
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            data_dir: None,
            script_ddl: true,
            url_tables: false,
            restricted: false,
            max_lease_hold: None,
            node: NodeIdentity::default(),
            distributor: None,
        }
    }
}

/// The Rust UDFs registered in an engine.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registry {
    pub(crate) scalar: Vec<Arc<ScalarUdf>>,
    pub(crate) set: Vec<Arc<SetUdf>>,
}

impl Registry {
    fn check_new_name(&self, name: &str) -> Result<()> {
        let taken = self.scalar.iter().any(|u| u.name() == name)
            || self.set.iter().any(|u| u.name() == name);
        if taken {
            return Err(definition_err!("a UDF named {name} is already registered"));
        }
        Ok(())
    }
}

impl Engine {
    /// An engine configured from the environment (`ACCELSQL_SIMULATED_GPUS`, `CUDA_VISIBLE_DEVICES`,
    /// `ACCELSQL_DEVICE_LOCK_DIR`, `ACCELSQL_GPU_WAIT_TIMEOUT`).
    pub fn new() -> Result<Self> {
        Self::with_config(SchedulerConfig::from_env()?)
    }

    /// An engine with an explicit device configuration.
    pub fn with_config(config: SchedulerConfig) -> Result<Self> {
        Self::with_options(EngineOptions {
            scheduler: config,
            ..EngineOptions::default()
        })
    }

    /// An engine with the devices of `options.scheduler`, the script catalog of
    /// `options.data_dir` (in memory without one; a damaged catalog file is an error), script
    /// DDL allowed or not, and files as tables or not.
    pub fn with_options(options: EngineOptions) -> Result<Self> {
        let node = options.node;
        if node.count == 0 || node.id >= node.count {
            return Err(crate::EngineError::InvalidSetting {
                name: "node".into(),
                message: format!(
                    "node {} of {}: the node number must be below the node count (at least 1)",
                    node.id, node.count
                ),
            });
        }
        let config = options.scheduler.clone();
        let scripts = match &options.data_dir {
            Some(dir) => ScriptCatalog::open(dir)?,
            None => ScriptCatalog::in_memory(),
        };
        let inventory = Inventory::from_config(&config)?;
        let devices = inventory.devices()?;
        let locks = config
            .device_lock_dir
            .as_ref()
            .map(DeviceLockDir::open)
            .transpose()?;
        let queue = LeaseQueue::with_options(devices.clone(), locks, None);
        Ok(Self {
            inner: Arc::new(EngineInner {
                id: std::hash::BuildHasher::hash_one(
                    &std::collections::hash_map::RandomState::new(),
                    (std::process::id(), std::time::SystemTime::now()),
                ),
                inventory,
                devices,
                queue,
                default_wait_timeout: config.lease_wait_timeout,
                max_lease_hold: options.max_lease_hold,
                node: options.node,
                distributor: options.distributor,
                udfs: RwLock::new(Registry {
                    scalar: crate::builtins::builtin_udfs()?
                        .into_iter()
                        .map(Arc::new)
                        .collect(),
                    set: crate::builtins::builtin_set_udfs()?
                        .into_iter()
                        .map(Arc::new)
                        .collect(),
                }),
                next_statement: AtomicU64::new(1),
                next_session: AtomicU64::new(1),
                scripts,
                script_ddl: options.script_ddl,
                url_tables: options.url_tables,
                restricted: options.restricted,
                node_leases: crate::remote::NodeLeases::default(),
                recent_calls: Mutex::new(VecDeque::new()),
            }),
        })
    }

    /// Registers a scalar (RETURNS) Rust UDF; sessions created afterwards can call it.
    ///
    /// Fails with 42E01 if a UDF of that name exists.
    pub fn register_scalar_udf(&self, udf: ScalarUdf) -> Result<()> {
        let mut registry = self.inner.udfs.write().unwrap_or_else(|e| e.into_inner());
        registry.check_new_name(udf.name())?;
        registry.scalar.push(Arc::new(udf));
        Ok(())
    }

    /// Registers a SET (RETURNS or EMITS) or SCALAR EMITS Rust UDF; sessions created afterwards
    /// can call it.
    ///
    /// Fails with 42E01 if a UDF of that name exists.
    pub fn register_set_udf(&self, udf: SetUdf) -> Result<()> {
        let mut registry = self.inner.udfs.write().unwrap_or_else(|e| e.into_inner());
        registry.check_new_name(udf.name())?;
        registry.set.push(Arc::new(udf));
        Ok(())
    }

    /// Opens a session (its own settings; the engine's GPUs and UDFs).
    pub fn session(&self) -> Session {
        Session::new(self.clone())
    }

    /// The devices the engine's lease hands out.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.inner.devices
    }

    /// The node lease queue (for introspection).
    pub fn lease_queue(&self) -> &LeaseQueue {
        &self.inner.queue
    }

    /// The inventory (fresh readings for `accelsql.gpu_devices`).
    pub fn inventory(&self) -> &Inventory {
        &self.inner.inventory
    }

    /// The last [`RECENT_CALLS`] finished UDF calls, oldest first.
    pub fn recent_calls(&self) -> Vec<UdfCallRecord> {
        self.inner
            .recent_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    pub(crate) fn next_session_id(&self) -> u64 {
        self.inner.next_session.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_statement_id(&self) -> u64 {
        self.inner.next_statement.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn record_calls(&self, records: Vec<UdfCallRecord>) {
        let mut recent = self
            .inner
            .recent_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for r in records {
            // A cluster task's call joins the record of its job's other tasks on this node.
            if let Some(run) = &r.run
                && let Some(known) = recent.iter_mut().rev().find(|k| {
                    k.decision.call_id == r.decision.call_id
                        && k.run.as_ref().is_some_and(|k| k.same_call(run))
                })
            {
                known.absorb(r);
                continue;
            }
            if recent.len() == RECENT_CALLS {
                recent.pop_front();
            }
            recent.push_back(r);
        }
    }
}
