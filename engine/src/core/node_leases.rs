//! The node leases of the statements whose tasks run on this node (a cluster's executor): every
//! task of one statement here shares one lease of the node's GPUs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use accelsql_gpu_scheduler::Lease;

use super::lease_grant::LeaseGrant;

/// One statement's lease on this node, shared by its tasks here, with what it gives the calls
/// of the task that took it (under memory sharing, their instances' devices).
#[derive(Debug, Default)]
pub(crate) struct SharedLease {
    pub(crate) lease: tokio::sync::OnceCell<(Lease, LeaseGrant)>,
}

/// The statements' leases on this node, by statement key; an entry lives while a task holds it.
#[derive(Debug, Default)]
pub(crate) struct NodeLeases(Mutex<HashMap<String, Weak<SharedLease>>>);

impl NodeLeases {
    /// The lease of `key`'s statement, shared with its other tasks here (new if none holds one).
    pub(crate) fn share(&self, key: &str) -> Arc<SharedLease> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = map.get(key).and_then(Weak::upgrade) {
            return shared;
        }
        map.retain(|_, lease| lease.strong_count() > 0);
        let shared = Arc::new(SharedLease::default());
        map.insert(key.to_string(), Arc::downgrade(&shared));
        shared
    }
}
