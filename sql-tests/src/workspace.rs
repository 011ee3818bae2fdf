//! Upstream's source tree as its `.slt` files see it: they run in upstream's
//! `datafusion/sqllogictest` folder, write under the relative `test_files/scratch/<file stem>/`
//! (emptied before each file) and read data by relative paths into the repository:
//! `'../../testing/data/csv/aggregate_test_100.csv'` (apache/arrow-testing),
//! `'../../parquet-testing/data/…'` (apache/parquet-testing), `'../core/tests/data/…'`
//! (DataFusion's own test data).
//!
//! accelsql's runner builds that tree under a temporary directory of this process
//! ([`upstream_root`], standing for upstream's repository root): `datafusion/sqllogictest/` is
//! a real folder that holds the scratch folders, and every other entry links to the data files
//! vendored in `sql-tests/upstream/data/` ([`data_dir`], see its README). Statements have the
//! relative paths made absolute under that root ([`rewrite_sql`]), and results print the root
//! as upstream's `WORKSPACE_ROOT` (see `upstream::normalize`), so that plans that show file
//! paths compare unchanged. accelsql's own suites use `$__TEST_DIR__` instead (see the README).

use std::path::{Path, PathBuf};
use std::sync::{LazyLock, OnceLock};

/// The relative prefix upstream's files write under.
const SCRATCH: &str = "test_files/scratch/";

/// Upstream's `.slt` files run in this folder of the repository.
const SQLLOGICTEST: &str = "datafusion/sqllogictest";

/// The folder that stands for upstream's repository root in this process (a temporary
/// directory, one per process so that concurrent runs do not share it).
pub fn upstream_root() -> &'static Path {
    static ROOT: LazyLock<PathBuf> = LazyLock::new(|| {
        std::env::temp_dir().join(format!("accelsql-upstream-{}", std::process::id()))
    });
    &ROOT
}

/// The folder that stands for upstream's `datafusion/sqllogictest`, where files run.
pub fn sqllogictest_dir() -> PathBuf {
    upstream_root().join(SQLLOGICTEST)
}

/// The vendored data files, laid out as in upstream's repository: `sql-tests/upstream/data`.
pub fn data_dir() -> PathBuf {
    crate::discover::crate_dir().join("upstream").join("data")
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

/// The sqllogictest crate's own data folder, which its files name relative to it.
const DATA: &str = "data/";

/// `sql` with upstream's relative paths made absolute under [`upstream_root`]: the scratch
/// folder (`test_files/scratch/…`, `./test_files/scratch/…`), string literals naming the crate's
/// `data/` folder (`'data/x.parquet'`), and, in string literals, paths that climb out of
/// `datafusion/sqllogictest` (`'../core/…'`, `'../../testing/…'`).
pub fn rewrite_sql(sql: &str) -> String {
    if !sql.contains(SCRATCH) && !sql.contains("../") && !sql.contains(DATA) {
        return sql.to_string();
    }
    let root = upstream_root().to_string_lossy().replace('\\', "/");
    let here = format!("{root}/{SQLLOGICTEST}");
    // `./test_files/scratch/…` and `test_files/scratch/…` alike.
    let sql = sql
        .replace(&format!("./{SCRATCH}"), SCRATCH)
        .replace(SCRATCH, &format!("{here}/{SCRATCH}"))
        .replace(&format!("'{DATA}"), &format!("'{here}/{DATA}"));
    let mut out = String::with_capacity(sql.len() + 64);
    let mut rest = sql.as_str();
    while let Some(at) = rest.find("../") {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        // Only a literal that starts with the climb: `'../x'`, `"../../x"`.
        if !matches!(before.chars().last(), Some('\'' | '"')) {
            out.push_str("../");
            rest = &from[3..];
            continue;
        }
        let (path, tail) = if let Some(tail) = from.strip_prefix("../../") {
            (root.clone(), tail)
        } else {
            (format!("{root}/datafusion"), &from[3..])
        };
        out.push_str(&path);
        out.push('/');
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// `text` (a result cell or an error message) with the paths [`rewrite_sql`] made absolute
/// written back as the statement wrote them: `/…/datafusion/sqllogictest/x` as `x`,
/// `/…/datafusion/x` as `../x`, `/…/x` as `../../x`. DataFusion prints a path as written where it
/// echoes the statement (`output_url=…`, `table '…' not found`), and as an object-store path,
/// without the leading `/`, where it lists files (upstream's normalisation prints those under
/// `WORKSPACE_ROOT`); upstream's expected results have no path of the first kind under
/// `/WORKSPACE_ROOT`, so the two never mix.
pub fn as_written(text: &str) -> String {
    let root = format!("/{}", upstream_root_in_plans());
    if !text.contains(&root) {
        return text.to_string();
    }
    text.replace(&format!("{root}/{SQLLOGICTEST}/"), "")
        .replace(&format!("{root}/datafusion/"), "../")
        .replace(&format!("{root}/"), "../../")
}

/// Builds the tree under [`upstream_root`] once per process: `datafusion/sqllogictest/` and a
/// link to each entry of [`data_dir`] (`datafusion/`'s entries linked one by one beside
/// `sqllogictest`).
fn prepare() -> std::io::Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        // Those of earlier processes (a test binary has no exit hook to remove its own).
        accelsql_engine::udf_runtime::scratch::remove_abandoned_dirs(
            &std::env::temp_dir(),
            "accelsql-upstream-",
        );
        build_tree(upstream_root(), &data_dir()).map_err(|e| e.to_string())
    })
    .clone()
    .map_err(std::io::Error::other)
}

