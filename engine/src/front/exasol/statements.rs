//! Exasol statements that DataFusion's parser does not know, recognised from their tokens:
//! `OPEN SCHEMA`, `CLOSE SCHEMA`, `COMMIT`, `ROLLBACK`, `CREATE [OR REPLACE] CONNECTION`,
//! `DROP CONNECTION`, `IMPORT … FROM SCRIPT`, `EXPORT … INTO SCRIPT`,
//! `ALTER SESSION SET QUERY_TIMEOUT = <seconds>` and `KILL SESSION <id>`.

use datafusion::error::DataFusionError;

use crate::core::error::{EngineError, Result};
pub(crate) use crate::front::tokens::{Tok, exasol_folded, qualified_name, syntax, tokens};

/// An Exasol statement that accelsql runs itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExasolStatement {
    /// `OPEN SCHEMA s`: `s` becomes the current schema.
    OpenSchema(String),
    /// `CLOSE SCHEMA`: back to the default schema.
    CloseSchema,
    /// `CREATE [OR REPLACE] CONNECTION name TO 'address' [USER 'u'] [IDENTIFIED BY 'p']`.
    CreateConnection {
        /// Replace an existing one.
        or_replace: bool,
        /// The connection's name, folded as Exasol folds it (unquoted: upper case).
        name: String,
        /// `TO 'address'`.
        address: String,
        /// `USER 'u'` (empty when absent).
        user: String,
        /// `IDENTIFIED BY 'p'` (empty when absent).
        password: String,
    },
    /// `DROP CONNECTION [IF EXISTS] name`.
    DropConnection {
        /// No error when it does not exist.
        if_exists: bool,
        /// Its name, folded.
        name: String,
    },
    /// `IMPORT [INTO t [(cols)]] FROM SCRIPT s [AT …] [WITH k = 'v' …]`.
    Import(ScriptTransfer),
    /// `EXPORT t|(query) INTO SCRIPT s [AT …] [WITH k = 'v' …]`.
    Export(ScriptTransfer),
    /// `ALTER SESSION SET QUERY_TIMEOUT = <seconds>`: the session's statement timeout (0: none).
    QueryTimeout(u64),
    /// `KILL SESSION <id>`: ends another session (or this one).
    KillSession(u64),
}

/// The parts of `IMPORT … FROM SCRIPT` / `EXPORT … INTO SCRIPT`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ScriptTransfer {
    /// IMPORT: the target table (`INTO t`), as SQL text; EXPORT: the source table, or the
    /// source query's text in parentheses.
    pub(crate) table: Option<String>,
    /// IMPORT: `INTO t (a, b)` target columns; or `INTO (a DOUBLE, b VARCHAR(3))` as
    /// (name, type) pairs for a sub-select import.
    pub(crate) columns: Vec<(String, Option<String>)>,
    /// The script, as SQL names it (`s` or `schema.s`).
    pub(crate) script: String,
    /// `AT conn`: a named connection.
    pub(crate) connection_name: Option<String>,
    /// `AT 'address' USER 'u' IDENTIFIED BY 'p'`.
    pub(crate) connection: Option<(String, String, String)>,
    /// `WITH k = 'v' …`: keys upper-cased, values as written.
    pub(crate) parameters: Vec<(String, String)>,
    /// EXPORT `TRUNCATE`.
    pub(crate) truncate: bool,
    /// EXPORT `REPLACE`.
    pub(crate) replace: bool,
    /// EXPORT `CREATED BY '…'`.
    pub(crate) created_by: Option<String>,
}

impl ScriptTransfer {
    /// The transfer with its table and column texts as the statement wrote them, for one read
    /// from the Exasol dialect's text (`exasol_text`, which swaps a quoted name's case): they
    /// run again as SQL, which reads them in the dialect once more (the swap is its own
    /// inverse).
    pub(crate) fn into_written(mut self) -> Self {
        use super::dialect::exasol_text;
        self.table = self.table.map(|t| exasol_text(&t));
        for (name, _) in &mut self.columns {
            *name = exasol_text(name);
        }
        self
    }
}

/// A schema identifier as accelsql folds it (unquoted → lower case, as DataFusion does).
fn sql_folded(tok: &Tok) -> Option<String> {
    match tok {
        Tok::Word { text, quoted: true } => Some(text.clone()),
        Tok::Word { text, .. } => Some(text.to_ascii_lowercase()),
        _ => None,
    }
}

