//! The front end's rewrites of a statement before DataFusion plans it, in one ordered list.
//!
//! A statement's text goes through, in this order:
//!
//! 1. Text passes, on the tokens of the text before it is parsed (they change what parses):
//!    in the Exasol dialect, quoted names and `''` (`front/exasol/dialect.rs`); Exasol syntax
//!    DataFusion rejects (`front/exasol/text.rs`); and a script call site's
//!    `EMITS (a INT, …)`, which names a UDF of that call only (`front/scripts/dynamic.rs`).
//! 2. Statement passes, on the parsed statement: [`NAME_PASSES`], then the statement's label is
//!    taken (its text as `accelsql.gpu_leases` and `accelsql.udf_calls` show it), then
//!    [`BINDING_PASSES`]. Each is a small function of its own file, with its own tests.
//! 3. Result passes, on the planned result's column names ([`OutputNames`]): names that
//!    repeated select items were aliased to get their own back, and under
//!    `SET accelsql.identifier_case = 'upper'` unquoted names are shown upper case (in the
//!    Exasol dialect, `front/exasol/dialect.rs` names the result instead).
//!
//! DataFusion's own analyzer and optimizer rules (accelsql adds the EMITS rule and the
//! placement rule, see `plan/`) run after these, on the logical plan.

pub(crate) mod emits_calls;
pub(crate) mod exasol_conversions;
pub(crate) mod exasol_functions;
pub(crate) mod exasol_types;
pub(crate) mod identifier_case;
pub(crate) mod placeholders;
pub(crate) mod repeated;
pub(crate) mod script_calls;
pub(crate) mod system_tables;
pub(crate) mod values_subqueries;

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::sql::parser::Statement as DfStatement;

use self::exasol_functions::SessionValues;
use self::script_calls::NameScope;
use crate::core::error::Result;
use crate::udf::SetUdf;
use crate::udf::script::definition::ScriptEntry;

/// What the statement passes read of the session they run in.
pub(crate) struct PassContext<'a> {
    /// The catalog's scripts, for resolving script calls by name.
    pub(crate) scripts: &'a [Arc<ScriptEntry>],
    /// The current schema and the names of built-in functions.
    pub(crate) names: NameScope<'a>,
    /// The EMITS UDF a function name calls in this session, if any.
    pub(crate) emits_udf: &'a (dyn Fn(&str) -> Option<Arc<SetUdf>> + Sync),
    /// What Exasol's niladic functions (`CURRENT_SCHEMA`, …) say now.
    pub(crate) values: &'a SessionValues,
    /// Whether the current schema has a table of a name (which then hides a system table's).
    pub(crate) has_table: &'a (dyn Fn(&str) -> bool + Sync),
    /// Whether the session speaks Exasol's dialect (`accelsql.sql_dialect = 'exasol'`).
    pub(crate) exasol: bool,
}

