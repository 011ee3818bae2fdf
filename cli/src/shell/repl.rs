//! The interactive prompt: line editing, history in `~/.accelsql_history`, statements over
//! several lines, and backslash commands (`meta.rs`).

use std::path::PathBuf;

use accelsql_engine::splitter::{is_blank, is_complete, split_statements};
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;

use super::meta::MetaCommand;
use super::session::{Flow, Shell};
use crate::error::CliError;

/// The prompt for a new statement.
const PROMPT: &str = "accelsql> ";
/// The prompt for the next line of an unfinished statement (same width as [`PROMPT`]).
const CONTINUATION: &str = "      -> ";
/// The history file, in the user's home directory.
const HISTORY_FILE: &str = ".accelsql_history";

/// Reads statements from the terminal until `\q` or end of input. A failing statement prints
/// its error and the session goes on. History that cannot be read or written is ignored.
pub(crate) fn run(shell: &Shell) -> Result<(), CliError> {
    let mut editor = DefaultEditor::new().map_err(|e| CliError::Terminal(e.to_string()))?;
    let history = history_path();
    if let Some(path) = &history {
        let _ = editor.load_history(path); // a first run has none
    }
    let engine = shell.engine();
    println!(
        "accelsql {} ({} GPU(s), {}). Type \\? for help, \\q to quit.",
        env!("CARGO_PKG_VERSION"),
        engine.devices().len(),
        engine.inventory().backend_name(),
    );
    let mut buffer = String::new();
    let outcome = 'prompt: loop {
        let prompt = if buffer.is_empty() {
            PROMPT
        } else {
            CONTINUATION
        };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                buffer.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break Ok(()),
            Err(e) => break Err(CliError::Terminal(e.to_string())),
        };
        if buffer.is_empty()
            && let Some(command) = MetaCommand::parse(&line)
        {
            let _ = editor.add_history_entry(line.trim());
            match shell.meta(command) {
                Ok(Flow::Quit) => break Ok(()),
                Ok(Flow::Continue) => {}
                Err(CliError::OutputClosed) => break Err(CliError::OutputClosed),
                Err(e) => eprintln!("{}", e.report()),
            }
            continue;
        }
        if !buffer.is_empty() {
            buffer.push('\n');
        }
        buffer.push_str(&line);
        if is_blank(&buffer) {
            buffer.clear();
        } else if is_complete(&buffer) {
            let _ = editor.add_history_entry(buffer.trim());
            for statement in split_statements(&buffer) {
                match shell.execute(&statement.text) {
                    Ok(()) => {}
                    Err(CliError::OutputClosed) => break 'prompt Err(CliError::OutputClosed),
                    Err(e) => {
                        eprintln!("{}", e.report());
                        break;
                    }
                }
            }
            buffer.clear();
        }
    };
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    outcome
}

/// `~/.accelsql_history`, or `None` without a home directory.
fn history_path() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(|home| PathBuf::from(home).join(HISTORY_FILE))
}
