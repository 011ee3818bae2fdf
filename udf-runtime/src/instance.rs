//! UDF instances: the context an implementation runs in, and the pool that hands out instance
//! slots and pins each GPU instance to one device of the statement's lease.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use accelsql_gpu_scheduler::DeviceInfo;

/// Reads the device memory a process uses on a device (NVML's per-process figures), to watch
/// script workers against their declaration.
pub trait DeviceMemoryProbe: Send + Sync + fmt::Debug {
    /// Bytes process `pid` uses on device `uuid` now; `None` where that cannot be told.
    fn used(&self, uuid: &str, pid: u32) -> Option<u64>;
}

/// What a GPU instance declared it needs of its device (`%perInstanceRequiredAcceleratorMemory`),
/// which its statement reserved there, and how to watch a worker process against it.
#[derive(Debug, Clone)]
pub struct DeviceMemoryLimit {
    /// The declaration, in bytes per instance.
    pub bytes: u64,
    /// Reads a worker's device memory; `None`: nothing can (the declaration is then trusted).
    pub probe: Option<Arc<dyn DeviceMemoryProbe>>,
}

impl PartialEq for DeviceMemoryLimit {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

/// What a UDF implementation knows about the instance running it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InstanceContext {
    /// Instance number within this call, `0..instances`.
    pub instance_id: usize,
    /// Number of this node (`iproc()`); 0 on a single node.
    pub node_id: usize,
    /// The GPU this instance is pinned to, or `None` when it runs on the CPU.
    pub device: Option<DeviceInfo>,
    /// The statement the call belongs to (0 outside a statement).
    pub statement_id: u64,
    /// Longest one run of this instance may take (`SET accelsql.udf_timeout`), if bounded.
    pub run_timeout: Option<Duration>,
    /// The most memory one worker process of this instance may hold, in bytes (the session's
    /// memory budget), if bounded.
    pub memory_limit: Option<u64>,
    /// The user running the statement (`exa.meta.current_user`); `None`: SYS.
    pub user: Option<String>,
    /// Under memory sharing, the device memory this GPU instance declared and its statement
    /// reserved: its GPU runs stay within it, and a script worker past it is stopped (53U26).
    pub device_memory: Option<DeviceMemoryLimit>,
    /// State the implementation keeps for this instance across the batches and groups of its
    /// call (e.g. a script's worker process); dropped when the statement ends.
    pub storage: InstanceStorage,
    /// Where to record worker processes, so that cancelling the statement kills them.
    pub processes: ProcessRegistry,
}

/// Per-instance state of one call: empty until an implementation puts something in it, dropped
/// with the call (when its statement ends, fails or is cancelled).
#[derive(Clone, Default)]
pub struct InstanceStorage(Arc<Mutex<Option<Box<dyn Any + Send>>>>);

impl InstanceStorage {
    /// The slot, locked: `None` until something is stored.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Option<Box<dyn Any + Send>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for InstanceStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.lock().is_some() {
            "InstanceStorage(set)"
        } else {
            "InstanceStorage(empty)"
        })
    }
}

impl PartialEq for InstanceStorage {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// What an instance pool knows of its statement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatementInfo {
    /// The statement's id.
    pub statement_id: u64,
    /// `SET accelsql.udf_timeout`, if set.
    pub run_timeout: Option<Duration>,
    /// The session's memory budget (`accelsql.memory_limit`), which bounds each worker process
    /// of the statement's instances, if set.
    pub memory_limit: Option<u64>,
    /// The user running the statement (`exa.meta.current_user`); `None`: SYS.
    pub user: Option<String>,
    /// The worker processes of the statement's instances, killed if it is cancelled.
    pub processes: ProcessRegistry,
}

/// The process groups a statement's UDF instances started (script workers), so that cancelling
/// the statement can kill them even while a run is in progress, and the storages that hold them,
/// so that the statement can finish them (a script's `cleanup()`) when its plan is done.
#[derive(Debug, Clone, Default)]
pub struct ProcessRegistry(Arc<Mutex<Registered>>);

#[derive(Debug, Default)]
struct Registered {
    pids: Vec<u32>,
    storages: Vec<InstanceStorage>,
    /// Set by [`ProcessRegistry::kill_all`]: the statement is over, and a process recorded
    /// later (a worker that was still starting) is killed as it is recorded.
    killed: bool,
}

