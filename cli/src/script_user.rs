//! `--script-user`: the OS user a server's (or an executor's) script workers run as.

use accelsql_engine::udf_runtime::script::sandbox::{ScriptUser, run_scripts_as};

use crate::error::CliError;

/// The flag, flattened into `serve` and `cluster executor`.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct ScriptUserArgs {
    /// The OS user script workers run as (a name, or `#UID`). Default: `nobody` when this
    /// process runs as root, else this process's own user. `root` keeps root's (not advised: a
    /// script then has every right the server has outside the sandbox's denied paths). Only a
    /// process run as root can give its scripts another user.
    #[arg(long, value_name = "USER")]
    script_user: Option<String>,
}

impl ScriptUserArgs {
    /// Makes every script worker started from now on run as the chosen user.
    pub(crate) fn apply(&self) -> Result<(), CliError> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let name = match (&self.script_user, root) {
            (Some(name), _) => name.as_str(),
            (None, true) => "nobody",
            (None, false) => return Ok(()),
        };
        let user = match ScriptUser::lookup(name) {
            Ok(user) => user,
            // No `nobody` in this system's user database: its customary id.
            Err(_) if self.script_user.is_none() => ScriptUser::lookup("#65534")
                .map_err(|e| CliError::Terminal(format!("--script-user: {e}")))?,
            Err(e) => return Err(CliError::Terminal(format!("--script-user: {e}"))),
        };
        // SAFETY: geteuid has no preconditions.
        let own = unsafe { libc::geteuid() };
        if user.uid == own {
            run_scripts_as(None);
            return Ok(());
        }
        if !root {
            return Err(CliError::Terminal(format!(
                "--script-user {name}: only a process run as root can run its scripts as another \
                 OS user"
            )));
        }
        match can_run_python(&user) {
            Ok(()) => run_scripts_as(Some(user)),
            // Given by the operator: a server whose scripts cannot start is of no use.
            Err(why) if self.script_user.is_some() => {
                return Err(CliError::Terminal(format!(
                    "--script-user {name}: {why}; install Python where that user may run it, or \
                     name another user"
                )));
            }
            // The default: say so loudly and keep root's (as before this flag existed).
            Err(why) => {
                eprintln!(
                    "accelsql: WARNING: script workers run as root: the unprivileged user \
                     {name} {why} (install Python where others may run it, e.g. /usr/bin, or \
                     give --script-user)"
                );
                run_scripts_as(None);
            }
        }
        Ok(())
    }
}

/// Whether `user` can start the `python3` scripts run with (found on `PATH` as the workers
/// find it); the error says why not.
fn can_run_python(user: &ScriptUser) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let python = accelsql_engine::udf_runtime::script::find_python3()
        .map_err(|e| format!("has no Python to run: {e}"))?;
    let status = std::process::Command::new(&python)
        .args(["-c", "import sys"])
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .gid(user.gid)
        .uid(user.uid)
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("cannot run {} ({s})", python.display())),
        Err(e) => Err(format!("cannot run {}: {e}", python.display())),
    }
}
