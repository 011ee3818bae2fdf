//! Splits SQL text into statements at top-level `;`, remembering where each one starts.
//!
//! It reads the text with sqlparser's tokenizer (the front end's one tokenizer), which tells a
//! terminating `;` from one inside a `'string'` (with `''` escapes), a `"quoted identifier"`
//! (with `""` escapes), a `-- line comment`, a `/* block comment */` (nested, as PostgreSQL
//! allows) or a dollar-quoted body (`$$ … $$`, `$tag$ … $tag$`). Everything else is left to the
//! SQL parser: an unterminated quote or comment simply runs to the end of the text, and the
//! parser reports it. A script statement's body (`CREATE … SCRIPT … AS` up to its `/` line) is
//! not SQL and is not tokenized.
//!
//! Shells and script runners use [`split_statements`] to run one statement at a time, so an
//! error can name the failing statement and the line it starts on; a REPL uses [`is_complete`]
//! to decide whether to run the buffer or to ask for another line.
//!
//! ```
//! use accelsql_engine::splitter::split_statements;
//!
//! let statements = split_statements("SELECT 1;\n-- the second one\nSELECT ';' AS semi");
//! assert_eq!(statements.len(), 2);
//! assert_eq!(statements[1].text, "SELECT ';' AS semi");
//! assert_eq!((statements[1].line, statements[1].index), (3, 2));
//! ```

use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

use super::tokens::{PlainDialect, Position};

/// One statement of a script, without its terminating `;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlStatement {
    /// The statement's text, from its first token to its last (comments inside it are kept,
    /// leading comments and surrounding whitespace are not).
    pub text: String,
    /// The 1-based line of the text on which the statement's first token stands.
    pub line: usize,
    /// The 1-based position of the statement among the script's non-empty statements.
    pub index: usize,
    /// A `CREATE … SCRIPT` whose body ran to the end of the text without its closing `/`
    /// line. `Session::sql` accepts that; the shell's script files do not.
    pub unterminated_script: bool,
}

/// Splits `text` into its statements, in order. A last statement without `;` is kept; empty
/// statements (only whitespace, comments or `;`) are skipped.
pub fn split_statements(text: &str) -> Vec<SqlStatement> {
    let mut statements = Vec::new();
    let mut current: Option<Pending> = None;
    let mut lexer = Lexer::new(text);
    while let Some(lexeme) = lexer.next() {
        match lexeme.kind {
            LexemeKind::Whitespace => {}
            // Comments before a statement's first token and after its last are not part of it;
            // one left open is, so that the parser reports it.
            LexemeKind::Comment => {
                if let Some(pending) = current.as_mut().filter(|_| !lexeme.closed) {
                    pending.end = lexeme.end;
                }
            }
            LexemeKind::Semicolon => {
                // A `;` with no statement before it is an empty statement: skipped.
                if let Some(pending) = current.take() {
                    statements.push(pending.finish(text, statements.len() + 1));
                }
            }
            LexemeKind::Code | LexemeKind::Quoted => {
                if current.is_none() && lexer.at_script_head() {
                    // `CREATE … SCRIPT … AS <body>`: the body is not SQL (its `;`, quotes and
                    // comments belong to it); the statement ends at a line holding only `/`,
                    // or at the end of the text.
                    let (end, resume) = script_end(text, lexeme.start);
                    let mut pending = Pending::starting_at(&lexeme);
                    pending.end = end;
                    let mut statement = pending.finish(text, statements.len() + 1);
                    statement.unterminated_script = end == resume;
                    statements.push(statement);
                    lexer.advance_to(resume);
                    continue;
                }
                let pending = current.get_or_insert_with(|| Pending::starting_at(&lexeme));
                pending.end = lexeme.end;
            }
        }
    }
    if let Some(pending) = current {
        statements.push(pending.finish(text, statements.len() + 1));
    }
    statements
}

