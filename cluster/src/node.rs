//! One accelsql node of a cluster: the [`Engine`] an executor (or the scheduler) runs with, and
//! the function registry Ballista resolves a plan's functions in.

use std::sync::Arc;

use accelsql_engine::{Engine, EngineOptions, NodeIdentity, SchedulerConfig};
use ballista_core::registry::BallistaFunctionRegistry;
use datafusion::execution::SessionState;

use crate::Result;
use crate::error::config_err;

/// Adds an embedding application's own Rust UDFs (or other setup) to a node's engine; run on
/// every node, so that a plan calling them runs anywhere.
pub type ConfigureEngine = Arc<dyn Fn(&Engine) -> accelsql_engine::Result<()> + Send + Sync>;

/// What makes one node: its number, the node count and its devices.
#[derive(Clone)]
pub struct NodeOptions {
    /// This node's number, `0..count` (`iproc()`).
    pub id: usize,
    /// The number of nodes (`nproc()`).
    pub count: usize,
    /// The node's devices (NVML, simulated, `CUDA_VISIBLE_DEVICES`), lock directory and lease
    /// timeout, as for a single-process engine.
    pub devices: SchedulerConfig,
    /// Registers the embedding application's UDFs on the node's engine.
    pub configure: Option<ConfigureEngine>,
    /// The longest one of a statement's tasks may hold the node's GPU lease; past it the task
    /// fails with 57G03 and the lease goes to the next in line. `None`: no limit.
    pub max_lease_hold: Option<std::time::Duration>,
}

impl std::fmt::Debug for NodeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeOptions")
            .field("id", &self.id)
            .field("count", &self.count)
            .field("devices", &self.devices)
            .field("configure", &self.configure.is_some())
            .field("max_lease_hold", &self.max_lease_hold)
            .finish()
    }
}

impl NodeOptions {
    /// Node `id` of `count`, with the devices the environment gives (`ACCELSQL_SIMULATED_GPUS`,
    /// `CUDA_VISIBLE_DEVICES`, NVML).
    pub fn new(id: usize, count: usize, devices: SchedulerConfig) -> Self {
        Self {
            id,
            count,
            devices,
            configure: None,
            max_lease_hold: None,
        }
    }

    /// The node's engine.
    pub(crate) fn engine(&self) -> Result<Engine> {
        if self.count == 0 || self.id >= self.count {
            return config_err!(
                "node {} of {}: the node number must be below the node count (at least 1)",
                self.id,
                self.count
            );
        }
        let engine = Engine::with_options(EngineOptions {
            scheduler: self.devices.clone(),
            node: NodeIdentity {
                id: self.id,
                count: self.count,
            },
            max_lease_hold: self.max_lease_hold,
            ..EngineOptions::default()
        })?;
        if let Some(configure) = &self.configure {
            configure(&engine)?;
        }
        Ok(engine)
    }
}

/// The state of a fresh session of `engine`: DataFusion's functions and accelsql's, with this
/// node's `iproc()`/`nproc()`.
pub(crate) fn session_state(engine: &Engine) -> SessionState {
    engine.session().context().state()
}

/// The functions a plan may call on this node, by name.
pub(crate) fn function_registry(engine: &Engine) -> BallistaFunctionRegistry {
    (&session_state(engine)).into()
}
