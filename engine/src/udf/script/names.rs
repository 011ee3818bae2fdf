//! How SQL names scripts: every script answers to `schema.name(…)`; a plain `name(…)` calls a
//! built-in function of that name if there is one, else the script in the session's current
//! schema (`OPEN SCHEMA`; `public` by default), or else the only script of that name in any schema
//! (with two or more and none in the current schema, a plain call is an error that lists them).
//!
//! DataFusion does not resolve schema-qualified function names, so before planning each
//! qualified call of a script is renamed to the one function its script is registered under
//! (`"s.f"`, one quoted identifier holding the dot).

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::error::DataFusionError;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Function, Ident, ObjectName, ObjectNamePart, VisitMut, VisitorMut,
};

use accelsql_udf_runtime::script::{ImportedScript, ScriptImports};

use super::catalog::{ScriptEntry, StoredOutput};
use crate::EngineError;

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
fn plain_candidates<'a>(
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

/// Renames the schema-qualified script calls in `statement` (see the module docs), and fails a
/// plain call that could mean scripts of several schemas, or a qualified call of a script that
/// exists only in other schemas.
pub(crate) fn resolve_script_calls(
    statement: &mut DfStatement,
    entries: &[Arc<ScriptEntry>],
    scope: &NameScope<'_>,
) -> crate::Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let statement = match statement {
        DfStatement::Statement(inner) => inner.as_mut(),
        DfStatement::Explain(explain) => {
            return resolve_script_calls(&mut explain.statement, entries, scope);
        }
        _ => return Ok(()),
    };
    match statement.visit(&mut Resolver { entries, scope }) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// How a session resolves plain script names: its current schema, and the names of built-in
/// functions (which a plain call always means; a script of such a name is called qualified).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NameScope<'a> {
    /// The current schema (`OPEN SCHEMA`; `public` by default).
    pub(crate) current: &'a str,
    /// Built-in functions and Rust UDFs of the session.
    pub(crate) builtins: &'a std::collections::HashSet<String>,
}

struct Resolver<'a> {
    entries: &'a [Arc<ScriptEntry>],
    scope: &'a NameScope<'a>,
}

/// An identifier as SQL folds it: unquoted → lower case.
fn folded(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_ascii_lowercase()
    }
}

fn name_error(message: String) -> EngineError {
    EngineError::Sql(DataFusionError::Plan(message))
}