/// Sends SIGKILL to process group `pid` (a group already gone only yields ESRCH).
fn kill_group(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) with a negative pid signals that process group; it touches no memory
        // of ours, and a stale group id only yields ESRCH.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

impl PartialEq for ProcessRegistry {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl ProcessRegistry {
    /// Records a process that leads its own process group; after [`kill_all`](Self::kill_all),
    /// kills it instead (its statement was stopped while it started).
    pub fn register(&self, pid: u32) {
        let mut registered = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if registered.killed {
            drop(registered);
            kill_group(pid);
        } else {
            registered.pids.push(pid);
        }
    }

    /// Records an instance storage that holds a worker to finish when the statement is done.
    pub fn register_storage(&self, storage: InstanceStorage) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .storages
            .push(storage);
    }

    /// The storages recorded so far, taken out of the registry.
    pub fn take_storages(&self) -> Vec<InstanceStorage> {
        std::mem::take(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()).storages)
    }

    /// Sends SIGKILL to every recorded process group (a group already gone is skipped), and
    /// to every one recorded from now on; the owners of the processes still reap them.
    pub fn kill_all(&self) {
        let pids = {
            let mut registered = self.0.lock().unwrap_or_else(|e| e.into_inner());
            registered.killed = true;
            std::mem::take(&mut registered.pids)
        };
        for pid in pids {
            kill_group(pid);
        }
    }
}

/// The free slots of a pool, and how many callers wait for one.
#[derive(Debug)]
struct FreeSlots {
    ids: Vec<usize>,
    waiting: usize,
}

/// A fixed set of instance slots for one UDF call. Each invocation borrows a free slot for its
/// duration, so no more than `size` instances run at once; slot `i` of a GPU call is pinned to
/// device `i mod n` of the lease (four instances on two GPUs see devices 0, 1, 0, 1).
#[derive(Debug)]
pub struct InstancePool {
    free: Mutex<FreeSlots>,
    returned: Condvar,
    devices: Vec<DeviceInfo>,
    node_id: usize,
    statement: StatementInfo,
    storage: Vec<InstanceStorage>,
    device_memory: Option<DeviceMemoryLimit>,
}

impl InstancePool {
    /// A pool of `size` (at least 1) slots, pinned round-robin to `devices` (empty: CPU).
    pub fn new(size: usize, devices: Vec<DeviceInfo>, node_id: usize) -> Self {
        Self::for_statement(size, devices, node_id, StatementInfo::default())
    }

    /// Like [`InstancePool::new`], for a call of `statement`.
    pub fn for_statement(
        size: usize,
        devices: Vec<DeviceInfo>,
        node_id: usize,
        statement: StatementInfo,
    ) -> Self {
        let size = size.max(1);
        Self {
            free: Mutex::new(FreeSlots {
                ids: (0..size).rev().collect(),
                waiting: 0,
            }),
            returned: Condvar::new(),
            devices,
            node_id,
            statement,
            storage: (0..size).map(|_| InstanceStorage::default()).collect(),
            device_memory: None,
        }
    }

    /// Gives each GPU instance of the pool `limit`: the device memory it declared and its
    /// statement reserved (see [`InstanceContext::device_memory`]).
    pub fn with_device_memory(mut self, limit: Option<DeviceMemoryLimit>) -> Self {
        self.device_memory = limit;
        self
    }

    /// The number of slots.
    pub fn size(&self) -> usize {
        self.storage.len()
    }

