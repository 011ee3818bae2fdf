//! Exasol syntax that DataFusion's parser rejects, rewritten on the statement's tokens before it
//! is parsed: character sets after string types (`VARCHAR(100) UTF8`, `CHAR(1) ASCII`, `CHARACTER
//! SET UTF8`), which accelsql's strings (always UTF-8) do not need — dropped, except `ASCII` on a
//! column of `CREATE TABLE`, written `CHARACTER SET ASCII` (a column option DataFusion's parser
//! keeps and its planner ignores) so that the column's declared type says it; `TIMESTAMP WITH LOCAL TIME
//! ZONE`, which is `TIMESTAMP WITH TIME ZONE` here (a timestamp in the session's time zone,
//! `datafusion.execution.time_zone`, as Exasol shows it; with none set, a plain timestamp); and `VALUES` rows written
//! without parentheses (`INSERT INTO t VALUES false`, `VALUES 1, 2` — one row per value, as in
//! standard SQL), and rows that are queries (`INSERT INTO t VALUES (SELECT a, b FROM s)`: the
//! query's rows; several such rows are the `UNION ALL` of their queries).

use crate::front::tokens::written_tokens;
use datafusion::sql::sqlparser::tokenizer::{Token, Whitespace};

/// `text` with Exasol's character sets dropped, `VALUES` rows that are queries made the queries
/// they are, and bare `VALUES` items parenthesized; the text unchanged when it has none of them
/// (or does not tokenize: the parser then says why).
pub(crate) fn rewrite_exasol_text(text: &str) -> String {
    // String literals keep their text as written (`'it''s'`), so the tokens join back into
    // the statement exactly.
    let Some(tokens) = written_tokens(text) else {
        return text.to_string();
    };
    let mut changed = false;
    let tokens = drop_character_sets(tokens, &mut changed);
    let tokens = local_time_zone(tokens, &mut changed);
    let tokens = values_of_queries(tokens, &mut changed);
    let tokens = parenthesize_values(tokens, &mut changed);
    if !changed {
        return text.to_string();
    }
    tokens.iter().map(|t| t.to_string()).collect()
}

/// `sql` with each `FROM DUAL` reading `table` (an identifier as SQL writes it) instead.
pub(crate) fn replace_from_dual(sql: &str, table: &str) -> String {
    let Some(tokens) = written_tokens(sql) else {
        return sql.to_string();
    };
    let mut out = String::with_capacity(sql.len());
    for (i, t) in tokens.iter().enumerate() {
        let after_from = prev_solid(&tokens, i).is_some_and(|p| is_word(&tokens[p], "FROM"));
        if after_from && is_word(t, "DUAL") {
            out.push_str(table);
        } else {
            out.push_str(&t.to_string());
        }
    }
    out
}

/// A piece of a statement's text: as written, or the text of an `IMPORT` in a sub-select
/// (`(IMPORT … FROM SCRIPT …)`, without its parentheses), which the session replaces with the
/// query the import stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Text as written.
    Text(String),
    /// The `IMPORT …` statement of a sub-select.
    Import(String),
}

/// `text` split around its sub-select imports; `None` when it has none (or does not tokenize).
/// An `IMPORT` that starts the statement is not a sub-select.
pub(crate) fn import_subselects(text: &str) -> Option<Vec<Piece>> {
    if !text.to_ascii_uppercase().contains("IMPORT") {
        return None;
    }
    let tokens = written_tokens(text)?;
    let mut pieces = Vec::new();
    let mut plain = String::new();
    let mut i = 0;
    while i < tokens.len() {
        let import = (tokens[i] == Token::LParen)
            .then(|| next_solid(&tokens, i))
            .flatten()
            .filter(|&w| is_word(&tokens[w], "IMPORT"))
            .and_then(|_| closing(&tokens, i));
        let Some(close) = import else {
            plain.push_str(&tokens[i].to_string());
            i += 1;
            continue;
        };
        plain.push('(');
        pieces.push(Piece::Text(std::mem::take(&mut plain)));
        let inner: String = tokens[i + 1..close].iter().map(|t| t.to_string()).collect();
        pieces.push(Piece::Import(inner.trim().to_string()));
        plain.push(')');
        i = close + 1;
    }
    if pieces.is_empty() {
        return None;
    }
    pieces.push(Piece::Text(plain));
    Some(pieces)
}

