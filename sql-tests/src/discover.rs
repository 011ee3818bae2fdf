//! Which `.slt` files a run takes: the files and folders named (folders searched recursively),
//! less the ones an `excluded.txt` beside or above them lists.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The file in a folder of `.slt` files that lists the ones a folder run leaves out.
pub const EXCLUDED_FILE: &str = "excluded.txt";

/// The upstream DataFusion version whose `.slt` files `upstream/` holds.
pub const UPSTREAM_VERSION: &str = "datafusion-55.2.0";

/// This crate's folder: `sql-tests` when run from the repository root, `.` when run from the
/// crate (as `cargo test` does), else the folder it was built from.
pub fn crate_dir() -> PathBuf {
    let has_suites = |dir: &Path| dir.join("slt").is_dir() && dir.join("Cargo.toml").is_file();
    if has_suites(Path::new("sql-tests")) {
        return PathBuf::from("sql-tests");
    }
    if has_suites(Path::new(".")) {
        // Relative, so that reports print `slt/x.slt` rather than `./slt/x.slt`.
        return PathBuf::new();
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// accelsql's own suites: `sql-tests/slt`.
pub fn suite_dir() -> PathBuf {
    crate_dir().join("slt")
}

/// Upstream DataFusion's files: `sql-tests/upstream/datafusion-55.2.0`.
pub fn upstream_dir() -> PathBuf {
    crate_dir().join("upstream").join(UPSTREAM_VERSION)
}

/// The files a run takes and the ones it leaves out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Files to run, in the order given (each folder's files sorted).
    pub files: Vec<PathBuf>,
    /// Files an `excluded.txt` leaves out, with its reason.
    pub excluded: Vec<(PathBuf, String)>,
}

/// The entries of one `excluded.txt`: `relative/path.slt  reason` per line (two or more spaces
/// or a tab between them); `#` starts a comment line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exclusions {
    /// The folder the listed paths are relative to.
    pub root: PathBuf,
    /// Relative path (with `/`) → reason.
    pub entries: BTreeMap<String, String>,
}

impl Exclusions {
    /// Reads `dir/excluded.txt`; `None` when there is none.
    pub fn load(dir: &Path) -> io::Result<Option<Self>> {
        load_list(dir, EXCLUDED_FILE, Self::parse)
    }

    /// Parses the text of an `excluded.txt` whose paths are relative to `root`.
    pub fn parse(root: &Path, text: &str) -> Result<Self, String> {
        let mut entries = BTreeMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim_end();
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let split = line
                .find('\t')
                .or_else(|| line.find("  "))
                .ok_or_else(|| format!("line {}: write `path  reason`", number + 1))?;
            let (file, reason) = line.split_at(split);
            let reason = reason.trim();
            if reason.is_empty() {
                return Err(format!(
                    "line {}: {} has no reason",
                    number + 1,
                    file.trim()
                ));
            }
            entries.insert(file.trim().to_string(), reason.to_string());
        }
        Ok(Self {
            root: root.to_path_buf(),
            entries,
        })
    }

    /// The reason `file` is excluded, if it is.
    pub fn reason(&self, file: &Path) -> Option<&str> {
        let relative = file.strip_prefix(&self.root).ok()?;
        let key = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        self.entries.get(&key).map(String::as_str)
    }

    /// The nearest `excluded.txt` in `dir` or a folder above it.
    pub fn nearest(dir: &Path) -> io::Result<Option<Self>> {
        let mut at = Some(dir);
        while let Some(d) = at {
            if let Some(found) = Self::load(d)? {
                return Ok(Some(found));
            }
            at = d.parent().filter(|p| !p.as_os_str().is_empty());
        }
        Ok(None)
    }
}

/// Reads the list file `dir/name` with `parse` (given `dir`, to which its paths are relative,
/// and its text); `None` when there is none, an `InvalidData` error naming the file when it does
/// not parse.
pub fn load_list<T>(
    dir: &Path,
    name: &str,
    parse: impl FnOnce(&Path, &str) -> Result<T, String>,
) -> io::Result<Option<T>> {
    let path = dir.join(name);
    if !path.is_file() {
        return Ok(None);
    }
    let text = fs::read_to_string(&path)?;
    parse(dir, &text).map(Some).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// The `.slt` files under `paths`. A folder gives its `*.slt` files, recursively and sorted,
/// less those the nearest `excluded.txt` lists (unless `include_excluded`); a file named
/// explicitly always runs.
pub fn select(paths: &[PathBuf], include_excluded: bool) -> io::Result<Selection> {
    let mut selection = Selection::default();
    for path in paths {
        if path.is_file() {
            selection.files.push(path.clone());
            continue;
        }
        if !path.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such file or folder", path.display()),
            ));
        }
        let exclusions = if include_excluded {
            None
        } else {
            Exclusions::nearest(path)?
        };
        let mut found = Vec::new();
        collect_slt(path, &mut found)?;
        found.sort();
        for file in found {
            match exclusions.as_ref().and_then(|e| e.reason(&file)) {
                Some(reason) => selection.excluded.push((file, reason.to_string())),
                None => selection.files.push(file),
            }
        }
    }
    Ok(selection)
}

fn collect_slt(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_slt(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "slt") {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusions_match_relative_paths() {
        let e = Exclusions::parse(
            Path::new("up"),
            "# comment\narray/a.slt  needs parquet\nb.slt\tneeds avro\n",
        )
        .unwrap();
        assert_eq!(e.reason(Path::new("up/array/a.slt")), Some("needs parquet"));
        assert_eq!(e.reason(Path::new("up/b.slt")), Some("needs avro"));
        assert_eq!(e.reason(Path::new("up/c.slt")), None);
        assert!(Exclusions::parse(Path::new("."), "a.slt\n").is_err());
    }
}