impl VisitorMut for Resolver<'_> {
    type Break = EngineError;

    fn pre_visit_expr(&mut self, expr: &mut SqlExpr) -> ControlFlow<Self::Break> {
        let SqlExpr::Function(Function { name, .. }) = expr else {
            return ControlFlow::Continue(());
        };
        match name.0.as_slice() {
            [ObjectNamePart::Identifier(plain)] => {
                let plain = folded(plain);
                if self.scope.builtins.contains(&plain) {
                    return ControlFlow::Continue(());
                }
                let candidates = plain_candidates(&plain, self.entries, self.scope.current);
                if candidates.len() > 1 {
                    let qualified: Vec<String> = candidates
                        .iter()
                        .map(|e| qualified_function(&e.schema, &e.name))
                        .collect();
                    return ControlFlow::Break(name_error(format!(
                        "script name {plain} is ambiguous: scripts {} exist and none is in \
                         the current schema {}; call one with its schema, e.g. {}(…), or OPEN \
                         SCHEMA the one you mean",
                        qualified.join(", "),
                        self.scope.current,
                        qualified[0]
                    )));
                }
            }
            [
                ObjectNamePart::Identifier(schema),
                ObjectNamePart::Identifier(script),
            ] => {
                let (schema, script) = (folded(schema), folded(script));
                let found = self
                    .entries
                    .iter()
                    .find(|e| e.schema == schema && e.name == script);
                match found {
                    // `EMITS (...)` calls were renamed before parsing (see `dynamic.rs`).
                    Some(entry) if entry.output != StoredOutput::DynamicEmits => {
                        *name = ObjectName::from(vec![Ident::with_quote(
                            '"',
                            qualified_function(&schema, &script),
                        )]);
                    }
                    Some(_) => {
                        return ControlFlow::Break(name_error(format!(
                            "EMITS (...) script {}: its call was not recognised before \
                             parsing; write it as {}(…) EMITS (a INT, …)",
                            qualified_function(&schema, &script),
                            qualified_function(&schema, &script)
                        )));
                    }
                    None => {
                        let elsewhere: Vec<String> = self
                            .entries
                            .iter()
                            .filter(|e| e.name == script)
                            .map(|e| qualified_function(&e.schema, &e.name))
                            .collect();
                        if !elsewhere.is_empty() {
                            return ControlFlow::Break(name_error(format!(
                                "script {} does not exist; scripts named {script}: {}",
                                qualified_function(&schema, &script),
                                elsewhere.join(", ")
                            )));
                        }
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// Splits a script name as `exa.import_script` gets it (`name`, `schema.name`, parts optionally
/// `"quoted"`) into (schema, name), folded as SQL folds identifiers.
fn split_script_name(text: &str) -> Result<(Option<String>, String), String> {
    let bad = || format!("{text:?} is not a script name (name or schema.name)");
    let mut parts = Vec::new();
    let mut chars = text.trim().chars().peekable();
    loop {
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
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
        parts.push(part);
        match chars.next() {
            None => break,
            Some('.') => {}
            Some(_) => return Err(bad()),
        }
    }
    match <[String; 2]>::try_from(parts) {
        Ok([schema, name]) => Ok((Some(schema), name)),
        Err(parts) => match <[String; 1]>::try_from(parts) {
            Ok([name]) => Ok((None, name)),
            Err(_) => Err(bad()),
        },
    }
}

/// What `exa.import_script(name)` finds among `entries`: the script `schema.name` names, or the
/// one a plain `name` calls in SQL.
pub(crate) fn script_imports(entries: Vec<Arc<ScriptEntry>>, current: String) -> ScriptImports {
    ScriptImports::new(move |text| {
        let (schema, name) = split_script_name(text)?;
        let found: Vec<&ScriptEntry> = match &schema {
            Some(schema) => entries
                .iter()
                .filter(|e| &e.schema == schema && e.name == name)
                .map(Arc::as_ref)
                .collect(),
            None => plain_candidates(&name, &entries, &current),
        };
        match found.as_slice() {
            [entry] => Ok(ImportedScript {
                qualified_name: qualified_function(&entry.schema, &entry.name),
                code: entry.code.clone(),
            }),
            [] => Err(format!(
                "script {} does not exist",
                qualified_function(schema.as_deref().unwrap_or(&current), &name)
            )),
            several => Err(format!(
                "script name {name} is ambiguous: scripts {} exist; name its schema",
                several
                    .iter()
                    .map(|e| qualified_function(&e.schema, &e.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use datafusion::sql::parser::DFParserBuilder;

    use super::*;

    fn entry(schema: &str, name: &str) -> Arc<ScriptEntry> {
        Arc::new(ScriptEntry {
            schema: schema.into(),
            name: name.into(),
            language: "PYTHON3".into(),
            set: false,
            params: Some(Vec::new()),
            output: StoredOutput::Returns("INT".into()),
            accelerator: None,
            instance_limit: None,
            env: Vec::new(),
            code: String::new(),
            text: String::new(),
        })
    }

    fn resolved(sql: &str, entries: &[Arc<ScriptEntry>]) -> crate::Result<String> {
        resolved_in(sql, entries, "public", &HashSet::new())
    }

    fn resolved_in(
        sql: &str,
        entries: &[Arc<ScriptEntry>],
        current: &str,
        builtins: &HashSet<String>,
    ) -> crate::Result<String> {
        let mut statements = DFParserBuilder::new(sql)
            .build()
            .and_then(|mut p| p.parse_statements())
            .map_err(EngineError::Sql)?;
        let mut statement = statements
            .pop_front()
            .ok_or_else(|| name_error("none".into()))?;
        resolve_script_calls(&mut statement, entries, &NameScope { current, builtins })?;
        Ok(statement.to_string())
    }

    #[test]
    fn qualified_calls_name_the_schemas_function() {
        let entries = [entry("public", "f"), entry("s", "f"), entry("s", "g")];
        assert_eq!(
            resolved("SELECT S.F(x), \"s\".g(1), f(2) FROM t", &entries).unwrap(),
            "SELECT \"s.f\"(x), \"s.g\"(1), f(2) FROM t"
        );
        // Other qualified functions are left to DataFusion.
        assert_eq!(
            resolved("SELECT other.h(1)", &entries).unwrap(),
            "SELECT other.h(1)"
        );
        let e = resolved("SELECT t.f(1)", &entries).unwrap_err();
        assert!(
            e.to_string()
                .contains("script t.f does not exist; scripts named f: public.f, s.f"),
            "{e}"
        );
    }

    #[test]
    fn imports_find_scripts_as_sql_names_them() {
        let entries = vec![
            entry("public", "f"),
            entry("lib", "f"),
            entry("Lib", "Util"),
            entry("a", "g"),
            entry("b", "g"),
        ];
        let imports = script_imports(entries, "public".into());
        let name = |text: &str| imports.find(text).map(|s| s.qualified_name);
        assert_eq!(name("F").unwrap(), "public.f");
        assert_eq!(name(" LIB.F ").unwrap(), "lib.f");
        assert_eq!(name("\"Lib\".\"Util\"").unwrap(), "Lib.Util");
        assert_eq!(
            name("lib.util").unwrap_err(),
            "script lib.util does not exist"
        );
        assert_eq!(name("h").unwrap_err(), "script public.h does not exist");
        assert!(
            name("g")
                .unwrap_err()
                .contains("ambiguous: scripts a.g, b.g exist")
        );
        for bad in ["", "a.", ".a", "a.b.c", "\"open", "\"a\"x"] {
            assert!(
                name(bad).unwrap_err().contains("is not a script name"),
                "{bad}"
            );
        }
    }

    #[test]
    fn plain_names_prefer_public_then_the_only_one() {
        let entries = [
            entry("a", "f"),
            entry("b", "f"),
            entry("a", "g"),
            entry("public", "h"),
            entry("c", "h"),
        ];
        assert!(owns_plain_name(&entries[2], &entries, "public"));
        assert!(owns_plain_name(&entries[3], &entries, "public"));
        assert!(!owns_plain_name(&entries[4], &entries, "public"));
        assert!(!owns_plain_name(&entries[0], &entries, "public"));
        let e = resolved("SELECT 1 FROM t WHERE F(x) > 0", &entries).unwrap_err();
        assert_eq!(e.code(), "42000");
        assert!(
            e.to_string()
                .contains("script name f is ambiguous: scripts a.f, b.f exist"),
            "{e}"
        );
        assert!(resolved("SELECT g(1), h(2), \"F\"(3)", &entries).is_ok());
    }

    #[test]
    fn the_current_schema_comes_first_and_builtins_keep_their_plain_names() {
        let entries = [entry("a", "f"), entry("b", "f"), entry("public", "lower")];
        // With schema a open, f is a.f; with c open, f is ambiguous.
        assert!(owns_plain_name(&entries[0], &entries, "a"));
        assert!(!owns_plain_name(&entries[1], &entries, "a"));
        let none = HashSet::new();
        assert!(resolved_in("SELECT f(1)", &entries, "a", &none).is_ok());
        let e = resolved_in("SELECT f(1)", &entries, "c", &none).unwrap_err();
        assert!(
            e.to_string().contains("none is in the current schema c"),
            "{e}"
        );
        // A script named like a built-in: the plain name is the built-in's, the qualified one
        // the script's.
        let builtins = HashSet::from(["f".to_string(), "lower".to_string()]);
        assert_eq!(
            resolved_in("SELECT f(1), public.lower(x)", &entries, "c", &builtins).unwrap(),
            "SELECT f(1), \"public.lower\"(x)"
        );
        let imports = script_imports(entries.to_vec(), "b".into());
        assert_eq!(imports.find("f").unwrap().qualified_name, "b.f");
    }
}
