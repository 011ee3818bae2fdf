//! The metadata commands of Exasol's WebSocket API (version 2 and later: `getSchemas`,
//! `getTables`, `getColumns`, `getScripts`, `getKeywords`, `getTypeInfo`, what pyexasol's
//! `meta.schema_exists`, `table_exists` and `list_sql_keywords` send) as queries of the engine's
//! Exasol system views, so that they show what the session may see and nothing else. Their
//! result sets have JDBC's column names, as Exasol's do.

use accelsql_engine::datafusion::common::ScalarValue;
use serde_json::Value;

/// The metadata commands answered.
pub(crate) const COMMANDS: [&str; 6] = [
    "getSchemas",
    "getTables",
    "getColumns",
    "getScripts",
    "getKeywords",
    "getTypeInfo",
];

/// A request's `LIKE` pattern of `field`: `null` or absent is every name (`%`), `""` none.
fn pattern(request: &Value, field: &str) -> ScalarValue {
    ScalarValue::Utf8(Some(request[field].as_str().unwrap_or("%").to_string()))
}

/// The query that answers `command` (one of [`COMMANDS`]) and its parameters.
pub(crate) fn query(command: &str, request: &Value) -> Option<(String, Vec<ScalarValue>)> {
    let p = |field| pattern(request, field);
    // `tableTypes`: which of TABLE and VIEW (accelsql has no system tables to list).
    let kinds: Vec<&str> = match request["tableTypes"].as_array() {
        None => vec!["TABLE", "VIEW"],
        Some(types) => ["TABLE", "VIEW"]
            .into_iter()
            .filter(|k| types.iter().any(|t| t.as_str() == Some(k)))
            .collect(),
    };
    let types = if kinds.is_empty() {
        " AND FALSE".to_string()
    } else {
        format!(" AND {{kind}} IN ('{}')", kinds.join("', '"))
    };
    let (sql, params) = match command {
        "getSchemas" => (
            "SELECT schema_name AS table_schem, CAST(NULL AS VARCHAR(128)) AS table_catalog \
             FROM sys.exa_schemas WHERE schema_name LIKE ? ORDER BY 1"
                .to_string(),
            vec![p("schema")],
        ),
        "getTables" => (
            format!(
                "SELECT CAST(NULL AS VARCHAR(128)) AS table_cat, root_name AS table_schem, \
                 object_name AS table_name, object_type AS table_type, object_comment AS remarks \
                 FROM sys.exa_all_objects WHERE root_name LIKE ? AND object_name LIKE ?{} \
                 ORDER BY 2, 3",
                types.replace("{kind}", "object_type")
            ),
            vec![p("schema"), p("table")],
        ),
        "getColumns" => (
            format!(
                "SELECT CAST(NULL AS VARCHAR(128)) AS table_cat, column_schema AS table_schem, \
                 column_table AS table_name, column_name, column_type AS type_name, \
                 column_maxsize AS column_size, column_num_scale AS decimal_digits, \
                 column_is_nullable AS is_nullable, column_default AS column_def, \
                 column_ordinal_position AS ordinal_position, column_comment AS remarks \
                 FROM sys.exa_all_columns WHERE column_schema LIKE ? AND column_table LIKE ? \
                 AND column_name LIKE ?{} ORDER BY 2, 3, column_ordinal_position",
                types.replace("{kind}", "column_object_type")
            ),
            vec![p("schema"), p("table"), p("column")],
        ),
        "getScripts" => (
            "SELECT CAST(NULL AS VARCHAR(128)) AS script_cat, script_schema AS script_schem, \
             script_name, script_type, script_language, script_input_type, \
             script_result_type, script_comment AS remarks \
             FROM sys.exa_all_scripts WHERE script_schema LIKE ? AND script_name LIKE ? \
             ORDER BY 2, 3"
                .to_string(),
            vec![p("schema"), p("script")],
        ),
        "getKeywords" => (
            "SELECT keyword, reserved FROM sys.exa_sql_keywords ORDER BY 1".to_string(),
            vec![],
        ),
        "getTypeInfo" => (
            // Exasol's types with their JDBC type numbers and largest precision.
            "SELECT type_name, data_type, precision FROM (VALUES \
             ('BOOLEAN', 16, 1), ('CHAR', 1, 2000), ('DATE', 91, 10), ('DECIMAL', 3, 36), \
             ('DOUBLE', 8, 64), ('GEOMETRY', -4, 2000000), ('HASHTYPE', -2, 1024), \
             ('INTERVAL DAY TO SECOND', -104, 9), ('INTERVAL YEAR TO MONTH', -103, 9), \
             ('TIMESTAMP', 93, 29), ('TIMESTAMP WITH LOCAL TIME ZONE', 93, 29), \
             ('VARCHAR', 12, 2000000)) AS t(type_name, data_type, precision) ORDER BY 1"
                .to_string(),
            vec![],
        ),
        _ => return None,
    };
    Some((sql, params))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn patterns_default_to_every_name_and_types_choose_tables_or_views() {
        let (sql, params) = query("getTables", &json!({"schema": "S%"})).unwrap();
        assert_eq!(
            params,
            vec![
                ScalarValue::Utf8(Some("S%".into())),
                ScalarValue::Utf8(Some("%".into()))
            ]
        );
        assert!(sql.contains("object_type IN ('TABLE', 'VIEW')"), "{sql}");
        let (sql, _) = query("getTables", &json!({"tableTypes": ["VIEW"]})).unwrap();
        assert!(sql.contains("object_type IN ('VIEW')"), "{sql}");
        let (sql, _) = query("getColumns", &json!({"tableTypes": ["SYSTEM TABLE"]})).unwrap();
        assert!(sql.contains("AND FALSE"), "{sql}");
        assert!(query("getUsers", &json!({})).is_none());
        assert!(COMMANDS.iter().all(|c| query(c, &json!({})).is_some()));
    }
}
