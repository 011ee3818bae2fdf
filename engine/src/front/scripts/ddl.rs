//! The script DDL accelsql handles itself (DataFusion's parser knows none of it):
//! `CREATE [OR REPLACE] <LANG> SCALAR|SET SCRIPT [schema.]name(params) RETURNS t | EMITS (…) AS body`,
//! `DROP SCRIPT [IF EXISTS] [schema.]name` and
//! `ALTER SESSION SET SCRIPT_LANGUAGES = 'ALIAS=runtime …'`.

use std::fmt;

use crate::core::error::EngineError;

/// One parsed script statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScriptDdl {
    /// `CREATE [OR REPLACE] … SCRIPT`.
    Create(CreateScript),
    /// `DROP SCRIPT [IF EXISTS] name`.
    Drop {
        /// Schema, if given.
        schema: Option<String>,
        /// Script name.
        name: String,
        /// Whether the schema and the name were quoted (kept as written).
        quoted: (bool, bool),
        /// `IF EXISTS`.
        if_exists: bool,
    },
    /// `ALTER SESSION SET SCRIPT_LANGUAGES = '…'`: the raw value.
    SetLanguages(String),
}

/// `CREATE … SCRIPT`, as written (types as text; the runtime parses them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreateScript {
    pub(crate) or_replace: bool,
    pub(crate) language: String,
    pub(crate) set: bool,
    pub(crate) schema: Option<String>,
    pub(crate) name: String,
    /// Whether the schema and the name were quoted (kept as written).
    pub(crate) quoted: (bool, bool),
    /// `None`: `...` (variadic).
    pub(crate) params: Option<Vec<(String, String)>>,
    pub(crate) output: DdlOutput,
    /// The body after `AS`, with line 1 its first line.
    pub(crate) body: String,
    /// The statement as the user wrote it.
    pub(crate) text: String,
}

/// The output clause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DdlOutput {
    /// `RETURNS type`.
    Returns(String),
    /// `EMITS (col type, …)`.
    Emits(Vec<(String, String)>),
    /// `EMITS (...)`: columns given at each call site.
    DynamicEmits,
}

/// A malformed script statement: what and where (1-based line and column of the statement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DdlError {
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) message: String,
}

impl fmt::Display for DdlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

impl From<DdlError> for EngineError {
    fn from(e: DdlError) -> Self {
        EngineError::ScriptDefinition {
            message: e.to_string(),
        }
    }
}

/// Whether `text` is a script statement for [`parse`].
pub(crate) fn is_script_ddl(text: &str) -> bool {
    let words: Vec<String> = crate::front::splitter::first_words(text, 5)
        .into_iter()
        .map(str::to_ascii_uppercase)
        .collect();
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    crate::front::splitter::is_script_head(text)
        || matches!(w.as_slice(), ["DROP", "SCRIPT", ..])
        || matches!(
            w.as_slice(),
            ["ALTER", "SESSION", "SET", "SCRIPT_LANGUAGES", ..]
        )
}

/// Parses a script statement ([`is_script_ddl`] said yes). In the Exasol dialect (`exasol`) a
/// quoted name — of the script, its schema, a parameter or an EMITS column — is Exasol's name
/// exactly, kept as its engine name (the dialect's name map, `core/names.rs`: `"Out"` is `oUT`),
/// as the dialect's token pass does for other statements (script DDL skips that pass).
pub(crate) fn parse(text: &str, exasol: bool) -> Result<ScriptDdl, DdlError> {
    let mut t = Tokens::new(text);
    t.exasol = exasol;
    let first = t.expect_word()?;
    match first.to_ascii_uppercase().as_str() {
        "CREATE" => parse_create(&mut t, text).map(ScriptDdl::Create),
        "DROP" => {
            t.keyword("SCRIPT")?;
            let if_exists = if t.peek_is("IF") {
                t.keyword("IF")?;
                t.keyword("EXISTS")?;
                true
            } else {
                false
            };
            let (schema, name, quoted) = t.object_name_quoted()?;
            t.end()?;
            Ok(ScriptDdl::Drop {
                schema,
                name,
                quoted,
                if_exists,
            })
        }
        "ALTER" => {
            t.keyword("SESSION")?;
            t.keyword("SET")?;
            t.keyword("SCRIPT_LANGUAGES")?;
            t.symbol("=")?;
            let value = t.string()?;
            t.end()?;
            Ok(ScriptDdl::SetLanguages(value))
        }
        _ => Err(t.error_here("expected CREATE, DROP or ALTER")),
    }
}

