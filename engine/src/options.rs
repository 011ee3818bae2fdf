//! Session settings under `accelsql.*` (`SET accelsql.gpu_wait_timeout = '30s'`), checked when
//! they are set, and reset with `RESET accelsql.<name>`.

use std::any::Any;
use std::time::Duration;

use accelsql_gpu_scheduler::units::parse_duration;
use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::error::Result as DfResult;

use crate::{EngineError, Result};

/// accelsql's session settings, set with `SET accelsql.<name> = <value>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccelsqlOptions {
    /// Longest wait for the node's GPU lease, e.g. '30s' or '5min'; empty: the engine's default.
    pub gpu_wait_timeout: String,
    /// Longest time one UDF instance may spend on one run (a batch or a group) before it is
    /// killed, e.g. '10min'; empty: no bound.
    pub udf_timeout: String,
}

/// The settings: name, description.
const SETTINGS: [(&str, &str); 2] = [
    (
        "gpu_wait_timeout",
        "Longest wait for the node's GPU lease, e.g. '30s' or '5min'; empty: the engine's default",
    ),
    (
        "udf_timeout",
        "Longest run (batch or group) of one UDF instance before it is killed; empty: no bound",
    ),
];

impl ConfigExtension for AccelsqlOptions {
    const PREFIX: &'static str = "accelsql";
}

impl ExtensionOptions for AccelsqlOptions {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> DfResult<()> {
        match key {
            "gpu_wait_timeout" => {
                parse_timeout("accelsql.gpu_wait_timeout", value)
                    .map_err(EngineError::into_datafusion)?;
                self.gpu_wait_timeout = value.trim().to_string();
                Ok(())
            }
            "udf_timeout" => {
                parse_timeout("accelsql.udf_timeout", value)
                    .map_err(EngineError::into_datafusion)?;
                self.udf_timeout = value.trim().to_string();
                Ok(())
            }
            _ => Err(EngineError::InvalidSetting {
                name: format!("accelsql.{key}"),
                message: format!(
                    "no such setting; accelsql has: {}",
                    SETTINGS.map(|(n, _)| format!("accelsql.{n}")).join(", ")
                ),
            }
            .into_datafusion()),
        }
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        SETTINGS
            .iter()
            .map(|(name, description)| ConfigEntry {
                key: format!("accelsql.{name}"),
                value: Some(match *name {
                    "gpu_wait_timeout" => self.gpu_wait_timeout.clone(),
                    "udf_timeout" => self.udf_timeout.clone(),
                    _ => String::new(),
                }),
                description,
            })
            .collect()
    }
}

impl AccelsqlOptions {
    /// The lease wait bound, if one is set.
    pub fn gpu_wait_timeout(&self) -> Result<Option<Duration>> {
        parse_timeout("accelsql.gpu_wait_timeout", &self.gpu_wait_timeout)
    }

    /// The bound on one run of a UDF instance, if one is set.
    pub fn udf_timeout(&self) -> Result<Option<Duration>> {
        parse_timeout("accelsql.udf_timeout", &self.udf_timeout)
    }

    /// Puts setting `key` (without the `accelsql.` prefix) back to its default.
    pub fn reset(&mut self, key: &str) -> Result<()> {
        match key {
            "gpu_wait_timeout" => {
                self.gpu_wait_timeout = String::new();
                Ok(())
            }
            "udf_timeout" => {
                self.udf_timeout = String::new();
                Ok(())
            }
            _ => Err(EngineError::InvalidSetting {
                name: format!("accelsql.{key}"),
                message: "no such setting".into(),
            }),
        }
    }
}

fn parse_timeout(name: &str, text: &str) -> Result<Option<Duration>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    parse_duration(text)
        .map(Some)
        .map_err(|e| EngineError::InvalidSetting {
            name: name.into(),
            // The scheduler's message without its own code: this error has one.
            message: strip_code(&e.to_string()).to_string(),
        })
}

/// `message` without a leading `[CODE] `.
fn strip_code(message: &str) -> &str {
    match message.strip_prefix('[').and_then(|m| m.split_once("] ")) {
        Some((code, rest)) if code.len() == 5 => rest,
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_rejected_when_set() {
        let mut o = AccelsqlOptions::default();
        let e = EngineError::from(o.set("gpu_wait_timeout", "abc").unwrap_err());
        assert_eq!(e.code(), "22E03");
        assert!(!e.to_string().contains("22G01"), "{e}");
        assert_eq!(o.gpu_wait_timeout, "");
        o.set("gpu_wait_timeout", "2s").unwrap();
        assert_eq!(o.gpu_wait_timeout().unwrap(), Some(Duration::from_secs(2)));
        o.reset("gpu_wait_timeout").unwrap();
        assert_eq!(o.gpu_wait_timeout().unwrap(), None);
        let e = EngineError::from(o.set("nope", "1").unwrap_err());
        assert!(e.to_string().contains("accelsql.gpu_wait_timeout"), "{e}");
    }
}
