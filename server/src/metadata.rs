//! What the metadata RPCs answer: the server's SqlInfo, its SQL types (XDBC), and a session's
//! catalogs, schemas, tables and table types; empty results of the right schema for keys.

use std::sync::{Arc, LazyLock};

use accelsql_engine::Session;
use accelsql_engine::datafusion::arrow::array::RecordBatch;
use accelsql_engine::datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use accelsql_engine::datafusion::datasource::TableType;
use arrow_flight::sql::metadata::{
    GetCatalogsBuilder, GetTablesBuilder, SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo,
    XdbcTypeInfoData, XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{
    CommandGetDbSchemas, CommandGetTables, Nullable, Searchable, SqlInfo, SqlSupportedTransaction,
    XdbcDataType,
};

use crate::error::{Result, ServerError};

/// The server's answers to GetSqlInfo.
pub(crate) static SQL_INFO: LazyLock<Option<SqlInfoData>> = LazyLock::new(|| {
    let mut b = SqlInfoDataBuilder::new();
    b.append(SqlInfo::FlightSqlServerName, "accelsql");
    b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    // The Arrow format version (Schema.fbs's MetadataVersion V5 is format 1.x).
    b.append(SqlInfo::FlightSqlServerArrowVersion, "1.5");
    b.append(SqlInfo::FlightSqlServerReadOnly, false);
    b.append(SqlInfo::FlightSqlServerSql, true);
    b.append(SqlInfo::FlightSqlServerSubstrait, false);
    b.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    b.append(SqlInfo::FlightSqlServerCancel, true);
    b.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    b.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, false);
    b.append(SqlInfo::SqlDdlCatalog, false);
    b.append(SqlInfo::SqlDdlSchema, true);
    b.append(SqlInfo::SqlDdlTable, true);
    b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    b.append(SqlInfo::SqlAllTablesAreSelectable, true);
    b.append(SqlInfo::SqlSearchStringEscape, "\\");
    b.append(SqlInfo::SqlSupportsColumnAliasing, true);
    b.append(SqlInfo::SqlNullPlusNullIsNull, true);
    b.append(SqlInfo::SqlSupportsExpressionsInOrderBy, true);
    b.append(SqlInfo::SqlSupportsOrderByUnrelated, true);
    b.append(SqlInfo::SqlSupportsNonNullableColumns, true);
    b.append(SqlInfo::SqlSchemaTerm, "schema");
    b.append(SqlInfo::SqlCatalogTerm, "catalog");
    b.append(SqlInfo::SqlProcedureTerm, "script");
    b.append(SqlInfo::SqlSelectForUpdateSupported, false);
    b.append(SqlInfo::SqlStoredProceduresSupported, false);
    b.append(SqlInfo::SqlCorrelatedSubqueriesSupported, true);
    b.append(SqlInfo::SqlTransactionsSupported, false);
    b.build().ok()
});

/// The server's answers to GetSqlInfo, or an internal error if they could not be built.
pub(crate) fn sql_info() -> Result<&'static SqlInfoData> {
    SQL_INFO.as_ref().ok_or_else(|| ServerError::Internal {
        message: "the server's SqlInfo could not be built".into(),
    })
}

fn xdbc(
    name: &str,
    data_type: XdbcDataType,
    column_size: Option<i32>,
    quoted: bool,
) -> XdbcTypeInfo {
    XdbcTypeInfo {
        type_name: name.into(),
        data_type,
        column_size,
        literal_prefix: quoted.then(|| "'".into()),
        literal_suffix: quoted.then(|| "'".into()),
        create_params: None,
        nullable: Nullable::NullabilityNullable,
        case_sensitive: quoted,
        searchable: Searchable::Full,
        unsigned_attribute: (!quoted).then_some(false),
        fixed_prec_scale: false,
        auto_increment: Some(false),
        local_type_name: Some(name.into()),
        minimum_scale: None,
        maximum_scale: None,
        sql_data_type: data_type,
        datetime_subcode: None,
        num_prec_radix: (!quoted).then_some(10),
        interval_precision: None,
    }
}

/// The SQL types scripts and tables use, for GetXdbcTypeInfo.
pub(crate) static XDBC_INFO: LazyLock<Option<XdbcTypeInfoData>> = LazyLock::new(|| {
    let mut b = XdbcTypeInfoDataBuilder::new();
    b.append(xdbc("BIGINT", XdbcDataType::XdbcBigint, Some(19), false));
    b.append(xdbc("BOOLEAN", XdbcDataType::XdbcBit, Some(1), false));
    b.append(xdbc("DATE", XdbcDataType::XdbcDate, Some(10), true));
    b.append(xdbc("DECIMAL", XdbcDataType::XdbcDecimal, Some(38), false));
    b.append(xdbc("DOUBLE", XdbcDataType::XdbcDouble, Some(15), false));
    b.append(xdbc("INTEGER", XdbcDataType::XdbcInteger, Some(10), false));
    b.append(xdbc(
        "TIMESTAMP",
        XdbcDataType::XdbcTimestamp,
        Some(29),
        true,
    ));
    b.append(xdbc("VARCHAR", XdbcDataType::XdbcVarchar, None, true));
    b.build().ok()
});

