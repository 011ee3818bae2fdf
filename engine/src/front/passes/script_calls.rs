//! The pass that resolves script calls by name (see `udf/script/names.rs` for the rules):
//! each schema-qualified call of a script is renamed to the one function its script is
//! registered under (`"s.f"`), and a plain call that could mean scripts of several schemas, or a
//! qualified call of a script that exists only in other schemas, fails (42000).

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Function, FunctionArguments, Ident, ObjectName, ObjectNamePart, Query,
    VisitMut, VisitorMut,
};

use crate::core::error::{EngineError, Result};
use crate::core::names::swap_case;
use crate::udf::script::definition::{ScriptEntry, StoredOutput};
use crate::udf::script::names::{folded, name_error, plain_candidates, qualified_function};

/// Renames the schema-qualified script calls in `statement` (see the module docs), and fails a
/// plain call that could mean scripts of several schemas, or a qualified call of a script that
/// exists only in other schemas.
pub(crate) fn resolve_script_calls(
    statement: &mut DfStatement,
    entries: &[Arc<ScriptEntry>],
    scope: &NameScope<'_>,
) -> Result<()> {
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
    let mut resolver = Resolver {
        entries,
        scope,
        calls: vec![Vec::new()],
    };
    match statement.visit(&mut resolver) {
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
    /// Whether the session speaks Exasol's dialect. Outside it a quoted name that names no
    /// script as written is also read as Exasol's name ([`swap_case`]: `"ADD_ONE"` is the
    /// script made as unquoted `add_one`), since scripts are shared with Exasol-dialect
    /// sessions and Exasol stores unquoted names upper case.
    pub(crate) exasol: bool,
}

/// What a function call being visited calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallKind {
    Scalar,
    Set,
    Other,
}

struct Resolver<'a> {
    entries: &'a [Arc<ScriptEntry>],
    scope: &'a NameScope<'a>,
    /// Per query (a subquery starts its own), the function calls being visited, each with
    /// the kind of script it calls: a SET script's call inside another SET call, or an EMITS
    /// one inside a SCALAR call, is an error.
    calls: Vec<Vec<CallKind>>,
}

impl Resolver<'_> {
    /// The engine's name a script name part means: as written (unquoted folded), or outside the
    /// Exasol dialect, for a quoted part that names no script (`script`) or schema as written,
    /// Exasol's reading of it when that names one (`"ADD_ONE"` → `add_one`).
    fn reading(&self, ident: &Ident, schema: bool) -> String {
        let written = folded(ident);
        if ident.quote_style.is_none() || self.scope.exasol {
            return written;
        }
        let names = |n: &str| {
            self.entries
                .iter()
                .any(|e| if schema { e.schema == n } else { e.name == n })
        };
        let exasol = swap_case(&written);
        if !names(&written) && names(&exasol) {
            exasol
        } else {
            written
        }
    }

    /// The script a call of `name` calls, if it names exactly one.
    fn script(&self, name: &ObjectName) -> Option<&ScriptEntry> {
        match name.0.as_slice() {
            [ObjectNamePart::Identifier(plain)] => {
                let plain = self.reading(plain, false);
                if self.scope.builtins.contains(&plain) {
                    return None;
                }
                match plain_candidates(&plain, self.entries, self.scope.current).as_slice() {
                    [one] => Some(*one),
                    _ => None,
                }
            }
            [
                ObjectNamePart::Identifier(schema),
                ObjectNamePart::Identifier(script),
            ] => {
                let (schema, script) = (self.reading(schema, true), self.reading(script, false));
                self.entries
                    .iter()
                    .find(|e| e.schema == schema && e.name == script)
                    .map(Arc::as_ref)
            }
            _ => None,
        }
    }
}