/// A column list `name type, …` (the inside of `EMITS (…)` at a call site, or what a script's
/// `default_output_columns()` returns); quoted names are read as [`parse`] reads them.
pub(crate) fn parse_columns(text: &str, exasol: bool) -> Result<Vec<(String, String)>, DdlError> {
    let wrapped = format!("{text})");
    let mut t = Tokens::new(&wrapped);
    t.exasol = exasol;
    let columns = t.column_list(")", "EMITS column")?;
    if columns.is_empty() {
        return Err(t.error_here("Empty return argument definition is not allowed"));
    }
    t.end()?;
    Ok(columns)
}

fn parse_create(t: &mut Tokens<'_>, text: &str) -> Result<CreateScript, DdlError> {
    let or_replace = if t.peek_is("OR") {
        t.keyword("OR")?;
        t.keyword("REPLACE")?;
        true
    } else {
        false
    };
    let language = t.expect_word()?.to_ascii_uppercase();
    let kind = t.expect_word()?.to_ascii_uppercase();
    let set = match kind.as_str() {
        "SET" => true,
        "SCALAR" => false,
        _ => return Err(t.error_before("expected SCALAR or SET")),
    };
    t.keyword("SCRIPT")?;
    let (schema, name, quoted) = t.object_name_quoted()?;
    t.symbol("(")?;
    let params = if t.peek_symbol("...") {
        t.symbol("...")?;
        t.symbol(")")?;
        None
    } else {
        Some(t.column_list(")", "parameter")?)
    };
    let output = match t.expect_word()?.to_ascii_uppercase().as_str() {
        "RETURNS" => DdlOutput::Returns(t.type_text(&["AS"])?),
        "EMITS" => {
            t.symbol("(")?;
            if t.peek_symbol("...") {
                t.symbol("...")?;
                t.symbol(")")?;
                DdlOutput::DynamicEmits
            } else {
                let cols = t.column_list(")", "EMITS column")?;
                if cols.is_empty() {
                    return Err(t.error_before("Empty return argument definition is not allowed"));
                }
                DdlOutput::Emits(cols)
            }
        }
        _ => return Err(t.error_before("expected RETURNS or EMITS")),
    };
    t.keyword("AS")?;
    let rest = &text[t.pos..];
    // The body starts after AS; when nothing follows AS on its line, at the next line.
    let body = match rest.split_once('\n') {
        Some((same_line, after)) if same_line.trim().is_empty() => after,
        _ => rest,
    };
    if !set && matches!(output, DdlOutput::Returns(_)) && params.as_ref().is_some_and(Vec::is_empty)
    {
        // Allowed: SCALAR scripts without parameters (e.g. `gpu_probe()`).
    }
    Ok(CreateScript {
        or_replace,
        language,
        set,
        schema,
        name,
        quoted,
        params,
        output,
        body: body.to_string(),
        text: text.to_string(),
    })
}

/// One token of a DDL head.
#[derive(Debug, Clone)]
struct Token {
    text: String,
    start: usize,
    end: usize,
    quoted: bool,
}

