//! Script options: the body's `%key value;` lines, checked at CREATE time and blanked out of the
//! code (each becomes an empty line, so tracebacks keep the user's line numbers).

use accelsql_udf_runtime::AcceleratorRequest;
use accelsql_udf_runtime::annotations::parse_instance_limit;

use crate::EngineError;

/// What a script body's options say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ScriptOptions {
    /// `%perInstanceRequiredAcceleratorDevices`, as written.
    pub(crate) accelerator: Option<String>,
    /// `%perNodeAndCallInstanceLimit`.
    pub(crate) instance_limit: Option<usize>,
    /// `%env NAME=value`, in order.
    pub(crate) env: Vec<(String, String)>,
}

/// Takes the options out of `body`: returns them and the code with each option line blanked.
pub(crate) fn take_options(body: &str) -> Result<(ScriptOptions, String), EngineError> {
    let mut options = ScriptOptions::default();
    let mut code = Vec::new();
    for (i, line) in body.split('\n').enumerate() {
        let trimmed = line.trim();
        let Some(option) = trimmed.strip_prefix('%') else {
            code.push(line);
            continue;
        };
        let fail = |message: String| EngineError::ScriptDefinition {
            message: format!("script line {}: {message}", i + 1),
        };
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
            "env" => {
                // Exasol reads an %env value up to its ';' and rejects a line without one.
                if !terminated {
                    return Err(fail(format!(
                        "%env {value} has no terminating ';' (write %env NAME=value;)"
                    )));
                }
                let (name, value) = value
                    .split_once('=')
                    .ok_or_else(|| fail(format!("%env needs NAME=value, got {value:?}")))?;
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
                     %perNodeAndCallInstanceLimit and %env"
                )));
            }
        }
        code.push("");
    }
    Ok((options, code.join("\n")))
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
                .contains("script line 3: %env MODE=fast has no terminating ';'"),
            "{e}"
        );
    }
}
