//! The engine's tables beyond what DataFusion plans: transactions (`COMMIT`, `ROLLBACK`, `SET
//! AUTOCOMMIT ON|OFF`, `BEGIN`), `RENAME TABLE`, `ALTER TABLE … ADD|DROP|RENAME COLUMN`,
//! `OPTIMIZE t`, `VACUUM t [RETAIN n HOURS] [DRY RUN]`, `COPY t FROM 'file'`, and the text forms
//! the session rewrites before DataFusion parses them: `t VERSION AS OF n` / `t TIMESTAMP AS OF
//! '…'` (time travel, Delta Lake's own syntax), `CREATE TABLE t LIKE s`, `CREATE [LOCAL]
//! TEMPORARY TABLE`.
//!
//! DDL on a stored table first commits the session's open transaction (as Oracle and MySQL
//! do): a table's columns change in a commit of their own.

use std::sync::Arc;

use accelsql_storage::catalog::AsOf;
use accelsql_storage::{StoredTable, TableStore};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::TableReference;
use datafusion::common::exec_datafusion_err;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Word};

use super::tokens::{Tok, syntax, written_tokens};
use crate::core::error::{EngineError, Result};
use crate::missing_err;

/// A statement on tables that DataFusion does not plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TableStatement {
    /// `BEGIN [TRANSACTION|WORK]` / `START TRANSACTION`: writes wait for COMMIT once.
    Begin,
    /// `COMMIT [WORK]`.
    Commit,
    /// `ROLLBACK [WORK]`.
    Rollback,
    /// `SET AUTOCOMMIT ON|OFF`.
    Autocommit(bool),
    /// `RENAME [TABLE] a TO b`.
    Rename {
        /// The table, as SQL names it.
        from: String,
        /// Its new name.
        to: String,
    },
    /// `OPTIMIZE t`: compaction.
    Optimize(String),
    /// `VACUUM t [RETAIN n HOURS] [DRY RUN]`.
    Vacuum {
        /// The table.
        table: String,
        /// `RETAIN n HOURS` (default: Delta's 168).
        retain_hours: Option<u64>,
        /// `DRY RUN`: list, do not delete.
        dry_run: bool,
    },
    /// `COPY t FROM 'file' [STORED AS fmt]`.
    CopyFrom {
        /// The table.
        table: String,
        /// The file, folder or glob.
        path: String,
        /// `STORED AS` (else from the file's extension).
        format: Option<String>,
    },
}

/// The name a run of tokens spells (`s.t`, `"My T"`), as SQL text.
fn name_text(toks: &[Tok]) -> Option<String> {
    let mut out = String::new();
    let mut want_word = true;
    for t in toks {
        match t {
            Tok::Word { .. } if want_word => out.push_str(&t.text()),
            Tok::Other(dot) if dot == "." && !want_word => out.push('.'),
            _ => return None,
        }
        want_word = !want_word;
    }
    (!out.is_empty() && !want_word).then_some(out)
}

/// The statement `text` is, if it is a [`TableStatement`]; an error for a malformed one.
#[cfg(test)]
pub(crate) fn parse_table_statement(text: &str) -> Result<Option<TableStatement>> {
    match crate::front::tokens::tokens(text) {
        Some(toks) => table_statement(text, &toks),
        None => Ok(None),
    }
}