/// Whether `text` starts (after whitespace and comments) with Exasol's script DDL head
/// `CREATE [OR REPLACE] <language> SCALAR|SET SCRIPT`.
pub fn is_script_head(text: &str) -> bool {
    let mut lexer = Lexer::new(text);
    lexer
        .find(|l| !matches!(l.kind, LexemeKind::Whitespace | LexemeKind::Comment))
        .is_some()
        && lexer.at_script_head()
}

/// The first `n` significant tokens of `text` (no whitespace, no comments), as written; read
/// lazily, so a long statement is not tokenized for its first words.
pub(crate) fn first_words(text: &str, n: usize) -> Vec<&str> {
    Lexer::new(text)
        .filter(|l| !matches!(l.kind, LexemeKind::Whitespace | LexemeKind::Comment))
        .take(n)
        .map(|l| &text[l.start..l.end])
        .collect()
}

/// Whether `words` (a statement's first significant tokens, up to six) are a script head.
fn script_head_words(words: &[&str]) -> bool {
    let words: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let rest = match words.as_slice() {
        ["CREATE", "OR", "REPLACE", rest @ ..] => rest,
        ["CREATE", rest @ ..] => rest,
        _ => return false,
    };
    // Any kind word: a misspelt SCALAR/SET still ends at its `/` line, and the script DDL
    // parser says what is wrong with it.
    matches!(rest, [_, kind, "SCRIPT", ..]
        if !matches!(*kind, "TABLE" | "VIEW" | "INDEX" | "SCHEMA" | "FUNCTION" | "DATABASE"))
}

/// Where a script statement starting at `start` ends (before its `/` line) and where splitting
/// resumes (after that line); without a `/` line, both are the end of `text`.
fn script_end(text: &str, start: usize) -> (usize, usize) {
    let mut offset = start;
    for line in text[start..].split_inclusive('\n') {
        if offset > start && line.trim() == "/" {
            return (offset, offset + line.len());
        }
        offset += line.len();
    }
    (text.len(), text.len())
}

/// Whether `text` holds a script statement whose `/` line has not come yet.
fn open_script(text: &str) -> bool {
    let mut lexer = Lexer::new(text);
    let mut statement_started = false;
    while let Some(lexeme) = lexer.next() {
        match lexeme.kind {
            LexemeKind::Whitespace | LexemeKind::Comment => {}
            LexemeKind::Semicolon => statement_started = false,
            LexemeKind::Code | LexemeKind::Quoted => {
                if !statement_started && lexer.at_script_head() {
                    let (end, resume) = script_end(text, lexeme.start);
                    if end == resume {
                        return true;
                    }
                    lexer.advance_to(resume);
                    continue;
                }
                statement_started = true;
            }
        }
    }
    false
}

/// Whether a REPL should run `buffer` now: true when its last content other than whitespace and
/// comments is a `;` that ends a statement (outside quotes, comments and dollar-quoted bodies).
///
/// ```
/// use accelsql_engine::splitter::is_complete;
///
/// assert!(is_complete("SELECT 1; -- done"));
/// assert!(!is_complete("SELECT 'a;"));
/// assert!(!is_complete("SELECT 1; SELECT 2"));
/// ```
pub fn is_complete(buffer: &str) -> bool {
    if open_script(buffer) {
        return false;
    }
    if buffer.lines().last().is_some_and(|l| l.trim() == "/") {
        return true;
    }
    let mut complete = false;
    for lexeme in Lexer::new(buffer) {
        match lexeme.kind {
            LexemeKind::Whitespace => {}
            // A comment left open swallows the rest of the buffer: more input is needed.
            LexemeKind::Comment => complete &= lexeme.closed,
            LexemeKind::Semicolon => complete = true,
            LexemeKind::Code | LexemeKind::Quoted => complete = false,
        }
    }
    complete
}

