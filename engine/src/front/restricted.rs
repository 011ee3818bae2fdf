//! Restricted sessions: what SQL from an untrusted user may not do, checked on every statement.
//!
//! A session made restricted ([`Session::restrict`], or every session of an engine built with
//! [`EngineOptions::restricted`]) refuses, with error 42501:
//! - script DDL (`CREATE/DROP SCRIPT`), `ALTER SESSION SET SCRIPT_LANGUAGES` (it names the
//!   executable a script runs in), `CREATE/DROP CONNECTION`, and a `DROP SCHEMA … CASCADE` that
//!   would drop scripts: all of them change what code runs, or the engine's shared catalog;
//! - file access: `CREATE EXTERNAL TABLE`, `COPY … TO`, a file, folder or glob named where a
//!   table goes, `CREATE FUNCTION`;
//! - settings, except those in [`FREE_SETTINGS`] (how results look, the time zone, the
//!   identifier case) and the bounds (GPU wait, UDF run and statement timeouts, the memory
//!   budget), which may only be lowered (an empty value or a longer bound would lift a limit). `RESET` of a timeout is
//!   refused for the same reason.
//!
//! The checks look at the planned statement, so `EXPLAIN ANALYZE COPY …` and `PREPARE p AS
//! COPY …` are refused as `COPY` is. A restriction is never lifted: there is no statement that
//! undoes it.
//!
//! [`Session::restrict`]: crate::Session::restrict
//! [`EngineOptions::restricted`]: crate::EngineOptions::restricted

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, Statement};

use crate::core::error::{EngineError, Result};
use crate::core::options::AccelsqlOptions;
use crate::restricted_err;

/// Settings a restricted session may change freely: they change how statements are parsed or
/// results look, never what a statement may use or touch.
pub(crate) const FREE_SETTINGS: &[&str] = &[
    "datafusion.execution.time_zone",
    "datafusion.sql_parser.enable_ident_normalization",
    "datafusion.sql_parser.parse_float_as_decimal",
    "datafusion.sql_parser.enable_options_value_normalization",
    "datafusion.sql_parser.map_string_types_to_utf8view",
    "datafusion.explain.logical_plan_only",
    "datafusion.explain.physical_plan_only",
    "datafusion.explain.show_statistics",
    "datafusion.explain.show_schema",
    "datafusion.explain.show_sizes",
    "datafusion.explain.format",
    "datafusion.format.null",
    "datafusion.format.date_format",
    "datafusion.format.datetime_format",
    "datafusion.format.timestamp_format",
    "datafusion.format.timestamp_tz_format",
    "datafusion.format.time_format",
    "datafusion.format.duration_format",
    "datafusion.format.safe",
    "datafusion.format.types_info",
    "accelsql.optional_gpu_when_busy",
    "accelsql.create_schema_opens",
    "accelsql.identifier_case",
];

/// Settings that bound a resource: a restricted session may lower them, never raise or lift them.
const LIMIT_SETTINGS: &[&str] = &[
    "accelsql.gpu_wait_timeout",
    "accelsql.udf_timeout",
    "accelsql.statement_timeout",
    "accelsql.memory_limit",
];

