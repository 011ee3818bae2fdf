//! Session settings under `accelsql.*` (`SET accelsql.gpu_wait_timeout = '30s'`), checked when
//! they are set, and reset with `RESET accelsql.<name>`.

use std::any::Any;
use std::time::Duration;

use accelsql_gpu_scheduler::units::parse_duration;
use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::error::Result as DfResult;

use crate::setting_err;
use crate::{EngineError, Result};

/// What an optional (`GpuNvidia|None`) call placed on the GPUs does when the node lease is busy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OptionalGpuWhenBusy {
    /// Wait for the lease, as a required call does (Exasol's behaviour; the default).
    #[default]
    Wait,
    /// Run on the CPU at once.
    Cpu,
}

impl OptionalGpuWhenBusy {
    /// The setting's value as `SET` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Wait => "wait",
            Self::Cpu => "cpu",
        }
    }
}

/// How unquoted identifiers are shown in results: DataFusion's (and PostgreSQL's) lower case, or
/// Exasol's upper case (`SELECT 1 AS a` returns column `A`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IdentifierCase {
    /// Unquoted names keep DataFusion's lower case (the default).
    #[default]
    Lower,
    /// Unquoted names in a result are upper case, as Exasol folds them; quoted ones keep theirs.
    Upper,
}

impl IdentifierCase {
    /// The setting's value as `SET` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lower => "lower",
            Self::Upper => "upper",
        }
    }
}

/// The SQL dialect a session speaks: DataFusion's (the default) or Exasol's, where unquoted
/// identifiers fold to upper case, `''` is NULL and literals, conversions and type names are
/// Exasol's (see `front/exasol/dialect.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SqlDialect {
    /// DataFusion's SQL: unquoted names fold to lower case, `''` is an empty string.
    #[default]
    Datafusion,
    /// Exasol's SQL, as far as accelsql follows it.
    Exasol,
}

impl SqlDialect {
    /// The dialect a session's settings (`config`) choose: the default where they carry no
    /// accelsql options.
    pub fn of(config: &datafusion::common::config::ConfigOptions) -> Self {
        config
            .extensions
            .get::<AccelsqlOptions>()
            .map_or_else(Self::default, |o| o.sql_dialect)
    }

    /// The setting's value as `SET` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Datafusion => "datafusion",
            Self::Exasol => "exasol",
        }
    }

    /// The dialect a value names (case-insensitively), or 22E03 listing the values.
    pub fn parse(value: &str) -> Result<Self> {
        choose(
            "sql_dialect",
            value.trim(),
            [("datafusion", Self::Datafusion), ("exasol", Self::Exasol)],
        )
    }
}

/// How a grouped SET call (`SELECT f(...) ... GROUP BY k`) gets each group's rows together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SetGrouping {
    /// Each partition's rows are kept as they arrive; the row indices are sorted by the keys
    /// alone and each group's rows gathered from them just before its run, so argument
    /// payloads (embeddings, long strings) never go through a sort (the default).
    #[default]
    Gather,
    /// The whole input, arguments included, is sorted by the keys before the call (DataFusion's
    /// sort, which can spill); the path before `gather`, kept to compare them.
    Sort,
}

impl SetGrouping {
    /// The setting's value as `SET` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gather => "gather",
            Self::Sort => "sort",
        }
    }
}

/// accelsql's session settings, set with `SET accelsql.<name> = <value>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccelsqlOptions {
    /// Longest wait for the node's GPU lease, e.g. '30s' or '5min'; empty: the engine's default.
    pub gpu_wait_timeout: String,
    /// Longest time one UDF instance may spend on one run (a batch or a group) before it is
    /// killed, e.g. '10min'; empty: no bound.
    pub udf_timeout: String,
    /// Longest time a statement may run, from the start of its execution (its wait for the GPU
    /// lease included) to its last row, e.g. '5min'; empty: no bound. Exasol's
    /// `ALTER SESSION SET QUERY_TIMEOUT = <seconds>` sets it (0: no bound).
    pub statement_timeout: String,
    /// The session's memory budget within the engine's pool, e.g. '2GiB' or '512MB'; empty: no
    /// budget of its own. A statement whose reservations pass it fails with 53200.
    pub memory_limit: String,
    /// What a GPU-placed optional call does when the lease is busy: `wait` (default) or `cpu`.
    pub optional_gpu_when_busy: OptionalGpuWhenBusy,
    /// Whether `CREATE SCHEMA s` also makes `s` the current schema, as in Exasol (default true).
    pub create_schema_opens: bool,
    /// How unquoted names are shown in results: `lower` (default) or Exasol's `upper`.
    pub identifier_case: IdentifierCase,
    /// How a grouped SET call gets each group's rows together: `gather` (default) or `sort`.
    pub set_grouping: SetGrouping,
    /// The session's SQL dialect: `datafusion` (default) or `exasol`.
    pub sql_dialect: SqlDialect,
}