fn is_word(t: &Token, word: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// The index of the next token after `i` that is not whitespace.
fn next_solid(tokens: &[Token], i: usize) -> Option<usize> {
    (i + 1..tokens.len()).find(|&j| !matches!(tokens[j], Token::Whitespace(_)))
}

/// The index of the last token before `i` that is not whitespace.
fn prev_solid(tokens: &[Token], i: usize) -> Option<usize> {
    (0..i)
        .rev()
        .find(|&j| !matches!(tokens[j], Token::Whitespace(_)))
}

/// Whether the string type whose last token is at `end` precedes: `VARCHAR(n)`, `CHAR(n)`,
/// `CHARACTER VARYING(n)`, `VARCHAR2(n)`, `NVARCHAR(n)`, `CLOB`, or a bare `VARCHAR`/`CHAR`.
fn ends_string_type(tokens: &[Token], end: usize) -> bool {
    const TYPES: [&str; 7] = [
        "VARCHAR", "CHAR", "VARYING", "VARCHAR2", "NVARCHAR", "NCHAR", "CLOB",
    ];
    let mut at = end;
    if tokens[at] == Token::RParen {
        // Back over `( n [CHAR|BYTE] )`.
        let Some(open) = (0..at).rev().find(|&j| tokens[j] == Token::LParen) else {
            return false;
        };
        let Some(before) = prev_solid(tokens, open) else {
            return false;
        };
        at = before;
    }
    TYPES.iter().any(|t| is_word(&tokens[at], t))
}

/// `TIMESTAMP[(p)] WITH LOCAL TIME ZONE` → `TIMESTAMP[(p)] WITH TIME ZONE`.
fn local_time_zone(tokens: Vec<Token>, changed: &mut bool) -> Vec<Token> {
    let mut drop = vec![false; tokens.len()];
    for i in 0..tokens.len() {
        if !is_word(&tokens[i], "LOCAL") {
            continue;
        }
        let before = prev_solid(&tokens, i).filter(|&w| is_word(&tokens[w], "WITH"));
        let mut ts = before.and_then(|w| prev_solid(&tokens, w));
        // `TIMESTAMP(6) WITH …`: back over the precision.
        if let Some(close) = ts.filter(|&c| matches!(tokens[c], Token::RParen)) {
            let number =
                prev_solid(&tokens, close).filter(|&n| matches!(tokens[n], Token::Number(..)));
            let open = number
                .and_then(|n| prev_solid(&tokens, n))
                .filter(|&o| matches!(tokens[o], Token::LParen));
            ts = open.and_then(|o| prev_solid(&tokens, o));
        }
        let time = next_solid(&tokens, i).filter(|&t| is_word(&tokens[t], "TIME"));
        let zone = time.and_then(|t| next_solid(&tokens, t));
        if ts.is_some_and(|t| is_word(&tokens[t], "TIMESTAMP"))
            && zone.is_some_and(|z| is_word(&tokens[z], "ZONE"))
        {
            drop[i] = true;
            // The whitespace after LOCAL goes with it.
            for (j, t) in tokens.iter().enumerate().skip(i + 1) {
                if !matches!(t, Token::Whitespace(_)) {
                    break;
                }
                drop[j] = true;
            }
        }
    }
    if !drop.iter().any(|d| *d) {
        return tokens;
    }
    *changed = true;
    tokens
        .into_iter()
        .zip(drop)
        .filter_map(|(t, d)| (!d).then_some(t))
        .collect()
}

fn drop_character_sets(tokens: Vec<Token>, changed: &mut bool) -> Vec<Token> {
    let mut drop = vec![false; tokens.len()];
    // Where a bare `ASCII` on a column definition becomes `CHARACTER SET ASCII`.
    let mut spelled_out = vec![false; tokens.len()];
    let creates_table = {
        let words: Vec<&Token> = tokens
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .take(4)
            .collect();
        let at = |i: usize, w: &str| words.get(i).is_some_and(|t| is_word(t, w));
        at(0, "CREATE") && (at(1, "TABLE") || (at(1, "OR") && at(2, "REPLACE") && at(3, "TABLE")))
    };
    // Whether the string type whose last token is at `end` types a column of `CREATE TABLE`
    // (not a cast in its query: `CAST(x AS VARCHAR(3) ASCII)`).
    let on_column = |end: usize| {
        creates_table
            && string_type_start(&tokens, end)
                .and_then(|start| prev_solid(&tokens, start))
                .is_some_and(|name| {
                    matches!(tokens[name], Token::Word(_)) && !is_word(&tokens[name], "AS")
                })
    };
    for i in 0..tokens.len() {
        let utf8 = is_word(&tokens[i], "UTF8");
        if !utf8 && !is_word(&tokens[i], "ASCII") {
            continue;
        }
        let Some(before) = prev_solid(&tokens, i) else {
            continue;
        };
        if ends_string_type(&tokens, before) {
            if !utf8 && on_column(before) {
                spelled_out[i] = true;
            } else {
                drop[i] = true;
            }
        } else if is_word(&tokens[before], "SET")
            && let Some(character) = prev_solid(&tokens, before)
            && is_word(&tokens[character], "CHARACTER")
            && let Some(ty) = prev_solid(&tokens, character)
            && ends_string_type(&tokens, ty)
            && (utf8 || !on_column(ty))
        {
            drop[character] = true;
            drop[before] = true;
            drop[i] = true;
        }
    }
    if !drop.iter().any(|d| *d) && !spelled_out.iter().any(|d| *d) {
        return tokens;
    }
    // The whitespace in front of a dropped word goes with it.
    for j in (1..tokens.len()).rev() {
        if drop[j] {
            let mut k = j;
            while k > 0 && matches!(tokens[k - 1], Token::Whitespace(_)) {
                k -= 1;
                drop[k] = true;
            }
        }
    }
    *changed = true;
    let mut out = Vec::with_capacity(tokens.len() + 4);
    for ((t, d), spell) in tokens.into_iter().zip(drop).zip(spelled_out) {
        if spell {
            out.extend([
                Token::make_word("CHARACTER", None),
                Token::Whitespace(Whitespace::Space),
                Token::make_word("SET", None),
                Token::Whitespace(Whitespace::Space),
            ]);
        }
        if !d {
            out.push(t);
        }
    }
    out
}

/// The index of the first token of the string type whose last token is at `end`
/// ([`ends_string_type`]): the type's word, or `CHARACTER` of `CHARACTER VARYING`.
fn string_type_start(tokens: &[Token], end: usize) -> Option<usize> {
    let mut at = end;
    if tokens[at] == Token::RParen {
        let open = (0..at).rev().find(|&j| tokens[j] == Token::LParen)?;
        at = prev_solid(tokens, open)?;
    }
    if is_word(&tokens[at], "VARYING") {
        at = prev_solid(tokens, at).filter(|&c| is_word(&tokens[c], "CHARACTER"))?;
    }
    Some(at)
}

/// Whether the `VALUES` at `at` opens a row list: it starts the statement or a query (after `(`,
/// `AS`, a set operator), or follows `INSERT INTO t [(columns)]`.
fn starts_row_list(tokens: &[Token], at: usize) -> bool {
    const BEFORE: [&str; 6] = ["AS", "UNION", "ALL", "DISTINCT", "EXCEPT", "INTERSECT"];
    let Some(prev) = prev_solid(tokens, at) else {
        return true;
    };
    if tokens[prev] == Token::LParen
        || tokens[prev] == Token::SemiColon
        || BEFORE.iter().any(|k| is_word(&tokens[prev], k))
    {
        return true;
    }
    // `INSERT INTO name [(columns)] VALUES`: the statement's words before are INSERT, INTO and
    // the target's name (no FROM, JOIN or TABLE).
    let start = (0..at)
        .rev()
        .find(|&j| tokens[j] == Token::SemiColon)
        .map_or(0, |j| j + 1);
    let words: Vec<&Token> = tokens[start..at]
        .iter()
        .filter(|t| matches!(t, Token::Word(_)))
        .collect();
    words.first().is_some_and(|t| is_word(t, "INSERT"))
        && !words.iter().any(|t| {
            ["FROM", "JOIN", "TABLE", "SELECT"]
                .iter()
                .any(|k| is_word(t, k))
        })
}

/// The index of the `)` that closes the `(` at `open`.
fn closing(tokens: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, t) in tokens.iter().enumerate().skip(open) {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// The rows of the row list after the `VALUES` at `at`, as the `(`, `)` positions of each,
/// when every row is a query in parentheses (`(SELECT …)`, `(WITH …)`); `None` otherwise.
fn query_rows(tokens: &[Token], at: usize) -> Option<Vec<(usize, usize)>> {
    let mut rows = Vec::new();
    let mut open = next_solid(tokens, at)?;
    loop {
        if tokens[open] != Token::LParen {
            return None;
        }
        let first = next_solid(tokens, open)?;
        if !is_word(&tokens[first], "SELECT") && !is_word(&tokens[first], "WITH") {
            return None;
        }
        let close = closing(tokens, open)?;
        rows.push((open, close));
        match next_solid(tokens, close) {
            Some(comma) if tokens[comma] == Token::Comma => open = next_solid(tokens, comma)?,
            _ => return Some(rows),
        }
    }
}

/// `VALUES (SELECT …), (SELECT …)` → `(SELECT …) UNION ALL (SELECT …)`: a row list whose every
/// row is a query in parentheses gives the rows of its queries.
fn values_of_queries(tokens: Vec<Token>, changed: &mut bool) -> Vec<Token> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let rows = (is_word(&tokens[i], "VALUES") && starts_row_list(&tokens, i))
            .then(|| query_rows(&tokens, i))
            .flatten();
        let Some(rows) = rows else {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        };
        *changed = true;
        for (k, &(open, close)) in rows.iter().enumerate() {
            if k > 0 {
                out.extend([
                    Token::Whitespace(Whitespace::Space),
                    Token::make_keyword("UNION"),
                    Token::Whitespace(Whitespace::Space),
                    Token::make_keyword("ALL"),
                    Token::Whitespace(Whitespace::Space),
                ]);
            }
            out.extend(tokens[open..=close].iter().cloned());
        }
        i = rows.last().map_or(i + 1, |&(_, close)| close + 1);
    }
    out
}