/// Refuses `plan` (and every plan inside it: EXPLAIN's, PREPARE's, sub-queries') if it does
/// something a restricted session may not. `own` holds the session's current accelsql settings.
pub(crate) fn check_plan(plan: &LogicalPlan, own: &AccelsqlOptions) -> Result<()> {
    plan.apply_with_subqueries(|node| {
        refusal(node, own).map_err(EngineError::into_datafusion)?;
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(())
}

/// Why one plan node is refused, if it is.
fn refusal(node: &LogicalPlan, own: &AccelsqlOptions) -> Result<()> {
    match node {
        LogicalPlan::Copy(copy) => Err(restricted_err!(
            "COPY … TO writes files on the server ({})",
            copy.output_url
        )),
        LogicalPlan::Ddl(DdlStatement::CreateExternalTable(table)) => Err(restricted_err!(
            "CREATE EXTERNAL TABLE reads files on the server ({})",
            table.locations.join(", ")
        )),
        LogicalPlan::Ddl(DdlStatement::CreateFunction(f)) => {
            Err(restricted_err!("CREATE FUNCTION {} defines code", f.name))
        }
        LogicalPlan::Statement(Statement::SetVariable(set)) => {
            check_setting(&set.variable, Some(&set.value), own)
        }
        LogicalPlan::Statement(Statement::ResetVariable(reset)) => {
            check_setting(&reset.variable, None, own)
        }
        _ => Ok(()),
    }
}

/// Whether a restricted session may set `name` to `value` (`None`: reset it to its default).
pub(crate) fn check_setting(name: &str, value: Option<&str>, own: &AccelsqlOptions) -> Result<()> {
    let name = name.trim().to_ascii_lowercase();
    if FREE_SETTINGS.contains(&name.as_str()) {
        return Ok(());
    }
    if LIMIT_SETTINGS.contains(&name.as_str()) {
        let Some(value) = value else {
            return Err(restricted_err!(
                "RESET {name} could lift the bound this session runs under; SET it to a lower \
                 value instead"
            ));
        };
        let value = value.trim();
        return if name == "accelsql.memory_limit" {
            let wanted = crate::core::options::parse_size(&name, value)?;
            only_lower(&name, value, wanted, own.memory_limit()?, |b| {
                format!("{b} bytes")
            })
        } else {
            let current = match name.as_str() {
                "accelsql.gpu_wait_timeout" => own.gpu_wait_timeout()?,
                "accelsql.statement_timeout" => own.statement_timeout()?,
                _ => own.udf_timeout()?,
            };
            let wanted = crate::core::options::parse_timeout(&name, value)?;
            only_lower(&name, value, wanted, current, |d| format!("{d:?}"))
        };
    }
    Err(restricted_err!(
        "setting {name} (it could lift a resource limit or reach the server's files); a \
         restricted session may change {} and lower {}",
        FREE_SETTINGS.join(", "),
        LIMIT_SETTINGS.join(", ")
    ))
}

/// Ok when `wanted` (the bound `SET name = value` asks for; `None`: none) is no higher than
/// `current` (`None`: none); 42501 naming the current bound (as `show` prints it) otherwise.
fn only_lower<T: PartialOrd>(
    name: &str,
    value: &str,
    wanted: Option<T>,
    current: Option<T>,
    show: impl Fn(T) -> String,
) -> Result<()> {
    match (wanted, current) {
        (Some(wanted), Some(current)) if wanted <= current => Ok(()),
        (Some(_), None) => Ok(()),
        (_, current) => Err(restricted_err!(
            "SET {name} = '{value}' would raise its bound ({} now); a restricted session may \
             only lower it",
            current.map_or_else(|| "none".to_string(), show)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(result: Result<()>) -> String {
        match result {
            Err(e @ EngineError::NotAllowedRestricted { .. }) => e.to_string(),
            other => panic!("expected a 42501 refusal, got {other:?}"),
        }
    }

    #[test]
    fn free_settings_pass_and_others_are_refused() {
        let own = AccelsqlOptions::default();
        check_setting("datafusion.execution.time_zone", Some("+02:00"), &own).unwrap();
        check_setting("ACCELSQL.IDENTIFIER_CASE", Some("lower"), &own).unwrap();
        for name in [
            "datafusion.execution.target_partitions",
            "datafusion.execution.batch_size",
            "datafusion.runtime.memory_limit",
            "datafusion.runtime.temp_directory",
            "datafusion.catalog.location",
            "datafusion.catalog.format",
        ] {
            let message = refused(check_setting(name, Some("1"), &own));
            assert!(message.starts_with("[42501]"), "{message}");
            assert!(message.contains(name), "{message}");
        }
    }

    #[test]
    fn timeouts_may_only_be_lowered() {
        let own = AccelsqlOptions {
            udf_timeout: "10s".into(),
            ..AccelsqlOptions::default()
        };
        check_setting("accelsql.udf_timeout", Some("5s"), &own).unwrap();
        check_setting("accelsql.udf_timeout", Some("10s"), &own).unwrap();
        for value in ["11s", ""] {
            let message = refused(check_setting("accelsql.udf_timeout", Some(value), &own));
            assert!(message.contains("only lower"), "{message}");
        }
        refused(check_setting("accelsql.udf_timeout", None, &own));
        // Without a bound, any bound is a lower one; lifting stays refused.
        check_setting("accelsql.gpu_wait_timeout", Some("1m"), &own).unwrap();
        refused(check_setting("accelsql.gpu_wait_timeout", Some(""), &own));
    }
}
