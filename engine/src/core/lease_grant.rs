//! What a statement's node lease gave its GPU calls ([`LeaseGrant`]): the devices, and under
//! memory sharing each call's instances' devices and reservation.

use std::collections::HashMap;

use accelsql_gpu_scheduler::{DeviceInfo, Lease};

/// What a lease gave a statement's GPU calls: its devices and, under memory sharing, each
/// call's instances' devices and reservation.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseGrant {
    /// The devices the lease uses: every device of the node for a whole-device lease, those
    /// its instances were placed on for a memory one; none without a lease.
    pub(crate) devices: Vec<DeviceInfo>,
    /// Under memory sharing, by call id: where each instance runs and what it reserved.
    pub(crate) calls: HashMap<usize, CallGrant>,
}

/// One call's share of a memory lease.
#[derive(Debug, Clone)]
pub(crate) struct CallGrant {
    /// The device of each instance, in instance order.
    pub(crate) instance_devices: Vec<DeviceInfo>,
    /// What each instance reserved on its device.
    pub(crate) bytes: u64,
}

/// What one GPU-placed call asks of a memory lease: `instances` instances of `bytes` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallDemand {
    pub(crate) call_id: usize,
    pub(crate) instances: usize,
    pub(crate) bytes: u64,
}

impl LeaseGrant {
    /// Every device, no reservation (a whole-device lease; empty: none).
    pub(crate) fn whole(devices: Vec<DeviceInfo>) -> Self {
        Self {
            devices,
            ..Self::default()
        }
    }

    /// What `lease`, requested for `layout` (the calls' instances in the order of the
    /// request's memory demand), gives each call.
    pub(crate) fn of_lease(lease: &Lease, layout: &[CallDemand]) -> Self {
        if lease.is_whole() {
            return Self::whole(lease.devices());
        }
        let mut at = lease.instance_devices().into_iter();
        let calls = layout
            .iter()
            .map(|c| {
                let instance_devices: Vec<DeviceInfo> = at.by_ref().take(c.instances).collect();
                (
                    c.call_id,
                    CallGrant {
                        instance_devices,
                        bytes: c.bytes,
                    },
                )
            })
            .collect();
        Self {
            devices: lease.devices(),
            calls,
        }
    }

    /// The devices call `call_id`'s instances are pinned to (instance `i` to entry `i mod n`)
    /// and what each reserved, if the lease reserved memory for it.
    pub(crate) fn for_call(&self, call_id: usize) -> (Vec<DeviceInfo>, Option<u64>) {
        match self.calls.get(&call_id) {
            Some(c) if !c.instance_devices.is_empty() => {
                (c.instance_devices.clone(), Some(c.bytes))
            }
            _ => (self.devices.clone(), None),
        }
    }

    /// NVML indices of the devices call `call_id`'s instances run on, one per instance slot.
    pub(crate) fn call_device_indices(&self, call_id: usize) -> Vec<u32> {
        self.for_call(call_id).0.iter().map(|d| d.index).collect()
    }
}