/// The Exasol statement `text` is, if it is one of [`ExasolStatement`]'s; `Ok(None)` for any
/// other statement (DataFusion's parser takes it), an error for a malformed one.
pub(crate) fn parse_exasol_statement(text: &str) -> Result<Option<ExasolStatement>> {
    match tokens(text) {
        Some(toks) => exasol_statement(text, &toks),
        None => Ok(None),
    }
}

/// Like [`parse_exasol_statement`], for `text` already cut into `toks` (the classifier's tokens).
pub(crate) fn exasol_statement(text: &str, toks: &[Tok]) -> Result<Option<ExasolStatement>> {
    let word = |i: usize, k: &str| toks.get(i).is_some_and(|t| t.is(k));
    if word(0, "OPEN") && word(1, "SCHEMA") {
        return match toks {
            [_, _, name] => Ok(Some(ExasolStatement::OpenSchema(
                sql_folded(name).ok_or_else(|| syntax("OPEN SCHEMA takes a schema name", text))?,
            ))),
            _ => Err(syntax("expected OPEN SCHEMA <name>", text)),
        };
    }
    if word(0, "CLOSE") && word(1, "SCHEMA") {
        return if toks.len() == 2 {
            Ok(Some(ExasolStatement::CloseSchema))
        } else {
            Err(syntax("expected CLOSE SCHEMA", text))
        };
    }
    let or_replace = word(1, "OR") && word(2, "REPLACE");
    let at = if or_replace { 3 } else { 1 };
    if word(0, "CREATE") && word(at, "CONNECTION") {
        return parse_create_connection(&toks[at + 1..], or_replace, text).map(Some);
    }
    if word(0, "DROP") && word(1, "CONNECTION") {
        let if_exists = word(2, "IF") && word(3, "EXISTS");
        let rest = &toks[if if_exists { 4 } else { 2 }..];
        return match rest {
            [name] => Ok(Some(ExasolStatement::DropConnection {
                if_exists,
                name: exasol_folded(name)
                    .ok_or_else(|| syntax("DROP CONNECTION takes a connection name", text))?,
            })),
            _ => Err(syntax("expected DROP CONNECTION [IF EXISTS] <name>", text)),
        };
    }
    if word(0, "ALTER") && word(1, "SESSION") && word(2, "SET") && word(3, "QUERY_TIMEOUT") {
        let seconds = match &toks[4..] {
            [Tok::Other(eq), Tok::Other(n)] if eq == "=" => n.parse::<u64>().ok(),
            _ => None,
        };
        return seconds
            .map(|s| Some(ExasolStatement::QueryTimeout(s)))
            .ok_or_else(|| {
                syntax(
                    "expected ALTER SESSION SET QUERY_TIMEOUT = <whole seconds, 0 for none>",
                    text,
                )
            });
    }
    if word(0, "KILL") && word(1, "SESSION") {
        let id = match &toks[2..] {
            [Tok::Other(n)] => n.parse::<u64>().ok(),
            _ => None,
        };
        return id
            .map(|id| Some(ExasolStatement::KillSession(id)))
            .ok_or_else(|| syntax("expected KILL SESSION <session number>", text));
    }
    if word(0, "IMPORT") && toks.iter().any(|t| t.is("SCRIPT")) {
        return parse_import(toks, text).map(|t| Some(ExasolStatement::Import(t)));
    }
    if word(0, "EXPORT") && toks.iter().any(|t| t.is("SCRIPT")) {
        return parse_export(toks, text).map(|t| Some(ExasolStatement::Export(t)));
    }
    if word(0, "IMPORT") || word(0, "EXPORT") {
        return Err(EngineError::Sql(DataFusionError::NotImplemented(
            "accelsql runs IMPORT … FROM SCRIPT and EXPORT … INTO SCRIPT only (a difference from \
             Exasol): for files use CREATE EXTERNAL TABLE … STORED AS CSV|PARQUET|JSON, \
             SELECT * FROM 'file', or COPY … TO 'file'"
                .into(),
        )));
    }
    Ok(None)
}

