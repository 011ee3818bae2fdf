//! How SQL names scripts: every script answers to `schema.name(…)`; a plain `name(…)` calls a
//! built-in function of that name if there is one, else the script in the session's current
//! schema (`OPEN SCHEMA`; `public` by default), or else the only script of that name in any schema
//! (with two or more and none in the current schema, a plain call is an error that lists them).
//!
//! DataFusion does not resolve schema-qualified function names, so before planning each
//! qualified call of a script is renamed to the one function its script is registered under
//! (`"s.f"`, one quoted identifier holding the dot): the front end's `script_calls` pass.

use std::sync::Arc;

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::ast::Ident;

use super::definition::ScriptEntry;
use crate::core::error::EngineError;

/// The function a schema-qualified call of `schema.name` is renamed to.
pub(crate) fn qualified_function(schema: &str, name: &str) -> String {
    format!("{schema}.{name}")
}

/// Whether `entry` also answers to its plain name in a session whose current schema is
/// `current`: it is in `current`, or no script of its name is there and it is the only one of
/// its name.
pub(crate) fn owns_plain_name(
    entry: &ScriptEntry,
    entries: &[Arc<ScriptEntry>],
    current: &str,
) -> bool {
    matches!(plain_candidates(&entry.name, entries, current).as_slice(), [only] if only.schema == entry.schema)
}

/// The scripts a plain call of `name` could mean: the one in the current schema if there is
/// one, else all of that name.
pub(crate) fn plain_candidates<'a>(
    name: &str,
    entries: &'a [Arc<ScriptEntry>],
    current: &str,
) -> Vec<&'a ScriptEntry> {
    let named: Vec<&ScriptEntry> = entries
        .iter()
        .filter(|e| e.name == name)
        .map(Arc::as_ref)
        .collect();
    match named.iter().find(|e| e.schema == current) {
        Some(here) => vec![here],
        None => named,
    }
}

/// The script `text` names as SQL writes it (`s`, `schema.s`, quoted parts keep their case): a
/// qualified name in its schema; a plain one in the current schema, else the only script of
/// that name. 42000 when there is none, or several and none in the current schema.
pub(crate) fn find_script(
    text: &str,
    entries: &[Arc<ScriptEntry>],
    current: &str,
) -> crate::Result<Arc<ScriptEntry>> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let name = Parser::new(&GenericDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_object_name(false))
        .map_err(|e| name_error(format!("{text} is not a script name: {e}")))?;
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|part| part.as_ident().map(folded))
        .collect();
    let found: Vec<&Arc<ScriptEntry>> = match parts.as_slice() {
        [schema, script] => entries
            .iter()
            .filter(|e| &e.schema == schema && &e.name == script)
            .collect(),
        [plain] => {
            let candidates = plain_candidates(plain, entries, current);
            entries
                .iter()
                .filter(|e| candidates.iter().any(|c| std::ptr::eq(*c, e.as_ref())))
                .collect()
        }
        _ => Vec::new(),
    };
    match found.as_slice() {
        [one] => Ok(Arc::clone(one)),
        [] => Err(name_error(format!("script {text} not found"))),
        many => Err(name_error(format!(
            "script name {text} is ambiguous: scripts {} exist and none is in the current \
             schema {current}; qualify the name",
            many.iter()
                .map(|e| qualified_function(&e.schema, &e.name))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The readings of a script name as `exa.import_script` gets it (`name`, `schema.name`, or
/// `catalog.schema.name` whose catalog is the engine's one; parts optionally `"quoted"`), as
/// (schema, name) folded as SQL folds identifiers, in the order to try them: when a part is
/// quoted, first with the quoted parts read as Exasol names (`"LIB"` is the script `CREATE SCRIPT
/// lib` made, see `core/names.rs`), then as written.
pub(crate) fn split_script_name(text: &str) -> Result<Vec<(Option<String>, String)>, String> {
    let bad =
        || format!("{text:?} is not a script name (name, schema.name or catalog.schema.name)");
    let mut parts: Vec<(String, bool)> = Vec::new();
    let mut chars = text.trim().chars().peekable();
    loop {
        let mut part = String::new();
        let quoted = chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    Some('"') => break,
                    Some(c) => part.push(c),
                    None => return Err(bad()),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != '.') {
                part.push(c);
            }
            part = part.trim().to_ascii_lowercase();
        }
        if part.is_empty() {
            return Err(bad());
        }
        parts.push((part, quoted));
        match chars.next() {
            None => break,
            Some('.') => {}
            Some(_) => return Err(bad()),
        }
    }
    // A three-part name's first part is the catalog: there is one.
    if parts.len() == 3 {
        parts.remove(0);
    }
    let reading = |exasol: bool| -> Vec<String> {
        parts
            .iter()
            .map(|(p, quoted)| {
                if *quoted && exasol {
                    crate::core::names::swap_case(p)
                } else {
                    p.clone()
                }
            })
            .collect()
    };
    let mut readings = Vec::new();
    // Exasol's reading first: `exa.import_script` is Exasol's API, and its scripts quote
    // Exasol's names ('"bar"' is the script bar, not BAR); as written, second, for scripts
    // that the default dialect named.
    for exasol in [true, false] {
        let reading = match reading(exasol).as_slice() {
            [schema, name] => (Some(schema.clone()), name.clone()),
            [name] => (None, name.clone()),
            _ => return Err(bad()),
        };
        if !readings.contains(&reading) {
            readings.push(reading);
        }
    }
    Ok(readings)
}

/// An identifier as SQL folds it: unquoted → lower case.
pub(crate) fn folded(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_ascii_lowercase()
    }
}

pub(crate) fn name_error(message: String) -> EngineError {
    EngineError::Sql(DataFusionError::Plan(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readings(text: &str) -> Vec<(Option<String>, String)> {
        split_script_name(text).unwrap()
    }

    #[test]
    fn import_names_fold_and_quoted_ones_also_read_as_exasol_names() {
        assert_eq!(readings("Lib"), [(None, "lib".to_string())]);
        assert_eq!(
            readings("S.Lib"),
            [(Some("s".to_string()), "lib".to_string())]
        );
        // A catalog in front is dropped.
        assert_eq!(
            readings("EXA.s.lib"),
            [(Some("s".to_string()), "lib".to_string())]
        );
        // Quoted: as Exasol's name for the engine's first, then as written.
        assert_eq!(
            readings(r#""S"."LIB""#),
            [
                (Some("s".to_string()), "lib".to_string()),
                (Some("S".to_string()), "LIB".to_string())
            ]
        );
        assert_eq!(readings(r#""a.b""#)[0], (None, "A.B".to_string()));
        assert!(split_script_name("a.b.c.d").is_err());
        assert!(split_script_name("").is_err());
        assert!(split_script_name(r#""open"#).is_err());
    }
}
