//! The shell's backslash commands (psql's and duckdb's habits): `\q`, `\?`, `\timing`, `\x`,
//! `\o FILE`, `\i FILE`, `\d [NAME]`, `\dt`, `\df` — at the start of a statement, typed at the
//! prompt or written in a script.

/// A line the shell handles itself instead of sending it to the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MetaCommand {
    /// `\q`, `quit`, `exit`: leave the shell.
    Quit,
    /// `\?`, `help`: the list of commands.
    Help,
    /// `\timing [on|off]`: print each statement's row count and time (toggles without a value).
    Timing(Option<bool>),
    /// `\x [on|off]`: expanded display, a record per row (toggles without a value).
    Expanded(Option<bool>),
    /// `\o [FILE]`: results go to FILE (made anew); without one, back to standard output.
    Output(Option<String>),
    /// `\i FILE`: run the statements of FILE.
    Include(String),
    /// `\d`: tables and scripts; `\d NAME`: a table's columns with their types, or a script.
    Describe(Option<String>),
    /// `\dt`: the tables.
    Tables,
    /// `\df`: the scripts (functions) with their kind, signature and annotations.
    Functions,
    /// A `\…` the shell does not know, or one given wrong arguments: what to say.
    Invalid(String),
}

/// The help text of [`MetaCommand::Help`].
pub(crate) const HELP: &str = r"Statements end with ';' (they may span lines). Commands:
  \?, help          this help
  \q, quit, exit    leave the shell (as does Ctrl-D)
  \timing [on|off]  print each statement's row count and time
  \x [on|off]       expanded display: a record per row
  \o [FILE]         send results to FILE; \o alone: back to the terminal
  \i FILE           run the statements of FILE
  \d [NAME]         tables and scripts; with NAME, a table's columns or a script
  \dt               tables
  \df               scripts (functions) with their annotations
Ctrl-C cancels the running statement (or drops the one being typed). History is kept in
~/.accelsql_history. Try: SELECT * FROM exa_metadata;  SELECT * FROM accelsql.gpu_devices;";

impl MetaCommand {
    /// The command on `line`, if it is one (`quit`/`exit`/`help` and `\…`; a trailing `;` is
    /// allowed).
    pub(crate) fn parse(line: &str) -> Option<Self> {
        let word = line.trim();
        let bare = word.strip_suffix(';').unwrap_or(word).trim_end();
        match bare.to_ascii_lowercase().as_str() {
            "quit" | "exit" => return Some(Self::Quit),
            "help" => return Some(Self::Help),
            _ => {}
        }
        let rest = bare.strip_prefix('\\')?;
        let (name, argument) = match rest.split_once(char::is_whitespace) {
            Some((name, argument)) => (name, Some(argument.trim()).filter(|a| !a.is_empty())),
            None => (rest, None),
        };
        let switch = |what: &str| match argument.map(str::to_ascii_lowercase).as_deref() {
            None => Ok(None),
            Some("on") => Ok(Some(true)),
            Some("off") => Ok(Some(false)),
            Some(other) => Err(Self::Invalid(format!(
                "\\{what} takes on or off, not {other}"
            ))),
        };
        let command = match name {
            "q" => Self::Quit,
            "?" | "h" => Self::Help,
            "timing" => switch("timing").map_or_else(|e| e, Self::Timing),
            "x" => switch("x").map_or_else(|e| e, Self::Expanded),
            "o" => Self::Output(argument.map(unquoted)),
            "i" => match argument {
                Some(file) => Self::Include(unquoted(file)),
                None => Self::Invalid("\\i needs a file: \\i FILE".into()),
            },
            "d" => Self::Describe(argument.map(str::to_string)),
            "dt" => Self::Tables,
            "df" => Self::Functions,
            _ => Self::Invalid(format!("unknown command \\{name}; type \\? for help")),
        };
        Some(command)
    }
}

