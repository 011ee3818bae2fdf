//! Where upstream parity files write their files: upstream's files `COPY … TO` and
//! `CREATE EXTERNAL TABLE … LOCATION` under the relative folder `test_files/scratch/<file
//! stem>/`, which upstream's runner makes empty before each file, in its own source tree.
//!
//! accelsql's runner keeps that folder under a temporary directory of this process instead
//! ([`upstream_root`]): statements have `test_files/scratch/` rewritten to that directory
//! ([`rewrite_sql`]), and results have the directory printed as upstream's path
//! (`WORKSPACE_ROOT/datafusion/sqllogictest`, see `upstream::normalize`), so that plans that
//! show file paths compare unchanged. accelsql's own suites use `$__TEST_DIR__` instead (see
//! the README).

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// The relative prefix upstream's files write under.
const SCRATCH: &str = "test_files/scratch/";

/// The folder that stands for upstream's `datafusion/sqllogictest` in this process (a
/// temporary directory, one per process so that concurrent runs do not share it).
pub fn upstream_root() -> &'static Path {
    static ROOT: LazyLock<PathBuf> = LazyLock::new(|| {
        std::env::temp_dir().join(format!("accelsql-upstream-{}", std::process::id()))
    });
    &ROOT
}

/// `upstream_root()` as it prints in plans: `/` separators, no leading `/` (object-store paths).
pub fn upstream_root_in_plans() -> &'static str {
    static ROOT: LazyLock<String> = LazyLock::new(|| {
        let root = upstream_root().to_string_lossy();
        let root = if cfg!(windows) {
            root.replace(std::path::MAIN_SEPARATOR, "/")
        } else {
            root.to_string()
        };
        root.trim_start_matches('/').to_string()
    });
    &ROOT
}

/// `sql` with upstream's relative scratch paths made absolute under [`upstream_root`].
pub fn rewrite_sql(sql: &str) -> String {
    if !sql.contains(SCRATCH) {
        return sql.to_string();
    }
    let root = upstream_root().to_string_lossy().replace('\\', "/");
    // `./test_files/scratch/…` and `test_files/scratch/…` alike.
    sql.replace(&format!("./{SCRATCH}"), SCRATCH)
        .replace(SCRATCH, &format!("{root}/{SCRATCH}"))
}

/// Makes the scratch folder of the upstream file at `path` empty (as upstream's
/// `setup_scratch_dir` does) and returns it.
pub fn setup(path: &Path) -> std::io::Result<PathBuf> {
    let stem = path.file_stem().unwrap_or(path.as_os_str());
    let dir = upstream_root().join(SCRATCH).join(stem);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_paths_are_made_absolute_once() {
        let root = upstream_root().display().to_string();
        let sql = "COPY t TO 'test_files/scratch/copy/x.parquet'";
        let once = rewrite_sql(sql);
        assert_eq!(
            once,
            format!("COPY t TO '{root}/test_files/scratch/copy/x.parquet'")
        );
        assert_eq!(rewrite_sql("SELECT 1"), "SELECT 1");
        assert!(
            upstream_root_in_plans()
                .ends_with(&format!("accelsql-upstream-{}", std::process::id()))
        );
    }
}
