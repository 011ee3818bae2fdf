//! The front end's one tokenizer, for every pass that reads a statement's text before
//! DataFusion parses it: sqlparser's, with the generic dialect. [`written_tokens`] keeps the
//! text as written (the text rewrites join tokens back into text); [`tokens`] is the
//! classifier's view, cut down to words (quoted or not), string literals and the rest.
//!
//! The splitter ([`splitter`](super::splitter), which the shell and the Python package use too)
//! and the script DDL reader (`scripts/ddl.rs`, [`located_tokens`]) run the same tokenizer with
//! a plainer lexical dialect ([`PlainDialect`]: no backslash escapes, nested comments); the
//! splitter reads a window of lines at a time and skips script bodies, which are not SQL.

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::dialect::{Dialect, GenericDialect};
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, Tokenizer};

use crate::core::error::EngineError;

/// One token as the recogniser sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// A word; `quoted` when it was a delimited identifier.
    Word { text: String, quoted: bool },
    /// A single-quoted string literal.
    Str(String),
    /// Any other token, as text.
    Other(String),
}

impl Tok {
    pub(crate) fn is(&self, keyword: &str) -> bool {
        matches!(self, Tok::Word { text, quoted: false } if text.eq_ignore_ascii_case(keyword))
    }

    pub(crate) fn text(&self) -> String {
        match self {
            Tok::Word { text, quoted: true } => format!("\"{}\"", text.replace('"', "\"\"")),
            Tok::Word { text, .. } | Tok::Other(text) => text.clone(),
            Tok::Str(s) => format!("'{}'", s.replace('\'', "''")),
        }
    }
}

/// `text` as sqlparser's tokens, string literals as written (`'it''s'`), so that the tokens
/// join back into the text exactly; `None` when it does not tokenize (an unclosed quote: the
/// parser then says why).
pub(crate) fn written_tokens(text: &str) -> Option<Vec<Token>> {
    Tokenizer::new(&GenericDialect {}, text)
        .with_unescape(false)
        .tokenize()
        .ok()
}

/// `text` as the classifier reads it: words, string literals (their values) and the rest,
/// without whitespace, comments or `;`.
pub(crate) fn tokens(text: &str) -> Option<Vec<Tok>> {
    let raw = Tokenizer::new(&GenericDialect {}, text).tokenize().ok()?;
    Some(
        raw.into_iter()
            .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF | Token::SemiColon))
            .map(|t| match t {
                Token::Word(w) => Tok::Word {
                    text: w.value,
                    quoted: w.quote_style.is_some(),
                },
                Token::SingleQuotedString(s) => Tok::Str(s),
                other => Tok::Other(other.to_string()),
            })
            .collect(),
    )
}

/// An identifier as Exasol folds it: unquoted → upper case.
pub(crate) fn exasol_folded(tok: &Tok) -> Option<String> {
    match tok {
        Tok::Word { text, quoted: true } => Some(text.clone()),
        Tok::Word { text, .. } => Some(text.to_ascii_uppercase()),
        _ => None,
    }
}

/// A syntax error (42000) for `text`: `what` was expected.
pub(crate) fn syntax(what: &str, text: &str) -> EngineError {
    EngineError::Sql(DataFusionError::SQL(
        Box::new(ParserError::ParserError(format!(
            "{what}; got: {}",
            text.trim()
        ))),
        None,
    ))
}

/// Reads a possibly qualified name (`a`, `a.b`) at `toks[*i]`, as SQL text.
pub(crate) fn qualified_name(toks: &[Tok], i: &mut usize) -> Option<String> {
    let mut parts = Vec::new();
    loop {
        match toks.get(*i) {
            Some(t @ Tok::Word { .. }) => parts.push(t.text()),
            _ => return None,
        }
        *i += 1;
        if toks.get(*i) == Some(&Tok::Other(".".into())) {
            *i += 1;
        } else {
            return Some(parts.join("."));
        }
    }
}

/// The lexical SQL of the splitter and the script DDL reader, for sqlparser's tokenizer: `''`
/// and `""` escapes only (no backslash escapes), nested block comments, dollar-quoted bodies,
/// `$` inside words (`a$b$` is a name, not a dollar quote).
#[derive(Debug)]
pub(crate) struct PlainDialect;