/// Whether `text` holds nothing to run: only whitespace, `;` and comments that are closed (an
/// open `/* …` is not blank: the rest of it is still to come).
///
/// ```
/// use accelsql_engine::splitter::is_blank;
///
/// assert!(is_blank("  -- just a comment"));
/// assert!(!is_blank("/* still open"));
/// ```
pub fn is_blank(text: &str) -> bool {
    Lexer::new(text).all(|lexeme| match lexeme.kind {
        LexemeKind::Whitespace | LexemeKind::Semicolon => true,
        LexemeKind::Comment => lexeme.closed,
        LexemeKind::Code | LexemeKind::Quoted => false,
    })
}

/// A statement being collected: byte range and start line.
#[derive(Debug)]
struct Pending {
    start: usize,
    end: usize,
    line: usize,
}

impl Pending {
    fn starting_at(lexeme: &Lexeme) -> Self {
        Self {
            start: lexeme.start,
            end: lexeme.end,
            line: lexeme.line,
        }
    }

    fn finish(self, text: &str, index: usize) -> SqlStatement {
        SqlStatement {
            text: text[self.start..self.end].trim_end().to_string(),
            line: self.line,
            index,
            unterminated_script: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LexemeKind {
    /// Spaces, tabs, newlines.
    Whitespace,
    /// `-- …` or `/* … */`.
    Comment,
    /// A `'string'`, `"identifier"` or dollar-quoted body.
    Quoted,
    /// A top-level `;`.
    Semicolon,
    /// Anything else (keywords, names, numbers, operators), one character or word at a time.
    Code,
}

/// A run of text of one kind, as byte offsets into the text, and the line it starts on.
#[derive(Debug, Clone, Copy)]
struct Lexeme {
    kind: LexemeKind,
    start: usize,
    end: usize,
    line: usize,
    /// False for a quote or comment that the text ends inside of.
    closed: bool,
}

/// Cuts text into [`Lexeme`]s with sqlparser's tokenizer, a window of lines at a time (a
/// script's body is skipped without tokenizing what follows it twice). Each lexeme ends on a
/// character boundary, so `&text[start..end]` is always valid. A quote or comment that the text
/// ends inside of is one unclosed lexeme running to the end; after a script body the splitter
/// moves on ([`Lexer::advance_to`]) and the text after it is tokenized afresh.
struct Lexer<'a> {
    text: &'a str,
    lexemes: Vec<Lexeme>,
    /// The next lexeme to hand out.
    next: usize,
    /// Where the lexemes so far end, and the line there.
    done: usize,
    done_line: usize,
    /// The next window's size, in characters.
    window: usize,
}

/// The first window's size in characters (it grows while a token runs past its end).
const WINDOW: usize = 4 * 1024;

impl<'a> Lexer<'a> {
    fn new(text: &'a str) -> Self {
        Self::starting_at(text, 0, 1)
    }

    /// The lexemes of `text` from byte offset `start`, which stands on line `line`.
    fn starting_at(text: &'a str, start: usize, line: usize) -> Self {
        Self {
            text,
            lexemes: Vec::new(),
            next: 0,
            done: start,
            done_line: line,
            window: WINDOW,
        }
    }

    /// Tokenizes the next window; false at the end of the text.
    fn fill(&mut self) -> bool {
        let text = self.text;
        if self.done >= text.len() {
            return false;
        }
        loop {
            // A window ends after a newline (or at the end of the text).
            let end = match text[self.done..].char_indices().nth(self.window) {
                Some((at, _)) => text[self.done + at..]
                    .find('\n')
                    .map_or(text.len(), |n| self.done + at + n + 1),
                None => text.len(),
            };
            let (mut lexemes, stopped) = lexemes(&text[..end], self.done, self.done_line);
            let mut until = end;
            if stopped && end < text.len() {
                // Something opens that the window does not close (a string, a comment, a
                // script's body): keep what came before it; what follows is read with a larger
                // window, and only if the splitter asks for it.
                if lexemes.last().is_some_and(|l| !l.closed) {
                    lexemes.pop();
                }
                self.window = self.window.saturating_mul(2);
                match lexemes.last() {
                    Some(last) => until = last.end,
                    None => continue,
                }
            } else {
                self.window = WINDOW;
            }
            self.done_line += text[self.done..until].matches('\n').count();
            self.done = until;
            self.lexemes.extend(lexemes);
            return true;
        }
    }

    /// Moves to byte offset `end` (a character boundary at or after the lexeme handed out
    /// last), counting the newlines passed.
    fn advance_to(&mut self, end: usize) {
        let (from, line) = match self.next.checked_sub(1).and_then(|i| self.lexemes.get(i)) {
            Some(last) => (last.start, last.line),
            None => (0, 1),
        };
        let line = line + self.text[from..end].matches('\n').count();
        *self = Self::starting_at(self.text, end, line);
    }

    /// Whether the lexeme handed out last starts a script statement (see [`is_script_head`]):
    /// its text and the next significant lexemes' (no whitespace, no comments), six at most.
    fn at_script_head(&mut self) -> bool {
        let mut words = Vec::new();
        let mut i = self.next.saturating_sub(1);
        while words.len() < 6 {
            if i >= self.lexemes.len() && !self.fill() {
                break;
            }
            let Some(l) = self.lexemes.get(i) else {
                break;
            };
            if !matches!(l.kind, LexemeKind::Whitespace | LexemeKind::Comment) {
                words.push(&self.text[l.start..l.end]);
            }
            i += 1;
        }
        script_head_words(&words)
    }
}

/// The lexemes of `text` from byte offset `start` (on line `line`), as sqlparser tokenizes it,
/// and whether the tokenizer stopped before the end (then the last lexeme is the unclosed rest).
fn lexemes(text: &str, start: usize, line: usize) -> (Vec<Lexeme>, bool) {
    let rest = &text[start..];
    let mut tokens = Vec::new();
    let stopped = Tokenizer::new(&PlainDialect, rest)
        .with_unescape(false)
        .tokenize_with_location_into_buf(&mut tokens)
        .is_err();
    let mut at = Position::new(rest);
    let mut out = Vec::with_capacity(tokens.len() + 1);
    for token in &tokens {
        let from = at.offset(token.span.start);
        let to = at.offset(token.span.end);
        out.push(Lexeme {
            kind: kind_of(&token.token),
            start: start + from,
            end: start + to,
            line: line + (token.span.start.line as usize).saturating_sub(1),
            closed: true,
        });
    }
    let done = out.last().map_or(start, |l| l.end);
    if stopped && done < text.len() {
        // The tokens stop where a quote or comment opens that the text ends inside of (or
        // where text that is not SQL begins): one run to the end, left open.
        let tail = &text[done..];
        let kind = if tail.starts_with("/*") {
            LexemeKind::Comment
        } else {
            LexemeKind::Quoted
        };
        out.push(Lexeme {
            kind,
            start: done,
            end: text.len(),
            line: line + text[start..done].matches('\n').count(),
            closed: false,
        });
    }
    (out, stopped)
}

/// What a token is to the splitter.
fn kind_of(token: &Token) -> LexemeKind {
    match token {
        Token::Whitespace(
            Whitespace::SingleLineComment { .. } | Whitespace::MultiLineComment(_),
        ) => LexemeKind::Comment,
        Token::Whitespace(_) => LexemeKind::Whitespace,
        // Other Unicode spaces (a no-break space pasted from a web page) are spaces too.
        Token::Char(c) if c.is_whitespace() => LexemeKind::Whitespace,
        Token::SemiColon => LexemeKind::Semicolon,
        Token::SingleQuotedString(_)
        | Token::DoubleQuotedString(_)
        | Token::DollarQuotedString(_)
        | Token::NationalStringLiteral(_)
        | Token::HexStringLiteral(_) => LexemeKind::Quoted,
        Token::Word(w) if w.quote_style.is_some() => LexemeKind::Quoted,
        _ => LexemeKind::Code,
    }
}

impl Iterator for Lexer<'_> {
    type Item = Lexeme;

    fn next(&mut self) -> Option<Lexeme> {
        if self.next >= self.lexemes.len() && !self.fill() {
            return None;
        }
        let lexeme = *self.lexemes.get(self.next)?;
        self.next += 1;
        Some(lexeme)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_body_ends_at_a_slash_line_not_at_semicolons() {
        let sql = "SELECT 1;\nCREATE OR REPLACE PYTHON3 SCALAR SCRIPT s(x INT) RETURNS INT AS\n\
                   %perInstanceRequiredAcceleratorDevices GpuNvidia;\n\
                   def run(ctx):\n    # don't split; here\n    return ctx.x\n/\nSELECT 2;";
        let statements = split_statements(sql);
        let texts: Vec<_> = statements.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(texts.len(), 3, "{texts:?}");
        assert_eq!(texts[0], "SELECT 1");
        assert!(
            texts[1].starts_with("CREATE OR REPLACE PYTHON3"),
            "{}",
            texts[1]
        );
        assert!(texts[1].ends_with("return ctx.x"), "{}", texts[1]);
        assert_eq!((texts[2], statements[2].line), ("SELECT 2", 8));
        // Without a `/` line the body runs to the end of the text.
        let open = "create python3 set script t(x int) emits (y int) as\ndef run(ctx): pass";
        assert_eq!(split_statements(open).len(), 1);
        assert!(split_statements(open)[0].unterminated_script);
        assert!(!statements[1].unterminated_script);
        assert!(!is_complete(open));
        assert!(is_complete(&format!("{open}\n/\n")));
        assert!(is_script_head("CREATE  /* c */ PYTHON3 SET SCRIPT"));
        assert!(!is_script_head("CREATE TABLE script (x INT)"));
        assert!(!is_script_head(
            "CREATE EXTERNAL TABLE script STORED AS CSV"
        ));
        assert!(is_script_head(
            "CREATE PYTHON3 SCALER SCRIPT f() RETURNS INT AS"
        ));
    }

    fn texts(sql: &str) -> Vec<String> {
        split_statements(sql).into_iter().map(|s| s.text).collect()
    }

    #[test]
    fn splits_at_top_level_semicolons() {
        assert_eq!(
            texts("SELECT 1; SELECT 2;SELECT 3"),
            ["SELECT 1", "SELECT 2", "SELECT 3"]
        );
    }

    #[test]
    fn numbers_statements_and_records_their_start_line() {
        let sql = "\n-- setup\nCREATE TABLE t AS VALUES (1);\n\n  SELECT *\n  FROM t;\nSELECT 2";
        let statements = split_statements(sql);
        let located: Vec<(usize, usize)> = statements.iter().map(|s| (s.line, s.index)).collect();
        assert_eq!(located, [(3, 1), (5, 2), (7, 3)]);
        assert_eq!(statements[1].text, "SELECT *\n  FROM t");
    }

    #[test]
    fn skips_empty_statements_and_comment_only_pieces() {
        let statements = split_statements(";; -- nothing\n ; /* nor here */ ; SELECT 1;;\n");
        assert_eq!(statements.len(), 1);
        assert_eq!(statements[0].text, "SELECT 1");
        assert_eq!((statements[0].line, statements[0].index), (2, 1));
        assert!(split_statements("").is_empty());
        assert!(split_statements("  \n-- only a comment\n").is_empty());
    }

    #[test]
    fn semicolons_in_strings_do_not_split() {
        assert_eq!(
            texts("SELECT 'a;b', 'it''s; fine'; SELECT 2"),
            ["SELECT 'a;b', 'it''s; fine'", "SELECT 2"]
        );
    }

    #[test]
    fn semicolons_in_quoted_identifiers_do_not_split() {
        assert_eq!(
            texts(r#"SELECT 1 AS "x;""y"; SELECT 2"#),
            [r#"SELECT 1 AS "x;""y""#, "SELECT 2"]
        );
    }

    #[test]
    fn semicolons_in_comments_do_not_split() {
        assert_eq!(
            texts("SELECT 1 -- not here;\n, 2 /* nor; /* nested; */ here; */ + 1; SELECT 3"),
            [
                "SELECT 1 -- not here;\n, 2 /* nor; /* nested; */ here; */ + 1",
                "SELECT 3"
            ]
        );
    }

    #[test]
    fn semicolons_in_dollar_quoted_bodies_do_not_split() {
        assert_eq!(
            texts("SELECT $$a;b$$; SELECT $fn$ x; $$ y; $fn$; SELECT 3"),
            ["SELECT $$a;b$$", "SELECT $fn$ x; $$ y; $fn$", "SELECT 3"]
        );
    }

    #[test]
    fn dollar_signs_that_do_not_open_a_quote_are_code() {
        assert_eq!(
            texts("SELECT $1; SELECT a$b$ FROM t; SELECT 2"),
            ["SELECT $1", "SELECT a$b$ FROM t", "SELECT 2"]
        );
    }

    #[test]
    fn newlines_inside_quotes_count_towards_later_lines() {
        let statements = split_statements("SELECT 'a\nb\nc';\n/* x\ny */ SELECT 2;");
        assert_eq!(statements[1].line, 5);
        assert_eq!(statements[1].text, "SELECT 2");
    }

    #[test]
    fn unterminated_quotes_run_to_the_end() {
        assert_eq!(
            texts("SELECT 1; SELECT 'a; b"),
            ["SELECT 1", "SELECT 'a; b"]
        );
        assert_eq!(texts("SELECT 1 /* open; "), ["SELECT 1 /* open;"]);
        assert_eq!(texts("SELECT 1 -- trailing\n;"), ["SELECT 1"]);
    }

    #[test]
    fn a_backslash_does_not_escape_a_quote_and_unicode_spaces_are_spaces() {
        assert_eq!(
            texts("SELECT 'C:\\'; SELECT 2"),
            ["SELECT 'C:\\'", "SELECT 2"]
        );
        assert_eq!(texts("SELECT 1;\u{a0}\n"), ["SELECT 1"]);
        assert!(is_blank("\u{a0};"));
    }

    #[test]
    fn multibyte_text_is_split_on_character_boundaries() {
        assert_eq!(
            texts("SELECT 'Zürich;' AS städte; SELECT '東京'"),
            ["SELECT 'Zürich;' AS städte", "SELECT '東京'"]
        );
    }

    #[test]
    fn a_buffer_is_complete_when_it_ends_with_a_terminating_semicolon() {
        assert!(is_complete("SELECT 1;"));
        assert!(is_complete("SELECT 1;  \n"));
        assert!(is_complete("SELECT 1; -- trailing comment"));
        assert!(is_complete("SELECT 1; /* closed */"));
        assert!(is_complete("SELECT\n  1\n;"));
        assert!(is_complete("SELECT 'a;b';"));
    }

    #[test]
    fn a_buffer_is_incomplete_without_a_terminating_semicolon() {
        assert!(!is_complete(""));
        assert!(!is_complete("   "));
        assert!(!is_complete("SELECT 1"));
        assert!(!is_complete("SELECT 1; SELECT 2"));
        assert!(!is_complete("SELECT 'a;"));
        assert!(!is_complete("SELECT \"a;"));
        assert!(!is_complete("SELECT 1 -- ;"));
        assert!(!is_complete("SELECT 1; /* open"));
        assert!(!is_complete("SELECT $$ a;"));
        assert!(!is_complete("-- only a comment;"));
    }

    #[test]
    fn blank_text_has_nothing_to_run() {
        assert!(is_blank(""));
        assert!(is_blank(" ;\n-- c\n/* d */ ;"));
        assert!(!is_blank("/* open"));
        assert!(!is_blank("x"));
        assert!(!is_blank("''"));
    }
}
