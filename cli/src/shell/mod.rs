//! The SQL shell: runs `-c` text, a script file, piped standard input or the interactive prompt
//! through one session, a statement at a time, printing each result.

mod args;
mod format;
mod interrupt;
mod meta;
mod repl;
mod session;

use std::io::{IsTerminal, Read};
use std::path::Path;
use std::process::ExitCode;

pub(crate) use self::args::ShellArgs;
pub(crate) use self::format::OutputFormat;
use self::session::Shell;
use crate::error::CliError;

/// Runs the shell as `args` ask: `-c`, `-f`, piped standard input, or interactively on a terminal.
pub(crate) fn run(args: &ShellArgs) -> Result<ExitCode, CliError> {
    match run_input(args) {
        // The reader of our output has gone (`accelsql … | head`): stop quietly, as `cat` would.
        Ok(()) | Err(CliError::OutputClosed) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e),
    }
}

fn run_input(args: &ShellArgs) -> Result<(), CliError> {
    let shell = Shell::start(args)?;
    if let Some(sql) = &args.sql {
        shell.run_script(sql, None)?;
    } else if let Some(path) = &args.file {
        let text = std::fs::read_to_string(path).map_err(|source| CliError::Script {
            path: path.clone(),
            source,
        })?;
        shell.run_script(&text, Some(&path.display().to_string()))?;
    } else if std::io::stdin().is_terminal() {
        repl::run(&shell)?;
    } else {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|source| CliError::Script {
                path: Path::new("<stdin>").to_path_buf(),
                source,
            })?;
        shell.run_script(&text, Some("<stdin>"))?;
    }
    Ok(())
}