/// Like [`parse_table_statement`], for `text` already cut into `toks` (the classifier's tokens).
pub(crate) fn table_statement(text: &str, toks: &[Tok]) -> Result<Option<TableStatement>> {
    let word = |i: usize, k: &str| toks.get(i).is_some_and(|t| t.is(k));
    let n = toks.len();
    if (word(0, "COMMIT") || word(0, "ROLLBACK"))
        && (n == 1 || (n == 2 && (word(1, "WORK") || word(1, "TRANSACTION"))))
    {
        return Ok(Some(if word(0, "COMMIT") {
            TableStatement::Commit
        } else {
            TableStatement::Rollback
        }));
    }
    if (word(0, "BEGIN") && (n == 1 || (n == 2 && (word(1, "TRANSACTION") || word(1, "WORK")))))
        || (word(0, "START") && word(1, "TRANSACTION") && n == 2)
    {
        return Ok(Some(TableStatement::Begin));
    }
    if word(0, "SET") && word(1, "AUTOCOMMIT") {
        let rest: Vec<&Tok> = toks[2..]
            .iter()
            .filter(|t| !matches!(t, Tok::Other(o) if o == "="))
            .collect();
        return match rest.as_slice() {
            [t] if t.is("ON") || t.is("TRUE") => Ok(Some(TableStatement::Autocommit(true))),
            [t] if t.is("OFF") || t.is("FALSE") => Ok(Some(TableStatement::Autocommit(false))),
            [Tok::Other(one)] if one == "1" => Ok(Some(TableStatement::Autocommit(true))),
            [Tok::Other(zero)] if zero == "0" => Ok(Some(TableStatement::Autocommit(false))),
            _ => Err(syntax("expected SET AUTOCOMMIT ON|OFF", text)),
        };
    }
    if word(0, "RENAME") {
        let start = if word(1, "TABLE") { 2 } else { 1 };
        if word(1, "SCHEMA")
            || word(1, "USER")
            || word(1, "ROLE")
            || word(1, "CONNECTION")
            || word(1, "CONSUMER")
        {
            return Ok(None);
        }
        let Some(to_at) = toks.iter().position(|t| t.is("TO")) else {
            return Err(syntax("expected RENAME [TABLE] <name> TO <new name>", text));
        };
        let (Some(from), Some(to)) = (
            name_text(&toks[start.min(to_at)..to_at]),
            name_text(&toks[to_at + 1..]),
        ) else {
            return Err(syntax("expected RENAME [TABLE] <name> TO <new name>", text));
        };
        return Ok(Some(TableStatement::Rename { from, to }));
    }
    if word(0, "OPTIMIZE") {
        let start = if word(1, "TABLE") { 2 } else { 1 };
        return match name_text(&toks[start.min(n)..]) {
            Some(table) => Ok(Some(TableStatement::Optimize(table))),
            None => Err(syntax("expected OPTIMIZE [TABLE] <name>", text)),
        };
    }
    if word(0, "VACUUM") {
        let start = if word(1, "TABLE") { 2 } else { 1 };
        let end = toks
            .iter()
            .position(|t| t.is("RETAIN") || t.is("DRY"))
            .unwrap_or(n);
        let Some(table) = name_text(&toks[start.min(end)..end]) else {
            return Err(syntax(
                "expected VACUUM <name> [RETAIN <n> HOURS] [DRY RUN]",
                text,
            ));
        };
        let mut retain_hours = None;
        let mut dry_run = false;
        let mut i = end;
        while i < n {
            if word(i, "RETAIN") {
                let hours = match toks.get(i + 1) {
                    Some(Tok::Other(v)) => v.parse::<u64>().ok(),
                    _ => None,
                };
                if hours.is_none() || !(word(i + 2, "HOURS") || word(i + 2, "HOUR")) {
                    return Err(syntax("expected RETAIN <whole number> HOURS", text));
                }
                retain_hours = hours;
                i += 3;
            } else if word(i, "DRY") && word(i + 1, "RUN") {
                dry_run = true;
                i += 2;
            } else {
                return Err(syntax(
                    "expected VACUUM <name> [RETAIN <n> HOURS] [DRY RUN]",
                    text,
                ));
            }
        }
        return Ok(Some(TableStatement::Vacuum {
            table,
            retain_hours,
            dry_run,
        }));
    }
    if word(0, "COPY") {
        // `COPY name FROM …`: a name, then FROM (a query in parentheses is COPY … TO).
        let Some(from_at) = toks.iter().position(|t| t.is("FROM")) else {
            return Ok(None);
        };
        if from_at < 2 || name_text(&toks[1..from_at]).is_none() {
            return Ok(None);
        }
        let Some(table) = name_text(&toks[1..from_at]) else {
            return Err(syntax("expected COPY <table> FROM '<file>'", text));
        };
        let Some(Tok::Str(path)) = toks.get(from_at + 1) else {
            return Err(syntax("expected COPY <table> FROM '<file>'", text));
        };
        let format = match &toks[from_at + 2..] {
            [] => None,
            [s, a, f] if s.is("STORED") && a.is("AS") => match f {
                Tok::Word { text, .. } => Some(text.to_ascii_lowercase()),
                _ => None,
            },
            _ => {
                return Err(syntax(
                    "expected COPY <table> FROM '<file>' [STORED AS PARQUET|CSV|JSON]",
                    text,
                ));
            }
        };
        return Ok(Some(TableStatement::CopyFrom {
            table,
            path: path.clone(),
            format,
        }));
    }
    Ok(None)
}

/// A statement's text after the table rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableText {
    /// The text DataFusion parses.
    pub(crate) text: String,
    /// `CREATE [LOCAL|GLOBAL] TEMPORARY TABLE`: the table is the session's own.
    pub(crate) temporary: bool,
}

