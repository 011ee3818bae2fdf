//! What one statement shares among its UDF calls: its id, its placements, and the devices of its
//! lease once it has one.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use accelsql_udf_runtime::AcceleratorRequest;

use crate::core::calls::Placement;
use crate::core::error::EngineError;
use crate::core::options::OptionalGpuWhenBusy;
use crate::udf::call::{LeaseDevices, PlacedCall};

/// Why the placement rule failed a statement (the two forms of error 22069).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlacementFailure {
    /// No GPU is present, and `udf` requires one.
    NoGpu {
        /// The UDF.
        udf: String,
    },
    /// `udf` requires the GPUs, and the session's user lacks `USE GPU`.
    NoGpuPrivilege {
        /// The UDF.
        udf: String,
    },
    /// Another required call in the block has the GPUs.
    Taken {
        /// What to say.
        detail: String,
    },
}

impl From<PlacementFailure> for EngineError {
    fn from(f: PlacementFailure) -> Self {
        match f {
            PlacementFailure::NoGpu { udf } => Self::NoGpuPresent { udf },
            PlacementFailure::NoGpuPrivilege { udf } => Self::InsufficientPrivileges {
                what: format!(
                    "UDF {udf} requires the GPUs, which need the USE GPU privilege (GRANT USE \
                     GPU TO <user or role>)"
                ),
            },
            PlacementFailure::Taken { detail } => Self::AcceleratorRequestFailed {
                requested: AcceleratorRequest::Required,
                detail,
            },
        }
    }
}

/// Per-statement state shared by the placement rule, the UDF calls and the result stream.
#[derive(Debug)]
pub(crate) struct StatementScope {
    pub(crate) id: u64,
    /// The number of the session that runs it.
    pub(crate) session: u64,
    pub(crate) devices_present: usize,
    pub(crate) node_id: usize,
    /// The engine that plans the statement (`EngineInner::id`), which its calls carry.
    pub(crate) client: u64,
    /// `SET accelsql.udf_timeout`: longest run of one UDF instance.
    pub(crate) run_timeout: Option<Duration>,
    /// The session's memory budget: the most one script worker of the statement may hold.
    pub(crate) memory_limit: Option<u64>,
    /// Worker processes of the statement's UDF instances (killed when it is cancelled).
    pub(crate) processes: accelsql_udf_runtime::ProcessRegistry,
    pub(crate) lease_devices: Arc<LeaseDevices>,
    pub(crate) calls: Mutex<Vec<Arc<PlacedCall>>>,
    pub(crate) lease_wait: Mutex<Option<Duration>>,
    /// The placement rule's failure (22069), kept for EXPLAIN, which reports analyzer errors as
    /// plan text instead of failing.
    pub(crate) placement_failure: Mutex<Option<PlacementFailure>>,
    /// Why the statement's GPU calls (all optional) ran on the CPU after all: the lease was busy
    /// (`optional_gpu_when_busy = 'cpu'`), or waiting for it timed out.
    pub(crate) fell_back: OnceLock<String>,
    /// `SET accelsql.optional_gpu_when_busy`: whether GPU-placed optional calls wait for a busy
    /// lease.
    pub(crate) optional_when_busy: OptionalGpuWhenBusy,
    /// The session's user (`exa.meta.current_user`; `None`: SYS).
    pub(crate) user: Option<String>,
    /// How the statement waits for the GPU lease (its user's consumer group).
    pub(crate) gpu_class: Option<crate::core::groups::GpuClass>,
    /// The engine's bound on holding the GPU lease, carried to a cluster's nodes.
    pub(crate) client_hold: Option<std::time::Duration>,
    /// Whether the session holds `USE GPU`: without it a required GPU call fails (42501) and an
    /// optional one runs on the CPU.
    pub(crate) gpu_allowed: bool,
    /// The statement's plan runs in other processes (a cluster's executors), whose nodes lease
    /// their own GPUs: this process takes no lease for it.
    pub(crate) remote: std::sync::atomic::AtomicBool,
}

impl StatementScope {
    pub(crate) fn new(id: u64, devices_present: usize) -> Self {
        Self {
            id,
            session: 0,
            devices_present,
            node_id: 0,
            client: 0,
            run_timeout: None,
            memory_limit: None,
            processes: Default::default(),
            lease_devices: Arc::new(OnceLock::new()),
            calls: Mutex::new(Vec::new()),
            lease_wait: Mutex::new(None),
            placement_failure: Mutex::new(None),
            fell_back: OnceLock::new(),
            optional_when_busy: OptionalGpuWhenBusy::default(),
            remote: std::sync::atomic::AtomicBool::new(false),
            user: None,
            gpu_class: None,
            client_hold: None,
            gpu_allowed: true,
        }
    }

    /// Records why placement failed.
    pub(crate) fn placement_failed(&self, failure: PlacementFailure) {
        *self
            .placement_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(failure);
    }

    /// The placement failure as an error, if placement failed.
    pub(crate) fn placement_failure(&self) -> Option<EngineError> {
        self.placement_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .map(EngineError::from)
    }

    pub(crate) fn calls(&self) -> Vec<Arc<PlacedCall>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the statement's plan runs in other processes (see [`Self::remote`]).
    pub(crate) fn is_remote(&self) -> bool {
        self.remote.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether any call of the statement was placed on the GPUs (so it needs the lease).
    pub(crate) fn needs_lease(&self) -> bool {
        !self.is_remote()
            && self
                .calls()
                .iter()
                .any(|c| c.decision.placement == Placement::Gpu)
    }

    /// Whether a GPU-placed call is required (a lease timeout then fails the statement; with only
    /// optional GPU calls it runs them on the CPU).
    pub(crate) fn has_required_gpu_call(&self) -> bool {
        self.calls().iter().any(|c| {
            c.decision.placement == Placement::Gpu
                && c.decision.request == AcceleratorRequest::Required
        })
    }

    /// Whether the statement waits for the lease: a GPU-placed call is required, or its GPU calls
    /// are optional and `accelsql.optional_gpu_when_busy` is `wait` (the default, as in Exasol).
    /// Otherwise it takes the lease only if it is free, else runs its GPU calls on the CPU.
    pub(crate) fn must_wait_for_lease(&self) -> bool {
        !self.is_remote()
            && self.calls().iter().any(|c| {
                c.decision.placement == Placement::Gpu
                    && (c.decision.request == AcceleratorRequest::Required
                        || self.optional_when_busy == OptionalGpuWhenBusy::Wait)
            })
    }
}
