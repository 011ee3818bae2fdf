//! Exasol's views of a session's tables and their columns, in schema `sys`: `EXA_ALL_TABLES`,
//! `EXA_USER_TABLES`, `EXA_ALL_COLUMNS`, `EXA_USER_COLUMNS` (a session's tables are its own, so
//! the `ALL` and `USER` views show the same rows). Names are shown as Exasol names them (upper
//! case for what SQL wrote unquoted; in the Exasol dialect, its name for each engine name), types
//! with Exasol's names (`DECIMAL(19,0)`, `VARCHAR(2000000) UTF8`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, UInt64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::error::Result as DfResult;
use datafusion::execution::session_state::SessionState;
use datafusion::prelude::SessionContext;
use futures::FutureExt;

use super::columns::strings;
use super::system_table::{Producer, TableMaker};
use crate::core::names::{ExasolType, exasol_field_type, exasol_name, swap_case};
use crate::core::options::SqlDialect;
use crate::core::owners::SessionIdentity;

/// The views' names (lower case), reachable unqualified from any schema.
pub(crate) const TABLE_VIEWS: [&str; 4] = [
    "exa_all_tables",
    "exa_user_tables",
    "exa_all_columns",
    "exa_user_columns",
];

/// One column of a user table, as the views show it.
struct ColumnRow {
    schema: String,
    table: String,
    name: String,
    sql_type: ExasolType,
    nullable: bool,
    position: u64,
}

/// The columns of every table of the session's default catalog, outside the engine's schemas
/// (`hidden`), with names as the session's dialect shows them.
fn session_columns(state: &SessionState, hidden: &[&str]) -> Vec<ColumnRow> {
    let options = state.config_options();
    let exasol = SqlDialect::of(options) == SqlDialect::Exasol;
    let shown = |name: &str| {
        if exasol {
            swap_case(name)
        } else {
            exasol_name(name)
        }
    };
    let Some(catalog) = state
        .catalog_list()
        .catalog(&options.catalog.default_catalog)
    else {
        return Vec::new();
    };
    let mut schemas = catalog.schema_names();
    schemas.sort();
    let mut rows = Vec::new();
    for schema_name in schemas {
        if hidden.contains(&schema_name.as_str()) {
            continue;
        }
        let Some(schema) = catalog.schema(&schema_name) else {
            continue;
        };
        let mut tables = schema.table_names();
        tables.sort();
        for table_name in tables {
            // Tables in memory and over files answer at once; one that would wait is left out
            // rather than block the scan.
            let Some(Ok(Some(table))) = schema.table(&table_name).now_or_never() else {
                continue;
            };
            for (i, field) in table.schema().fields().iter().enumerate() {
                rows.push(ColumnRow {
                    schema: shown(&schema_name),
                    table: shown(&table_name),
                    name: shown(field.name()),
                    sql_type: exasol_field_type(field),
                    nullable: field.is_nullable(),
                    position: i as u64 + 1,
                });
            }
        }
    }
    rows
}

/// Registers the views in `sys` (see the module docs); the tables of schemas `hidden` (the
/// engine's own) are left out.
pub(crate) fn register(
    ctx: &SessionContext,
    table: &TableMaker<'_>,
    who: &Arc<SessionIdentity>,
    hidden: &'static [&'static str],
) -> DfResult<()> {
    use DataType::{Boolean, UInt64, Utf8};
    let state = Arc::downgrade(&ctx.state_ref());
    let tables = || -> Box<Producer> {
        let state = state.clone();
        let who = Arc::clone(who);
        Box::new(move |_| {
            let mut seen: Vec<(String, String, u64)> = Vec::new();
            let rows = state
                .upgrade()
                .map(|s| session_columns(&s.read(), hidden))
                .unwrap_or_default();
            for row in rows {
                match seen.last_mut() {
                    Some((s, t, n)) if *s == row.schema && *t == row.table => *n += 1,
                    _ => seen.push((row.schema, row.table, 1)),
                }
            }
            let owner = exasol_name(&who.grants().user);
            Ok(vec![
                strings(seen.iter().map(|(s, _, _)| Some(s.clone()))),
                strings(seen.iter().map(|(_, t, _)| Some(t.clone()))),
                strings(seen.iter().map(|_| Some(owner.clone()))),
                Arc::new(UInt64Array::from_iter_values(
                    seen.iter().map(|(_, _, n)| *n),
                )) as ArrayRef,
                strings(seen.iter().map(|_| None)),
            ])
        })
    };
    let table_columns = [
        ("table_schema", Utf8),
        ("table_name", Utf8),
        ("table_owner", Utf8),
        ("table_column_count", UInt64),
        ("table_comment", Utf8),
    ];
    ctx.register_table("sys.exa_all_tables", table(&table_columns, tables()))?;
    ctx.register_table("sys.exa_user_tables", table(&table_columns, tables()))?;

    let columns = || -> Box<Producer> {
        let state = state.clone();
        let who = Arc::clone(who);
        Box::new(move |_| {
            let rows = state
                .upgrade()
                .map(|s| session_columns(&s.read(), hidden))
                .unwrap_or_default();
            let owner = exasol_name(&who.grants().user);
            let text = |f: &dyn Fn(&ColumnRow) -> Option<String>| strings(rows.iter().map(f));
            let number = |f: &dyn Fn(&ColumnRow) -> Option<u64>| -> ArrayRef {
                Arc::new(rows.iter().map(f).collect::<UInt64Array>())
            };
            Ok(vec![
                text(&|r| Some(r.schema.clone())),
                text(&|r| Some(r.table.clone())),
                text(&|_| Some("TABLE".into())),
                text(&|r| Some(r.name.clone())),
                text(&|r| Some(r.sql_type.name.clone())),
                number(&|r| r.sql_type.size),
                number(&|r| r.sql_type.precision),
                number(&|r| r.sql_type.scale),
                number(&|r| Some(r.position)),
                Arc::new(
                    rows.iter()
                        .map(|r| Some(r.nullable))
                        .collect::<BooleanArray>(),
                ) as ArrayRef,
                text(&|_| None),
                text(&|_| Some(owner.clone())),
                text(&|_| None),
            ])
        })
    };
    let column_columns = [
        ("column_schema", Utf8),
        ("column_table", Utf8),
        ("column_object_type", Utf8),
        ("column_name", Utf8),
        ("column_type", Utf8),
        ("column_maxsize", UInt64),
        ("column_num_prec", UInt64),
        ("column_num_scale", UInt64),
        ("column_ordinal_position", UInt64),
        ("column_is_nullable", Boolean),
        ("column_default", Utf8),
        ("column_owner", Utf8),
        ("column_comment", Utf8),
    ];
    ctx.register_table("sys.exa_all_columns", table(&column_columns, columns()))?;
    ctx.register_table("sys.exa_user_columns", table(&column_columns, columns()))?;
    Ok(())
}
