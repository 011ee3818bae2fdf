//! What the engine records of its UDF calls: where each call ran and why ([`Placement`],
//! [`PlacementDecision`]), and one [`UdfCallRecord`] per finished call, as `accelsql.udf_calls`
//! and EXPLAIN ANALYZE show them — on a cluster's node, merged over the tasks of one job.

use std::fmt;
use std::time::Duration;

use accelsql_udf_runtime::AcceleratorRequest;

/// Where a UDF call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placement {
    /// On the statement's GPUs (instances pinned round-robin to the lease's devices).
    Gpu,
    /// On the CPU.
    Cpu,
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Gpu => "GPU",
            Self::Cpu => "CPU",
        })
    }
}

/// The rule's decision for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementDecision {
    /// Number of the call in its statement, in discovery order (1-based).
    pub call_id: usize,
    /// Number of the query block the call is in (1-based; 1 is the outermost select).
    pub block: usize,
    /// The UDF.
    pub udf: String,
    /// Its annotation.
    pub request: AcceleratorRequest,
    /// Where it runs.
    pub placement: Placement,
    /// Why, in words.
    pub reason: String,
}

impl fmt::Display for PlacementDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "call {} {}() in block {}: {} ({}; requested {})",
            self.call_id, self.udf, self.block, self.placement, self.reason, self.request
        )
    }
}

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
    pub(crate) run: Option<NodeRun>,
    /// Under `gpu_sharing = 'memory'`: the device memory each GPU instance reserved (its
    /// `%perInstanceRequiredAcceleratorMemory`); `None` where the call had whole devices or
    /// ran on the CPU.
    pub reserved_bytes: Option<u64>,
}

impl UdfCallRecord {
    /// The call's placement and the reason for it as metric labels, from a small fixed set
    /// (the decision's words are free text): placement `gpu`, `cpu`, or `fallback` (placed on
    /// the GPU, some batches ran on the CPU); reason `required`, `preferred`, `not_requested`,
    /// `no_privilege`, `no_gpu`, `gpu_taken`, and for a fallback `out_of_memory` or
    /// `device_failure`.
    pub fn metric_labels(&self) -> (&'static str, &'static str) {
        let d = &self.decision;
        match d.placement {
            Placement::Gpu if self.cpu_fallback_batches > 0 => {
                let memory = self
                    .fallback_reason
                    .as_deref()
                    .is_some_and(|r| r.to_ascii_lowercase().contains("memory"));
                (
                    "fallback",
                    if memory {
                        "out_of_memory"
                    } else {
                        "device_failure"
                    },
                )
            }
            Placement::Gpu if d.request == AcceleratorRequest::Required => ("gpu", "required"),
            Placement::Gpu => ("gpu", "preferred"),
            Placement::Cpu if d.request == AcceleratorRequest::None => ("cpu", "not_requested"),
            Placement::Cpu if d.reason.contains("privilege") => ("cpu", "no_privilege"),
            Placement::Cpu if d.reason.starts_with("GPUs taken") => ("cpu", "gpu_taken"),
            Placement::Cpu => ("cpu", "no_gpu"),
        }
    }
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
        if let Some(bytes) = self.reserved_bytes {
            write!(
                f,
                ", reserved {} of device memory per instance",
                accelsql_gpu_scheduler::units::format_bytes(bytes)
            )?;
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

/// Where a call recorded on a cluster's node came from, and what each copy of it did there.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeRun {
    /// The engine that placed the call.
    pub(crate) client: u64,
    /// The cluster job whose tasks ran it here.
    pub(crate) job: String,
    /// Each copy of the call decoded here, with its latest reading.
    pub(crate) copies: Vec<(u64, UdfCallRecord)>,
}

impl NodeRun {
    /// Whether `other` is a record of the same statement's run on this node.
    pub(crate) fn same_call(&self, other: &NodeRun) -> bool {
        self.client == other.client && self.job == other.job
    }
}

impl UdfCallRecord {
    /// Takes in a later reading of the same call on this node (see
    /// [`Engine::record_task_calls`](crate::Engine::record_task_calls)): a copy's reading replaces its earlier one, and the
    /// record shows the sum over the copies.
    pub(crate) fn absorb(&mut self, later: UdfCallRecord) {
        let (Some(run), Some(later)) = (&mut self.run, later.run) else {
            return;
        };
        for (copy, reading) in later.copies {
            match run.copies.iter_mut().find(|(c, _)| *c == copy) {
                Some(known) => known.1 = reading,
                None => run.copies.push((copy, reading)),
            }
        }
        let copies = || run.copies.iter().map(|(_, r)| r);
        let mut devices: Vec<u32> = copies().flat_map(|r| r.devices.iter().copied()).collect();
        devices.sort_unstable();
        devices.dedup();
        self.devices = devices;
        self.instances = copies().map(|r| r.instances).sum();
        self.rows_in = copies().map(|r| r.rows_in).sum();
        self.rows_out = copies().map(|r| r.rows_out).sum();
        self.elapsed = copies().map(|r| r.elapsed).sum();
        self.lease_wait = copies().filter_map(|r| r.lease_wait).max();
        self.gpu_batches = copies().map(|r| r.gpu_batches).sum();
        self.cpu_fallback_batches = copies().map(|r| r.cpu_fallback_batches).sum();
        self.fallback_reason = copies()
            .filter_map(|r| r.fallback_reason.clone())
            .next_back();
    }
}