/// A DDL head's tokens (words, quoted identifiers, strings, symbols; no whitespace or comments),
/// read with the front end's tokenizer ([`crate::front::tokens::located_tokens`]). Where the
/// tokenizer stops (a quote left open, a body that is not SQL), the rest is one last token.
struct Tokens<'a> {
    text: &'a str,
    toks: Vec<Token>,
    /// The next token to read.
    next: usize,
    /// Where the token read last ends.
    pos: usize,
    /// Where the token read last starts.
    last_start: usize,
    /// Read quoted names as the Exasol dialect does (see [`parse`]).
    exasol: bool,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str) -> Self {
        let toks = crate::front::tokens::located_tokens(text)
            .into_iter()
            .map(|t| Token {
                text: t.text,
                start: t.start,
                end: t.end,
                quoted: t.quoted,
            })
            .collect();
        Self {
            text,
            toks,
            next: 0,
            pos: 0,
            last_start: 0,
            exasol: false,
        }
    }

    /// Moves to the start of the next token (the end of the text after the last).
    fn skip_space(&mut self) {
        self.pos = self
            .toks
            .get(self.next)
            .map_or(self.text.len(), |t| t.start);
    }

    fn peek_token(&mut self) -> Option<Token> {
        self.toks.get(self.next).cloned()
    }

    fn next_token(&mut self) -> Option<Token> {
        let token = self.toks.get(self.next).cloned()?;
        self.next += 1;
        self.last_start = token.start;
        self.pos = token.end;
        Some(token)
    }

    fn position(&self, at: usize) -> (usize, usize) {
        let before = &self.text[..at.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
        (line, column)
    }

    fn error_at(&self, at: usize, message: impl Into<String>) -> DdlError {
        let (line, column) = self.position(at);
        DdlError {
            line,
            column,
            message: message.into(),
        }
    }

    /// An error about the token just read.
    fn error_before(&self, message: &str) -> DdlError {
        let found = self.text[self.last_start..self.pos].to_string();
        self.error_at(self.last_start, format!("{message}, found {found:?}"))
    }

    /// An error about the next token.
    fn error_here(&mut self, message: &str) -> DdlError {
        match self.peek_token() {
            Some(tok) => self.error_at(tok.start, format!("{message}, found {:?}", tok.text)),
            None => self.error_at(self.text.len(), format!("{message}, found the end")),
        }
    }

    fn expect_word(&mut self) -> Result<String, DdlError> {
        match self.peek_token() {
            Some(tok)
                if tok.quoted && self.text[tok.start..].starts_with('"')
                    || tok.text.chars().all(|c| c.is_alphanumeric() || c == '_') =>
            {
                self.next_token();
                Ok(tok.text)
            }
            _ => Err(self.error_here("expected a name")),
        }
    }

    fn peek_is(&mut self, word: &str) -> bool {
        self.peek_token()
            .is_some_and(|t| !t.quoted && t.text.eq_ignore_ascii_case(word))
    }

    fn peek_symbol(&mut self, symbol: &str) -> bool {
        self.peek_token()
            .is_some_and(|t| !t.quoted && t.text == symbol)
    }

    fn keyword(&mut self, word: &str) -> Result<(), DdlError> {
        if self.peek_is(word) {
            self.next_token();
            Ok(())
        } else {
            Err(self.error_here(&format!("expected {word}")))
        }
    }

    fn symbol(&mut self, symbol: &str) -> Result<(), DdlError> {
        if self.peek_symbol(symbol) {
            self.next_token();
            Ok(())
        } else {
            Err(self.error_here(&format!("expected {symbol:?}")))
        }
    }

    fn string(&mut self) -> Result<String, DdlError> {
        match self.peek_token() {
            Some(tok) if tok.quoted && self.text[tok.start..].starts_with('\'') => {
                self.next_token();
                Ok(tok.text)
            }
            _ => Err(self.error_here("expected a quoted string")),
        }
    }

    fn end(&mut self) -> Result<(), DdlError> {
        while self.peek_symbol(";") {
            self.next_token();
        }
        match self.peek_token() {
            None => Ok(()),
            Some(_) => Err(self.error_here("expected the end of the statement")),
        }
    }

    /// A name as SQL folds it: unquoted → lower case; quoted → as written (the Exasol dialect:
    /// its engine name, see [`parse`]).
    fn name(&mut self) -> Result<String, DdlError> {
        self.name_quoted().map(|(name, _)| name)
    }

    /// [`name`](Self::name), and whether it was quoted.
    fn name_quoted(&mut self) -> Result<(String, bool), DdlError> {
        let quoted = self
            .peek_token()
            .is_some_and(|t| t.quoted && self.text[t.start..].starts_with('"'));
        let word = self.expect_word()?;
        Ok(if quoted && self.exasol {
            (crate::core::names::swap_case(&word), true)
        } else if quoted {
            (word, true)
        } else {
            (word.to_ascii_lowercase(), false)
        })
    }

    /// `[schema.]name`, and whether the schema and the name were quoted.
    fn object_name_quoted(&mut self) -> Result<(Option<String>, String, (bool, bool)), DdlError> {
        let (first, first_quoted) = self.name_quoted()?;
        if self.peek_symbol(".") {
            self.next_token();
            let (second, quoted) = self.name_quoted()?;
            Ok((Some(first), second, (first_quoted, quoted)))
        } else {
            Ok((None, first, (false, first_quoted)))
        }
    }

    /// The text of a type, up to a `,` or `)` at depth 0, or one of `stop` words.
    fn type_text(&mut self, stop: &[&str]) -> Result<String, DdlError> {
        let start = {
            self.skip_space();
            self.pos
        };
        let mut depth = 0usize;
        let mut end = start;
        while let Some(tok) = self.peek_token() {
            if depth == 0
                && (tok.text == ","
                    || tok.text == ")"
                    || stop.iter().any(|s| tok.text.eq_ignore_ascii_case(s)))
            {
                break;
            }
            match tok.text.as_str() {
                "(" => depth += 1,
                ")" => depth = depth.saturating_sub(1),
                _ => {}
            }
            self.next_token();
            end = self.pos;
        }
        let text = self.text[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if text.is_empty() {
            return Err(self.error_here("expected a type"));
        }
        Ok(text)
    }

    /// `name type, name type …` up to `close`.
    fn column_list(&mut self, close: &str, what: &str) -> Result<Vec<(String, String)>, DdlError> {
        let mut columns = Vec::new();
        if self.peek_symbol(close) {
            self.next_token();
            return Ok(columns);
        }
        loop {
            let name = self
                .name()
                .map_err(|_| self.error_here(&format!("expected a {what} name")))?;
            let ty = self.type_text(&[])?;
            if columns.iter().any(|(n, _): &(String, String)| n == &name) {
                let message = if what == "EMITS column" {
                    // Exasol's words.
                    let shown = if self.exasol {
                        crate::core::names::swap_case(&name)
                    } else {
                        crate::core::names::exasol_name(&name)
                    };
                    format!("Return argument {shown} is declared more than once")
                } else {
                    format!("{what} {name} appears twice")
                };
                return Err(self.error_at(self.last_start, message));
            }
            columns.push((name, ty));
            if self.peek_symbol(",") {
                self.next_token();
                continue;
            }
            self.symbol(close)?;
            return Ok(columns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_script_heads_are_parsed() {
        let sql = "CREATE OR REPLACE PYTHON3 SET SCRIPT Retail.Sum_Pop(country VARCHAR(100), pop DECIMAL(18, 0))\n\
                   EMITS (country VARCHAR(100), total DOUBLE) AS\n%env A=1;\ndef run(ctx):\n  pass";
        let ScriptDdl::Create(c) = parse(sql, false).unwrap() else {
            panic!()
        };
        assert!(c.or_replace && c.set);
        assert_eq!(c.language, "PYTHON3");
        assert_eq!(
            (c.schema.as_deref(), c.name.as_str()),
            (Some("retail"), "sum_pop")
        );
        assert_eq!(
            c.params.unwrap(),
            [
                ("country".into(), "VARCHAR(100)".into()),
                ("pop".into(), "DECIMAL(18, 0)".into())
            ]
        );
        assert_eq!(
            c.output,
            DdlOutput::Emits(vec![
                ("country".into(), "VARCHAR(100)".into()),
                ("total".into(), "DOUBLE".into())
            ])
        );
        assert_eq!(c.body, "%env A=1;\ndef run(ctx):\n  pass");
        let ScriptDdl::Create(c) = parse(
            "create python3 scalar script f(...) returns double precision as return 1",
            false,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(c.params, None);
        assert_eq!(c.output, DdlOutput::Returns("double precision".into()));
        assert_eq!(c.body, " return 1");
        let ScriptDdl::Create(c) =
            parse("create python3 scalar script g() emits (...) as\nx", false).unwrap()
        else {
            panic!()
        };
        assert_eq!(c.output, DdlOutput::DynamicEmits);
    }

    #[test]
    fn malformed_heads_say_what_and_where() {
        let e = parse(
            "CREATE PYTHON3 SCALAR SCRIPT f(x INT)\n RETRUNS INT AS\npass",
            false,
        )
        .unwrap_err();
        assert_eq!((e.line, e.column), (2, 2), "{e}");
        assert!(e.message.contains("expected RETURNS or EMITS"), "{e}");
        let e = parse(
            "CREATE PYTHON3 SCALAR SCRIPT f(x INT, x INT) RETURNS INT AS",
            false,
        )
        .unwrap_err();
        assert!(e.message.contains("parameter x appears twice"), "{e}");
        let e = parse("CREATE PYTHON3 SCALAR SCRIPT f(x) RETURNS INT AS", false).unwrap_err();
        assert!(e.message.contains("expected a type"), "{e}");
    }

    #[test]
    fn drop_and_alter_session() {
        assert_eq!(
            parse("DROP SCRIPT IF EXISTS s.f;", false).unwrap(),
            ScriptDdl::Drop {
                schema: Some("s".into()),
                name: "f".into(),
                quoted: (false, false),
                if_exists: true
            }
        );
        assert_eq!(
            parse(
                "ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=builtin_python3 GPU_PY=/opt/py'",
                false
            )
            .unwrap(),
            ScriptDdl::SetLanguages("PYTHON3=builtin_python3 GPU_PY=/opt/py".into())
        );
        assert!(is_script_ddl("drop script f"));
        assert!(is_script_ddl("alter session set script_languages='x'"));
        assert!(!is_script_ddl("DROP TABLE f"));
    }

    #[test]
    fn the_exasol_dialect_reads_quoted_names_as_exasol_names() {
        let sql = "CREATE PYTHON3 SET SCRIPT \"Retail\".\"Sum_Pop\"(\"Country\" VARCHAR(9), pop INT)\n\
                   EMITS (\"Out\" VARCHAR(9), \"TOTAL\" DOUBLE, low INT) AS\nx";
        let ScriptDdl::Create(c) = parse(sql, true).unwrap() else {
            panic!()
        };
        // Engine names are the swap of Exasol's (`"Out"` → `oUT`); unquoted ones fold as ever.
        assert_eq!(
            (c.schema.as_deref(), c.name.as_str()),
            (Some("rETAIL"), "sUM_pOP")
        );
        let names =
            |cols: &[(String, String)]| cols.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(&c.params.unwrap()), ["cOUNTRY", "pop"]);
        let DdlOutput::Emits(cols) = c.output else {
            panic!()
        };
        assert_eq!(names(&cols), ["oUT", "total", "low"]);
        // The default dialect keeps quoted names as written.
        let ScriptDdl::Create(c) = parse(sql, false).unwrap() else {
            panic!()
        };
        assert_eq!(names(&c.params.unwrap()), ["Country", "pop"]);
        // `"TOTAL"` and `total` are one name to Exasol: declared twice, in Exasol's words.
        let e = parse_columns("\"TOTAL\" INT, total INT", true).unwrap_err();
        assert!(
            e.message
                .contains("Return argument TOTAL is declared more than once"),
            "{e}"
        );
        assert!(parse_columns("\"TOTAL\" INT, total INT", false).is_ok());
        let e = parse_columns("\"b\" INT, \"b\" INT", true).unwrap_err();
        assert!(e.message.contains("Return argument b is declared"), "{e}");
    }
}