/// `VALUES a, b` → `VALUES (a), (b)`: after a `VALUES` not followed by `(`, each top-level
/// comma-separated item up to the end of the list (a closing parenthesis, `;`, or a keyword
/// that ends it) becomes a row of its own.
fn parenthesize_values(tokens: Vec<Token>, changed: &mut bool) -> Vec<Token> {
    const ENDS: [&str; 6] = ["ORDER", "LIMIT", "OFFSET", "UNION", "EXCEPT", "INTERSECT"];
    let mut out = Vec::with_capacity(tokens.len() + 8);
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        out.push(t.clone());
        i += 1;
        if !is_word(t, "VALUES") {
            continue;
        }
        let Some(first) = next_solid(&tokens, i - 1) else {
            continue;
        };
        // `VALUES (…)` is standard, `VALUES ROW(…)` MySQL's; a table named `values` (`FROM
        // values`, `CREATE TABLE values(…)`, `(values.a`) is no row list.
        if matches!(
            tokens[first],
            Token::LParen | Token::SemiColon | Token::Period | Token::Comma | Token::RParen
        ) || is_word(&tokens[first], "ROW")
            || !starts_row_list(&tokens, i - 1)
        {
            continue;
        }
        *changed = true;
        // Copy whitespace, then wrap items.
        out.extend(tokens[i..first].iter().cloned());
        i = first;
        let mut depth = 0usize;
        out.push(Token::LParen);
        while i < tokens.len() {
            let t = &tokens[i];
            match t {
                Token::LParen => depth += 1,
                Token::RParen if depth == 0 => break,
                Token::RParen => depth -= 1,
                Token::SemiColon if depth == 0 => break,
                Token::Comma if depth == 0 => {
                    out.push(Token::RParen);
                    out.push(Token::Comma);
                    i += 1;
                    while let Some(w @ Token::Whitespace(_)) = tokens.get(i) {
                        out.push(w.clone());
                        i += 1;
                    }
                    out.push(Token::LParen);
                    continue;
                }
                _ if depth == 0 && ENDS.iter().any(|k| is_word(t, k)) => break,
                _ => {}
            }
            out.push(t.clone());
            i += 1;
        }
        // Trailing whitespace goes after the closing parenthesis.
        let mut trailing = Vec::new();
        while matches!(out.last(), Some(Token::Whitespace(_))) {
            if let Some(w) = out.pop() {
                trailing.push(w);
            }
        }
        out.push(Token::RParen);
        out.extend(trailing.into_iter().rev());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn character_sets_are_dropped_after_string_types_only() {
        assert_eq!(
            rewrite_exasol_text(
                "CREATE TABLE t (a VARCHAR(100) UTF8, b CHAR(1) ascii, c DECIMAL(18,0))"
            ),
            "CREATE TABLE t (a VARCHAR(100), b CHAR(1) CHARACTER SET ascii, c DECIMAL(18,0))"
        );
        // ASCII is kept (as a column option) on columns only, not in casts.
        assert_eq!(
            rewrite_exasol_text(
                "CREATE OR REPLACE TABLE t (a CHARACTER VARYING(5) CHARACTER SET ASCII) AS \
                 SELECT CAST(x AS VARCHAR(5) ASCII) FROM s"
            ),
            "CREATE OR REPLACE TABLE t (a CHARACTER VARYING(5) CHARACTER SET ASCII) AS \
             SELECT CAST(x AS VARCHAR(5)) FROM s"
        );
        assert_eq!(
            rewrite_exasol_text("SELECT CAST(x AS CHAR(2) ASCII) FROM s"),
            "SELECT CAST(x AS CHAR(2)) FROM s"
        );
        assert_eq!(
            rewrite_exasol_text("CREATE TABLE t (a VARCHAR(10) CHARACTER SET UTF8)"),
            "CREATE TABLE t (a VARCHAR(10))"
        );
        // A column named utf8, or text in strings and quoted names, stays.
        let same = "SELECT utf8, 'VARCHAR(1) UTF8', \"ASCII\" FROM t";
        assert_eq!(rewrite_exasol_text(same), same);
        // Escaped quotes survive a rewrite.
        assert_eq!(
            rewrite_exasol_text("CREATE TABLE t (a VARCHAR(9) UTF8 DEFAULT 'it''s')"),
            "CREATE TABLE t (a VARCHAR(9) DEFAULT 'it''s')"
        );
    }

    #[test]
    fn from_dual_reads_the_given_table() {
        assert_eq!(
            replace_from_dual("SELECT f(\"T\".\"A\") FROM dual GROUP BY iproc()", "\"T\""),
            "SELECT f(\"T\".\"A\") FROM \"T\" GROUP BY iproc()"
        );
        assert_eq!(
            replace_from_dual("SELECT 'dual' AS dual", "x"),
            "SELECT 'dual' AS dual"
        );
    }

    #[test]
    fn local_time_zone_is_the_session_time_zone() {
        assert_eq!(
            rewrite_exasol_text("CREATE TABLE t (ts TIMESTAMP WITH LOCAL TIME ZONE, local INT)"),
            "CREATE TABLE t (ts TIMESTAMP WITH TIME ZONE, local INT)"
        );
        assert_eq!(
            rewrite_exasol_text("CREATE TABLE t (ts TIMESTAMP(6) WITH LOCAL TIME ZONE)"),
            "CREATE TABLE t (ts TIMESTAMP(6) WITH TIME ZONE)"
        );
        let same = "SELECT local FROM t WITH x";
        assert_eq!(rewrite_exasol_text(same), same);
    }

    #[test]
    fn imports_in_sub_selects_are_split_out() {
        assert_eq!(
            import_subselects(
                "SELECT a FROM (IMPORT INTO (a INT) FROM SCRIPT s WITH k = ')') AS i WHERE a > 1"
            ),
            Some(vec![
                Piece::Text("SELECT a FROM (".into()),
                Piece::Import("IMPORT INTO (a INT) FROM SCRIPT s WITH k = ')'".into()),
                Piece::Text(") AS i WHERE a > 1".into()),
            ])
        );
        // A statement that is an IMPORT, a word or string that only says IMPORT: no pieces.
        for none in [
            "IMPORT INTO t FROM SCRIPT s",
            "SELECT 'x (IMPORT' FROM imports",
            "SELECT import FROM t",
        ] {
            assert_eq!(import_subselects(none), None, "{none}");
        }
    }

    #[test]
    fn values_rows_that_are_queries_give_the_queries_rows() {
        assert_eq!(
            rewrite_exasol_text("INSERT INTO t VALUES (SELECT max(a) + 1, 'w' FROM t)"),
            "INSERT INTO t (SELECT max(a) + 1, 'w' FROM t)"
        );
        assert_eq!(
            rewrite_exasol_text(
                "INSERT INTO t (a) VALUES (SELECT 1), ( WITH q AS (SELECT 2) SELECT * FROM q);"
            ),
            "INSERT INTO t (a) (SELECT 1) UNION ALL ( WITH q AS (SELECT 2) SELECT * FROM q);"
        );
        // A row list that is not all queries, and a scalar subquery in a row, are left alone.
        for same in [
            "INSERT INTO t VALUES (1), (SELECT 2)",
            "INSERT INTO t VALUES ((SELECT 1), 2)",
            "SELECT * FROM t WHERE a IN (SELECT 1)",
        ] {
            assert_eq!(rewrite_exasol_text(same), same);
        }
    }

    #[test]
    fn bare_values_become_rows() {
        assert_eq!(
            rewrite_exasol_text("INSERT INTO t VALUES false"),
            "INSERT INTO t VALUES (false)"
        );
        assert_eq!(
            rewrite_exasol_text("INSERT INTO t VALUES 1, 2 + f(3, 4)"),
            "INSERT INTO t VALUES (1), (2 + f(3, 4))"
        );
        assert_eq!(
            rewrite_exasol_text("SELECT * FROM (VALUES 1, 2) AS v(x) ORDER BY x"),
            "SELECT * FROM (VALUES (1), (2)) AS v(x) ORDER BY x"
        );
        for same in [
            "CREATE TABLE values(a INT)",
            "SELECT a FROM values AS v WHERE a = 1",
            "SELECT * FROM values",
            "SELECT * FROM s.values JOIN values ON true",
            "SELECT * FROM (VALUES ROW('a'), ROW('b')) AS t(x)",
            "DROP TABLE values;",
            "INSERT INTO t SELECT * FROM values",
            "SELECT named_struct(values.a, 'a') FROM values",
        ] {
            assert_eq!(rewrite_exasol_text(same), same);
        }
        assert_eq!(
            rewrite_exasol_text("CREATE TABLE t AS VALUES 1, 2"),
            "CREATE TABLE t AS VALUES (1), (2)"
        );
        assert_eq!(
            rewrite_exasol_text("INSERT INTO s.t (a) VALUES 1"),
            "INSERT INTO s.t (a) VALUES (1)"
        );
        let same = "INSERT INTO t VALUES (1, 2), (3, 4)";
        assert_eq!(rewrite_exasol_text(same), same);
    }
}
