//! Exasol's views of the engine's tables and their columns, in schema `sys`: `EXA_ALL_TABLES`
//! and `EXA_ALL_COLUMNS` (the tables the session may read: its own, those granted to it, every
//! one with `SELECT ANY TABLE`), `EXA_USER_TABLES` and `EXA_USER_COLUMNS` (those its user
//! owns), with each table's owner; `EXA_SCHEMAS` (the schemas) and `EXA_SQL_KEYWORDS` (the
//! parser's keywords, `RESERVED` where it refuses them as a bare alias). Names are shown as
//! Exasol names them (upper
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
use super::system_table::{Producer, SystemContext, SystemTable, TableMaker};
use crate::core::names::{ExasolType, exasol_field_type, exasol_name, swap_case};
use crate::core::options::SqlDialect;
use crate::core::owners::SessionIdentity;
use crate::core::privileges::{ObjectPrivilege, SYS_USER};

/// `table`, reading the newest snapshot of every stored table before each scan.
fn with_tables(table: Arc<SystemTable>) -> Arc<SystemTable> {
    table.refreshing_tables()
}

/// The views' names (lower case), reachable unqualified from any schema.
pub(crate) const TABLE_VIEWS: [&str; 9] = [
    "exa_all_tables",
    "exa_user_tables",
    "exa_all_columns",
    "exa_user_columns",
    "exa_schemas",
    "exa_sql_keywords",
    "exa_all_objects",
    "exa_all_views",
    "exa_all_constraint_columns",
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

/// One table (or view) as the views show it: its columns and owner.
struct TableRow {
    schema: String,
    table: String,
    owner: String,
    columns: Vec<ColumnRow>,
    /// `TABLE` or `VIEW`.
    kind: &'static str,
    /// A view's definition.
    text: Option<String>,
}

/// The tables of the session's default catalog that the session may read, outside the
/// engine's schemas (`hidden`), with names as the session's dialect shows them; `own`: only
/// those its user owns. Stored tables are read from their newest snapshot (which the view's
/// scan has just refreshed), memory and temporary tables from their providers.
fn session_tables(
    state: &SessionState,
    engine: &SystemContext,
    who: &SessionIdentity,
    hidden: &[&str],
    own: bool,
) -> Vec<TableRow> {
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
    let grants = who.grants();
    let tables = &engine.state.tables;
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
        let mut names = schema.table_names();
        names.sort();
        for table_name in names {
            let key = format!("{schema_name}.{table_name}");
            let stored = tables
                .store()
                .and_then(|s| s.cached_snapshot(&schema_name, &table_name));
            let (fields, owner, kind, text) = match stored {
                Some(snapshot) => (
                    std::sync::Arc::clone(&snapshot.schema.logical),
                    snapshot.owner.clone(),
                    "TABLE",
                    None,
                ),
                None => {
                    // Tables in memory and over files answer at once; one that would wait is
                    // left out rather than block the scan.
                    let Some(Ok(Some(table))) = schema.table(&table_name).now_or_never() else {
                        continue;
                    };
                    let view = table.table_type() == datafusion::datasource::TableType::View;
                    (
                        table.schema(),
                        tables.memory_owner(&key),
                        if view { "VIEW" } else { "TABLE" },
                        table.get_table_definition().map(str::to_string),
                    )
                }
            };
            let owner = owner.unwrap_or_else(|| SYS_USER.to_string());
            if own && owner != grants.user {
                continue;
            }
            if !own
                && grants
                    .may_use_table(&key, Some(&owner), Some(ObjectPrivilege::Select))
                    .is_err()
            {
                continue;
            }
            let columns = fields
                .fields()
                .iter()
                .enumerate()
                .map(|(i, field)| ColumnRow {
                    schema: shown(&schema_name),
                    table: shown(&table_name),
                    name: shown(field.name()),
                    sql_type: exasol_field_type(field),
                    nullable: field.is_nullable(),
                    position: i as u64 + 1,
                })
                .collect();
            rows.push(TableRow {
                schema: shown(&schema_name),
                table: shown(&table_name),
                owner: exasol_name(&owner),
                columns,
                kind,
                text,
            });
        }
    }
    rows
}

/// Reads the tables (and views) the session may read (`true`: those its user owns).
type ReadTables = dyn Fn(&SystemContext, bool) -> Vec<TableRow> + Send + Sync;