impl Default for AccelsqlOptions {
    fn default() -> Self {
        Self {
            gpu_wait_timeout: String::new(),
            udf_timeout: String::new(),
            statement_timeout: String::new(),
            memory_limit: String::new(),
            optional_gpu_when_busy: OptionalGpuWhenBusy::default(),
            create_schema_opens: true,
            identifier_case: IdentifierCase::default(),
            set_grouping: SetGrouping::default(),
            sql_dialect: SqlDialect::default(),
        }
    }
}

/// The settings: name, description.
const SETTINGS: [(&str, &str); 9] = [
    (
        "gpu_wait_timeout",
        "Longest wait for the node's GPU lease, e.g. '30s' or '5min'; empty: the engine's default",
    ),
    (
        "udf_timeout",
        "Longest run (batch or group) of one UDF instance before it is killed; empty: no bound",
    ),
    (
        "statement_timeout",
        "Longest time a statement may run, lease wait included, before it is stopped (57T01), \
         e.g. '5min'; empty: no bound (Exasol: ALTER SESSION SET QUERY_TIMEOUT = <seconds>)",
    ),
    (
        "memory_limit",
        "The session's memory budget within the engine's pool, e.g. '2GiB'; a statement past \
         it fails with 53200 (operators that can spill do so first); empty: no budget of its own",
    ),
    (
        "optional_gpu_when_busy",
        "What a GPU-placed optional (GpuNvidia|None) call does when the GPU lease is busy: \
         'wait' for it (default, as Exasol) or run on the 'cpu' at once",
    ),
    (
        "create_schema_opens",
        "Whether CREATE SCHEMA s also makes s the current schema, as Exasol does (default true)",
    ),
    (
        "identifier_case",
        "How unquoted names are shown in results: 'lower' (default, as DataFusion) or 'upper' \
         (as Exasol: SELECT 1 AS a returns column A; quoted names keep their case)",
    ),
    (
        "set_grouping",
        "How a grouped SET call gets each group's rows together: 'gather' (default: row indices \
         sorted by the keys, each group's rows gathered for its run) or 'sort' (the whole input, \
         arguments included, sorted by the keys first)",
    ),
    (
        "sql_dialect",
        "The session's SQL dialect: 'datafusion' (default) or 'exasol' (unquoted names fold to \
         upper case, '' is NULL, exact decimal literals up to 36 digits, Exasol's conversions \
         and type names)",
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
        self.set_checked(key, value)
            .map_err(EngineError::into_datafusion)
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        SETTINGS
            .iter()
            .map(|(name, description)| ConfigEntry {
                key: format!("accelsql.{name}"),
                value: Some(match *name {
                    "gpu_wait_timeout" => self.gpu_wait_timeout.clone(),
                    "udf_timeout" => self.udf_timeout.clone(),
                    "statement_timeout" => self.statement_timeout.clone(),
                    "memory_limit" => self.memory_limit.clone(),
                    "optional_gpu_when_busy" => self.optional_gpu_when_busy.as_str().to_string(),
                    "create_schema_opens" => self.create_schema_opens.to_string(),
                    "identifier_case" => self.identifier_case.as_str().to_string(),
                    "set_grouping" => self.set_grouping.as_str().to_string(),
                    "sql_dialect" => self.sql_dialect.as_str().to_string(),
                    _ => String::new(),
                }),
                description,
            })
            .collect()
    }
}

