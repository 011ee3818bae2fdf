//! Consumer groups: Exasol's per-group limits (precedence, CPU weight, memory limits per group,
//! user and session, query and idle timeouts) and accelsql's GPU knobs (`GPU_PRECEDENCE`,
//! `GPU_LEASE_HOLD_LIMIT`, `MAX_GPU_WAITERS`), as the catalog stores them and a session applies
//! them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The group a user without one is in (as in Exasol).
pub const DEFAULT_GROUP: &str = "MEDIUM";

/// One consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroup {
    /// Its name (folded to upper case).
    pub name: String,
    /// `PRECEDENCE` (1–1000): Exasol's CPU priority; the GPU queue's unless `GPU_PRECEDENCE`
    /// says otherwise.
    pub precedence: u32,
    /// `CPU_WEIGHT` (1–1000): stored and shown; accelsql does not weigh CPU shares.
    pub cpu_weight: u32,
    /// `GROUP_TEMP_DB_RAM_LIMIT`: the most all of the group's sessions may hold (bytes).
    pub group_ram_limit: Option<u64>,
    /// `USER_TEMP_DB_RAM_LIMIT`: the most one user's sessions may hold together (bytes).
    pub user_ram_limit: Option<u64>,
    /// `SESSION_TEMP_DB_RAM_LIMIT`: the most one session may hold (bytes).
    pub session_ram_limit: Option<u64>,
    /// `QUERY_TIMEOUT` in seconds: the longest a statement may run.
    pub query_timeout: Option<u64>,
    /// `IDLE_TIMEOUT` in seconds: a server ends a session idle this long.
    pub idle_timeout: Option<u64>,
    /// `GPU_PRECEDENCE`: the node lease queue's precedence (default: `precedence`).
    pub gpu_precedence: Option<u32>,
    /// `GPU_LEASE_HOLD_LIMIT` in seconds: the longest a statement may hold the GPU lease.
    pub gpu_lease_hold_limit: Option<u64>,
    /// `MAX_GPU_WAITERS`: the most statements of the group that may wait for the lease at once.
    pub max_gpu_waiters: Option<usize>,
    /// `COMMENT IS '…'`.
    #[serde(default)]
    pub comment: Option<String>,
}

impl ConsumerGroup {
    /// A group with Exasol's defaults for a new group (precedence 1000, weight 1000, no limits).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            precedence: 1000,
            cpu_weight: 1000,
            group_ram_limit: None,
            user_ram_limit: None,
            session_ram_limit: None,
            query_timeout: None,
            idle_timeout: None,
            gpu_precedence: None,
            gpu_lease_hold_limit: None,
            max_gpu_waiters: None,
            comment: None,
        }
    }

    /// Exasol's predefined groups: `SYS_CONSUMER_GROUP` (1000), `HIGH` (900), `MEDIUM` (300),
    /// `LOW` (100).
    pub fn predefined() -> Vec<Self> {
        [
            ("SYS_CONSUMER_GROUP", 1000, 1000),
            ("HIGH", 900, 900),
            (DEFAULT_GROUP, 300, 300),
            ("LOW", 100, 100),
        ]
        .into_iter()
        .map(|(name, precedence, weight)| Self {
            precedence,
            cpu_weight: weight,
            ..Self::new(name)
        })
        .collect()
    }

    /// The precedence its statements wait for the GPU lease with.
    pub fn effective_gpu_precedence(&self) -> u32 {
        self.gpu_precedence.unwrap_or(self.precedence)
    }

    /// `QUERY_TIMEOUT` as a duration.
    pub fn query_timeout(&self) -> Option<Duration> {
        self.query_timeout
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
    }

    /// Sets attribute `key` (as `CREATE/ALTER CONSUMER GROUP … WITH key = value` names it) to
    /// `value`; an error says what is wrong.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let value = value.trim();
        let number = |what: &str| -> Result<u64, String> {
            value
                .parse::<u64>()
                .map_err(|_| format!("{what} takes a whole number, not '{value}'"))
        };
        let in_range = |what: &str| -> Result<u32, String> {
            let n = number(what)?;
            if (1..=1000).contains(&n) {
                Ok(n as u32)
            } else {
                Err(format!("{what} must be between 1 and 1000, not {n}"))
            }
        };
        let bytes = |what: &str| -> Result<Option<u64>, String> {
            if value.is_empty() || value == "0" {
                return Ok(None);
            }
            parse_bytes(value).map(Some).ok_or_else(|| {
                format!("{what} takes a size such as '10G' or '512MiB', not '{value}'")
            })
        };
        let seconds = |what: &str| -> Result<Option<u64>, String> {
            Ok(Some(number(what)?).filter(|s| *s > 0))
        };
        match key.to_ascii_uppercase().as_str() {
            "PRECEDENCE" => self.precedence = in_range("PRECEDENCE")?,
            "CPU_WEIGHT" => self.cpu_weight = in_range("CPU_WEIGHT")?,
            "GROUP_TEMP_DB_RAM_LIMIT" => self.group_ram_limit = bytes("GROUP_TEMP_DB_RAM_LIMIT")?,
            "USER_TEMP_DB_RAM_LIMIT" => self.user_ram_limit = bytes("USER_TEMP_DB_RAM_LIMIT")?,
            "SESSION_TEMP_DB_RAM_LIMIT" => {
                self.session_ram_limit = bytes("SESSION_TEMP_DB_RAM_LIMIT")?
            }
            "QUERY_TIMEOUT" => self.query_timeout = seconds("QUERY_TIMEOUT")?,
            "IDLE_TIMEOUT" => self.idle_timeout = seconds("IDLE_TIMEOUT")?,
            "GPU_PRECEDENCE" => self.gpu_precedence = Some(in_range("GPU_PRECEDENCE")?),
            "GPU_LEASE_HOLD_LIMIT" => self.gpu_lease_hold_limit = seconds("GPU_LEASE_HOLD_LIMIT")?,
            "MAX_GPU_WAITERS" => {
                self.max_gpu_waiters = Some(number("MAX_GPU_WAITERS")? as usize).filter(|n| *n > 0)
            }
            other => {
                return Err(format!(
                    "unknown consumer group attribute {other}; known: PRECEDENCE, CPU_WEIGHT, \
                     GROUP_TEMP_DB_RAM_LIMIT, USER_TEMP_DB_RAM_LIMIT, SESSION_TEMP_DB_RAM_LIMIT, \
                     QUERY_TIMEOUT, IDLE_TIMEOUT, GPU_PRECEDENCE, GPU_LEASE_HOLD_LIMIT, \
                     MAX_GPU_WAITERS"
                ));
            }
        }
        Ok(())
    }
}

