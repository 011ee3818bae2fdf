//! The declared table (`layers.txt`): which source trees to check, and the layers of each.

use crate::error::Error;

/// The language of a source tree, which says how its imports are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// A crate's `src/` directory.
    Rust,
    /// A Python package directory (its name is the package's name).
    Python,
}

/// One source tree of the table: checked for cycles, and for upward imports when it has layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// How its files are read.
    pub lang: Lang,
    /// Its directory, relative to the workspace root (`engine/src`).
    pub dir: String,
    /// Its layers, lowest first; empty when only cycles are checked.
    pub layers: Vec<Layer>,
}

/// One layer: the files it holds, by prefix relative to the package directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// The layer's name, as reports give it.
    pub name: String,
    /// Folders (ending in `/`) or files, relative to the package directory.
    pub prefixes: Vec<String>,
}

impl Package {
    /// The index of the layer holding `file` (relative to the package directory): the one with
    /// the longest matching prefix, or `None` when no prefix matches.
    pub fn layer_of(&self, file: &str) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for (index, layer) in self.layers.iter().enumerate() {
            for prefix in &layer.prefixes {
                let hit = if prefix.ends_with('/') {
                    file.starts_with(prefix.as_str())
                } else {
                    file == prefix
                };
                if hit && best.is_none_or(|(len, _)| prefix.len() > len) {
                    best = Some((prefix.len(), index));
                }
            }
        }
        best.map(|(_, index)| index)
    }
}

/// Parses the table: `rust DIR` or `python DIR` opens a package, `layer NAME PREFIX…` adds a
/// layer to the package above it; `#` starts a comment, blank lines are ignored.
pub fn parse(text: &str) -> Result<Vec<Package>, Error> {
    let mut packages: Vec<Package> = Vec::new();
    for (number, raw) in text.lines().enumerate() {
        let fail = |what: String| Error(format!("layers.txt:{}: {what}", number + 1));
        let words: Vec<&str> = raw
            .split('#')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        match words.as_slice() {
            [] => {}
            [kind @ ("rust" | "python"), dir] => {
                let dir = dir.trim_end_matches('/').to_string();
                if packages.iter().any(|p| p.dir == dir) {
                    return Err(fail(format!("{dir} is listed twice")));
                }
                let lang = if *kind == "rust" {
                    Lang::Rust
                } else {
                    Lang::Python
                };
                packages.push(Package {
                    lang,
                    dir,
                    layers: Vec::new(),
                });
            }
            ["layer", name, prefixes @ ..] if !prefixes.is_empty() => {
                let Some(package) = packages.last_mut() else {
                    return Err(fail(
                        "a layer needs a `rust DIR` or `python DIR` line above it".into(),
                    ));
                };
                if package.layers.iter().any(|l| l.name == *name) {
                    return Err(fail(format!("layer {name} is declared twice")));
                }
                let taken = package
                    .layers
                    .iter()
                    .flat_map(|l| &l.prefixes)
                    .find(|p| prefixes.contains(&p.as_str()));
                if let Some(prefix) = taken {
                    return Err(fail(format!("{prefix} is already in another layer")));
                }
                let prefixes = prefixes.iter().map(|p| p.to_string()).collect();
                package.layers.push(Layer {
                    name: name.to_string(),
                    prefixes,
                });
            }
            _ => {
                return Err(fail(format!(
                    "expected `rust DIR`, `python DIR` or `layer NAME PREFIX…`, found `{}`",
                    raw.trim()
                )));
            }
        }
    }
    Ok(packages)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "# the engine\nrust engine/src/\n  layer core core/ error.rs  # lowest\n  layer udf udf/\n  layer facade lib.rs core/special/\n\npython udf-runtime/python/accelsql_worker\n";

    #[test]
    fn parses_packages_and_layers() {
        let packages = parse(TABLE).unwrap();
        assert_eq!(packages.len(), 2);
        assert_eq!(packages[0].dir, "engine/src");
        assert_eq!(packages[0].lang, Lang::Rust);
        assert_eq!(packages[0].layers[0].prefixes, ["core/", "error.rs"]);
        assert_eq!(packages[1].lang, Lang::Python);
        assert!(packages[1].layers.is_empty());
    }

    #[test]
    fn longest_prefix_wins_and_files_match_whole() {
        let engine = &parse(TABLE).unwrap()[0];
        assert_eq!(engine.layer_of("core/a.rs"), Some(0));
        assert_eq!(engine.layer_of("core/special/b.rs"), Some(2));
        assert_eq!(engine.layer_of("error.rs"), Some(0));
        assert_eq!(engine.layer_of("error.rs.bak"), None);
        assert_eq!(engine.layer_of("udf.rs"), None);
    }

    #[test]
    fn rejects_malformed_lines() {
        assert!(
            parse("layer core core/")
                .unwrap_err()
                .0
                .contains("layers.txt:1")
        );
        assert!(parse("rust a\nlayer x\n").is_err());
        assert!(parse("rust a\nrust a/\n").is_err());
        assert!(parse("rust a\nlayer x a.rs\nlayer x b.rs\n").is_err());
        assert!(parse("rust a\nlayer x a.rs\nlayer y a.rs\n").is_err());
        assert!(parse("cobol a\n").is_err());
    }
}
