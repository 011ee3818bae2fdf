//! Privileges: every check of what a session may do goes through here. A statement is checked
//! against the session's [`Grants`] (its user's privileges, bounded by the `RESTRICTED` role's
//! in a restricted session), refreshed from the catalog at the start of each statement:
//! - the planned statement ([`check_plan`]): `COPY … TO` needs `WRITE SERVER FILES`,
//!   `CREATE EXTERNAL TABLE` `READ SERVER FILES`, `CREATE FUNCTION` `CREATE SCRIPT`, tables and
//!   views `CREATE TABLE`, schemas `CREATE SCHEMA`, a call of a script `EXECUTE` on it (or
//!   `EXECUTE ANY SCRIPT`, or owning it), and settings ([`check_setting`]);
//! - settings: without `ALTER SESSION`, only those in [`FREE_SETTINGS`] (how results look, the
//!   time zone, the identifier case) and the bounds (GPU wait, UDF run and statement timeouts,
//!   the memory budget), which may only be lowered (an empty value or a longer bound would lift
//!   a limit); `RESET` of a bound is refused for the same reason;
//! - users, roles, grants and consumer groups ([`statements`], [`run`]).
//!
//! The checks look at the planned statement, so `EXPLAIN ANALYZE COPY …` and `PREPARE p AS
//! COPY …` are refused as `COPY` is. A restriction is never lifted: there is no statement that
//! undoes it. A refusal is 42501: "insufficient privileges" when the user lacks the privilege,
//! "not allowed in a restricted session" when only the session's restriction takes it away.

pub(crate) mod run;
pub(crate) mod statements;

use std::collections::HashMap;
use std::path::Path;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{DdlStatement, Expr, LogicalPlan, Statement};

use crate::core::error::{EngineError, Result};
use crate::core::options::AccelsqlOptions;
use crate::core::privileges::{Denial, Grants, SystemPrivilege};

/// The 42501 for `what`, refused for `denial`; `needs` names the privilege(s) that would allow it.
pub(crate) fn refusal(denial: Denial, what: &str, needs: &str) -> EngineError {
    denial.refusal(what, needs)
}

/// Ok when the session holds system privilege `p`; 42501 naming it and `what` otherwise.
pub(crate) fn require(grants: &Grants, p: SystemPrivilege, what: &str) -> Result<()> {
    grants
        .check_system(p)
        .map_err(|d| refusal(d, what, &format!("the {p} privilege")))
}

/// A script a function name calls: its catalog key (`schema.name`) and owner.
#[derive(Debug, Clone)]
pub(crate) struct ScriptRef {
    /// `schema.name`, as the catalog keys it.
    pub(crate) key: String,
    /// Its owner (`None`: SYS).
    pub(crate) owner: Option<String>,
}

/// Ok when the session may run `script` (owning it, `EXECUTE ON SCRIPT`/`SCHEMA`, or `EXECUTE
/// ANY SCRIPT`).
pub(crate) fn check_execute(grants: &Grants, script: &ScriptRef) -> Result<()> {
    grants
        .may_execute(&script.key, script.owner.as_deref())
        .map_err(|d| {
            refusal(
                d,
                &format!("calling script {}", script.key.to_uppercase()),
                "EXECUTE on it (or EXECUTE ANY SCRIPT)",
            )
        })
}

/// Ok when the session may name connection `name` (owned by `owner`) in `IMPORT/EXPORT … AT`.
pub(crate) fn check_use_connection(grants: &Grants, name: &str, owner: Option<&str>) -> Result<()> {
    grants.may_use_connection(name, owner).map_err(|d| {
        refusal(
            d,
            &format!("using connection {name}"),
            "the connection granted (GRANT CONNECTION) or USE ANY CONNECTION",
        )
    })
}

/// Settings a session without `ALTER SESSION` may change freely: they change how statements are parsed or
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
    "accelsql.set_grouping",
    "accelsql.sql_dialect",
];
/// Settings that bound a resource: a session without `ALTER SESSION` may lower them, never raise or lift them.
const LIMIT_SETTINGS: &[&str] = &[
    "accelsql.gpu_wait_timeout",
    "accelsql.udf_timeout",
    "accelsql.statement_timeout",
    "accelsql.memory_limit",
];