/// The answers to GetXdbcTypeInfo.
pub(crate) fn xdbc_info() -> Result<&'static XdbcTypeInfoData> {
    XDBC_INFO.as_ref().ok_or_else(|| ServerError::Internal {
        message: "the server's XDBC type info could not be built".into(),
    })
}

/// The table types tables report (GetTableTypes).
pub(crate) const TABLE_TYPES: [&str; 3] = ["TABLE", "VIEW", "LOCAL TEMPORARY"];

fn table_type_name(t: TableType) -> &'static str {
    match t {
        TableType::Base => "TABLE",
        TableType::View => "VIEW",
        TableType::Temporary => "LOCAL TEMPORARY",
    }
}

/// The session's catalogs (GetCatalogs).
pub(crate) fn catalogs(session: &Session) -> Result<RecordBatch> {
    let mut builder = GetCatalogsBuilder::new();
    let mut names = session.context().catalog_names();
    names.sort();
    for name in names {
        builder.append(name);
    }
    builder.build().map_err(metadata_failed)
}

/// The session's schemas, filtered as the command asks (GetDbSchemas).
pub(crate) fn schemas(session: &Session, query: CommandGetDbSchemas) -> Result<RecordBatch> {
    let mut builder = query.into_builder();
    let ctx = session.context();
    let mut catalogs = ctx.catalog_names();
    catalogs.sort();
    for catalog_name in catalogs {
        let Some(catalog) = ctx.catalog(&catalog_name) else {
            continue;
        };
        let mut names = catalog.schema_names();
        names.sort();
        for schema in names {
            builder.append(&catalog_name, schema);
        }
    }
    builder.build().map_err(metadata_failed)
}

/// The session's tables (with their Arrow schemas when asked), filtered as the command asks
/// (GetTables).
pub(crate) async fn tables(session: &Session, query: CommandGetTables) -> Result<RecordBatch> {
    let mut builder: GetTablesBuilder = query.into_builder();
    let ctx = session.context();
    let mut catalogs = ctx.catalog_names();
    catalogs.sort();
    for catalog_name in catalogs {
        let Some(catalog) = ctx.catalog(&catalog_name) else {
            continue;
        };
        let mut schema_names = catalog.schema_names();
        schema_names.sort();
        for schema_name in schema_names {
            let Some(schema) = catalog.schema(&schema_name) else {
                continue;
            };
            let mut names = schema.table_names();
            names.sort();
            for name in names {
                // A table that vanished (or fails to open) since it was listed is left out.
                let Ok(Some(table)) = schema.table(&name).await else {
                    continue;
                };
                builder
                    .append(
                        &catalog_name,
                        &schema_name,
                        &name,
                        table_type_name(table.table_type()),
                        table.schema().as_ref(),
                    )
                    .map_err(metadata_failed)?;
            }
        }
    }
    builder.build().map_err(metadata_failed)
}

/// The schema of GetPrimaryKeys' result (accelsql tables have no keys: always empty).
pub(crate) fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// The schema of GetExportedKeys', GetImportedKeys' and GetCrossReference's results (always
/// empty: accelsql has no foreign keys).
pub(crate) fn foreign_keys_schema() -> SchemaRef {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        text("pk_catalog_name", true),
        text("pk_db_schema_name", true),
        text("pk_table_name", false),
        text("pk_column_name", false),
        text("fk_catalog_name", true),
        text("fk_db_schema_name", true),
        text("fk_table_name", false),
        text("fk_column_name", false),
        Field::new("key_sequence", DataType::Int32, false),
        text("fk_key_name", true),
        text("pk_key_name", true),
        Field::new("update_rule", DataType::UInt8, false),
        Field::new("delete_rule", DataType::UInt8, false),
    ]))
}

/// A metadata result that could not be built (a bug, not the client's doing).
pub(crate) fn metadata_failed(e: impl std::fmt::Display) -> ServerError {
    ServerError::Internal {
        message: format!("building a metadata result failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_answers_build() {
        assert!(sql_info().is_ok());
        assert!(xdbc_info().is_ok());
        assert_eq!(primary_keys_schema().fields().len(), 6);
        assert_eq!(foreign_keys_schema().fields().len(), 13);
    }
}
