//! Splits SQL text into statements at top-level `;`, remembering where each one starts.
//!
//! The splitter only knows enough lexical SQL to tell a terminating `;` from one inside a
//! `'string'` (with `''` escapes), a `"quoted identifier"` (with `""` escapes), a `-- line comment`,
//! a `/* block comment */` (nested, as PostgreSQL and sqlparser allow) or a dollar-quoted body
//! (`$$ … $$`, `$tag$ … $tag$`). Everything else is left to the SQL parser: an unterminated quote
//! or comment simply runs to the end of the text, and the parser reports it.
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
                if current.is_none() && is_script_head(&text[lexeme.start..]) {
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
    let words: Vec<String> = Lexer::new(text)
        .filter(|l| !matches!(l.kind, LexemeKind::Whitespace | LexemeKind::Comment))
        .take(6)
        .map(|l| text[l.start..l.end].to_ascii_uppercase())
        .collect();
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
                if !statement_started && is_script_head(&text[lexeme.start..]) {
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

/// Cuts text into [`Lexeme`]s. Each lexeme ends on a character boundary, so `&text[start..end]`
/// is always valid.
struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Lexer<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            pos: 0,
            line: 1,
        }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    /// Moves to byte offset `end` (a character boundary), counting the newlines passed.
    fn advance_to(&mut self, end: usize) {
        self.line += self.text[self.pos..end].matches('\n').count();
        self.pos = end;
    }

    /// End of a quote opened at `self.pos` with `quote`, where a doubled `quote` escapes it.
    fn quoted_end(&self, quote: char) -> (usize, bool) {
        let rest = self.rest();
        let mut chars = rest.char_indices().skip(1).peekable();
        while let Some((i, c)) = chars.next() {
            if c == quote {
                if chars.peek().is_some_and(|&(_, next)| next == quote) {
                    chars.next();
                } else {
                    return (self.pos + i + c.len_utf8(), true);
                }
            }
        }
        (self.text.len(), false)
    }

    /// End of a (nested) block comment opened at `self.pos`.
    fn block_comment_end(&self) -> (usize, bool) {
        let bytes = self.rest().as_bytes();
        let mut depth = 0usize;
        let mut i = 0;
        while i + 1 < bytes.len() {
            match (bytes[i], bytes[i + 1]) {
                (b'/', b'*') => {
                    depth += 1;
                    i += 2;
                }
                (b'*', b'/') => {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        return (self.pos + i, true);
                    }
                }
                _ => i += 1,
            }
        }
        (self.text.len(), false)
    }

    /// If a dollar quote (`$$` or `$tag$`) opens at `self.pos`, its end.
    fn dollar_quoted_end(&self) -> Option<(usize, bool)> {
        let rest = self.rest();
        let after = &rest[1..];
        let tag_len = after
            .char_indices()
            .take_while(|&(i, c)| c == '_' || c.is_alphabetic() || (i > 0 && c.is_alphanumeric()))
            .map(|(i, c)| i + c.len_utf8())
            .last()
            .unwrap_or(0);
        if !after[tag_len..].starts_with('$') {
            return None; // `$1` placeholders and the like
        }
        let delimiter = &rest[..tag_len + 2];
        let body = &rest[delimiter.len()..];
        Some(match body.find(delimiter) {
            Some(at) => (self.pos + delimiter.len() + at + delimiter.len(), true),
            None => (self.text.len(), false),
        })
    }
}

impl Iterator for Lexer<'_> {
    type Item = Lexeme;

    fn next(&mut self) -> Option<Lexeme> {
        let rest = self.rest();
        let c = rest.chars().next()?;
        let (kind, end, closed) = if c.is_whitespace() {
            let len = rest
                .find(|c: char| !c.is_whitespace())
                .unwrap_or(rest.len());
            (LexemeKind::Whitespace, self.pos + len, true)
        } else if rest.starts_with("--") {
            // The newline is not part of the comment: it is whitespace, and closes it.
            let len = rest.find('\n').unwrap_or(rest.len());
            (LexemeKind::Comment, self.pos + len, true)
        } else if rest.starts_with("/*") {
            let (end, closed) = self.block_comment_end();
            (LexemeKind::Comment, end, closed)
        } else if c == '\'' || c == '"' {
            let (end, closed) = self.quoted_end(c);
            (LexemeKind::Quoted, end, closed)
        } else if c == ';' {
            (LexemeKind::Semicolon, self.pos + 1, true)
        } else if let Some((end, closed)) = (c == '$').then(|| self.dollar_quoted_end()).flatten() {
            (LexemeKind::Quoted, end, closed)
        } else if c.is_alphanumeric() || c == '_' {
            // A whole word, so that `a$b$` is not mistaken for the start of a dollar quote.
            let len = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
                .unwrap_or(rest.len());
            (LexemeKind::Code, self.pos + len, true)
        } else {
            (LexemeKind::Code, self.pos + c.len_utf8(), true)
        };
        let lexeme = Lexeme {
            kind,
            start: self.pos,
            end,
            line: self.line,
            closed,
        };
        self.advance_to(end);
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
