//! Records of upstream files whose result accelsql changes on purpose: `differences.txt` beside
//! `excluded.txt` lists them one per line, `path/of/file.slt:LINE  reason` (the line where the
//! record starts; a path relative to the folder, `.slt.part` files included). The runner runs a
//! listed record and expects it to fail: a listed record that passes, or a line that names no
//! record, fails the file, so that the list stays exact.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// The file in a folder of upstream `.slt` files that lists the records accelsql changes.
pub const DIFFERENCES_FILE: &str = "differences.txt";

/// The entries of one `differences.txt`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Differences {
    /// The folder the listed paths are relative to.
    pub root: PathBuf,
    /// (relative path with `/`, line) → reason.
    pub entries: BTreeMap<(String, u32), String>,
}

impl Differences {
    /// The differences of the upstream file at `file`: those of the `differences.txt` in the
    /// nearest folder above it named `datafusion-…` inside a folder named `upstream`; empty when
    /// there is none.
    pub fn for_file(file: &Path) -> io::Result<Self> {
        let root = file.ancestors().skip(1).find(|dir| {
            dir.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("datafusion-"))
                && dir
                    .parent()
                    .and_then(Path::file_name)
                    .is_some_and(|n| n == "upstream")
        });
        match root {
            Some(root) => Ok(Self::load(root)?.unwrap_or_default()),
            None => Ok(Self::default()),
        }
    }

    /// Reads `dir/differences.txt`; `None` when there is none.
    pub fn load(dir: &Path) -> io::Result<Option<Self>> {
        crate::discover::load_list(dir, DIFFERENCES_FILE, Self::parse)
    }

    /// Parses the text of a `differences.txt` whose paths are relative to `root`.
    pub fn parse(root: &Path, text: &str) -> Result<Self, String> {
        let mut entries = BTreeMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim_end();
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let bad = || format!("line {}: write `path.slt:LINE  reason`", number + 1);
            let split = line
                .find('\t')
                .or_else(|| line.find("  "))
                .ok_or_else(bad)?;
            let (place, reason) = line.split_at(split);
            let (file, at) = place.trim().rsplit_once(':').ok_or_else(bad)?;
            let at: u32 = at.parse().map_err(|_| bad())?;
            let reason = reason.trim();
            if reason.len() < 10 {
                return Err(format!("line {}: {place} needs a reason", number + 1));
            }
            if entries
                .insert((file.to_string(), at), reason.to_string())
                .is_some()
            {
                return Err(format!("line {}: {place} is listed twice", number + 1));
            }
        }
        Ok(Self {
            root: root.to_path_buf(),
            entries,
        })
    }

    /// `file` relative to the root, with `/`, if it lies under it.
    pub fn key(&self, file: &Path) -> Option<String> {
        let relative = file.strip_prefix(&self.root).ok()?;
        Some(
            relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
        )
    }

    /// Why the record at `file:line` differs, if it is listed.
    pub fn reason(&self, file: &Path, line: u32) -> Option<&str> {
        let key = self.key(file)?;
        self.entries.get(&(key, line)).map(String::as_str)
    }

    /// The lines listed for `file` itself (not for the `.slt.part` files it includes).
    pub fn lines_of(&self, file: &Path) -> Vec<u32> {
        let Some(key) = self.key(file) else {
            return Vec::new();
        };
        self.entries
            .keys()
            .filter(|(f, _)| *f == key)
            .map(|(_, line)| *line)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_name_a_file_and_line() {
        let root = Path::new("up/datafusion-55.2.0");
        let d = Differences::parse(
            root,
            "# comment\nunnest.slt:42  accelsql plans repeated items\na/b.slt.part:7\tanother reason here\n",
        )
        .unwrap();
        assert_eq!(
            d.reason(&root.join("unnest.slt"), 42),
            Some("accelsql plans repeated items")
        );
        assert_eq!(d.reason(&root.join("unnest.slt"), 43), None);
        assert_eq!(
            d.reason(&root.join("a/b.slt.part"), 7),
            Some("another reason here")
        );
        assert_eq!(d.lines_of(&root.join("unnest.slt")), vec![42]);
        assert!(Differences::parse(root, "x.slt  no line number given\n").is_err());
        assert!(Differences::parse(root, "x.slt:1  short\n").is_err());
        assert!(
            Differences::parse(root, "x.slt:1  a reason given\nx.slt:1  a reason given\n").is_err()
        );
    }

    #[test]
    fn the_root_is_the_upstream_version_folder() {
        let dir = std::env::temp_dir().join(format!("accelsql-diff-{}", std::process::id()));
        let root = dir.join("upstream/datafusion-1.0.0");
        std::fs::create_dir_all(root.join("array")).unwrap();
        std::fs::write(
            root.join(DIFFERENCES_FILE),
            "array/x.slt:3  a reason given\n",
        )
        .unwrap();
        let d = Differences::for_file(&root.join("array/x.slt")).unwrap();
        assert_eq!(
            d.reason(&root.join("array/x.slt"), 3),
            Some("a reason given")
        );
        assert!(
            Differences::for_file(Path::new("slt/x.slt"))
                .unwrap()
                .entries
                .is_empty()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
