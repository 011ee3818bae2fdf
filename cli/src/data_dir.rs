//! Where the shell and `accelsql serve` keep their tables, scripts, users and connections when
//! no `--data-dir` is given: `$ACCELSQL_DATA_DIR`, else the user's data folder
//! (`$XDG_DATA_HOME/accelsql`, `~/.local/share/accelsql`). `--in-memory` (or
//! `ACCELSQL_DATA_DIR=:memory:`) keeps them in memory, gone when the process ends.

use std::path::{Path, PathBuf};

/// The environment variable that names the default data directory (`:memory:` or empty: none).
pub(crate) const ENV: &str = "ACCELSQL_DATA_DIR";

/// The data directory a process uses: `flag` (`--data-dir`), none with `in_memory`, else the
/// default (see the module docs).
pub(crate) fn resolve(flag: Option<&Path>, in_memory: bool) -> Option<PathBuf> {
    if let Some(dir) = flag {
        return Some(dir.to_path_buf());
    }
    if in_memory {
        return None;
    }
    from_environment(
        std::env::var_os(ENV).map(PathBuf::from),
        std::env::var_os("XDG_DATA_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    )
}

/// The default from the environment's values of `ACCELSQL_DATA_DIR`, `XDG_DATA_HOME`, `HOME`.
fn from_environment(
    own: Option<PathBuf>,
    xdg: Option<PathBuf>,
    home: Option<PathBuf>,
) -> Option<PathBuf> {
    if let Some(dir) = own {
        return match dir.to_str() {
            Some("" | ":memory:") => None,
            _ => Some(dir),
        };
    }
    if let Some(xdg) = xdg.filter(|d| d.is_absolute()) {
        return Some(xdg.join("accelsql"));
    }
    home.filter(|d| d.is_absolute())
        .map(|h| h.join(".local").join("share").join("accelsql"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_then_the_environment_then_the_users_data_folder() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(resolve(Some(Path::new("/d")), true), p("/d"));
        assert_eq!(resolve(None, true), None);
        assert_eq!(
            from_environment(p("/own"), p("/xdg"), p("/home/u")),
            p("/own")
        );
        assert_eq!(
            from_environment(p(":memory:"), p("/xdg"), p("/home/u")),
            None
        );
        assert_eq!(from_environment(p(""), None, p("/home/u")), None);
        assert_eq!(
            from_environment(None, p("/xdg"), p("/home/u")),
            p("/xdg/accelsql")
        );
        assert_eq!(
            from_environment(None, p("relative"), p("/home/u")),
            p("/home/u/.local/share/accelsql")
        );
        assert_eq!(from_environment(None, None, None), None);
    }
}
