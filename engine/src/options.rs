//! Session settings under `accelsql.*` (`SET accelsql.gpu_wait_timeout = '30s'`).

use std::time::Duration;

use accelsql_gpu_scheduler::units::parse_duration;
use datafusion::common::config::ConfigExtension;
use datafusion::common::extensions_options;

use crate::{EngineError, Result};

extensions_options! {
    /// accelsql's session settings, set with `SET accelsql.<name> = <value>`.
    pub struct AccelsqlOptions {
        /// Longest wait for the node's GPU lease, e.g. '30s' or '5min'; empty: the engine's default.
        pub gpu_wait_timeout: String, default = String::new()
    }
}

impl ConfigExtension for AccelsqlOptions {
    const PREFIX: &'static str = "accelsql";
}

impl AccelsqlOptions {
    /// The lease wait bound, if one is set.
    pub fn gpu_wait_timeout(&self) -> Result<Option<Duration>> {
        let text = self.gpu_wait_timeout.trim();
        if text.is_empty() {
            return Ok(None);
        }
        parse_duration(text)
            .map(Some)
            .map_err(|e| EngineError::InvalidSetting {
                name: "accelsql.gpu_wait_timeout".into(),
                message: e.to_string(),
            })
    }
}
