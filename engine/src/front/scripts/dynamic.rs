//! Call-site EMITS for `EMITS (...)` scripts: `SELECT f(x) EMITS (a INT, b VARCHAR(20)) FROM t`.
//! Before a statement is parsed, each such call is renamed to a function of its own (for this
//! statement only) whose EMITS columns are the ones the call site gives, and the `EMITS (…)`
//! clause, which SQL does not know, is removed.

use super::ddl::parse_columns;
use crate::core::error::EngineError;
use crate::script_err;

/// One call of an `EMITS (...)` script in a statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DynamicCall {
    /// The function name the call was renamed to.
    pub(crate) function: String,
    /// The script called, as `find` named it.
    pub(crate) script: String,
    /// Its EMITS columns at this call site, as (name, type); `None` when the call gives no
    /// EMITS list (the script's `default_output_columns()` says them).
    pub(crate) columns: Option<Vec<(String, String)>>,
}

/// Rewrites the calls of `EMITS (...)` scripts; returns the new text and the calls. `find` gets
/// each called name, as (schema if qualified, name) folded as SQL folds them, and says which such
/// script it calls, if any.
///
/// A call site's `EMITS (…)` list after anything else fails as Exasol words it: after a script
/// with a static output (`is_script` says which names call scripts), "The script has a static
/// return argument definition…"; after any other function, "emits specification is not allowed
/// for built-in functions".
pub(crate) fn rewrite_dynamic_emits(
    text: &str,
    find: &dyn Fn(Option<&str>, &str) -> Option<String>,
    is_script: &dyn Fn(Option<&str>, &str) -> bool,
) -> crate::Result<(String, Vec<DynamicCall>)> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut calls = Vec::new();
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' => i = skip_quoted(bytes, i),
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i = text[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = text[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |n| i + 2 + n + 2);
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b'"' => {
                let start = i;
                let Some((first, end)) = identifier(text, i) else {
                    i += 1;
                    continue;
                };
                i = end;
                let mut word = first;
                let mut schema = None;
                let dot = skip_space(bytes, i);
                if bytes.get(dot) == Some(&b'.')
                    && let Some((second, end)) = identifier(text, skip_space(bytes, dot + 1))
                {
                    i = end;
                    schema = Some(word);
                    word = second;
                }
                let after_word = skip_space(bytes, i);
                if follows_dot(bytes, start) || bytes.get(after_word) != Some(&b'(') {
                    continue;
                }
                let script = find(schema.as_deref(), &word);
                let Some(args_end) = matching_paren(bytes, after_word) else {
                    if script.is_some() {
                        return Err(dynamic_err(&word, "its argument list is not closed"));
                    }
                    continue;
                };
                let emits_at = skip_space(bytes, args_end);
                let has_emits = text
                    .get(emits_at..emits_at + 5)
                    .is_some_and(|w| w.eq_ignore_ascii_case("emits"))
                    && !bytes
                        .get(emits_at + 5)
                        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
                let open = skip_space(bytes, emits_at + 5);
                let Some(script) = script else {
                    if has_emits && bytes.get(open) == Some(&b'(') {
                        return Err(misplaced_emits(&word, is_script(schema.as_deref(), &word)));
                    }
                    continue;
                };
                let function = format!("{word}__emits_{}", calls.len() + 1);
                out.push_str(&text[copied..start]);
                out.push('"');
                out.push_str(&function.replace('"', "\"\""));
                out.push('"');
                let columns = if has_emits && bytes.get(open) == Some(&b'(') {
                    let close = matching_paren(bytes, open)
                        .ok_or_else(|| dynamic_err(&word, "its EMITS list is not closed"))?;
                    let list = &text[open + 1..close - 1];
                    if list.trim().is_empty() {
                        return Err(dynamic_err(
                            &word,
                            "Empty return argument definition is not allowed",
                        ));
                    }
                    // The dialect's token pass has read the list's quoted names already.
                    let columns = parse_columns(list, false).map_err(|e| {
                        // A list that does not parse is Exasol's `syntax error`.
                        let syntax = e.message.starts_with("expected")
                            || e.message.starts_with("unexpected");
                        let kind = if syntax { "syntax error " } else { "" };
                        dynamic_err(&word, &format!("{kind}in its EMITS list: {e}"))
                    })?;
                    out.push_str(&text[i..args_end]);
                    copied = close;
                    i = close;
                    Some(columns)
                } else {
                    // No EMITS list: the script's default_output_columns() gives them.
                    out.push_str(&text[i..args_end]);
                    copied = args_end;
                    i = args_end;
                    None
                };
                calls.push(DynamicCall {
                    function,
                    script,
                    columns,
                });
            }
            _ => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    Ok((out, calls))
}

/// An `EMITS (…)` list after a call of `function`, which is not an `EMITS (...)` script.
fn misplaced_emits(function: &str, is_script: bool) -> EngineError {
    EngineError::ScriptDefinition {
        message: if is_script {
            format!(
                "The script has a static return argument definition. Dynamic return arguments \
                 are not supported in this case (script {function})"
            )
        } else {
            format!("emits specification is not allowed for built-in functions ({function})")
        },
    }
}

fn dynamic_err(script: &str, message: &str) -> EngineError {
    script_err!("call of EMITS (...) script {script}: {message}")
}

