//! Script options: the body's `%key value;` lines, checked at CREATE time and blanked out of the
//! code (each becomes an empty line, so tracebacks keep the user's line numbers).
//!
//! As in Exasol, an option is a line whose first non-blank character is `%`, anywhere in the
//! body. A line that Python reads as part of something else is code, never an option: a line
//! inside a multi-line string, inside brackets, or after a line ending in a backslash (where a
//! leading `%` is the modulo operator). [`logical_line_starts`] says which lines start one.

use accelsql_udf_runtime::AcceleratorRequest;
use accelsql_udf_runtime::annotations::{parse_device_memory, parse_instance_limit};

use crate::EngineError;
use crate::script_err;

/// What a script body's options say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ScriptOptions {
    /// `%perInstanceRequiredAcceleratorDevices`, as written.
    pub(crate) accelerator: Option<String>,
    /// `%perNodeAndCallInstanceLimit`.
    pub(crate) instance_limit: Option<usize>,
    /// `%perInstanceRequiredAcceleratorMemory`, in bytes.
    pub(crate) device_memory: Option<u64>,
    /// `%env NAME=value`, in order.
    pub(crate) env: Vec<(String, String)>,
}

/// Takes the options out of `body`: returns them and the code with each option line blanked.
pub(crate) fn take_options(body: &str) -> Result<(ScriptOptions, String), EngineError> {
    let mut options = ScriptOptions::default();
    let mut code = Vec::new();
    let starts = logical_line_starts(body);
    for (i, line) in body.split('\n').enumerate() {
        let trimmed = line.trim();
        let option = trimmed
            .strip_prefix('%')
            .filter(|_| starts.get(i).copied().unwrap_or(true));
        let Some(option) = option else {
            code.push(line);
            continue;
        };
        let fail = |message: String| script_err!("script line {}: {message}", i + 1);
        let option = option.trim_end();
        let terminated = option.ends_with(';');
        let option = option.trim_end_matches(';').trim_end();
        let (key, value) = option
            .split_once(char::is_whitespace)
            .map(|(k, v)| (k, v.trim()))
            .unwrap_or((option, ""));
        match key.to_ascii_lowercase().as_str() {
            "perinstancerequiredacceleratordevices" => {
                AcceleratorRequest::parse(value).map_err(|e| fail(e.to_string()))?;
                options.accelerator = Some(value.to_string());
            }
            "pernodeandcallinstancelimit" => {
                let limit = parse_instance_limit(value).map_err(|e| fail(e.to_string()))?;
                options.instance_limit = Some(limit);
            }
            "perinstancerequiredacceleratormemory" => {
                let bytes = parse_device_memory(value).map_err(|e| fail(e.to_string()))?;
                options.device_memory = Some(bytes);
            }
            "env" => {
                // Exasol reads an %env value up to its ';' and rejects a line without one.
                if !terminated {
                    return Err(fail(format!(
                        "Error while parsing %env option line: %env {value} has no terminating \
                         ';' (write %env NAME=value;)"
                    )));
                }
                let (name, value) = value.split_once('=').ok_or_else(|| {
                    fail(format!(
                        "Error while parsing %env option line: Script option %env does not \
                             have the form VAR=VALUE; got {value:?}"
                    ))
                })?;
                let name = name.trim();
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(fail(format!(
                        "{name:?} is not an environment variable name"
                    )));
                }
                options
                    .env
                    .push((name.to_string(), value.trim().to_string()));
            }
            _ => {
                return Err(fail(format!(
                    "unknown script option %{key}; accelsql knows %perInstanceRequiredAcceleratorDevices, \
                     %perInstanceRequiredAcceleratorMemory, %perNodeAndCallInstanceLimit and %env"
                )));
            }
        }
        code.push("");
    }
    Ok((options, code.join("\n")))
}

