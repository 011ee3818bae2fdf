//! Memory budgets: the engine's DataFusion memory pool (operators that can spill do so under
//! the data directory) and each session's budget within it ([`SessionPool`]); a statement that
//! does not fit fails with 53200 while the engine goes on serving the others.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use accelsql_gpu_scheduler::units::format_bytes;
use datafusion::common::resources_datafusion_err;
use datafusion::error::Result as DfResult;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
    TrackConsumersPool,
};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};

use super::error::{EngineError, Result};
use crate::data_dir_err;

/// The share of the machine's memory (or of its cgroup's limit) an engine's pool gets when
/// [`EngineOptions::memory_limit`](crate::EngineOptions::memory_limit) is not set.
pub const DEFAULT_MEMORY_SHARE: f64 = 0.5;

/// The folder under the data directory where operators spill.
pub(crate) const SPILL_DIR: &str = "tmp";

/// How many of the largest consumers an out-of-memory error names.
const TOP_CONSUMERS: usize = 5;

/// The memory a process may use: the machine's (`/proc/meminfo`), or its cgroup's limit when
/// that is lower; `None` when neither can be read.
pub fn machine_memory() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    });
    // cgroup v2, then v1 (whose "no limit" is a huge number, which `min` ignores).
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok());
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// The pool size an engine gets by default: [`DEFAULT_MEMORY_SHARE`] of [`machine_memory`]
/// (4 GiB when that cannot be read).
pub fn default_memory_limit() -> usize {
    let machine = machine_memory().unwrap_or(8 << 30);
    usize::try_from((machine as f64 * DEFAULT_MEMORY_SHARE) as u64).unwrap_or(usize::MAX)
}

/// The engine's runtime: one memory pool of `limit` bytes shared by every session, and spill
/// files under `data_dir/tmp` (the OS's temporary folder without a data directory).
pub(crate) fn engine_runtime(limit: usize, data_dir: Option<&Path>) -> Result<Arc<RuntimeEnv>> {
    let pool = TrackConsumersPool::new(
        GreedyMemoryPool::new(limit),
        NonZeroUsize::new(TOP_CONSUMERS).unwrap_or(NonZeroUsize::MIN),
    );
    let mode = match data_dir {
        Some(dir) => {
            let spill = dir.join(SPILL_DIR);
            std::fs::create_dir_all(&spill).map_err(|e| {
                data_dir_err!(
                    spill.clone(),
                    "cannot make the folder operators spill to: {e}"
                )
            })?;
            DiskManagerMode::Directories(vec![spill])
        }
        None => DiskManagerMode::OsTmpDirectory,
    };
    RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(pool))
        .with_disk_manager_builder(DiskManagerBuilder::default().with_mode(mode))
        .build_arc()
        .map_err(EngineError::from)
}

/// A session's runtime: the engine's, with its memory seen through the session's budget and
/// its spill files through its own disk manager (see [`SpillQuotas`](super::spill::SpillQuotas)).
pub(crate) fn session_runtime(
    engine: &RuntimeEnv,
    pool: Arc<SessionPool>,
    disk: Arc<datafusion::execution::disk_manager::DiskManager>,
) -> Arc<RuntimeEnv> {
    let mut runtime = engine.clone();
    runtime.memory_pool = pool;
    runtime.disk_manager = disk;
    Arc::new(runtime)
}

/// A budget several sessions share: all sessions of one user (a consumer group's
/// `USER_TEMP_DB_RAM_LIMIT`), or of one group (`GROUP_TEMP_DB_RAM_LIMIT`).
#[derive(Debug)]
pub(crate) struct SharedBudget {
    /// What it is, as errors name it: `user ANN`, `consumer group ETL`.
    what: String,
    /// The limit in bytes (`usize::MAX`: none).
    limit: AtomicUsize,
    used: AtomicUsize,
}

impl SharedBudget {
    /// Adds `bytes` unless that passes the limit; the limit and what is in use otherwise.
    fn try_add(&self, bytes: usize) -> std::result::Result<(), (usize, usize)> {
        let limit = self.limit.load(Ordering::Acquire);
        let mut used = self.used.load(Ordering::Acquire);
        loop {
            let wanted = used.saturating_add(bytes);
            if wanted > limit {
                return Err((limit, used));
            }
            match self
                .used
                .compare_exchange_weak(used, wanted, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(now) => used = now,
            }
        }
    }