/// `text` with time travel written as the names the catalog reads (`"t@@version=3" AS t`),
/// `CREATE TABLE t LIKE s …` as `CREATE TABLE t AS SELECT * FROM s LIMIT 0`, and `TEMPORARY`
/// taken out of `CREATE TEMPORARY TABLE` (and reported).
///
/// # Errors
///
/// 22007 for a `TIMESTAMP AS OF` that is not a timestamp.
pub(crate) fn rewrite_table_text(text: &str) -> Result<TableText> {
    let Some(mut toks) = written_tokens(text) else {
        return Ok(TableText {
            text: text.to_string(),
            temporary: false,
        });
    };
    let mut changed = false;
    let temporary = take_temporary(&mut toks);
    changed |= temporary;
    changed |= rewrite_like(&mut toks);
    changed |= rewrite_time_travel(&mut toks)?;
    let text = if changed {
        toks.iter().map(|t| t.to_string()).collect()
    } else {
        text.to_string()
    };
    Ok(TableText { text, temporary })
}

/// Indices of the tokens that are not whitespace.
fn solid(toks: &[Token]) -> Vec<usize> {
    toks.iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t, Token::Whitespace(_)))
        .map(|(i, _)| i)
        .collect()
}

fn is_kw(t: &Token, k: Keyword) -> bool {
    matches!(t, Token::Word(w) if w.keyword == k && w.quote_style.is_none())
}

/// `CREATE [OR REPLACE] [LOCAL|GLOBAL] TEMPORARY|TEMP TABLE` → without the middle words.
fn take_temporary(toks: &mut [Token]) -> bool {
    let at = solid(toks);
    let kw = |i: usize, k: Keyword| at.get(i).is_some_and(|&j| is_kw(&toks[j], k));
    if !kw(0, Keyword::CREATE) {
        return false;
    }
    let mut i = 1;
    if kw(1, Keyword::OR) && kw(2, Keyword::REPLACE) {
        i = 3;
    }
    let scope = kw(i, Keyword::LOCAL) || kw(i, Keyword::GLOBAL);
    let temp_at = if scope { i + 1 } else { i };
    if !(kw(temp_at, Keyword::TEMPORARY) || kw(temp_at, Keyword::TEMP))
        || !kw(temp_at + 1, Keyword::TABLE)
    {
        return false;
    }
    for k in i..=temp_at {
        toks[at[k]] = Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space);
    }
    true
}

/// `CREATE [OR REPLACE] TABLE t LIKE s [INCLUDING|EXCLUDING …]` → `… TABLE t AS SELECT * FROM s
/// LIMIT 0` (the columns, their types and NOT NULL; no rows).
fn rewrite_like(toks: &mut Vec<Token>) -> bool {
    let at = solid(toks);
    let kw = |i: usize, k: Keyword| at.get(i).is_some_and(|&j| is_kw(&toks[j], k));
    if !kw(0, Keyword::CREATE) {
        return false;
    }
    let Some(table_at) = (1..4).find(|&i| kw(i, Keyword::TABLE)) else {
        return false;
    };
    let Some(like_at) = (table_at + 2..at.len()).find(|&i| kw(i, Keyword::LIKE)) else {
        return false;
    };
    // The name after LIKE: words and dots.
    let mut end = like_at + 1;
    while end < at.len() {
        match &toks[at[end]] {
            Token::Word(w)
                if w.keyword == Keyword::INCLUDING || w.keyword == Keyword::EXCLUDING =>
            {
                if w.quote_style.is_none() {
                    break;
                }
                end += 1;
            }
            Token::Word(_) | Token::Period => end += 1,
            _ => break,
        }
    }
    if end == like_at + 1 {
        return false;
    }
    // Only options may follow (INCLUDING/EXCLUDING DEFAULTS|IDENTITY|COMMENTS).
    if at[end..].iter().any(|&j| {
        !matches!(&toks[j], Token::Word(w) if w.quote_style.is_none())
            && !matches!(toks[j], Token::SemiColon)
    }) {
        return false;
    }
    let source: String = toks[at[like_at + 1]..=at[end - 1]]
        .iter()
        .map(|t| t.to_string())
        .collect();
    let head: Vec<Token> = toks[..at[like_at]].to_vec();
    let mut out = head;
    let tail = format!("AS SELECT * FROM {source} LIMIT 0");
    out.push(Token::make_word(&tail, None));
    *toks = out;
    true
}