/// For each line of `body` (split at `\n`): whether Python starts a new logical line there, i.e.
/// the line is not inside a string, inside brackets, or the continuation of a line ending in `\`.
///
/// A lexer's view only, as forgiving as Python's tokenizer is strict: an unclosed bracket or
/// string simply runs to the end of the body.
pub(crate) fn logical_line_starts(body: &str) -> Vec<bool> {
    let mut starts = Vec::new();
    // The open triple-quoted string's quote character, if any.
    let mut triple: Option<u8> = None;
    let mut depth: usize = 0;
    let mut continued = false;
    for line in body.split('\n') {
        starts.push(triple.is_none() && depth == 0 && !continued);
        continued = false;
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if let Some(q) = triple {
                if b == b'\\' {
                    i += 2;
                } else if bytes[i..].starts_with(&[q, q, q]) {
                    triple = None;
                    i += 3;
                } else {
                    i += 1;
                }
                continue;
            }
            match b {
                b'#' => break,
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                b'\'' | b'"' => {
                    if bytes[i..].starts_with(&[b, b, b]) {
                        triple = Some(b);
                        i += 3;
                        continue;
                    }
                    // A one-line string: to its closing quote (an escaped quote does not
                    // close it), or to the end of the line.
                    i += 1;
                    while i < bytes.len() && bytes[i] != b {
                        i += if bytes[i] == b'\\' { 2 } else { 1 };
                    }
                }
                b'\\' if i + 1 == bytes.len() => continued = true,
                _ => {}
            }
            i += 1;
        }
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_taken_out_and_lines_kept() {
        let body = "%perInstanceRequiredAcceleratorDevices GpuNvidia|None;\n%perNodeAndCallInstanceLimit 2;\n\
                    %env MODE=fast;\n%env PATHS=a=b;\ndef run(ctx):\n    return 1";
        let (o, code) = take_options(body).unwrap();
        assert_eq!(o.accelerator.as_deref(), Some("GpuNvidia|None"));
        assert_eq!(o.instance_limit, Some(2));
        assert_eq!(
            o.env,
            [
                ("MODE".into(), "fast".into()),
                ("PATHS".into(), "a=b".into())
            ]
        );
        assert_eq!(code, "\n\n\n\ndef run(ctx):\n    return 1");
    }

    #[test]
    fn percent_lines_that_python_reads_as_code_are_not_options() {
        let body = r#"%env REAL=1;
HELP = """usage:
%env INJECTED=1;
%perNodeAndCallInstanceLimit 1;
"""
DOC = '''
%unknownOption x
'''
y = (7
     %env)
z = 7 \
    %env
s = '(' # ) a bracket in a string or comment opens nothing
  %env LATER=2;
def run(ctx):
    return 1"#;
        let (o, code) = take_options(body).unwrap();
        assert_eq!(
            o.env,
            [("REAL".into(), "1".into()), ("LATER".into(), "2".into())]
        );
        assert_eq!(o.instance_limit, None);
        // The string's lines stay as Python reads them; only the two options are blanked.
        assert!(
            code.contains("%env INJECTED=1;\n%perNodeAndCallInstanceLimit 1;"),
            "{code}"
        );
        assert!(
            code.contains("     %env)") && code.contains("    %env\n"),
            "{code}"
        );
        assert_eq!(code.split('\n').count(), body.split('\n').count());
        assert!(!code.contains("LATER") && !code.contains("REAL"), "{code}");
    }

    #[test]
    fn logical_line_starts_follow_strings_brackets_and_continuations() {
        let body = "a = 1\nb = \"\"\"x\n\"\"\"\nc = [\n1]\nd = 'it\\'s' \\\n+ 'x'\ne";
        assert_eq!(
            logical_line_starts(body),
            [true, true, false, true, false, true, false, true]
        );
        // Unclosed things run to the end, without panicking.
        assert_eq!(logical_line_starts("x = '''\n%a\n"), [true, false, false]);
        assert_eq!(logical_line_starts("f(\n"), [true, false]);
        assert_eq!(logical_line_starts("s = 'abc\\"), [true]);
    }

    #[test]
    fn unknown_options_and_bad_values_are_errors_with_their_line() {
        let e = take_options("def f(): pass\n%perInstanceLimit 2;").unwrap_err();
        assert!(
            e.to_string()
                .contains("script line 2: unknown script option %perInstanceLimit"),
            "{e}"
        );
        let e = take_options("%perInstanceRequiredAcceleratorDevices GpuAmd;").unwrap_err();
        assert!(e.to_string().contains("script line 1"), "{e}");
        assert!(take_options("%perNodeAndCallInstanceLimit zero;").is_err());
        assert!(take_options("%env =x;").is_err());
        let e = take_options("def f(): pass\n\n%env MODE=fast\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("%env MODE=fast has no terminating ';'"),
            "{e}"
        );
    }
}