impl Dialect for PlainDialect {
    fn is_identifier_start(&self, ch: char) -> bool {
        ch.is_alphabetic() || ch == '_'
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        ch.is_alphanumeric() || ch == '_' || ch == '$'
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '"'
    }

    fn supports_nested_comments(&self) -> bool {
        true
    }
}

/// Byte offsets of sqlparser's locations (1-based lines and columns counted in characters) in
/// the text it tokenized, read forward once.
pub(crate) struct Position<'a> {
    text: &'a str,
    byte: usize,
    line: u64,
    column: u64,
}

impl<'a> Position<'a> {
    /// At the start of `text`.
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            text,
            byte: 0,
            line: 1,
            column: 1,
        }
    }

    /// The byte offset of `location`, at or after the last one asked for.
    pub(crate) fn offset(&mut self, location: Location) -> usize {
        while (self.line, self.column) < (location.line, location.column) {
            let Some(c) = self.text[self.byte..].chars().next() else {
                break;
            };
            self.byte += c.len_utf8();
            if c == '\n' {
                self.line += 1;
                self.column = 1;
            } else {
                self.column += 1;
            }
        }
        self.byte
    }
}

/// A token and its place in the text, for a reader that reports positions or cuts the text at a
/// token (the script DDL reader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// A word or symbol as written; a string literal's or quoted name's value.
    pub(crate) text: String,
    /// Its byte range in the text.
    pub(crate) start: usize,
    /// Where it ends.
    pub(crate) end: usize,
    /// A string literal or a quoted name.
    pub(crate) quoted: bool,
}

/// `text`'s tokens with their byte ranges, without whitespace and comments ([`PlainDialect`]);
/// `...` is one token. Where the tokenizer stops (a quote left open, text that is not SQL), the
/// rest is one last token, `quoted`, as written.
pub(crate) fn located_tokens(text: &str) -> Vec<Located> {
    let mut raw = Vec::new();
    let stopped = Tokenizer::new(&PlainDialect, text)
        .tokenize_with_location_into_buf(&mut raw)
        .is_err();
    let mut at = Position::new(text);
    let mut out: Vec<Located> = Vec::with_capacity(raw.len());
    let mut done = 0;
    for token in raw {
        let start = at.offset(token.span.start);
        let end = at.offset(token.span.end);
        done = end;
        let (text, quoted) = match token.token {
            Token::Whitespace(_) => continue,
            Token::Word(w) => (w.value, w.quote_style.is_some()),
            Token::SingleQuotedString(s) => (s, true),
            Token::Number(n, _) => (n, false),
            other => (other.to_string(), false),
        };
        // `...` (a variadic parameter list) is three periods to the tokenizer.
        if text == "."
            && out.len() >= 2
            && out[out.len() - 2..]
                .iter()
                .all(|t| t.text == "." && !t.quoted)
            && out[out.len() - 2].end + 1 == out[out.len() - 1].end
            && out[out.len() - 1].end == start
        {
            let first = out[out.len() - 2].start;
            out.truncate(out.len() - 2);
            out.push(Located {
                text: "...".into(),
                start: first,
                end,
                quoted: false,
            });
            continue;
        }
        out.push(Located {
            text,
            start,
            end,
            quoted,
        });
    }
    if stopped && done < text.len() {
        out.push(Located {
            text: text[done..].to_string(),
            start: done,
            end: text.len(),
            quoted: true,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn located_tokens_keep_their_places_values_and_an_open_rest() {
        let text = "CREATE  \"Mixed\" /* c */ ('it''s', f(...)) AS\ndef run(ctx): return 'x";
        let toks = located_tokens(text);
        let texts: Vec<&str> = toks.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(
            &texts[..9],
            ["CREATE", "Mixed", "(", "it's", ",", "f", "(", "...", ")"]
        );
        assert!(toks[1].quoted && toks[3].quoted && !toks[7].quoted);
        for t in &toks {
            let written = &text[t.start..t.end];
            assert!(t.quoted || written == t.text, "{t:?} stands as {written:?}");
        }
        // The body's open quote: the rest is one last token, as written.
        let last = toks.last().unwrap();
        assert_eq!((last.text.as_str(), last.quoted), ("'x", true));
        assert_eq!(&text[toks[1].start..toks[1].end], "\"Mixed\"");
    }
}