/// `name VERSION AS OF n` and `name TIMESTAMP AS OF 'ts'` → the catalog's versioned name,
/// aliased back to the table's own name unless an alias follows.
fn rewrite_time_travel(toks: &mut Vec<Token>) -> Result<bool> {
    let mut changed = false;
    loop {
        let at = solid(toks);
        let Some(found) = (1..at.len()).find(|&i| {
            let t = &toks[at[i]];
            (is_kw(t, Keyword::VERSION) || is_kw(t, Keyword::TIMESTAMP))
                && at.get(i + 1).is_some_and(|&j| is_kw(&toks[j], Keyword::AS))
                && at.get(i + 2).is_some_and(|&j| is_kw(&toks[j], Keyword::OF))
                && matches!(toks[at[i - 1]], Token::Word(_))
        }) else {
            return Ok(changed);
        };
        let by_version = is_kw(&toks[at[found]], Keyword::VERSION);
        let Some(&value_at) = at.get(found + 3) else {
            return Err(syntax(
                "expected VERSION AS OF <number> or TIMESTAMP AS OF '<timestamp>'",
                &toks.iter().map(|t| t.to_string()).collect::<String>(),
            ));
        };
        let as_of = match (&toks[value_at], by_version) {
            (Token::Number(n, _), true) => AsOf::Version(n.parse().map_err(|_| {
                syntax(
                    "VERSION AS OF takes a whole number",
                    &toks.iter().map(|t| t.to_string()).collect::<String>(),
                )
            })?),
            (Token::SingleQuotedString(s), false) => AsOf::Timestamp(parse_timestamp(s)?),
            _ => {
                return Err(syntax(
                    "expected VERSION AS OF <number> or TIMESTAMP AS OF '<timestamp>'",
                    &toks.iter().map(|t| t.to_string()).collect::<String>(),
                ));
            }
        };
        // The name before: words separated by periods, ending at `found - 1`.
        let last = found - 1;
        let mut first = last;
        while first >= 2
            && matches!(toks[at[first - 1]], Token::Period)
            && matches!(toks[at[first - 2]], Token::Word(_))
        {
            first -= 2;
        }
        let Token::Word(table) = toks[at[last]].clone() else {
            return Ok(changed);
        };
        let table_name = match table.quote_style {
            Some(_) => table.value.clone(),
            None => table.value.to_ascii_lowercase(),
        };
        let versioned = Word {
            value: as_of.name_for(&table_name),
            quote_style: Some('"'),
            keyword: Keyword::NoKeyword,
        };
        let aliased = at.get(found + 4).is_some_and(|&j| match &toks[j] {
            Token::Word(w) => {
                w.quote_style.is_some()
                    || w.keyword == Keyword::AS
                    || w.keyword == Keyword::NoKeyword
            }
            _ => false,
        });
        let mut replacement = vec![Token::Word(versioned)];
        if !aliased {
            replacement.push(Token::Whitespace(
                datafusion::sql::sqlparser::tokenizer::Whitespace::Space,
            ));
            replacement.push(Token::make_word(
                &format!("AS \"{}\"", table_name.replace('"', "\"\"")),
                None,
            ));
        }
        let _ = first;
        toks.splice(at[last]..=value_at, replacement);
        changed = true;
    }
}

/// A `TIMESTAMP AS OF` value: RFC 3339, or `YYYY-MM-DD[ HH:MM:SS[.f]]` in UTC.
fn parse_timestamp(text: &str) -> Result<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    for format in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Ok(t.and_utc());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    }
    Err(EngineError::from(exec_datafusion_err!(
        "[22007] TIMESTAMP AS OF '{text}': not a timestamp (write '2026-12-06 10:00:00' in UTC, \
         or RFC 3339 with an offset)"
    )))
}

/// A table statement's one-row result: `(name, value)` columns.
pub(crate) fn report(columns: Vec<(&str, ReportValue)>) -> Result<SendableRecordBatchStream> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, value)| match value {
            ReportValue::Count(_) => Field::new(*name, DataType::UInt64, false),
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let arrays = columns
        .into_iter()
        .map(|(_, value)| match value {
            ReportValue::Count(n) => Arc::new(UInt64Array::from(vec![n])) as _,
        })
        .collect();
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays)
        .map_err(|e| EngineError::Sql(e.into()))?;
    Ok(Box::pin(MemoryStream::try_new(vec![batch], schema, None)?))
}

/// A value of a [`report`].
pub(crate) enum ReportValue {
    /// A count.
    Count(u64),
}

/// A stored table by its resolved name, 42704 when it does not exist.
pub(crate) fn stored_table(
    store: &TableStore,
    reference: &datafusion::common::ResolvedTableReference,
) -> Result<Arc<StoredTable>> {
    store
        .table(&reference.schema, &reference.table)?
        .ok_or_else(|| missing_err!("table {}.{}", reference.schema, reference.table))
}