/// A file argument without the quotes around it (`\o 'my file.csv'`).
fn unquoted(text: &str) -> String {
    let t = text.trim();
    for q in ['\'', '"'] {
        if let Some(inner) = t.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner.to_string();
        }
    }
    t.to_string()
}

/// `name` as a SQL string literal.
pub(crate) fn sql_string(name: &str) -> String {
    format!("'{}'", name.replace('\'', "''"))
}

/// The query of `\dt`: the session's tables (not the system schemas').
pub(crate) const TABLES_SQL: &str = "SELECT table_schema AS \"schema\", table_name AS \"name\", \
     table_type AS \"type\" FROM information_schema.tables \
     WHERE table_schema NOT IN ('information_schema', 'accelsql', 'sys') ORDER BY 1, 2";

/// The query of `\df`: the scripts, with their kind, signature and annotations.
pub(crate) const FUNCTIONS_SQL: &str = "SELECT \"schema\", \"name\", \"language\", \"kind\", \
     \"inputs\", \"output\", \"options\" AS \"annotations\" FROM accelsql.scripts ORDER BY 1, 2";

/// The query of `\d NAME` for a script: the scripts named `name` (any case; `schema.name` too).
pub(crate) fn script_sql(name: &str) -> String {
    let (schema, plain) = match name.rsplit_once('.') {
        Some((schema, plain)) => (Some(schema), plain),
        None => (None, name),
    };
    let strip = |s: &str| s.trim().trim_matches('"').to_string();
    let mut sql = format!(
        "SELECT \"schema\", \"name\", \"language\", \"kind\", \"inputs\", \"output\", \
         \"options\" AS \"annotations\" FROM accelsql.scripts WHERE lower(\"name\") = lower({})",
        sql_string(&strip(plain))
    );
    if let Some(schema) = schema {
        sql.push_str(&format!(
            " AND lower(\"schema\") = lower({})",
            sql_string(&strip(schema))
        ));
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_their_arguments_are_recognised() {
        use MetaCommand as M;
        assert_eq!(M::parse("\\q"), Some(M::Quit));
        assert_eq!(M::parse("  quit; "), Some(M::Quit));
        assert_eq!(M::parse("EXIT"), Some(M::Quit));
        assert_eq!(M::parse("\\?"), Some(M::Help));
        assert_eq!(M::parse("\\timing"), Some(M::Timing(None)));
        assert_eq!(M::parse("\\timing off"), Some(M::Timing(Some(false))));
        assert_eq!(M::parse("\\x on"), Some(M::Expanded(Some(true))));
        assert!(matches!(M::parse("\\x maybe"), Some(M::Invalid(_))));
        assert_eq!(
            M::parse("\\o 'out file.csv'"),
            Some(M::Output(Some("out file.csv".into())))
        );
        assert_eq!(M::parse("\\o"), Some(M::Output(None)));
        assert_eq!(
            M::parse("\\i setup.sql"),
            Some(M::Include("setup.sql".into()))
        );
        assert!(matches!(M::parse("\\i"), Some(M::Invalid(_))));
        assert_eq!(M::parse("\\d"), Some(M::Describe(None)));
        assert_eq!(M::parse("\\d s.t"), Some(M::Describe(Some("s.t".into()))));
        assert_eq!(M::parse("\\dt"), Some(M::Tables));
        assert_eq!(M::parse("\\df;"), Some(M::Functions));
        assert!(matches!(M::parse("\\zz"), Some(M::Invalid(_))));
        assert_eq!(M::parse("SELECT 1;"), None);
        assert_eq!(M::parse("quitting"), None);
    }

    #[test]
    fn script_lookups_quote_what_they_are_given() {
        assert_eq!(
            script_sql("it's"),
            "SELECT \"schema\", \"name\", \"language\", \"kind\", \"inputs\", \"output\", \
             \"options\" AS \"annotations\" FROM accelsql.scripts WHERE lower(\"name\") = lower('it''s')"
        );
        assert!(script_sql("Retail.\"F\"").ends_with("AND lower(\"schema\") = lower('Retail')"));
    }
}