impl AccelsqlOptions {
    /// The settings a session of an engine whose default statement timeout is
    /// `statement_timeout`, default session memory budget `memory_limit` and default dialect
    /// `sql_dialect` starts with.
    pub(crate) fn for_session(
        statement_timeout: Option<Duration>,
        memory_limit: Option<usize>,
        sql_dialect: SqlDialect,
    ) -> Self {
        Self {
            sql_dialect,
            statement_timeout: statement_timeout
                .map(|d| format!("{}ms", d.as_millis().max(1)))
                .unwrap_or_default(),
            memory_limit: memory_limit.map(|b| b.to_string()).unwrap_or_default(),
            ..Self::default()
        }
    }

    /// The session's memory budget in bytes, if one is set.
    pub fn memory_limit(&self) -> Result<Option<usize>> {
        parse_size("accelsql.memory_limit", &self.memory_limit)
    }

    /// The lease wait bound, if one is set.
    pub fn gpu_wait_timeout(&self) -> Result<Option<Duration>> {
        parse_timeout("accelsql.gpu_wait_timeout", &self.gpu_wait_timeout)
    }

    /// The bound on one run of a UDF instance, if one is set.
    pub fn udf_timeout(&self) -> Result<Option<Duration>> {
        parse_timeout("accelsql.udf_timeout", &self.udf_timeout)
    }

    /// The bound on a statement's run time, if one is set.
    pub fn statement_timeout(&self) -> Result<Option<Duration>> {
        parse_timeout("accelsql.statement_timeout", &self.statement_timeout)
    }

    /// Sets `key` (without the `accelsql.` prefix) after checking `value`; a bad value leaves
    /// the setting as it was (22E03).
    fn set_checked(&mut self, key: &str, value: &str) -> Result<()> {
        let value = value.trim();
        match key {
            "gpu_wait_timeout" => {
                parse_timeout("accelsql.gpu_wait_timeout", value)?;
                self.gpu_wait_timeout = value.to_string();
            }
            "udf_timeout" => {
                parse_timeout("accelsql.udf_timeout", value)?;
                self.udf_timeout = value.to_string();
            }
            "statement_timeout" => {
                if parse_timeout("accelsql.statement_timeout", value)? == Some(Duration::ZERO) {
                    return Err(setting_err!(
                        "accelsql.statement_timeout",
                        "a statement timeout must be longer than 0; '' (empty) means \
                                  no bound"
                    ));
                }
                self.statement_timeout = value.to_string();
            }
            "memory_limit" => {
                if parse_size("accelsql.memory_limit", value)? == Some(0) {
                    return Err(setting_err!(
                        "accelsql.memory_limit",
                        "a memory budget must be more than 0 bytes; '' (empty) means \
                                  no budget of its own"
                    ));
                }
                self.memory_limit = value.to_string();
            }
            "optional_gpu_when_busy" => {
                self.optional_gpu_when_busy = choose(
                    key,
                    value,
                    [
                        ("wait", OptionalGpuWhenBusy::Wait),
                        ("cpu", OptionalGpuWhenBusy::Cpu),
                    ],
                )?;
            }
            "create_schema_opens" => {
                self.create_schema_opens = choose(key, value, [("true", true), ("false", false)])?;
            }
            "identifier_case" => {
                self.identifier_case = choose(
                    key,
                    value,
                    [
                        ("lower", IdentifierCase::Lower),
                        ("upper", IdentifierCase::Upper),
                    ],
                )?;
            }
            "set_grouping" => {
                self.set_grouping = choose(
                    key,
                    value,
                    [("gather", SetGrouping::Gather), ("sort", SetGrouping::Sort)],
                )?;
            }
            "sql_dialect" => self.sql_dialect = SqlDialect::parse(value)?,
            _ => return Err(no_such_setting(key)),
        }
        Ok(())
    }

    /// Puts setting `key` (without the `accelsql.` prefix) back to its default.
    pub fn reset(&mut self, key: &str) -> Result<()> {
        self.reset_to(key, &Self::default())
    }

    /// Puts setting `key` (without the `accelsql.` prefix) back to its value in `default` (a
    /// session's: the engine's statement timeout, say).
    pub(crate) fn reset_to(&mut self, key: &str, default: &Self) -> Result<()> {
        let default = default.clone();
        match key {
            "gpu_wait_timeout" => self.gpu_wait_timeout = default.gpu_wait_timeout,
            "udf_timeout" => self.udf_timeout = default.udf_timeout,
            "statement_timeout" => self.statement_timeout = default.statement_timeout,
            "memory_limit" => self.memory_limit = default.memory_limit,
            "optional_gpu_when_busy" => {
                self.optional_gpu_when_busy = default.optional_gpu_when_busy
            }
            "create_schema_opens" => self.create_schema_opens = default.create_schema_opens,
            "identifier_case" => self.identifier_case = default.identifier_case,
            "set_grouping" => self.set_grouping = default.set_grouping,
            "sql_dialect" => self.sql_dialect = default.sql_dialect,
            _ => return Err(no_such_setting(key)),
        }
        Ok(())
    }
}