/// `name` (SQL text) as a table reference, its unquoted parts folded as DataFusion folds them.
pub(crate) fn table_reference(name: &str) -> TableReference {
    TableReference::parse_str(name)
}

/// Whether `plan` is DDL that changes tables (and so commits an open transaction first).
pub(crate) fn is_table_ddl(plan: &LogicalPlan) -> bool {
    matches!(
        plan,
        LogicalPlan::Ddl(
            DdlStatement::CreateMemoryTable(_)
                | DdlStatement::DropTable(_)
                | DdlStatement::CreateView(_)
                | DdlStatement::DropView(_)
                | DdlStatement::CreateCatalogSchema(_)
                | DdlStatement::DropCatalogSchema(_)
                | DdlStatement::CreateExternalTable(_)
        )
    )
}

/// A CTAS's rows in the Exasol dialect: empty strings are NULL (as Exasol stores them), in
/// columns that may hold NULL.
pub(crate) fn exasol_rows(stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use futures::StreamExt;
    let schema = crate::plan::empty_strings::nullable_strings(&stream.schema());
    let out = Arc::clone(&schema);
    Box::pin(RecordBatchStreamAdapter::new(
        schema,
        stream.map(move |batch| {
            batch.and_then(|b| {
                crate::plan::empty_strings::empty_strings_as_null(&b, &out)
                    .map_err(datafusion::error::DataFusionError::from)
            })
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_and_maintenance_statements_parse() {
        let p = |t: &str| parse_table_statement(t).unwrap();
        assert_eq!(p("commit"), Some(TableStatement::Commit));
        assert_eq!(p("ROLLBACK WORK"), Some(TableStatement::Rollback));
        assert_eq!(p("start transaction"), Some(TableStatement::Begin));
        assert_eq!(
            p("SET AUTOCOMMIT OFF"),
            Some(TableStatement::Autocommit(false))
        );
        assert_eq!(
            p("set autocommit = on"),
            Some(TableStatement::Autocommit(true))
        );
        assert_eq!(
            p("RENAME TABLE s.a TO s.\"B\""),
            Some(TableStatement::Rename {
                from: "s.a".into(),
                to: "s.\"B\"".into()
            })
        );
        assert_eq!(p("OPTIMIZE t"), Some(TableStatement::Optimize("t".into())));
        assert_eq!(
            p("VACUUM s.t RETAIN 0 HOURS DRY RUN"),
            Some(TableStatement::Vacuum {
                table: "s.t".into(),
                retain_hours: Some(0),
                dry_run: true
            })
        );
        assert_eq!(
            p("COPY t FROM '/d/x.parquet'"),
            Some(TableStatement::CopyFrom {
                table: "t".into(),
                path: "/d/x.parquet".into(),
                format: None
            })
        );
        assert_eq!(p("COPY (SELECT 1) TO '/tmp/x.csv'"), None);
        assert_eq!(p("RENAME USER a TO b"), None);
        assert_eq!(p("SELECT 1"), None);
        assert!(parse_table_statement("VACUUM t RETAIN x HOURS").is_err());
        assert!(parse_table_statement("SET AUTOCOMMIT maybe").is_err());
    }

    #[test]
    fn time_travel_like_and_temporary_are_rewritten() {
        let r = |t: &str| rewrite_table_text(t).unwrap();
        assert_eq!(
            r("SELECT * FROM T VERSION AS OF 3 WHERE x > 1").text,
            "SELECT * FROM \"t@@version=3\" AS \"t\" WHERE x > 1"
        );
        assert_eq!(
            r("SELECT a.x FROM s.t VERSION AS OF 0 a").text,
            "SELECT a.x FROM s.\"t@@version=0\" a"
        );
        assert_eq!(
            r("SELECT * FROM t TIMESTAMP AS OF '2026-12-06 10:00:00'").text,
            "SELECT * FROM \"t@@timestamp=2026-12-06T10:00:00+00:00\" AS \"t\""
        );
        assert!(rewrite_table_text("SELECT * FROM t TIMESTAMP AS OF 'noon'").is_err());
        let like = r("CREATE TABLE u LIKE s.t INCLUDING DEFAULTS");
        assert_eq!(like.text, "CREATE TABLE u AS SELECT * FROM s.t LIMIT 0");
        let temp = r("create local temporary table x (a int)");
        assert!(temp.temporary);
        assert_eq!(
            temp.text.split_whitespace().collect::<Vec<_>>().join(" "),
            "create table x (a int)"
        );
        // A column named version is left alone.
        let plain = r("SELECT version FROM t");
        assert_eq!(plain.text, "SELECT version FROM t");
        assert!(!plain.temporary);
    }
}
