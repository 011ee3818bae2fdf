//! Keeps the import structure honest: no import cycles between files, no imports from a layer
//! above, over the source trees and layers declared in `tools/layers/layers.txt`.
//!
//! # What counts as an edge (file A imports something file B defines)
//! Rust, per crate root (`lib.rs`, `main.rs`, `bin/*.rs`), the module tree followed through
//! `mod` declarations (`#[path]` honoured, inline `mod x { … }` tracked):
//! - every `use` leaf that names an item of this crate, resolved to the file that *defines* it:
//!   `pub use` re-exports (also renamed and glob ones) are followed, recursively;
//! - paths written in code that start with `crate::`, `self::`, `super::`, `$crate::`, a child
//!   module or a module brought in by `use` (`use crate::udf; udf::call::record()`);
//! - names a glob import (`use super::*`) brings in, where the code names them;
//! - macros: `#[macro_export]` ones by their root path, others through `use` or, when called
//!   bare (textual scope), by the one file defining a `macro_rules!` of that name.
//!
//! Not edges: a `pub use` that re-exports the module's own descendants (a facade: `mod.rs`
//! and `lib.rs` re-exporting their children; but where the module's own code then calls a
//! name it re-exports, that call is an edge), `use` of a module itself (what is used through
//! it counts), `mod` declarations, paths into other crates (also through a `pub use` of
//! another crate's item), and anything under `#[cfg(test)]` (test modules, items, and
//! `#[cfg(test)] mod x;` files may reach up: they are not read at all).
//!
//! Python, within one package: `import pkg.a`, `from pkg.a import b`, `from .a import b`,
//! `from . import a`, `from .. import a`, anywhere in a file (lazy imports inside functions and
//! under `if TYPE_CHECKING:` too); `from .a import b` goes to the submodule `a.b` if there is
//! one, else to `a` or to the submodule its `__init__.py` takes `b` from. An `__init__.py`
//! importing its own submodules is a facade. `importlib.import_module` and `__import__` are
//! not read, nor imports after `:` on one line (`if x: import y`).

mod error;
mod graph;
mod python;
mod report;
mod rust;
pub mod table;

use std::collections::BTreeSet;
use std::path::Path;

pub use error::Error;
use graph::Sources;
pub use report::Report;
use table::{Lang, Package};

/// Checks the workspace at `root` against its `tools/layers/layers.txt`, and that the table
/// lists the `src/` of every member in the root `Cargo.toml`.
pub fn check_workspace(root: &Path) -> Result<Report, Error> {
    let packages = table::parse(&read(&root.join("tools/layers/layers.txt"))?)?;
    let mut report = check(root, &packages)?;
    for member in members(&read(&root.join("Cargo.toml"))?) {
        let src = format!("{member}/src");
        if root.join(&src).is_dir()
            && !packages
                .iter()
                .any(|p| p.lang == Lang::Rust && p.dir == src)
        {
            report.unlisted.push(format!("{src} (add `rust {src}`)"));
        }
    }
    Ok(report)
}

/// Checks each package of the table, its directory relative to `root`.
pub fn check(root: &Path, packages: &[Package]) -> Result<Report, Error> {
    let mut report = Report::default();
    for package in packages {
        let (ext, name) = match package.lang {
            Lang::Rust => (".rs", ""),
            Lang::Python => (".py", package.dir.rsplit('/').next().unwrap_or_default()),
        };
        let mut sources = Sources::new();
        read_tree(&root.join(&package.dir), "", ext, &mut sources)?;
        let analysis = match package.lang {
            Lang::Rust => rust::analyse(&sources),
            Lang::Python => python::analyse(&sources, name),
        };
        let layers = match package.layers.len() {
            0 => "cycles only".to_string(),
            n => format!("{n} layers"),
        };
        let edges: BTreeSet<(usize, usize)> =
            analysis.edges.iter().map(|e| (e.from, e.to)).collect();
        report.summary.push(format!(
            "{}: {} files, {} edges, {layers}",
            package.dir,
            analysis.files.len(),
            edges.len()
        ));
        graph::check(package, &analysis, &mut report);
    }
    Ok(report)
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error(format!("cannot read {}: {e}", path.display())))
}

/// Reads every file ending in `ext` under `dir` into `out`, keyed by `prefix` + its path.
fn read_tree(dir: &Path, prefix: &str, ext: &str, out: &mut Sources) -> Result<(), Error> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error(format!("cannot list {}: {e}", dir.display())))?;
    for entry in entries {
        let path = entry
            .map_err(|e| Error(format!("cannot list {}: {e}", dir.display())))?
            .path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_dir() {
            read_tree(&path, &format!("{prefix}{name}/"), ext, out)?;
        } else if name.ends_with(ext) {
            out.insert(format!("{prefix}{name}"), read(&path)?);
        }
    }
    Ok(())
}

/// The `members` of a `[workspace]` in Cargo.toml text.
fn members(cargo_toml: &str) -> Vec<String> {
    let Some(start) = cargo_toml.find("members") else {
        return Vec::new();
    };
    let list = &cargo_toml[start..];
    let list = &list[..list.find(']').unwrap_or(list.len())];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_read_from_the_workspace_list() {
        let toml = "[workspace]\nresolver = \"3\"\nmembers = [\n    \"cli\",\n    \"tools/layers\", # x\n]\n[workspace.package]\nversion = \"0.1.0\"";
        assert_eq!(members(toml), ["cli", "tools/layers"]);
    }

    #[test]
    fn a_synthetic_tree_on_disk_is_checked_with_its_layers() {
        let root = std::env::temp_dir().join(format!("accelsql-layers-{}", std::process::id()));
        let files = [
            ("e/src/lib.rs", "mod core; mod udf; pub use udf::Udf;"),
            (
                "e/src/core/mod.rs",
                "mod error; pub use error::Error; use crate::udf::Udf;",
            ),
            (
                "e/src/core/error.rs",
                "pub struct Error; fn f() -> crate::Udf { crate::Udf }",
            ),
            ("e/src/udf.rs", "pub struct Udf; use crate::core::Error;"),
            ("p/pkg/__init__.py", "from .a import x\n"),
            ("p/pkg/a.py", "from .b import y\nx = 1\n"),
            ("p/pkg/b.py", "def f():\n    from .a import x\n"),
        ];
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let packages = table::parse(
            "rust e/src\nlayer core core/\nlayer udf udf.rs\nlayer facade lib.rs\npython p/pkg",
        )
        .unwrap();
        let report = check(&root, &packages).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let upward = [
            "e/src/core/mod.rs:1: imports Udf from layer udf (above layer core)",
            "e/src/core/error.rs:1: imports Udf from layer udf (above layer core)",
        ];
        assert_eq!(report.upward, upward);
        assert_eq!(report.cycles.len(), 2, "{report}");
        assert!(
            report.cycles[0].starts_with("e/src: core/error.rs -> udf.rs -> core/error.rs"),
            "{report}"
        );
        assert!(
            report.cycles[1].starts_with("p/pkg: a.py -> b.py -> a.py"),
            "{report}"
        );
        assert!(
            report
                .to_string()
                .contains("e/src: 4 files, 3 edges, 3 layers"),
            "{report}"
        );
    }
}