/// Refuses `plan` (and every plan inside it: EXPLAIN's, PREPARE's, sub-queries') if it does
/// something the session may not. `own` holds the session's current accelsql settings;
/// `scripts` maps a function name to the script it calls.
pub(crate) fn check_plan(
    plan: &LogicalPlan,
    grants: &Grants,
    own: &AccelsqlOptions,
    scripts: &HashMap<String, ScriptRef>,
    data_dir: Option<&Path>,
) -> Result<()> {
    if grants.is_all() {
        return Ok(());
    }
    plan.apply_with_subqueries(|node| {
        check_node(node, grants, own, data_dir).map_err(EngineError::into_datafusion)?;
        node.apply_expressions(|e| {
            e.apply(|e| {
                let name = match e {
                    Expr::ScalarFunction(f) => f.func.name(),
                    Expr::AggregateFunction(f) => f.func.name(),
                    Expr::WindowFunction(w) => w.fun.name(),
                    _ => return Ok(TreeNodeRecursion::Continue),
                };
                if let Some(script) = scripts.get(name) {
                    check_execute(grants, script).map_err(EngineError::into_datafusion)?;
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(())
}

/// Why one plan node is refused, if it is.
fn check_node(
    node: &LogicalPlan,
    grants: &Grants,
    own: &AccelsqlOptions,
    data_dir: Option<&Path>,
) -> Result<()> {
    use SystemPrivilege::*;
    match node {
        LogicalPlan::Copy(copy) => {
            require(
                grants,
                WriteServerFiles,
                &format!("COPY … TO writes files on the server ({})", copy.output_url),
            )?;
            crate::core::privileges::check_outside_data_dir(&copy.output_url, data_dir)
        }
        LogicalPlan::Ddl(DdlStatement::CreateExternalTable(table)) => {
            require(
                grants,
                ReadServerFiles,
                &format!(
                    "CREATE EXTERNAL TABLE reads files on the server ({})",
                    table.locations.join(", ")
                ),
            )?;
            table
                .locations
                .iter()
                .try_for_each(|l| crate::core::privileges::check_outside_data_dir(l, data_dir))
        }
        // Inserting into a table whose rows live in files (an external table) writes them.
        LogicalPlan::Dml(dml) if writes_files(dml) => require(
            grants,
            WriteServerFiles,
            &format!(
                "writing into {}, whose rows are files on the server",
                dml.table_name
            ),
        ),
        LogicalPlan::Ddl(DdlStatement::CreateFunction(f)) => require(
            grants,
            CreateScript,
            &format!("CREATE FUNCTION {} defines code", f.name),
        ),
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(t)) => {
            require(grants, CreateTable, &format!("CREATE TABLE {}", t.name))
        }
        LogicalPlan::Ddl(DdlStatement::CreateView(v)) => {
            require(grants, CreateTable, &format!("CREATE VIEW {}", v.name))
        }
        LogicalPlan::Ddl(DdlStatement::CreateCatalogSchema(s)) => require(
            grants,
            CreateSchema,
            &format!("CREATE SCHEMA {}", s.schema_name),
        ),
        LogicalPlan::Statement(Statement::SetVariable(set)) => {
            check_setting(&set.variable, Some(&set.value), own, grants)
        }
        LogicalPlan::Statement(Statement::ResetVariable(reset)) => {
            check_setting(&reset.variable, None, own, grants)
        }
        _ => Ok(()),
    }
}

/// Whether `dml` writes into a table backed by files (a listing table: `CREATE EXTERNAL TABLE`).
fn writes_files(dml: &datafusion::logical_expr::DmlStatement) -> bool {
    datafusion::datasource::source_as_provider(&dml.target).is_ok_and(|provider| {
        provider
            .downcast_ref::<datafusion::datasource::listing::ListingTable>()
            .is_some()
    })
}

/// Whether the session may set `name` to `value` (`None`: reset it to its default): anything
/// with `ALTER SESSION`; without it the free settings, and the bounds only lowered.
pub(crate) fn check_setting(
    name: &str,
    value: Option<&str>,
    own: &AccelsqlOptions,
    grants: &Grants,
) -> Result<()> {
    let Err(denial) = grants.check_system(SystemPrivilege::AlterSession) else {
        return Ok(());
    };
    let refused = |what: String| {
        let hint = "; without it a session may change only how statements are parsed and results \
                    look, and only lower its bounds";
        refusal(denial, &what, &format!("the ALTER SESSION privilege{hint}"))
    };
    let name = name.trim().to_ascii_lowercase();
    if FREE_SETTINGS.contains(&name.as_str()) {
        return Ok(());
    }
    if LIMIT_SETTINGS.contains(&name.as_str()) {
        let Some(value) = value else {
            return Err(refused(format!(
                "RESET {name} (it could lift the bound this session runs under: SET it to a \
                 lower value instead)"
            )));
        };
        let value = value.trim();
        return if name == "accelsql.memory_limit" {
            let wanted = crate::core::options::parse_size(&name, value)?;
            only_lower(&name, value, wanted, own.memory_limit()?, |b| {
                format!("{b} bytes")
            })
            .map_err(refused)
        } else {
            let current = match name.as_str() {
                "accelsql.gpu_wait_timeout" => own.gpu_wait_timeout()?,
                "accelsql.statement_timeout" => own.statement_timeout()?,
                _ => own.udf_timeout()?,
            };
            let wanted = crate::core::options::parse_timeout(&name, value)?;
            only_lower(&name, value, wanted, current, |d| format!("{d:?}")).map_err(refused)
        };
    }
    Err(refused(format!(
        "setting {name} (it could lift a resource limit or reach the server's files; free: {}; \
         lower only: {})",
        FREE_SETTINGS.join(", "),
        LIMIT_SETTINGS.join(", ")
    )))
}

/// Ok when `wanted` (the bound `SET name = value` asks for; `None`: none) is no higher than
/// `current` (`None`: none); what is wrong (naming the current bound as `show` prints it)
/// otherwise.
fn only_lower<T: PartialOrd>(
    name: &str,
    value: &str,
    wanted: Option<T>,
    current: Option<T>,
    show: impl Fn(T) -> String,
) -> std::result::Result<(), String> {
    match (wanted, current) {
        (Some(wanted), Some(current)) if wanted <= current => Ok(()),
        (Some(_), None) => Ok(()),
        (_, current) => Err(format!(
            "raising {name} to '{value}' ({} now)",
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

    /// A restricted session of a DBA: bounded by the RESTRICTED role as a new catalog has it.
    fn restricted() -> Grants {
        crate::catalog::security::SecurityState::default().grants_of("SYS", true)
    }

    fn check_setting(name: &str, value: Option<&str>, own: &AccelsqlOptions) -> Result<()> {
        super::check_setting(name, value, own, &restricted())
    }

    #[test]
    fn a_user_without_the_privilege_gets_exasols_words() {
        let user = crate::catalog::security::SecurityState::default().grants_of("ANN", false);
        let e = require(&user, SystemPrivilege::UseGpu, "running f on the GPU").unwrap_err();
        assert_eq!(
            e.to_string(),
            "[42501] insufficient privileges: running f on the GPU needs the USE GPU privilege"
        );
        let script = ScriptRef {
            key: "public.f".into(),
            owner: Some("ANN".into()),
        };
        check_execute(&user, &script).unwrap();
        let other = ScriptRef {
            key: "public.g".into(),
            owner: None,
        };
        assert!(check_execute(&user, &other).is_err());
        // SYS holds everything; a restricted SYS session may run every script still.
        check_execute(&Grants::sys(), &other).unwrap();
        check_execute(&restricted(), &other).unwrap();
        assert!(require(&restricted(), SystemPrivilege::CreateScript, "x").is_err());
    }

    #[test]
    fn the_data_directory_is_never_a_file_location() {
        use crate::core::privileges::check_outside_data_dir;
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        std::fs::create_dir_all(data.join("public")).unwrap();
        std::fs::write(data.join("server-token"), "t").unwrap();
        let d = Some(data.as_path());
        let refused = |location: String| {
            let e = check_outside_data_dir(&location, d).unwrap_err();
            assert_eq!(e.code(), "42501", "{location}");
        };
        refused(data.join("server-token").display().to_string());
        refused(format!("file://{}", data.join("scripts.json").display()));
        refused(format!(
            "{}/../data/server-token",
            data.join("public").display()
        ));
        refused(format!("{}/*.csv", data.join("public").display()));
        refused(format!("{}/new/not-yet.csv", data.display()));
        // A folder or glob that holds the data directory would list its files too.
        refused(format!("{}/", root.path().display()));
        refused(format!("{}/**/*.json", root.path().display()));
        let beside = root.path().join("beside.csv");
        check_outside_data_dir(&beside.display().to_string(), d).unwrap();
        check_outside_data_dir("s3://bucket/data/server-token", d).unwrap();
        check_outside_data_dir(&data.join("x").display().to_string(), None).unwrap();
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