/// A producer whose columns `make` builds from what `read` reads at each scan.
fn over_tables(
    read: &Arc<ReadTables>,
    own: bool,
    make: impl Fn(Vec<TableRow>) -> Vec<ArrayRef> + Send + Sync + 'static,
) -> Box<Producer> {
    let read = Arc::clone(read);
    Box::new(move |engine| Ok(make(read(engine, own))))
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
    let read: Arc<ReadTables> = {
        let (state, who) = (std::sync::Weak::clone(&state), Arc::clone(who));
        Arc::new(move |engine, own| {
            state
                .upgrade()
                .map(|s| session_tables(&s.read(), engine, &who, hidden, own))
                .unwrap_or_default()
        })
    };
    let tables = |own: bool| {
        over_tables(&read, own, |rows| {
            let rows: Vec<TableRow> = rows.into_iter().filter(|t| t.kind == "TABLE").collect();
            vec![
                strings(rows.iter().map(|t| Some(t.schema.clone()))),
                strings(rows.iter().map(|t| Some(t.table.clone()))),
                strings(rows.iter().map(|t| Some(t.owner.clone()))),
                Arc::new(UInt64Array::from_iter_values(
                    rows.iter().map(|t| t.columns.len() as u64),
                )) as ArrayRef,
                strings(rows.iter().map(|_| None)),
            ]
        })
    };
    let table_columns = [
        ("table_schema", Utf8),
        ("table_name", Utf8),
        ("table_owner", Utf8),
        ("table_column_count", UInt64),
        ("table_comment", Utf8),
    ];
    ctx.register_table(
        "sys.exa_all_tables",
        with_tables(table(&table_columns, tables(false))),
    )?;
    ctx.register_table(
        "sys.exa_user_tables",
        with_tables(table(&table_columns, tables(true))),
    )?;

    let columns = |own: bool| {
        over_tables(&read, own, |tables| {
            let owners: Vec<String> = tables
                .iter()
                .flat_map(|t| t.columns.iter().map(|_| t.owner.clone()))
                .collect();
            let kinds: Vec<&str> = tables
                .iter()
                .flat_map(|t| t.columns.iter().map(|_| t.kind))
                .collect();
            let rows: Vec<ColumnRow> = tables.into_iter().flat_map(|t| t.columns).collect();
            let text = |f: &dyn Fn(&ColumnRow) -> Option<String>| strings(rows.iter().map(f));
            let number = |f: &dyn Fn(&ColumnRow) -> Option<u64>| -> ArrayRef {
                Arc::new(rows.iter().map(f).collect::<UInt64Array>())
            };
            vec![
                text(&|r| Some(r.schema.clone())),
                text(&|r| Some(r.table.clone())),
                strings(kinds.iter().map(|k| Some((*k).to_string()))),
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
                strings(owners.into_iter().map(Some)),
                text(&|_| None),
                text(&|_| None),
                Arc::new(rows.iter().map(|_| Some(false)).collect::<BooleanArray>()) as ArrayRef,
            ]
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
        ("column_identity", Utf8),
        ("column_is_distribution_key", Boolean),
    ];
    ctx.register_table(
        "sys.exa_all_columns",
        with_tables(table(&column_columns, columns(false))),
    )?;
    ctx.register_table(
        "sys.exa_user_columns",
        with_tables(table(&column_columns, columns(true))),
    )?;

    let objects = over_tables(&read, false, |rows| {
        vec![
            strings(rows.iter().map(|t| Some(t.table.clone()))),
            strings(rows.iter().map(|t| Some(t.kind.to_string()))),
            strings(rows.iter().map(|t| Some(t.owner.clone()))),
            strings(rows.iter().map(|t| Some(t.schema.clone()))),
            strings(rows.iter().map(|_| Some("SCHEMA".to_string()))),
            Arc::new(rows.iter().map(|_| Some(false)).collect::<BooleanArray>()) as ArrayRef,
            strings(rows.iter().map(|_| None)),
        ]
    });
    ctx.register_table(
        "sys.exa_all_objects",
        with_tables(table(
            &[
                ("object_name", Utf8),
                ("object_type", Utf8),
                ("owner", Utf8),
                ("root_name", Utf8),
                ("root_type", Utf8),
                ("object_is_virtual", Boolean),
                ("object_comment", Utf8),
            ],
            objects,
        )),
    )?;
    let views = over_tables(&read, false, |rows| {
        let rows: Vec<TableRow> = rows.into_iter().filter(|t| t.kind == "VIEW").collect();
        vec![
            strings(rows.iter().map(|t| Some(t.schema.clone()))),
            strings(rows.iter().map(|t| Some(t.table.clone()))),
            strings(rows.iter().map(|t| Some(t.schema.clone()))),
            strings(rows.iter().map(|t| Some(t.owner.clone()))),
            strings(rows.iter().map(|t| t.text.clone())),
            strings(rows.iter().map(|_| None)),
        ]
    });
    ctx.register_table(
        "sys.exa_all_views",
        with_tables(table(
            &[
                ("view_schema", Utf8),
                ("view_name", Utf8),
                ("scope_schema", Utf8),
                ("view_owner", Utf8),
                ("view_text", Utf8),
                ("view_comment", Utf8),
            ],
            views,
        )),
    )?;
    // accelsql keeps no constraints: the view is there, with Exasol's columns, and empty.
    let constraint_columns = [
        "constraint_schema",
        "constraint_table",
        "constraint_type",
        "constraint_name",
        "constraint_owner",
        "column_name",
        "referenced_schema",
        "referenced_table",
        "referenced_column",
    ];
    let mut no_constraints: Vec<(&str, DataType)> =
        constraint_columns.iter().map(|c| (*c, Utf8)).collect();
    no_constraints.push(("ordinal_position", UInt64));
    ctx.register_table(
        "sys.exa_all_constraint_columns",
        table(
            &no_constraints,
            Box::new(move |_| {
                let mut columns: Vec<ArrayRef> = constraint_columns
                    .iter()
                    .map(|_| strings(std::iter::empty::<Option<String>>()))
                    .collect();
                columns.push(Arc::new(UInt64Array::from(Vec::<u64>::new())));
                Ok(columns)
            }),
        ),
    )?;

    let schemas: Box<Producer> = Box::new(move |_| {
        let names = state
            .upgrade()
            .map(|s| session_schemas(&s.read(), hidden))
            .unwrap_or_default();
        Ok(vec![
            strings(names.iter().map(|n| Some(n.clone()))),
            strings(names.iter().map(|_| Some(SYS_USER.to_ascii_uppercase()))),
            Arc::new(names.iter().map(|_| Some(false)).collect::<BooleanArray>()) as ArrayRef,
            strings(names.iter().map(|_| None)),
        ])
    });
    ctx.register_table(
        "sys.exa_schemas",
        table(
            &[
                ("schema_name", Utf8),
                ("schema_owner", Utf8),
                ("schema_is_virtual", Boolean),
                ("schema_comment", Utf8),
            ],
            schemas,
        ),
    )?;
    let keywords: Box<Producer> = Box::new(|_| {
        use datafusion::sql::sqlparser::keywords::{
            ALL_KEYWORDS, ALL_KEYWORDS_INDEX, RESERVED_FOR_COLUMN_ALIAS, RESERVED_FOR_TABLE_ALIAS,
        };
        let reserved = ALL_KEYWORDS_INDEX.iter().map(|k| {
            Some(RESERVED_FOR_COLUMN_ALIAS.contains(k) || RESERVED_FOR_TABLE_ALIAS.contains(k))
        });
        Ok(vec![
            strings(ALL_KEYWORDS.iter().map(|k| Some((*k).to_string()))),
            Arc::new(reserved.collect::<BooleanArray>()) as ArrayRef,
        ])
    });
    ctx.register_table(
        "sys.exa_sql_keywords",
        table(&[("keyword", Utf8), ("reserved", Boolean)], keywords),
    )?;
    Ok(())
}

/// The schemas of the session's default catalog outside the engine's (`hidden`), named as the
/// session's dialect shows them, sorted.
fn session_schemas(state: &SessionState, hidden: &[&str]) -> Vec<String> {
    let options = state.config_options();
    let exasol = SqlDialect::of(options) == SqlDialect::Exasol;
    let Some(catalog) = state
        .catalog_list()
        .catalog(&options.catalog.default_catalog)
    else {
        return Vec::new();
    };
    let mut names: Vec<String> = catalog
        .schema_names()
        .into_iter()
        .filter(|n| !hidden.contains(&n.as_str()))
        .map(|n| {
            if exasol {
                swap_case(&n)
            } else {
                exasol_name(&n)
            }
        })
        .collect();
    names.sort();
    names
}