    /// Borrows slot `id % size`, waiting while it is busy: a caller that works through one
    /// partition of the input keeps to one instance (so partitions spread over the instances,
    /// and over their devices, however the runs interleave).
    pub fn checkout_slot(&self, id: usize) -> InstanceSlot<'_> {
        let id = id % self.size().max(1);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(at) = free.ids.iter().position(|&f| f == id) {
                free.ids.remove(at);
                return self.slot(id);
            }
            free = self.wait(free);
        }
    }

    fn slot(&self, id: usize) -> InstanceSlot<'_> {
        let device =
            (!self.devices.is_empty()).then(|| self.devices[id % self.devices.len()].clone());
        let device_memory = device.as_ref().and(self.device_memory.clone());
        InstanceSlot {
            pool: self,
            context: InstanceContext {
                instance_id: id,
                node_id: self.node_id,
                device,
                statement_id: self.statement.statement_id,
                run_timeout: self.statement.run_timeout,
                memory_limit: self.statement.memory_limit,
                user: self.statement.user.clone(),
                device_memory,
                storage: self.storage.get(id).cloned().unwrap_or_default(),
                processes: self.statement.processes.clone(),
            },
        }
    }

    /// Borrows a slot, waiting while all are busy (every busy slot is held by a running
    /// invocation, so the wait is bounded by one invocation).
    pub fn checkout(&self) -> InstanceSlot<'_> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(id) = free.ids.pop() {
                return self.slot(id);
            }
            free = self.wait(free);
        }
    }

    /// Waits for a slot to come back, counted as a waiter so that returns wake it.
    fn wait<'a>(&self, mut free: MutexGuard<'a, FreeSlots>) -> MutexGuard<'a, FreeSlots> {
        free.waiting += 1;
        let mut free = self.returned.wait(free).unwrap_or_else(|e| e.into_inner());
        free.waiting -= 1;
        free
    }
}

/// A borrowed instance slot; returned to its pool when dropped.
#[derive(Debug)]
pub struct InstanceSlot<'a> {
    pool: &'a InstancePool,
    context: InstanceContext,
}

impl InstanceSlot<'_> {
    /// The instance's context.
    pub fn context(&self) -> &InstanceContext {
        &self.context
    }
}

impl Drop for InstanceSlot<'_> {
    fn drop(&mut self) {
        let mut free = self.pool.free.lock().unwrap_or_else(|e| e.into_inner());
        free.ids.push(self.context.instance_id);
        let waiting = free.waiting > 0;
        drop(free);
        // Waiters may want different slots: wake them all to look. Without waiters, no wake-up
        // (a notify is a system call, and this runs once per batch).
        if waiting {
            self.pool.returned.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use accelsql_gpu_scheduler::Inventory;

    use super::*;

    #[test]
    fn four_instances_on_two_gpus_are_pinned_round_robin() {
        let devices = Inventory::simulated(2).devices().unwrap();
        let pool = InstancePool::new(4, devices.clone(), 0);
        let slots: Vec<_> = (0..4).map(|_| pool.checkout()).collect();
        let pinned: Vec<(usize, u32)> = slots
            .iter()
            .map(|s| {
                (
                    s.context().instance_id,
                    s.context().device.as_ref().unwrap().index,
                )
            })
            .collect();
        assert_eq!(pinned, vec![(0, 0), (1, 1), (2, 0), (3, 1)]);
    }

    #[test]
    fn a_partition_keeps_to_its_slot() {
        let devices = Inventory::simulated(2).devices().unwrap();
        let pool = std::sync::Arc::new(InstancePool::new(2, devices, 0));
        let first = pool.checkout_slot(3);
        assert_eq!(first.context().instance_id, 1);
        assert_eq!(first.context().device.as_ref().unwrap().index, 1);
        let p2 = std::sync::Arc::clone(&pool);
        let waiter = std::thread::spawn(move || p2.checkout_slot(1).context().instance_id);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiter.is_finished());
        assert_eq!(pool.checkout_slot(0).context().instance_id, 0);
        drop(first);
        assert_eq!(waiter.join().unwrap(), 1);
    }

    #[test]
    fn cpu_instances_have_no_device_and_slots_are_reused() {
        let pool = InstancePool::new(1, Vec::new(), 0);
        let first = pool.checkout();
        assert_eq!(first.context().device, None);
        drop(first);
        assert_eq!(pool.checkout().context().instance_id, 0);
    }

    #[test]
    fn a_full_pool_waits_for_a_slot() {
        let pool = std::sync::Arc::new(InstancePool::new(1, Vec::new(), 0));
        let held = pool.checkout();
        let p2 = std::sync::Arc::clone(&pool);
        let waiter = std::thread::spawn(move || p2.checkout().context().instance_id);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiter.is_finished());
        drop(held);
        assert_eq!(waiter.join().unwrap(), 0);
    }
}