fn build_tree(root: &Path, data: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(root.join(SQLLOGICTEST))?;
    let data = std::path::absolute(data)?;
    if !data.is_dir() {
        return Ok(()); // files that read data then fail, naming the path
    }
    let link = |target: &Path, at: &Path| -> std::io::Result<()> {
        if at.symlink_metadata().is_ok() {
            return Ok(());
        }
        link_dir(target, at)
    };
    for entry in std::fs::read_dir(&data)? {
        let entry = entry?;
        let name = entry.file_name();
        if !entry.file_type()?.is_dir() {
            continue;
        }
        if name == "datafusion" {
            for inner in std::fs::read_dir(entry.path())? {
                let inner = inner?;
                if inner.file_name() == "sqllogictest" {
                    // A real folder (the scratch folders go there): link what it holds.
                    for data in std::fs::read_dir(inner.path())? {
                        let data = data?;
                        link(
                            &data.path(),
                            &root.join(SQLLOGICTEST).join(data.file_name()),
                        )?;
                    }
                    continue;
                }
                let at = root.join("datafusion").join(inner.file_name());
                link(&inner.path(), &at)?;
            }
        } else {
            link(&entry.path(), &root.join(&name))?;
        }
    }
    Ok(())
}

#[cfg(unix)]
fn link_dir(target: &Path, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}

#[cfg(windows)]
fn link_dir(target: &Path, at: &Path) -> std::io::Result<()> {
    std::os::windows::fs::symlink_dir(target, at)
}

/// Makes the scratch folder of the upstream file at `path` empty (as upstream's
/// `setup_scratch_dir` does), with the data tree beside it, and returns it.
pub fn setup(path: &Path) -> std::io::Result<PathBuf> {
    prepare()?;
    let stem = path.file_stem().unwrap_or(path.as_os_str());
    let dir = sqllogictest_dir().join(SCRATCH).join(stem);
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
            format!("COPY t TO '{root}/datafusion/sqllogictest/test_files/scratch/copy/x.parquet'")
        );
        assert_eq!(rewrite_sql("SELECT 1"), "SELECT 1");
        assert!(
            upstream_root_in_plans()
                .ends_with(&format!("accelsql-upstream-{}", std::process::id()))
        );
    }

    #[test]
    fn data_paths_climb_from_sqllogictest() {
        let root = upstream_root().display().to_string();
        assert_eq!(
            rewrite_sql("LOCATION '../../testing/data/csv/a.csv'"),
            format!("LOCATION '{root}/testing/data/csv/a.csv'")
        );
        assert_eq!(
            rewrite_sql("SELECT * FROM \"../core/tests/data/2.json\""),
            format!("SELECT * FROM \"{root}/datafusion/core/tests/data/2.json\"")
        );
        assert_eq!(
            rewrite_sql("LOCATION 'data/x.parquet'"),
            format!("LOCATION '{root}/datafusion/sqllogictest/data/x.parquet'")
        );
        // A `../` inside a literal, or outside one, is not a path of the tree.
        assert_eq!(rewrite_sql("SELECT 'a/../b'"), "SELECT 'a/../b'");
        assert_eq!(rewrite_sql("SELECT 1 -- ../x"), "SELECT 1 -- ../x");
    }

    #[test]
    fn paths_print_as_the_statement_wrote_them() {
        for written in [
            "'../../testing/data/csv/a.csv'",
            "'../core/tests/data/2.json'",
            "'test_files/scratch/copy/x.parquet'",
            "'data/x.parquet'",
        ] {
            let absolute = rewrite_sql(written);
            assert_ne!(absolute, written);
            assert_eq!(
                as_written(&format!("table {absolute} not found")),
                format!("table {written} not found")
            );
        }
        // A listed file (object-store path, no leading `/`) is left for WORKSPACE_ROOT.
        let listed = format!("{}/testing/a.csv", upstream_root_in_plans());
        assert_eq!(as_written(&listed), listed);
    }

    #[test]
    fn the_tree_links_the_data_beside_sqllogictest() {
        let base = std::env::temp_dir().join(format!("accelsql-tree-test-{}", std::process::id()));
        let data = base.join("data");
        std::fs::create_dir_all(data.join("testing/data")).unwrap();
        std::fs::create_dir_all(data.join("datafusion/core/tests")).unwrap();
        std::fs::write(data.join("testing/data/x.csv"), "a\n1\n").unwrap();
        let root = base.join("root");
        build_tree(&root, &data).unwrap();
        build_tree(&root, &data).unwrap(); // twice is fine
        assert!(root.join("datafusion/sqllogictest").is_dir());
        assert!(root.join("datafusion/core/tests").is_dir());
        assert_eq!(
            std::fs::read_to_string(root.join("testing/data/x.csv")).unwrap(),
            "a\n1\n"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