    fn sub(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(bytes))
            });
    }
}

/// The shared budgets of an engine's users and consumer groups, by name.
#[derive(Debug, Default)]
pub(crate) struct SharedBudgets {
    budgets: Mutex<HashMap<String, Arc<SharedBudget>>>,
}

impl SharedBudgets {
    /// The budget named `what`, with its limit set to `limit` (`None`: none).
    pub(crate) fn get(&self, what: &str, limit: Option<u64>) -> Arc<SharedBudget> {
        let mut budgets = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
        let budget = Arc::clone(budgets.entry(what.to_string()).or_insert_with(|| {
            Arc::new(SharedBudget {
                what: what.to_string(),
                limit: AtomicUsize::new(usize::MAX),
                used: AtomicUsize::new(0),
            })
        }));
        let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        budget.limit.store(limit, Ordering::Release);
        budget
    }
}

/// One session's memory: every reservation counts against the session's budget
/// (`accelsql.memory_limit`), against the shared budgets of its user and consumer group, and
/// against the engine's pool; whichever is full first refuses it (53200).
#[derive(Debug)]
pub struct SessionPool {
    engine: Arc<dyn MemoryPool>,
    session: u64,
    /// The budget in bytes; `usize::MAX`: none (only the engine's pool bounds the session).
    budget: AtomicUsize,
    used: AtomicUsize,
    /// The user's and the group's shared budgets (changed only while nothing is reserved, so
    /// that every byte is given back to the budgets it was taken from).
    shared: RwLock<Vec<Arc<SharedBudget>>>,
}

impl SessionPool {
    /// Session `session`'s view of `engine` with no budget of its own yet.
    pub(crate) fn new(engine: Arc<dyn MemoryPool>, session: u64) -> Self {
        Self {
            engine,
            session,
            budget: AtomicUsize::new(usize::MAX),
            used: AtomicUsize::new(0),
            shared: RwLock::new(Vec::new()),
        }
    }

    /// Makes `shared` the budgets the session's reservations also count against, if the
    /// session holds nothing now (else the current ones stay until it does).
    pub(crate) fn set_shared(&self, shared: Vec<Arc<SharedBudget>>) {
        let mut current = self.shared.write().unwrap_or_else(|e| e.into_inner());
        if self.used() == 0 {
            *current = shared;
        }
    }

    fn shared(&self) -> Vec<Arc<SharedBudget>> {
        self.shared
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets the session's budget (`None`: none of its own).
    pub(crate) fn set_budget(&self, budget: Option<usize>) {
        self.budget
            .store(budget.unwrap_or(usize::MAX), Ordering::Release);
    }

    /// The session's budget, if it has one.
    pub fn budget(&self) -> Option<usize> {
        match self.budget.load(Ordering::Acquire) {
            usize::MAX => None,
            b => Some(b),
        }
    }

    /// What the session's statements hold now, in bytes.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// A reservation of `bytes` for `what`, held until it is dropped; 53200 if it does not fit.
    pub(crate) fn reserve(
        self: &Arc<Self>,
        what: &str,
        bytes: usize,
    ) -> DfResult<MemoryReservation> {
        let pool: Arc<dyn MemoryPool> = Arc::clone(self) as Arc<dyn MemoryPool>;
        let reservation = MemoryConsumer::new(what).register(&pool);
        reservation.try_grow(bytes)?;
        Ok(reservation)
    }
}

impl fmt::Display for SessionPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "session {}'s memory ({} in use",
            self.session,
            format_bytes(self.used() as u64)
        )?;
        match self.budget() {
            Some(b) => write!(f, " of {})", format_bytes(b as u64)),
            None => write!(f, ", no budget of its own)"),
        }
    }
}

