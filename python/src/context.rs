//! `UdfContext`: what a registered Python callable learns about the instance running it (passed
//! as its `ctx` keyword argument when it declares one).

use accelsql_engine::InstanceContext;
use pyo3::prelude::*;

/// The instance a UDF call runs on: its number, the device it is pinned to (GPU placement) or
/// none (CPU), and the batch size.
#[pyclass(module = "accelsql", frozen, get_all, skip_from_py_object)]
#[derive(Debug, Clone)]
pub(crate) struct UdfContext {
    /// Instance number within the call, `0..instances`.
    instance_id: usize,
    /// Node number (`iproc()`); 0 on a single node.
    node_id: usize,
    /// The statement's id.
    statement_id: u64,
    /// Rows in this batch (the length the result must have).
    num_rows: usize,
    /// `'GPU'` when the instance is pinned to a device, else `'CPU'`.
    placement: &'static str,
    /// The pinned device's index, or None on the CPU.
    device_index: Option<u32>,
    /// The pinned device's UUID, or None on the CPU.
    device_uuid: Option<String>,
    /// The pinned device's product name, or None on the CPU.
    device_name: Option<String>,
    /// Whether the pinned device is simulated (no CUDA behind it).
    simulated: bool,
    /// What a script worker of this instance gets as `CUDA_VISIBLE_DEVICES`: the device's UUID
    /// (its index for a simulated one), or `''` on the CPU.
    cuda_visible_devices: String,
}

impl UdfContext {
    /// The context of `instance` for a batch of `num_rows`.
    pub(crate) fn new(instance: &InstanceContext, num_rows: usize) -> Self {
        let device = instance.device.as_ref();
        Self {
            instance_id: instance.instance_id,
            node_id: instance.node_id,
            statement_id: instance.statement_id,
            num_rows,
            placement: if device.is_some() { "GPU" } else { "CPU" },
            device_index: device.map(|d| d.index),
            device_uuid: device.map(|d| d.uuid.clone()),
            device_name: device.map(|d| d.name.clone()),
            simulated: device.is_some_and(|d| d.simulated),
            cuda_visible_devices: match device {
                Some(d) if d.simulated => d.index.to_string(),
                Some(d) => d.uuid.clone(),
                None => String::new(),
            },
        }
    }
}

#[pymethods]
impl UdfContext {
    fn __repr__(&self) -> String {
        match (&self.device_index, &self.device_uuid) {
            (Some(index), Some(uuid)) => format!(
                "UdfContext(instance_id={}, placement='GPU', device_index={index}, device_uuid='{uuid}', simulated={}, num_rows={})",
                self.instance_id,
                if self.simulated { "True" } else { "False" },
                self.num_rows
            ),
            _ => format!(
                "UdfContext(instance_id={}, placement='CPU', num_rows={})",
                self.instance_id, self.num_rows
            ),
        }
    }
}