fn parse_create_connection(rest: &[Tok], or_replace: bool, text: &str) -> Result<ExasolStatement> {
    let usage = "expected CREATE [OR REPLACE] CONNECTION <name> TO '<address>' \
                 [USER '<user>'] [IDENTIFIED BY '<password>']";
    let name = rest
        .first()
        .and_then(exasol_folded)
        .ok_or_else(|| syntax(usage, text))?;
    let mut i = 1;
    let mut string_after = |keywords: &[&str]| -> Result<Option<String>> {
        if !keywords
            .iter()
            .enumerate()
            .all(|(k, w)| rest.get(i + k).is_some_and(|t| t.is(w)))
        {
            return Ok(None);
        }
        match rest.get(i + keywords.len()) {
            Some(Tok::Str(s)) => {
                i += keywords.len() + 1;
                Ok(Some(s.clone()))
            }
            _ => Err(syntax(usage, text)),
        }
    };
    let address = string_after(&["TO"])?.ok_or_else(|| syntax(usage, text))?;
    let user = string_after(&["USER"])?.unwrap_or_default();
    let password = string_after(&["IDENTIFIED", "BY"])?.unwrap_or_default();
    if i != rest.len() {
        return Err(syntax(usage, text));
    }
    Ok(ExasolStatement::CreateConnection {
        or_replace,
        name,
        address,
        user,
        password,
    })
}

/// The tokens from `toks[*i]` to the parenthesis matching the one there, as SQL text (without
/// the outer parentheses); `*i` moves past it.
fn parenthesized(toks: &[Tok], i: &mut usize) -> Option<Vec<Tok>> {
    if toks.get(*i) != Some(&Tok::Other("(".into())) {
        return None;
    }
    let mut depth = 0usize;
    let start = *i + 1;
    while let Some(t) = toks.get(*i) {
        match t {
            Tok::Other(p) if p == "(" => depth += 1,
            Tok::Other(p) if p == ")" => {
                depth -= 1;
                if depth == 0 {
                    let inner = toks[start..*i].to_vec();
                    *i += 1;
                    return Some(inner);
                }
            }
            _ => {}
        }
        *i += 1;
    }
    None
}

fn joined(toks: &[Tok]) -> String {
    toks.iter().map(Tok::text).collect::<Vec<_>>().join(" ")
}

/// `a, b` or `a DOUBLE, b VARCHAR(3)`: (name, type) pairs, folded as SQL folds names.
fn column_list(toks: &[Tok]) -> Option<Vec<(String, Option<String>)>> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut current: Vec<Tok> = Vec::new();
    let mut push = |current: &mut Vec<Tok>| -> Option<()> {
        let (first, rest) = current.split_first()?;
        let name = sql_folded(first)?;
        out.push((name, (!rest.is_empty()).then(|| joined(rest))));
        current.clear();
        Some(())
    };
    for t in toks {
        match t {
            Tok::Other(p) if p == "(" => depth += 1,
            Tok::Other(p) if p == ")" => depth = depth.saturating_sub(1),
            Tok::Other(p) if p == "," && depth == 0 => {
                push(&mut current)?;
                continue;
            }
            _ => {}
        }
        current.push(t.clone());
    }
    push(&mut current)?;
    Some(out)
}

/// `SCRIPT s [AT conn | AT 'a' USER 'u' IDENTIFIED BY 'p'] [WITH k = 'v' …]`, from `toks[*i]`.
fn script_clause(toks: &[Tok], i: &mut usize, out: &mut ScriptTransfer) -> Option<()> {
    if !toks.get(*i)?.is("SCRIPT") {
        return None;
    }
    *i += 1;
    out.script = qualified_name(toks, i)?;
    if toks.get(*i).is_some_and(|t| t.is("AT")) {
        *i += 1;
        match toks.get(*i)? {
            Tok::Str(address) => {
                let address = address.clone();
                *i += 1;
                let mut user = String::new();
                let mut password = String::new();
                if toks.get(*i).is_some_and(|t| t.is("USER")) {
                    let Tok::Str(u) = toks.get(*i + 1)? else {
                        return None;
                    };
                    user = u.clone();
                    *i += 2;
                }
                if toks.get(*i).is_some_and(|t| t.is("IDENTIFIED"))
                    && toks.get(*i + 1).is_some_and(|t| t.is("BY"))
                {
                    let Tok::Str(p) = toks.get(*i + 2)? else {
                        return None;
                    };
                    password = p.clone();
                    *i += 3;
                }
                out.connection = Some((address, user, password));
            }
            name => {
                out.connection_name = Some(exasol_folded(name)?);
                *i += 1;
            }
        }
    }
    if toks.get(*i).is_some_and(|t| t.is("WITH")) {
        *i += 1;
        while let Some(Tok::Word { .. }) = toks.get(*i) {
            let key = exasol_folded(toks.get(*i)?)?;
            if toks.get(*i + 1) != Some(&Tok::Other("=".into())) {
                // Not a parameter: EXPORT's TRUNCATE / REPLACE / CREATED BY follow.
                break;
            }
            let Tok::Str(value) = toks.get(*i + 2)? else {
                return None;
            };
            out.parameters.push((key, value.clone()));
            *i += 3;
        }
    }
    Some(())
}