impl MemoryPool for SessionPool {
    fn name(&self) -> &str {
        "accelsql session"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.engine.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.engine.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        let shared = self.shared.read().unwrap_or_else(|e| e.into_inner());
        for budget in shared.iter() {
            budget.used.fetch_add(additional, Ordering::AcqRel);
        }
        self.used.fetch_add(additional, Ordering::AcqRel);
        self.engine.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        let shared = self.shared.read().unwrap_or_else(|e| e.into_inner());
        for budget in shared.iter() {
            budget.sub(shrink);
        }
        self.used.fetch_sub(shrink, Ordering::AcqRel);
        self.engine.shrink(reservation, shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> DfResult<()> {
        let budget = self.budget.load(Ordering::Acquire);
        let mut used = self.used.load(Ordering::Acquire);
        loop {
            let wanted = used.saturating_add(additional);
            if wanted > budget {
                return Err(resources_datafusion_err!(
                    "{} needs {} more, which is past session {}'s memory budget of {} ({} in \
                     use); lower the statement's needs or raise accelsql.memory_limit",
                    reservation.consumer().name(),
                    format_bytes(additional as u64),
                    self.session,
                    format_bytes(budget as u64),
                    format_bytes(used as u64)
                ));
            }
            match self
                .used
                .compare_exchange_weak(used, wanted, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => used = now,
            }
        }
        let shared = self.shared();
        for (i, budget) in shared.iter().enumerate() {
            if let Err((limit, in_use)) = budget.try_add(additional) {
                for taken in &shared[..i] {
                    taken.sub(additional);
                }
                self.used.fetch_sub(additional, Ordering::AcqRel);
                return Err(resources_datafusion_err!(
                    "{} needs {} more, which is past the memory limit of {} ({} for all its \
                     sessions, {} in use; its consumer group's TEMP_DB_RAM_LIMIT)",
                    reservation.consumer().name(),
                    format_bytes(additional as u64),
                    budget.what,
                    format_bytes(limit as u64),
                    format_bytes(in_use as u64)
                ));
            }
        }
        if let Err(e) = self.engine.try_grow(reservation, additional) {
            for budget in &shared {
                budget.sub(additional);
            }
            self.used.fetch_sub(additional, Ordering::AcqRel);
            return Err(e);
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.used()
    }

    fn memory_limit(&self) -> MemoryLimit {
        let engine = match self.engine.memory_limit() {
            MemoryLimit::Finite(n) => n,
            _ => usize::MAX,
        };
        match self.budget.load(Ordering::Acquire).min(engine) {
            usize::MAX => MemoryLimit::Infinite,
            n => MemoryLimit::Finite(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(engine_limit: usize) -> (Arc<dyn MemoryPool>, Arc<SessionPool>, Arc<SessionPool>) {
        let engine: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(engine_limit));
        let a = Arc::new(SessionPool::new(Arc::clone(&engine), 1));
        let b = Arc::new(SessionPool::new(Arc::clone(&engine), 2));
        (engine, a, b)
    }

    #[test]
    fn a_session_budget_refuses_past_it_and_frees_on_drop() {
        let (engine, a, _) = pools(1000);
        a.set_budget(Some(100));
        let held = a.reserve("sort", 80).unwrap_or_else(|e| panic!("{e}"));
        let refused = a.reserve("join", 30).map(|_| ()).unwrap_err();
        assert!(
            matches!(
                refused,
                datafusion::error::DataFusionError::ResourcesExhausted(_)
            ),
            "{refused}"
        );
        assert!(
            refused.to_string().contains("session 1's memory budget"),
            "{refused}"
        );
        assert_eq!((a.used(), engine.reserved()), (80, 80));
        drop(held);
        assert_eq!((a.used(), engine.reserved()), (0, 0));
        assert!(a.reserve("join", 100).is_ok());
    }

    #[test]
    fn the_engine_pool_bounds_all_sessions_together() {
        let (engine, a, b) = pools(100);
        let _a = a.reserve("a", 70).unwrap_or_else(|e| panic!("{e}"));
        // b has no budget of its own, but the engine's pool is nearly full.
        assert!(b.reserve("b", 40).is_err());
        assert_eq!(b.used(), 0, "a refused reservation leaves nothing counted");
        assert_eq!(engine.reserved(), 70);
        assert!(b.reserve("b", 30).is_ok());
    }

    #[test]
    fn the_default_limit_is_a_share_of_the_machine() {
        let limit = default_memory_limit();
        assert!(limit > 0);
        if let Some(machine) = machine_memory() {
            assert!((limit as u64) <= machine);
        }
    }
}