/// The choice `value` names (case-insensitively) among `choices`; 22E03 listing them otherwise.
fn choose<T: Copy, const N: usize>(key: &str, value: &str, choices: [(&str, T); N]) -> Result<T> {
    choices
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(value))
        .map(|(_, choice)| *choice)
        .ok_or_else(|| {
            setting_err!(
                format!("accelsql.{key}"),
                "'{value}' is not one of {}",
                choices.map(|(name, _)| format!("'{name}'")).join(", ")
            )
        })
}

/// 22E03 for a name that is not one of [`SETTINGS`].
fn no_such_setting(key: &str) -> EngineError {
    setting_err!(
        format!("accelsql.{key}"),
        "no such setting; accelsql has: {}",
        SETTINGS.map(|(n, _)| format!("accelsql.{n}")).join(", ")
    )
}

/// The bytes a size setting's text gives (`''`: none), or 22E03.
pub(crate) fn parse_size(name: &str, text: &str) -> Result<Option<usize>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    accelsql_gpu_scheduler::units::parse_bytes(text)
        .map(|b| Some(usize::try_from(b).unwrap_or(usize::MAX)))
        .map_err(|e| EngineError::InvalidSetting {
            name: name.into(),
            message: strip_code(&e.to_string()).to_string(),
        })
}

/// The bound a timeout setting's text gives (`''`: none), or 22E03.
pub(crate) fn parse_timeout(name: &str, text: &str) -> Result<Option<Duration>> {
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

    #[test]
    fn optional_gpu_when_busy_takes_wait_or_cpu() {
        let mut o = AccelsqlOptions::default();
        assert_eq!(o.optional_gpu_when_busy, OptionalGpuWhenBusy::Wait);
        o.set("optional_gpu_when_busy", " CPU ").unwrap();
        assert_eq!(o.optional_gpu_when_busy, OptionalGpuWhenBusy::Cpu);
        let e = EngineError::from(o.set("optional_gpu_when_busy", "maybe").unwrap_err());
        assert_eq!(e.code(), "22E03");
        assert!(e.to_string().contains("'maybe'"), "{e}");
        assert_eq!(o.optional_gpu_when_busy, OptionalGpuWhenBusy::Cpu);
        let shown = o.entries();
        assert!(shown.iter().any(
            |e| e.key == "accelsql.optional_gpu_when_busy" && e.value.as_deref() == Some("cpu")
        ));
        o.reset("optional_gpu_when_busy").unwrap();
        assert_eq!(o.optional_gpu_when_busy, OptionalGpuWhenBusy::Wait);
    }

    #[test]
    fn exasol_forms_have_settings() {
        let mut o = AccelsqlOptions::default();
        assert!(o.create_schema_opens);
        assert_eq!(o.identifier_case, IdentifierCase::Lower);
        o.set("create_schema_opens", "FALSE").unwrap();
        o.set("identifier_case", "upper").unwrap();
        assert!(!o.create_schema_opens);
        assert_eq!(o.identifier_case, IdentifierCase::Upper);
        let e = EngineError::from(o.set("identifier_case", "title").unwrap_err());
        assert!(e.to_string().contains("'lower', 'upper'"), "{e}");
        assert_eq!(o.identifier_case, IdentifierCase::Upper);
        o.set("sql_dialect", "EXASOL").unwrap();
        assert_eq!(o.sql_dialect, SqlDialect::Exasol);
        let e = EngineError::from(o.set("sql_dialect", "oracle").unwrap_err());
        assert!(e.to_string().contains("'datafusion', 'exasol'"), "{e}");
        o.reset("create_schema_opens").unwrap();
        o.reset("identifier_case").unwrap();
        o.reset("sql_dialect").unwrap();
        assert_eq!(o, AccelsqlOptions::default());
    }
}
