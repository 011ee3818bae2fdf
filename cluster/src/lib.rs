//! accelsql on Apache DataFusion Ballista: a scheduler and executors that know accelsql's
//! functions, and a client that runs a session's queries on them.
//!
//! A cluster is Ballista's — one scheduler, N executors — started from accelsql's own binary
//! (`accelsql cluster scheduler|executor|local`), because Ballista's stock binaries cannot know
//! accelsql's UDFs. Each executor is one accelsql node: its own [`Engine`] with node number K of
//! N (`iproc()`, `nproc()`), its own devices and lease queue. A client session plans each query
//! itself, the placement rule included, and submits the finished physical plan to the scheduler
//! ([`ClusterClient`], an [`accelsql_engine::PlanDistributor`]); Ballista splits it into stages
//! and runs their tasks on the executors, which resolve every function by name in their own
//! registry — so `iproc()` answers the number of the node that processes the row.
//!
//! [`Engine`]: accelsql_engine::Engine

mod affinity;
mod client;
mod codec;
mod error;
mod executor;
mod guard;
mod info;
mod local;
mod metrics;
mod node;
mod scheduler;
mod security;
mod stage;
mod submit;
mod yielding;

pub use client::{ClusterClient, ClusterQueryExec, NODE_LOST};
pub use error::{ClusterError, Result};
pub use executor::{ExecutorOptions, run_executor};
pub use guard::EventSink;
pub use local::{LocalCluster, LocalClusterOptions, READY_PREFIX};
pub use node::{ConfigureEngine, NodeOptions};
pub use scheduler::{SchedulerHandle, SchedulerOptions, start_scheduler};
pub use security::ClusterAuth;
