//! Exasol syntax that DataFusion's parser rejects, rewritten on the statement's tokens before it
//! is parsed: character sets after string types (`VARCHAR(100) UTF8`, `CHAR(1) ASCII`, `CHARACTER
//! SET UTF8`), which accelsql's strings (always UTF-8) do not need, and `VALUES` rows written
//! without parentheses (`INSERT INTO t VALUES false`, `VALUES 1, 2` — one row per value, as in
//! standard SQL).

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// `text` with Exasol's character sets dropped and bare `VALUES` items parenthesized; the text
/// unchanged when it has neither (or does not tokenize: the parser then says why).
pub(crate) fn rewrite_exasol_text(text: &str) -> String {
    let dialect = GenericDialect {};
    // Unescaped off: string literals keep their text as written (`'it''s'`), so the tokens
    // join back into the statement exactly.
    let Ok(tokens) = Tokenizer::new(&dialect, text)
        .with_unescape(false)
        .tokenize()
    else {
        return text.to_string();
    };
    let mut changed = false;
    let tokens = drop_character_sets(tokens, &mut changed);
    let tokens = parenthesize_values(tokens, &mut changed);
    if !changed {
        return text.to_string();
    }
    tokens.iter().map(|t| t.to_string()).collect()
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

fn drop_character_sets(tokens: Vec<Token>, changed: &mut bool) -> Vec<Token> {
    let mut drop = vec![false; tokens.len()];
    for i in 0..tokens.len() {
        let charset = is_word(&tokens[i], "UTF8") || is_word(&tokens[i], "ASCII");
        if !charset {
            continue;
        }
        let Some(before) = prev_solid(&tokens, i) else {
            continue;
        };
        if ends_string_type(&tokens, before) {
            drop[i] = true;
        } else if is_word(&tokens[before], "SET")
            && let Some(character) = prev_solid(&tokens, before)
            && is_word(&tokens[character], "CHARACTER")
            && let Some(ty) = prev_solid(&tokens, character)
            && ends_string_type(&tokens, ty)
        {
            drop[character] = true;
            drop[before] = true;
            drop[i] = true;
        }
    }
    if !drop.iter().any(|d| *d) {
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
    tokens
        .into_iter()
        .zip(drop)
        .filter_map(|(t, d)| (!d).then_some(t))
        .collect()
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
        if tokens[first] == Token::LParen {
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
            "CREATE TABLE t (a VARCHAR(100), b CHAR(1), c DECIMAL(18,0))"
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
        let same = "INSERT INTO t VALUES (1, 2), (3, 4)";
        assert_eq!(rewrite_exasol_text(same), same);
    }
}
