//! How to build an engine ([`EngineOptions`]) and a node's place in a cluster
//! ([`NodeIdentity`]).

use std::sync::Arc;
use std::time::Duration;

use accelsql_gpu_scheduler::SchedulerConfig;

use super::distribute::PlanDistributor;
use super::error::Result;
use crate::setting_err;

/// The default of [`EngineOptions::max_statement_depth`](crate::EngineOptions): deep enough for
/// generated SQL (a thousand `OR`ed conditions), shallow enough that planning and running such
/// a statement fits a stack of [`STATEMENT_STACK_BYTES`] with room to spare, in an unoptimized
/// build too.
pub const DEFAULT_MAX_STATEMENT_DEPTH: usize = 2_000;

/// The default of [`EngineOptions::max_value_bytes`](crate::EngineOptions): 256 MiB, far
/// beyond Exasol's largest VARCHAR (2,000,000 characters) and a tenth of what one Arrow string
/// array can hold.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 256 * 1024 * 1024;

/// The stack each thread that plans or runs statements should have: the `accelsql` shell,
/// `serve`, the cluster's processes and the Python package give their runtime's threads this
/// much (tokio's default is 2 MiB). An application that embeds the engine in its own runtime
/// sets it with `tokio::runtime::Builder::thread_stack_size`, or lowers
/// [`EngineOptions::max_statement_depth`](crate::EngineOptions) (about 300 levels fit 2 MiB in
/// an unoptimized build).
pub const STATEMENT_STACK_BYTES: usize = 64 * 1024 * 1024;

/// How to build an [`Engine`](crate::Engine).
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
    /// Every session's statement timeout to start with (`accelsql.statement_timeout`): a
    /// statement still running after it is stopped with error 57T01, its lease and workers
    /// freed. A session may change it, but a restricted one only lower it. `None` (the
    /// default): no bound.
    pub statement_timeout: Option<Duration>,
    /// The engine's memory pool in bytes, shared by all its sessions: operators that can spill
    /// (sorts, aggregations, joins) spill under `data_dir/tmp` when it is full, and one that
    /// cannot fails with 53200. `None` (the default): half the machine's memory (or of its
    /// cgroup's limit), see [`default_memory_limit`](crate::default_memory_limit).
    pub memory_limit: Option<usize>,
    /// Every session's memory budget to start with (`accelsql.memory_limit`), within the
    /// engine's pool: a statement whose reservations pass it fails with 53200. A session may
    /// change it, but a restricted one only lower it. `None` (the default): no budget of its
    /// own.
    pub session_memory_limit: Option<usize>,
    /// Every session's SQL dialect to start with (`accelsql.sql_dialect`; `serve
    /// --sql-dialect`): DataFusion's (the default) or Exasol's. A session may change it.
    pub sql_dialect: crate::core::options::SqlDialect,
    /// Which node of a cluster this engine is (`iproc()`, `exa.meta.node_id`) and how many there
    /// are (`nproc()`, `exa.meta.node_count`); one node of one by default.
    pub node: NodeIdentity,
    /// Where queries run: `None` (the default) in this process; a distributor (such as a
    /// Ballista cluster's client) to run each query's placed physical plan elsewhere. Set
    /// [`node`](Self::node)`.count` to the cluster's node count, so that `nproc()` and
    /// `EXA_METADATA` agree with the executors.
    pub distributor: Option<Arc<dyn PlanDistributor>>,
    /// PBKDF2 rounds for the password hashes `CREATE USER` and `ALTER USER … IDENTIFIED BY`
    /// store (default [`DEFAULT_ROUNDS`](crate::DEFAULT_ROUNDS), 600,000; tests lower it).
    pub password_rounds: u32,
    /// How fast a statement waiting for the GPU lease gains precedence: one point per this
    /// long (see [`LeaseQueue`](accelsql_gpu_scheduler::LeaseQueue)); default 10 ms, so a
    /// `LOW` group's statement (precedence 100) outranks a newly arrived `HIGH` one (900) after
    /// 8 s of waiting. Zero: no aging.
    pub gpu_precedence_aging: Duration,
    /// The deepest a statement may nest (its operator chains, set operations and brackets, as
    /// estimated from its tokens); a deeper one is
    /// refused with 54001 before it is parsed, so that no input can overflow a thread's stack.
    /// Default [`DEFAULT_MAX_STATEMENT_DEPTH`](crate::DEFAULT_MAX_STATEMENT_DEPTH), which fits
    /// threads with a stack of [`STATEMENT_STACK_BYTES`](crate::STATEMENT_STACK_BYTES).
    pub max_statement_depth: usize,
    /// The largest value (one cell: a text, a list) a function that grows its input may make,
    /// in bytes (`repeat`, `concat`, `replace`, `array_repeat`, …); a larger one fails with
    /// 53200 before it is built, whatever budget is left, since every copy of it (the result
    /// batch, its encoding for a client) is as large. Default
    /// [`DEFAULT_MAX_VALUE_BYTES`](crate::DEFAULT_MAX_VALUE_BYTES).
    pub max_value_bytes: usize,
    /// The most all sessions together may spill to disk (sorts, aggregations and joins that
    /// outgrow memory), in bytes. `None` (the default): half the free space of the spill
    /// folder's file system at start, at most 100 GiB.
    pub spill_limit: Option<u64>,
    /// The most all sessions of one user may spill together; `None`: half of
    /// [`spill_limit`](Self::spill_limit).
    pub user_spill_limit: Option<u64>,
    /// The most one session may spill; `None`: a quarter of [`spill_limit`](Self::spill_limit).
    /// A statement past any of the three fails with 53400.
    pub session_spill_limit: Option<u64>,
}

/// A node's place in a cluster: its number (0-based) and the number of nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeIdentity {
    /// This node's number, `0..count`.
    pub id: usize,
    /// How many nodes there are (at least 1).
    pub count: usize,
}

impl NodeIdentity {
    /// 22023 unless the node number is below the node count (at least 1).
    pub(crate) fn check(&self) -> Result<()> {
        if self.count == 0 || self.id >= self.count {
            return Err(setting_err!(
                "node",
                "node {} of {}: the node number must be below the node count (at least 1)",
                self.id,
                self.count
            ));
        }
        Ok(())
    }
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
            statement_timeout: None,
            memory_limit: None,
            session_memory_limit: None,
            sql_dialect: crate::core::options::SqlDialect::Datafusion,
            node: NodeIdentity::default(),
            distributor: None,
            password_rounds: crate::core::passwords::DEFAULT_ROUNDS,
            gpu_precedence_aging: Duration::from_millis(10),
            max_statement_depth: DEFAULT_MAX_STATEMENT_DEPTH,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            spill_limit: None,
            user_spill_limit: None,
            session_spill_limit: None,
        }
    }
}