impl VisitorMut for Resolver<'_> {
    type Break = EngineError;

    fn pre_visit_query(&mut self, _query: &mut Query) -> ControlFlow<Self::Break> {
        self.calls.push(Vec::new());
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<Self::Break> {
        self.calls.pop();
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut SqlExpr) -> ControlFlow<Self::Break> {
        if matches!(expr, SqlExpr::Function(_))
            && let Some(calls) = self.calls.last_mut()
        {
            calls.pop();
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut SqlExpr) -> ControlFlow<Self::Break> {
        let SqlExpr::Function(Function { name, args, .. }) = expr else {
            return ControlFlow::Continue(());
        };
        // Exasol's rule: a SET script that EMITS rows may not sit inside a SCALAR script's
        // call; one that RETURNS a value is an aggregate, and its value may be an argument.
        let script = self.script(name).map(|e| {
            let emits = !matches!(e.output, StoredOutput::Returns(_));
            (e.set, emits, qualified_function(&e.schema, &e.name))
        });
        let inside = |kind: CallKind| self.calls.last().is_some_and(|calls| calls.contains(&kind));
        if let Some((true, emits, set_script)) = &script {
            let why = if *emits && inside(CallKind::Scalar) {
                Some("it EMITS rows and is called inside a SCALAR script's call")
            } else if inside(CallKind::Set) {
                Some("it is called inside another SET script's call")
            } else {
                None
            };
            if let Some(why) = why {
                return ControlFlow::Break(name_error(format!(
                    "encapsulated set function: the SET script {set_script}: {why}; call it in \
                     a select of its own (a subquery) and pass its result on"
                )));
            }
            let no_arguments = match args {
                FunctionArguments::List(list) => list.args.is_empty(),
                FunctionArguments::None => true,
                FunctionArguments::Subquery(_) => false,
            };
            if no_arguments {
                return ControlFlow::Break(name_error(format!(
                    "data exception - missing input parameters for SET UDF script {set_script}: \
                     a SET script is called with at least one argument"
                )));
            }
        }
        let kind = match script {
            Some((false, _, _)) => CallKind::Scalar,
            Some((true, _, _)) => CallKind::Set,
            None => CallKind::Other,
        };
        if let Some(calls) = self.calls.last_mut() {
            calls.push(kind);
        }
        match name.0.as_slice() {
            [ObjectNamePart::Identifier(ident)] => {
                let plain = self.reading(ident, false);
                if self.scope.builtins.contains(&folded(ident)) {
                    return ControlFlow::Continue(());
                }
                if plain != folded(ident) {
                    // Exasol's reading of a quoted name: the function is registered under the
                    // engine's.
                    *name = ObjectName::from(vec![Ident::with_quote('"', plain.clone())]);
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
                let (schema, script) = (self.reading(schema, true), self.reading(script, false));
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use datafusion::sql::parser::DFParserBuilder;

    use super::*;
    use crate::udf::script::links::script_imports;
    use crate::udf::script::names::owns_plain_name;

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
            device_memory: None,
            env: Vec::new(),
            code: String::new(),
            text: String::new(),
            body: None,
            owner: None,
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
        resolve_script_calls(
            &mut statement,
            entries,
            &NameScope {
                current,
                builtins,
                exasol: false,
            },
        )?;
        Ok(statement.to_string())
    }

    #[test]
    fn quoted_names_are_also_read_as_exasol_stores_them() {
        let entries = [entry("public", "add_one"), entry("public", "Mixed")];
        assert_eq!(
            resolved(r#"SELECT "ADD_ONE"(1), "PUBLIC"."ADD_ONE"(2)"#, &entries).unwrap(),
            r#"SELECT "add_one"(1), "public.add_one"(2)"#
        );
        // As written first: "Mixed" is that script; "mIXED" reads as it too, "MIXED" as none.
        assert_eq!(
            resolved(r#"SELECT "Mixed"(1), "mIXED"(2), "MIXED"(3)"#, &entries).unwrap(),
            r#"SELECT "Mixed"(1), "Mixed"(2), "MIXED"(3)"#
        );
    }

    #[test]
    fn a_set_emits_script_inside_a_scalar_scripts_call_is_encapsulated() {
        let mut set = (*entry("public", "agg")).clone();
        set.set = true;
        let mut emits = set.clone();
        emits.name = "rows".into();
        emits.output = StoredOutput::Emits(vec![("a".into(), "INT".into())]);
        let entries = [entry("public", "f"), Arc::new(set), Arc::new(emits)];
        let e = resolved("SELECT f(rows(x)) FROM t", &entries).unwrap_err();
        assert!(e.to_string().contains("encapsulated set function"), "{e}");
        let e = resolved("SELECT f(1 + public.rows(x)) FROM t", &entries).unwrap_err();
        assert!(e.to_string().contains("encapsulated set function"), "{e}");
        // A SET script that RETURNS is an aggregate: its value may be a SCALAR call's argument.
        assert!(resolved("SELECT f(agg(x)) FROM t GROUP BY y", &entries).is_ok());
        assert!(resolved("SELECT f(1 + public.agg(x)) FROM t", &entries).is_ok());
        // Not another SET call's; and a SET call needs an argument.
        let e = resolved("SELECT agg(agg(x)) FROM t", &entries).unwrap_err();
        assert!(e.to_string().contains("encapsulated set function"), "{e}");
        let e = resolved("SELECT agg() FROM t", &entries).unwrap_err();
        assert!(
            e.to_string()
                .contains("missing input parameters for SET UDF script"),
            "{e}"
        );
        // Beside it, around it, or in a subquery of its arguments: allowed.
        assert!(resolved("SELECT f(1), agg(x) FROM t", &entries).is_ok());
        assert!(resolved("SELECT abs(agg(x)), agg(f(x)) FROM t", &entries).is_ok());
        assert!(resolved("SELECT f((SELECT agg(x) FROM t))", &entries).is_ok());
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
        let imports = script_imports(entries, "public".into(), Vec::new());
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
        // A three-part name's first part is the catalog.
        assert_eq!(name("exa.lib.f").unwrap(), "lib.f");
        for bad in ["", "a.", ".a", "a.b.c.d", "\"open", "\"a\"x"] {
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
        assert!(resolved("SELECT g(1), h(2), \"Q\"(3)", &entries).is_ok());
        // A quoted "F" is Exasol's F, the engine's f: as ambiguous.
        assert!(resolved("SELECT \"F\"(3)", &entries).is_err());
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
        let imports = script_imports(entries.to_vec(), "b".into(), Vec::new());
        assert_eq!(imports.find("f").unwrap().qualified_name, "b.f");
    }
}