/// The identifier at `i`, as SQL folds it (unquoted: lower case; `"quoted"`: as written, `""`
/// unescaped), and the index after it.
fn identifier(text: &str, i: usize) -> Option<(String, usize)> {
    let bytes = text.as_bytes();
    match bytes.get(i)? {
        b'"' => {
            let end = skip_quoted(bytes, i);
            let inner = text.get(i + 1..end.checked_sub(1)?)?;
            (end > i + 1 && bytes[end - 1] == b'"').then(|| (inner.replace("\"\"", "\""), end))
        }
        c if c.is_ascii_alphabetic() || *c == b'_' => {
            let mut end = i;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
                end += 1;
            }
            Some((text[i..end].to_ascii_lowercase(), end))
        }
        _ => None,
    }
}

/// Whether a `.` comes right before `start` (spaces aside): the word is qualified by something
/// this scanner does not read (a quoted schema, a third name part).
fn follows_dot(bytes: &[u8], start: usize) -> bool {
    bytes[..start]
        .iter()
        .rev()
        .find(|b| !b.is_ascii_whitespace())
        == Some(&b'.')
}

fn skip_space(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The index after the quote that closes the one at `i` ('' and "" escape).
fn skip_quoted(bytes: &[u8], i: usize) -> usize {
    let quote = bytes[i];
    let mut j = i + 1;
    while j < bytes.len() {
        if bytes[j] == quote {
            if bytes.get(j + 1) == Some(&quote) {
                j += 2;
                continue;
            }
            return j + 1;
        }
        j += 1;
    }
    bytes.len()
}

/// The index after the `)` matching the `(` at `open`.
fn matching_paren(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = open;
    while j < bytes.len() {
        match bytes[j] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            b'\'' | b'"' => {
                j = skip_quoted(bytes, j);
                continue;
            }
            _ => {}
        }
        j += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_scripts(_: Option<&str>, _: &str) -> bool {
        false
    }

    #[test]
    fn misplaced_emits_lists_fail_in_exasols_words() {
        let dynamic =
            |_: Option<&str>, name: &str| (name == "split").then(|| "public.split".to_string());
        let fixed = |_: Option<&str>, name: &str| name == "fixed";
        let e = rewrite_dynamic_emits("SELECT split(x) EMITS ( ) FROM t", &dynamic, &fixed)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("Empty return argument definition is not allowed"),
            "{e}"
        );
        let e = rewrite_dynamic_emits("SELECT fixed(x) EMITS (a INT) FROM t", &dynamic, &fixed)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("The script has a static return argument definition"),
            "{e}"
        );
        let e = rewrite_dynamic_emits("SELECT upper(x) emits (a INT) FROM t", &dynamic, &fixed)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("emits specification is not allowed for built-in functions"),
            "{e}"
        );
        // A column named emits is not a list.
        assert!(rewrite_dynamic_emits("SELECT upper(x) emits FROM t", &dynamic, &fixed).is_ok());
    }

    #[test]
    fn calls_are_renamed_and_their_emits_clause_taken() {
        let dynamic = |schema: Option<&str>, name: &str| {
            (matches!(schema, None | Some("public")) && name == "split")
                .then(|| "public.split".to_string())
        };
        let (text, calls) = rewrite_dynamic_emits(
            "SELECT Split(x, ')') EMITS (word VARCHAR(20), n DECIMAL(18, 0)) FROM t -- split(y)",
            &dynamic,
            &no_scripts,
        )
        .unwrap();
        assert_eq!(text, "SELECT \"split__emits_1\"(x, ')') FROM t -- split(y)");
        assert_eq!(calls.len(), 1);
        assert_eq!(
            calls[0].columns,
            Some(vec![
                ("word".to_string(), "VARCHAR(20)".to_string()),
                ("n".to_string(), "DECIMAL(18, 0)".to_string())
            ])
        );
        // Without an EMITS list the call is renamed; its columns come from the script.
        let (text, calls) =
            rewrite_dynamic_emits("SELECT split(x) FROM t", &dynamic, &no_scripts).unwrap();
        assert_eq!(text, "SELECT \"split__emits_1\"(x) FROM t");
        assert_eq!(calls[0].columns, None);
        let (same, none) =
            rewrite_dynamic_emits("SELECT 'split(x)' FROM t", &dynamic, &no_scripts).unwrap();
        assert_eq!((same.as_str(), none.len()), ("SELECT 'split(x)' FROM t", 0));
        let (text, calls) = rewrite_dynamic_emits(
            "SELECT PUBLIC . split(x) EMITS (w VARCHAR(9)) FROM (SELECT other.split(y) FROM t)",
            &dynamic,
            &no_scripts,
        )
        .unwrap();
        assert_eq!(
            text,
            "SELECT \"split__emits_1\"(x) FROM (SELECT other.split(y) FROM t)"
        );
        assert_eq!(calls[0].script, "public.split");
        let (text, calls) = rewrite_dynamic_emits(
            "SELECT \"public\".\"split\"(x) EMITS (w INT), \"Split\"(x), \"S\".split(x), a.b.split(x)",
            &dynamic,
            &no_scripts,
        )
        .unwrap();
        assert_eq!(
            text,
            "SELECT \"split__emits_1\"(x), \"Split\"(x), \"S\".split(x), a.b.split(x)"
        );
        assert_eq!(calls.len(), 1);
    }
}
