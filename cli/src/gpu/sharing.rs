//! `--gpu-sharing` and `--gpu-memory-headroom`: how a node's lease queue shares its GPUs, for
//! `accelsql serve` and `accelsql cluster executor`.

use accelsql_gpu_scheduler::{GpuSharing, SchedulerConfig, parse_headroom};

use crate::error::CliError;

/// How this node shares its GPUs among statements.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct GpuSharingArgs {
    /// `exclusive` (one statement owns every GPU, Exasol's rule) or `memory` (statements that
    /// declare their device memory, %perInstanceRequiredAcceleratorMemory, share a GPU while
    /// their reservations fit). Default: ACCELSQL_GPU_SHARING, else exclusive.
    #[arg(long, value_name = "MODE")]
    pub(crate) gpu_sharing: Option<String>,
    /// Under `memory` sharing, the share of each GPU's memory reservations leave free (e.g.
    /// 10%). Default: ACCELSQL_GPU_MEMORY_HEADROOM, else 10%.
    #[arg(long, value_name = "PERCENT")]
    pub(crate) gpu_memory_headroom: Option<String>,
}

impl GpuSharingArgs {
    /// `config` with the flags applied over what the environment said.
    pub(crate) fn apply(&self, mut config: SchedulerConfig) -> Result<SchedulerConfig, CliError> {
        let bad = |flag: &str, e: accelsql_gpu_scheduler::SchedulerError| {
            CliError::Terminal(format!("{flag}: {e}"))
        };
        if let Some(mode) = &self.gpu_sharing {
            config.gpu_sharing = GpuSharing::parse(mode).map_err(|e| bad("--gpu-sharing", e))?;
        }
        if let Some(headroom) = &self.gpu_memory_headroom {
            config.memory_headroom_percent =
                Some(parse_headroom(headroom).map_err(|e| bad("--gpu-memory-headroom", e))?);
        }
        Ok(config)
    }
}
