//! `CREATE [OR REPLACE] CONNECTION` and `DROP CONNECTION`: named addresses and credentials that
//! scripts read with `exa.get_connection('NAME')` and `IMPORT … AT name` names, kept in the
//! engine's catalog (owner-only `scripts.json` with a data directory).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::catalog::scripts::ScriptCatalog;
use crate::udf::script::definition::{ConnectionEntry, folded_connection_name};

/// Stores a connection.
pub(crate) fn create_connection(
    catalog: &ScriptCatalog,
    name: String,
    address: String,
    user: String,
    password: String,
    or_replace: bool,
    owner: Option<String>,
) -> crate::Result<()> {
    let created_micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    catalog.create_connection(
        ConnectionEntry {
            name,
            address,
            user,
            password,
            created_micros,
            owner,
        },
        or_replace,
    )
}

/// `exa.get_connection(name)`'s lookup: the connection as a script sees it, or Exasol's words
/// for a missing one. Names fold as Exasol folds them: `'my_conn'` finds `MY_CONN`.
pub(crate) fn find_connection(
    catalog: &ScriptCatalog,
    name: &str,
) -> Result<ConnectionEntry, String> {
    let folded = folded_connection_name(name);
    catalog
        .connection(&folded)
        .ok_or_else(|| format!("connection {folded} does not exist"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_found_as_exasol_folds_names() {
        let catalog = ScriptCatalog::in_memory();
        create_connection(
            &catalog,
            "MY_CONN".into(),
            "a".into(),
            "u".into(),
            "s3cret".into(),
            false,
            None,
        )
        .unwrap();
        assert_eq!(find_connection(&catalog, "my_conn").unwrap().address, "a");
        assert_eq!(find_connection(&catalog, "\"MY_CONN\"").unwrap().user, "u");
        assert_eq!(
            find_connection(&catalog, "\"my_conn\"").unwrap_err(),
            "connection my_conn does not exist"
        );
        let e = create_connection(
            &catalog,
            "MY_CONN".into(),
            "b".into(),
            String::new(),
            "s3cret".into(),
            false,
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
        create_connection(
            &catalog,
            "MY_CONN".into(),
            "b".into(),
            String::new(),
            "s3cret".into(),
            true,
            None,
        )
        .unwrap();
        assert_eq!(find_connection(&catalog, "MY_CONN").unwrap().address, "b");
        // The password never shows in debug output.
        let shown = format!("{:?}", catalog.connections());
        assert!(
            shown.contains("MY_CONN") && !shown.contains("s3cret"),
            "{shown}"
        );
        catalog.drop_connection("MY_CONN", false).unwrap();
        assert!(catalog.drop_connection("MY_CONN", false).is_err());
        catalog.drop_connection("MY_CONN", true).unwrap();
    }
}