/// How a statement waits in a node's GPU lease queue: its consumer group's name, precedence,
/// waiter cap and hold limit. It travels with a cluster's placed calls, so that executors'
/// queues apply the same order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuClass {
    /// The consumer group.
    pub group: String,
    /// Its `GPU_PRECEDENCE`.
    pub precedence: u32,
    /// Its `MAX_GPU_WAITERS`.
    pub max_waiters: Option<usize>,
    /// Its `GPU_LEASE_HOLD_LIMIT` in seconds.
    pub hold_limit_secs: Option<u64>,
}

impl GpuClass {
    /// The class of `group`'s statements.
    pub fn of(group: &ConsumerGroup) -> Self {
        Self {
            group: group.name.clone(),
            precedence: group.effective_gpu_precedence(),
            max_waiters: group.max_gpu_waiters,
            hold_limit_secs: group.gpu_lease_hold_limit,
        }
    }

    /// The hold limit as a duration.
    pub fn hold_limit(&self) -> Option<Duration> {
        self.hold_limit_secs
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
    }
}

/// `10G`, `512 MiB`, `1024` (bytes) → bytes; Exasol's sizes are powers of 1024.
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale: u64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return None,
    };
    let bytes = number * scale as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_parse_and_bad_ones_say_why() {
        let mut g = ConsumerGroup::new("ETL");
        g.set("precedence", "200").unwrap();
        g.set("SESSION_TEMP_DB_RAM_LIMIT", "2G").unwrap();
        g.set("QUERY_TIMEOUT", "30").unwrap();
        g.set("GPU_PRECEDENCE", "900").unwrap();
        g.set("MAX_GPU_WAITERS", "2").unwrap();
        assert_eq!(g.precedence, 200);
        assert_eq!(g.session_ram_limit, Some(2 << 30));
        assert_eq!(g.query_timeout(), Some(Duration::from_secs(30)));
        assert_eq!(g.effective_gpu_precedence(), 900);
        assert_eq!(g.max_gpu_waiters, Some(2));
        assert!(
            g.set("PRECEDENCE", "0")
                .unwrap_err()
                .contains("between 1 and 1000")
        );
        assert!(g.set("COLOR", "red").unwrap_err().contains("unknown"));
        assert!(g.set("USER_TEMP_DB_RAM_LIMIT", "lots").is_err());
        g.set("QUERY_TIMEOUT", "0").unwrap();
        assert_eq!(g.query_timeout(), None);
    }

    #[test]
    fn predefined_groups_are_exasols() {
        let groups = ConsumerGroup::predefined();
        let medium = groups.iter().find(|g| g.name == DEFAULT_GROUP).unwrap();
        assert_eq!(medium.effective_gpu_precedence(), 300);
        assert_eq!(groups.len(), 4);
    }
}