/// One rewrite of a parsed statement.
pub(crate) struct StatementPass {
    /// What it does, in a few words.
    pub(crate) name: &'static str,
    /// The rewrite.
    pub(crate) run: fn(&mut DfStatement, &PassContext<'_>) -> Result<()>,
}

/// The passes that resolve and rewrite names, in the order they run: each later pass sees
/// what the earlier ones wrote (the EMITS expansion sees resolved script names; aliasing sees
/// Exasol's functions mapped; system tables are qualified last, after every table name is
/// final).
pub(crate) const NAME_PASSES: [StatementPass; 8] = [
    StatementPass {
        name: "map Exasol types and interval literals",
        run: |s, _| {
            exasol_types::map_exasol_types(s);
            Ok(())
        },
    },
    StatementPass {
        name: "make the Exasol dialect's conversions explicit",
        run: |s, cx| {
            if cx.exasol {
                exasol_conversions::make_conversions_explicit(s);
            }
            Ok(())
        },
    },
    StatementPass {
        name: "lift VALUES rows with subqueries",
        run: |s, _| {
            values_subqueries::lift_values_subqueries(s);
            Ok(())
        },
    },
    StatementPass {
        name: "resolve script calls",
        run: |s, cx| script_calls::resolve_script_calls(s, cx.scripts, &cx.names),
    },
    StatementPass {
        name: "expand EMITS calls",
        run: |s, cx| emits_calls::expand_emits_calls(s, cx.emits_udf),
    },
    StatementPass {
        name: "map Exasol functions",
        run: |s, cx| {
            exasol_functions::map_exasol_functions(s, cx.values);
            Ok(())
        },
    },
    StatementPass {
        name: "alias repeated select items",
        run: |s, _| {
            repeated::alias_repeated_select_items(s);
            Ok(())
        },
    },
    StatementPass {
        name: "qualify system tables",
        run: |s, cx| {
            system_tables::qualify_system_tables(s, cx.has_table);
            Ok(())
        },
    },
];

/// The passes that prepare the statement's parameters, after its label is taken (so a label
/// shows `?` where the user wrote one).
pub(crate) const BINDING_PASSES: [StatementPass; 1] = [StatementPass {
    name: "number ? placeholders",
    run: |s, _| placeholders::number_question_marks(s),
}];

/// A statement after the statement passes.
#[derive(Debug)]
pub(crate) struct Rewritten {
    /// The statement to plan.
    pub(crate) statement: DfStatement,
    /// Its text after the name passes (see [`NAME_PASSES`]).
    pub(crate) label: String,
    /// What the result passes need from the statement as the user wrote it.
    pub(crate) output: OutputNames,
    /// The columns a `CREATE TABLE t (…)` declares, with their SQL types as Exasol names them
    /// (see [`exasol_types::declared_column_types`]); empty for other statements.
    pub(crate) declared_types: Vec<(String, String)>,
}

/// Runs the [`NAME_PASSES`] over `statement`, in order, and takes its label; the first pass that
/// fails fails the statement. [`Rewritten::bind`] runs the rest.
pub(crate) fn rewrite_names(mut statement: DfStatement, cx: &PassContext<'_>) -> Result<Rewritten> {
    // Before the rewrites, which quote the names they write.
    let output = OutputNames {
        quoted: identifier_case::quoted_output_names(&statement),
    };
    let declared_types = exasol_types::declared_column_types(&statement);
    for pass in &NAME_PASSES {
        log::trace!("front-end pass: {}", pass.name);
        (pass.run)(&mut statement, cx)?;
    }
    let label = statement.to_string();
    Ok(Rewritten {
        statement,
        label,
        output,
        declared_types,
    })
}

impl Rewritten {
    /// Runs the [`BINDING_PASSES`] over the statement, in order.
    pub(crate) fn bind(&mut self, cx: &PassContext<'_>) -> Result<()> {
        for pass in &BINDING_PASSES {
            log::trace!("front-end pass: {}", pass.name);
            (pass.run)(&mut self.statement, cx)?;
        }
        Ok(())
    }
}

/// Runs every statement pass over `statement`: [`rewrite_names`], then [`Rewritten::bind`].
#[cfg(test)]
pub(crate) fn rewrite(statement: DfStatement, cx: &PassContext<'_>) -> Result<Rewritten> {
    let mut rewritten = rewrite_names(statement, cx)?;
    rewritten.bind(cx)?;
    Ok(rewritten)
}

/// The result passes: the names of a statement's result columns as the user wrote them.
#[derive(Debug, Clone, Default)]
pub(crate) struct OutputNames {
    /// The select items the user quoted (their names keep their case).
    quoted: HashSet<String>,
}

impl OutputNames {
    /// The result's schema renamed, or `None` when no name changes: names that the repeated
    /// select items got back, and with `upper_case` (`accelsql.identifier_case = 'upper'`)
    /// unquoted names in upper case.
    pub(crate) fn rename(&self, schema: &SchemaRef, upper_case: bool) -> Option<SchemaRef> {
        let mut renamed = None;
        if let Some(restored) = repeated::restore_repeated_names(schema) {
            renamed = Some(restored);
        }
        if upper_case {
            let current = renamed.as_ref().unwrap_or(schema);
            if let Some(upper) = identifier_case::upper_case_names(current, &self.quoted) {
                renamed = Some(upper);
            }
        }
        renamed
    }
}

/// The first statement of `sql`, parsed as a pass sees it (for the passes' tests).
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) fn parse(sql: &str) -> DfStatement {
    datafusion::sql::parser::DFParserBuilder::new(sql)
        .build()
        .unwrap()
        .parse_statements()
        .unwrap()
        .pop_front()
        .unwrap()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::HashSet;

    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn run(sql: &str, has_table: &(dyn Fn(&str) -> bool + Sync)) -> Rewritten {
        let builtins = HashSet::new();
        let values = SessionValues {
            db_time_zone: "UTC".into(),
            session_time_zone: "UTC".into(),
            current_schema: Some("PUBLIC".into()),
            current_user: "SYS".into(),
        };
        let cx = PassContext {
            scripts: &[],
            names: NameScope {
                current: "public",
                builtins: &builtins,
                exasol: false,
            },
            emits_udf: &|_| None,
            values: &values,
            has_table,
            exasol: false,
        };
        rewrite(parse(sql), &cx).unwrap()
    }

    #[test]
    fn the_passes_run_in_order_and_the_label_keeps_question_marks() {
        let out = run(
            "SELECT MOD(x, 2), MOD(x, 2), ? FROM dual WHERE y = ?",
            &|_| false,
        );
        // Exasol's MOD is mapped before the repeated items are aliased, so both copies are
        // the same expression and the second gets an alias; DUAL is qualified; the label is
        // taken before the placeholders are numbered.
        let label = out.label.to_lowercase();
        assert!(
            label.starts_with("select ((x) % (2)), ((x) % (2)) as \"__accelsql_repeat_of_0_1\""),
            "{label}"
        );
        assert!(label.contains("sys.\"dual\""), "{label}");
        assert!(label.contains('?') && !label.contains("$1"), "{label}");
        let planned = out.statement.to_string();
        assert!(
            planned.contains("$1") && planned.contains("$2"),
            "{planned}"
        );
        assert!(!planned.contains('?'), "{planned}");
    }

    #[test]
    fn a_table_named_dual_in_the_current_schema_is_not_qualified() {
        let out = run("SELECT * FROM dual", &|name| name == "dual");
        assert!(!out.label.contains("sys"), "{}", out.label);
    }

    #[test]
    fn the_pass_lists_name_each_pass_once() {
        let names: Vec<&str> = NAME_PASSES
            .iter()
            .chain(&BINDING_PASSES)
            .map(|p| p.name)
            .collect();
        let unique: HashSet<&&str> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert_eq!(names.last(), Some(&"number ? placeholders"));
    }

    #[test]
    fn output_names_are_upper_case_only_when_asked() {
        let out = run("SELECT a, \"b\" FROM t", &|_| false);
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Int32, true),
        ]));
        assert!(out.output.rename(&schema, false).is_none());
        let upper = out.output.rename(&schema, true).unwrap();
        assert_eq!(upper.field(0).name(), "A");
        assert_eq!(upper.field(1).name(), "b");
    }
}
