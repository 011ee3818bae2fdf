//! The front end's one tokenizer, for every pass that reads a statement's text before
//! DataFusion parses it: sqlparser's, with the generic dialect. [`written_tokens`] keeps the
//! text as written (the text rewrites join tokens back into text); [`tokens`] is the
//! classifier's view, cut down to words (quoted or not), string literals and the rest.
//!
//! The splitter ([`splitter`](super::splitter), which the shell and the Python package use too)
//! runs the same tokenizer with its own lexical dialect (no backslash escapes, nested comments),
//! a window of lines at a time, and skips script bodies, which are not SQL. One reader keeps a
//! lexer of its own: the script DDL reader (`scripts/ddl.rs`), which reads a header and then a
//! body in another language.

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

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
