//! Rust source as tokens: comments dropped, each literal one token, lifetimes and labels dropped.

/// One token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// An identifier or keyword; `$crate` keeps its `$`, a raw identifier its `r#`.
    Ident(String),
    /// A string literal's text, escapes left as written (for `#[path = "…"]`).
    Str(String),
    /// Any other literal (number, char, byte).
    Lit,
    /// `::`.
    PathSep,
    /// Any other punctuation, one character at a time.
    Punct(char),
}

/// A token and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) line: usize,
}

/// Splits `src` into tokens.
pub(crate) fn tokenize(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let ident_char = |ch: char| ch.is_alphanumeric() || ch == '_';
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    while i < c.len() {
        let (ch, start) = (c[i], line);
        let tok = if ch.is_whitespace() {
            line += usize::from(ch == '\n');
            i += 1;
            continue;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            continue;
        } else if ch == '/' && at(i + 1) == '*' {
            let (mut depth, mut j) = (1, i + 2);
            while j < c.len() && depth > 0 {
                match (c[j], at(j + 1)) {
                    ('/', '*') => (depth, j) = (depth + 1, j + 2),
                    ('*', '/') => (depth, j) = (depth - 1, j + 2),
                    (ch, _) => (line, j) = (line + usize::from(ch == '\n'), j + 1),
                }
            }
            i = j;
            continue;
        } else if ch == '"' {
            let (text, next) = quoted(&c, i + 1, '"', &mut line);
            i = next;
            Tok::Str(text)
        } else if ch == '\'' {
            if at(i + 1) == '\\' || (at(i + 2) == '\'' && at(i + 1) != '\n') {
                i = quoted(&c, i + 1, '\'', &mut line).1;
                Tok::Lit
            } else {
                i += 1; // a lifetime or label: dropped with its name
                while ident_char(at(i)) {
                    i += 1;
                }
                continue;
            }
        } else if ch.is_ascii_digit() {
            while ident_char(at(i)) {
                i += 1;
            }
            Tok::Lit
        } else if ch.is_alphabetic() || ch == '_' || (ch == '$' && ident_char(at(i + 1))) {
            let begin = i;
            i += 1;
            while ident_char(at(i)) {
                i += 1;
            }
            let word: String = c[begin..i].iter().collect();
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if raw && (at(i) == '"' || (at(i) == '#' && matches!(at(i + 1), '#' | '"'))) {
                let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
                let close: Vec<char> = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let (body, mut j) = (i + hashes + 1, i + hashes + 1);
                while j < c.len() && !c[j..].starts_with(&close) {
                    line += usize::from(c[j] == '\n');
                    j += 1;
                }
                i = (j + close.len()).min(c.len());
                Tok::Str(c[body..j.min(c.len())].iter().collect())
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                let (text, next) = quoted(&c, i + 1, '"', &mut line);
                i = next;
                Tok::Str(text)
            } else if word == "b" && at(i) == '\'' {
                i = quoted(&c, i + 1, '\'', &mut line).1;
                Tok::Lit
            } else if word == "r" && at(i) == '#' && ident_char(at(i + 1)) {
                let begin = i + 1;
                i += 1;
                while ident_char(at(i)) {
                    i += 1;
                }
                Tok::Ident(format!("r#{}", c[begin..i].iter().collect::<String>()))
            } else {
                Tok::Ident(word)
            }
        } else if ch == ':' && at(i + 1) == ':' {
            i += 2;
            Tok::PathSep
        } else {
            i += 1;
            Tok::Punct(ch)
        };
        out.push(Token { tok, line: start });
    }
    out
}

/// Reads a quoted literal whose opening quote is just before `i`, up to the unescaped `quote`:
/// its text and the index after the closing quote.
fn quoted(c: &[char], mut i: usize, quote: char, line: &mut usize) -> (String, usize) {
    let begin = i;
    while i < c.len() && c[i] != quote {
        let escape = c[i] == '\\';
        *line += usize::from(c.get(i + usize::from(escape)) == Some(&'\n'));
        i += 1 + usize::from(escape);
    }
    let end = i.min(c.len());
    (c[begin..end].iter().collect(), (i + 1).min(c.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(src: &str) -> Vec<String> {
        tokenize(src)
            .into_iter()
            .filter_map(|t| match t.tok {
                Tok::Ident(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comments_are_dropped_nested_ones_too() {
        let src = "a // b\n/* c /* d */ e */ f /// g\n//! h\n/** i */ j";
        assert_eq!(idents(src), ["a", "f", "j"]);
    }

    #[test]
    fn string_contents_are_not_code() {
        let src = r####"a "use crate::x; \" b" c r#"d " e"# f br##"g"# "## h b"i" 'j' k"####;
        assert_eq!(idents(src), ["a", "c", "f", "h", "k"]);
        let strs: Vec<Tok> = tokenize(r#"x "p/q.rs" r"s""#)
            .into_iter()
            .map(|t| t.tok)
            .collect();
        assert_eq!(strs[1], Tok::Str("p/q.rs".into()));
        assert_eq!(strs[2], Tok::Str("s".into()));
    }

    #[test]
    fn lifetimes_are_not_char_literals() {
        let src = "fn f<'a>(x: &'a str, c: char) -> &'a str { 'outer: loop { g('\"', '\\'', b'x', '{') } }";
        let words = idents(src);
        assert_eq!(
            words,
            ["fn", "f", "x", "str", "c", "char", "str", "loop", "g"]
        );
        let braces = tokenize(src)
            .iter()
            .filter(|t| t.tok == Tok::Punct('{'))
            .count();
        assert_eq!(braces, 2, "the '{{' char literal is no brace");
    }

    #[test]
    fn paths_raw_idents_and_lines() {
        let toks = tokenize("a::b\n$crate::c r#type\n\"x\\\ny\" z");
        assert_eq!(toks[1].tok, Tok::PathSep);
        assert_eq!(toks[3].tok, Tok::Ident("$crate".into()));
        assert_eq!(toks[3].line, 2);
        assert_eq!(toks[6].tok, Tok::Ident("r#type".into()));
        assert_eq!(toks[8].tok, Tok::Ident("z".into()));
        assert_eq!(toks[8].line, 4);
    }
}