fn parse_import(toks: &[Tok], text: &str) -> Result<ScriptTransfer> {
    let usage = "expected IMPORT [INTO <table> [(<columns>)] | INTO (<name> <type>, …)] FROM SCRIPT \
                 <script> [AT <connection>] [WITH <key> = '<value>' …]";
    let bad = || syntax(usage, text);
    let mut out = ScriptTransfer::default();
    let mut i = 1;
    if toks.get(i).is_some_and(|t| t.is("INTO")) {
        i += 1;
        if let Some(inner) = parenthesized(toks, &mut i) {
            out.columns = column_list(&inner).ok_or_else(bad)?;
        } else {
            out.table = Some(qualified_name(toks, &mut i).ok_or_else(bad)?);
            if let Some(inner) = parenthesized(toks, &mut i) {
                out.columns = column_list(&inner).ok_or_else(bad)?;
            }
        }
    }
    if !toks.get(i).is_some_and(|t| t.is("FROM")) {
        return Err(bad());
    }
    i += 1;
    script_clause(toks, &mut i, &mut out).ok_or_else(bad)?;
    if i != toks.len() {
        return Err(bad());
    }
    Ok(out)
}

fn parse_export(toks: &[Tok], text: &str) -> Result<ScriptTransfer> {
    let usage = "expected EXPORT <table> | (<query>) INTO SCRIPT <script> [AT <connection>] \
                 [WITH <key> = '<value>' …] [TRUNCATE | REPLACE] [CREATED BY '<text>']";
    let bad = || syntax(usage, text);
    let mut out = ScriptTransfer::default();
    let mut i = 1;
    if let Some(inner) = parenthesized(toks, &mut i) {
        out.table = Some(format!("({})", joined(&inner)));
    } else {
        out.table = Some(qualified_name(toks, &mut i).ok_or_else(bad)?);
        if let Some(inner) = parenthesized(toks, &mut i) {
            out.columns = column_list(&inner).ok_or_else(bad)?;
        }
    }
    if !toks.get(i).is_some_and(|t| t.is("INTO")) {
        return Err(bad());
    }
    i += 1;
    script_clause(toks, &mut i, &mut out).ok_or_else(bad)?;
    loop {
        match toks.get(i) {
            Some(t) if t.is("TRUNCATE") => out.truncate = true,
            Some(t) if t.is("REPLACE") => out.replace = true,
            Some(t) if t.is("CREATED") && toks.get(i + 1).is_some_and(|t| t.is("BY")) => {
                let Some(Tok::Str(s)) = toks.get(i + 2) else {
                    return Err(bad());
                };
                out.created_by = Some(s.clone());
                i += 2;
            }
            None => break,
            Some(_) => return Err(bad()),
        }
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Option<ExasolStatement> {
        parse_exasol_statement(text).unwrap()
    }

    #[test]
    fn schemas_and_transactions() {
        assert_eq!(
            parsed("open schema Lab"),
            Some(ExasolStatement::OpenSchema("lab".into()))
        );
        assert_eq!(
            parsed("OPEN SCHEMA \"Lab\";"),
            Some(ExasolStatement::OpenSchema("Lab".into()))
        );
        assert_eq!(parsed("CLOSE SCHEMA"), Some(ExasolStatement::CloseSchema));
        // Transactions are the tables' statements (front/tables.rs).
        assert_eq!(parsed("commit"), None);
        assert_eq!(parsed("SELECT 1"), None);
        assert_eq!(parsed("CREATE SCHEMA s"), None);
        assert!(parse_exasol_statement("OPEN SCHEMA a b").is_err());
    }

    #[test]
    fn query_timeout() {
        assert_eq!(
            parsed("alter session set query_timeout = 30;"),
            Some(ExasolStatement::QueryTimeout(30))
        );
        assert_eq!(
            parsed("ALTER SESSION SET QUERY_TIMEOUT=0"),
            Some(ExasolStatement::QueryTimeout(0))
        );
        for bad in [
            "ALTER SESSION SET QUERY_TIMEOUT = -1",
            "ALTER SESSION SET QUERY_TIMEOUT = 1.5",
            "ALTER SESSION SET QUERY_TIMEOUT = '5'",
            "ALTER SESSION SET QUERY_TIMEOUT",
        ] {
            let e = parse_exasol_statement(bad).unwrap_err();
            assert!(
                e.to_string().contains("QUERY_TIMEOUT = <whole seconds"),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            parsed("kill session 12;"),
            Some(ExasolStatement::KillSession(12))
        );
        for bad in ["KILL SESSION", "KILL SESSION x", "KILL SESSION 1 2"] {
            let e = parse_exasol_statement(bad).unwrap_err();
            assert!(
                e.to_string().contains("KILL SESSION <session number>"),
                "{bad}: {e}"
            );
        }
        // Other ALTER SESSION statements are not this one.
        assert_eq!(parsed("ALTER SESSION SET NLS_DATE_FORMAT = 'x'"), None);
    }

    #[test]
    fn connections() {
        assert_eq!(
            parsed(
                "CREATE OR REPLACE CONNECTION my_conn TO 'https://x' USER 'u' IDENTIFIED BY 'p''w'"
            ),
            Some(ExasolStatement::CreateConnection {
                or_replace: true,
                name: "MY_CONN".into(),
                address: "https://x".into(),
                user: "u".into(),
                password: "p'w".into(),
            })
        );
        assert_eq!(
            parsed("create connection \"c\" to 'a'"),
            Some(ExasolStatement::CreateConnection {
                or_replace: false,
                name: "c".into(),
                address: "a".into(),
                user: String::new(),
                password: String::new(),
            })
        );
        assert_eq!(
            parsed("DROP CONNECTION IF EXISTS c"),
            Some(ExasolStatement::DropConnection {
                if_exists: true,
                name: "C".into()
            })
        );
        let e = parse_exasol_statement("CREATE CONNECTION c 'a'").unwrap_err();
        assert_eq!(e.code(), "42000", "{e}");
    }

    #[test]
    fn import_and_export() {
        let Some(ExasolStatement::Import(t)) = parsed(
            "IMPORT INTO s.t (a, b) FROM SCRIPT lab.loader AT my_conn WITH url = 'x' Mode='Fast'",
        ) else {
            panic!()
        };
        assert_eq!(t.table.as_deref(), Some("s.t"));
        assert_eq!(t.columns, [("a".into(), None), ("b".into(), None)]);
        assert_eq!(t.script, "lab.loader");
        assert_eq!(t.connection_name.as_deref(), Some("MY_CONN"));
        assert_eq!(
            t.parameters,
            [("URL".into(), "x".into()), ("MODE".into(), "Fast".into())]
        );
        let Some(ExasolStatement::Import(t)) = parsed(
            "IMPORT INTO (a DOUBLE, b VARCHAR(3)) FROM SCRIPT s AT 'addr' USER 'u' IDENTIFIED BY 'p'",
        ) else {
            panic!()
        };
        assert_eq!(t.table, None);
        assert_eq!(
            t.columns,
            [
                ("a".into(), Some("DOUBLE".into())),
                ("b".into(), Some("VARCHAR ( 3 )".into()))
            ]
        );
        assert_eq!(t.connection, Some(("addr".into(), "u".into(), "p".into())));
        let Some(ExasolStatement::Export(t)) = parsed(
            "EXPORT t INTO SCRIPT s WITH k = 'v' REPLACE CREATED BY 'CREATE TABLE x (a INT)'",
        ) else {
            panic!()
        };
        assert_eq!(t.table.as_deref(), Some("t"));
        assert!(t.replace && !t.truncate);
        assert_eq!(t.created_by.as_deref(), Some("CREATE TABLE x (a INT)"));
        assert!(parse_exasol_statement("IMPORT INTO t FROM SCRIPT").is_err());
        // Exasol's file and database imports are not there, and say so.
        let e = parse_exasol_statement("IMPORT INTO t FROM CSV AT 'x' FILE 'y.csv'").unwrap_err();
        assert_eq!(e.code(), "0A000", "{e}");
        assert!(e.to_string().contains("CREATE EXTERNAL TABLE"), "{e}");
    }
}
