//! A crate's `src/` as a file graph: the module tree of each crate root, and the file that
//! defines what each import names.

mod lex;
mod parse;

use std::collections::BTreeMap;

use crate::graph::{Analysis, Edge, Sources};
use parse::{Mention, Use};

/// One module: a file's own, or an inline `mod name { … }` in it.
struct Module {
    parent: Option<usize>,
    file: usize,
    children: BTreeMap<String, usize>,
    /// Items defined here, with the file that defines them (a `#[macro_export]` macro sits at
    /// the root but is defined elsewhere).
    defs: BTreeMap<String, usize>,
    uses: Vec<Use>,
    mentions: Vec<Mention>,
}

/// What a path names.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Module(usize),
    /// An item, by the file that defines it.
    Item(usize),
    /// A name a `use` brings in from another crate.
    External,
}

/// A resolved path: its target, the module its last step looked in, and which segment named
/// the target.
struct Found {
    target: Target,
    via: usize,
    segment: usize,
}

/// The module tree of one crate root (module 0).
#[derive(Default)]
struct Tree {
    modules: Vec<Module>,
    /// Every `macro_rules!` name, with the files defining one (for macros in textual scope).
    macros: BTreeMap<String, Vec<usize>>,
}

/// Builds the file graph of a `src/` directory: `sources` maps paths relative to it to text.
/// Crate roots are `lib.rs`, `main.rs` and the binaries under `bin/`; files no root reaches
/// (and modules declared under `#[cfg(test)]`) are left out.
pub(crate) fn analyse(sources: &Sources) -> Analysis {
    let mut analysis = Analysis::default();
    let bins = sources.keys().filter(|f| {
        let rest = f.strip_prefix("bin/").unwrap_or_default();
        rest.ends_with(".rs")
            && (!rest.contains('/') || rest.matches('/').count() == 1 && rest.ends_with("/main.rs"))
    });
    for root in ["lib.rs", "main.rs"]
        .iter()
        .map(|s| s.to_string())
        .chain(bins.cloned())
        .filter(|r| sources.contains_key(r))
    {
        let mut tree = Tree::default();
        let dir = root
            .rfind('/')
            .map_or(String::new(), |i| root[..=i].to_string());
        tree.load(sources, &mut analysis.files, &root, None, "", &dir);
        tree.edges(&mut analysis.edges);
    }
    analysis
}

/// The index of `name` in `files`, added when new.
fn file_index(files: &mut Vec<String>, name: &str) -> usize {
    files.iter().position(|f| f == name).unwrap_or_else(|| {
        files.push(name.to_string());
        files.len() - 1
    })
}

/// `dir` joined with a relative `path`, `.` and `..` folded away.
fn join(dir: &str, path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in dir.split('/').chain(path.split('/')) {
        match part {
            "" | "." => {}
            ".." => _ = parts.pop(),
            p => parts.push(p),
        }
    }
    parts.join("/")
}

impl Tree {
    /// Loads the file `rel` as module `name` under `parent`; `dir` is where its `mod x;`
    /// declarations look for their files.
    fn load(
        &mut self,
        sources: &Sources,
        files: &mut Vec<String>,
        rel: &str,
        parent: Option<usize>,
        name: &str,
        dir: &str,
    ) {
        let Some(text) = sources.get(rel) else { return };
        let file = file_index(files, rel);
        let own_dir = rel.rfind('/').map_or("", |i| &rel[..=i]);
        let (mut ids, mut dirs, mut pending) =
            (Vec::<usize>::new(), Vec::<String>::new(), Vec::new());
        for body in parse::parse(text) {
            let (parent, name, dir) = match body.parent {
                None => (parent, name.to_string(), dir.to_string()),
                Some(p) => (
                    Some(ids[p]),
                    body.name.clone(),
                    format!("{}{}/", dirs[p], body.name),
                ),
            };
            let id = self.modules.len();
            if let Some(p) = parent {
                self.modules[p].children.insert(name, id);
            }
            let defs = body
                .defs
                .iter()
                .chain(body.macros.iter().map(|(m, _)| m))
                .map(|d| (d.clone(), file))
                .collect();
            self.modules.push(Module {
                parent,
                file,
                children: BTreeMap::new(),
                defs,
                uses: body.uses,
                mentions: body.mentions,
            });
            for (mac, exported) in body.macros {
                if exported {
                    self.modules[0].defs.insert(mac.clone(), file);
                }
                let files = self.macros.entry(mac).or_default();
                if !files.contains(&file) {
                    files.push(file);
                }
            }
            for (child, path) in body.mods {
                let (child_file, child_dir) = match path {
                    Some(path) => {
                        let f = join(if body.parent.is_none() { own_dir } else { &dir }, &path);
                        let d = f.rfind('/').map_or(String::new(), |i| f[..=i].to_string());
                        (f, d)
                    }
                    None if sources.contains_key(&format!("{dir}{child}.rs")) => {
                        (format!("{dir}{child}.rs"), format!("{dir}{child}/"))
                    }
                    None => (format!("{dir}{child}/mod.rs"), format!("{dir}{child}/")),
                };
                pending.push((child_file, id, child, child_dir));
            }
            ids.push(id);
            dirs.push(dir);
        }
        for (child_file, id, child, child_dir) in pending {
            self.load(sources, files, &child_file, Some(id), &child, &child_dir);
        }
    }

    /// What `name` means in module `m`: its own items and modules, then its `use` bindings,
    /// then its glob imports (flagged). `want_module` picks a module when a name is both.
    fn lookup(
        &self,
        m: usize,
        name: &str,
        want_module: bool,
        seen: &mut Vec<(usize, String)>,
    ) -> Option<(Target, bool)> {
        if seen.len() > 24 || seen.iter().any(|(s, n)| *s == m && n == name) {
            return None;
        }
        seen.push((m, name.to_string()));
        let module = &self.modules[m];
        let mut found: Vec<Target> = module
            .defs
            .get(name)
            .map(|&f| Target::Item(f))
            .into_iter()
            .collect();
        found.extend(module.children.get(name).map(|&c| Target::Module(c)));
        for u in module
            .uses
            .iter()
            .filter(|u| u.alias.as_deref() == Some(name))
        {
            found.push(
                self.resolve(m, &u.path, want_module, seen)
                    .map_or(Target::External, |f| f.target),
            );
        }
        let glob = found.is_empty();
        for u in module.uses.iter().filter(|u| glob && u.alias.is_none()) {
            if let Some(Found {
                target: Target::Module(g),
                ..
            }) = self.resolve(m, &u.path, true, seen)
            {
                found.extend(self.lookup(g, name, want_module, seen).map(|(t, _)| t));
            }
        }
        seen.pop();
        found.sort_by_key(|t| *t == Target::External);
        let pick = found
            .iter()
            .find(|t| matches!(t, Target::Module(_)) == want_module)
            .or(found.first());
        pick.map(|t| (*t, glob))
    }

    /// Resolves `path` as written in module `m`: module steps are taken while they lead to
    /// modules, the first item ends it (what follows is a variant or an associated item), and
    /// a name a module does not know is taken to be defined in that module's file. A relative
    /// path whose first name is unknown is external (`None`).
    fn resolve(
        &self,
        m: usize,
        path: &[String],
        want_module: bool,
        seen: &mut Vec<(usize, String)>,
    ) -> Option<Found> {
        let anchored = matches!(
            path.first()?.as_str(),
            "crate" | "$crate" | "self" | "super"
        );
        let mut cur = m;
        for (k, segment) in path.iter().enumerate() {
            let last = k + 1 == path.len();
            match segment.as_str() {
                "crate" | "$crate" if k == 0 => cur = 0,
                "self" => {}
                "super" => cur = self.modules[cur].parent?,
                name => match self.lookup(cur, name, want_module || !last, seen) {
                    Some((Target::Module(c), _)) if last => {
                        return Some(Found {
                            target: Target::Module(c),
                            via: cur,
                            segment: k,
                        });
                    }
                    Some((Target::Module(c), _)) => cur = c,
                    Some((Target::External, _)) => return None,
                    Some((target, _)) => {
                        return Some(Found {
                            target,
                            via: cur,
                            segment: k,
                        });
                    }
                    None if k == 0 && !anchored => return None,
                    None => {
                        return Some(Found {
                            target: Target::Item(self.modules[cur].file),
                            via: cur,
                            segment: k,
                        });
                    }
                },
            }
        }
        Some(Found {
            target: Target::Module(cur),
            via: cur,
            segment: path.len() - 1,
        })
    }

    /// Whether module `a` lies strictly inside module `m`.
    fn is_below(&self, mut a: usize, m: usize) -> bool {
        while let Some(p) = self.modules[a].parent {
            if p == m {
                return true;
            }
            a = p;
        }
        false
    }

    /// The edges of this tree, added to `out`.
    fn edges(&self, out: &mut Vec<Edge>) {
        let mut seen = Vec::new();
        for (m, module) in self.modules.iter().enumerate() {
            let from = module.file;
            let mut emit = |to: usize, name: &str, line: usize| {
                if to != from {
                    out.push(Edge {
                        from,
                        to,
                        name: name.to_string(),
                        line,
                    });
                }
            };
            // Names this module re-exports from below it: no edge, unless its own code uses them.
            let mut facade: BTreeMap<&str, usize> = BTreeMap::new();
            for u in &module.uses {
                let Some(found) = self.resolve(m, &u.path, u.alias.is_none(), &mut seen) else {
                    continue;
                };
                match found.target {
                    Target::Item(to) if u.public && self.is_below(found.via, m) => {
                        facade.extend(u.alias.as_deref().map(|alias| (alias, to)));
                    }
                    Target::Item(to) => emit(to, &u.path[found.segment], u.line),
                    // A private glob counts by the names the code uses (mentions, below).
                    Target::Module(g) if u.alias.is_none() && u.public && !self.is_below(g, m) => {
                        emit(self.modules[g].file, "*", u.line)
                    }
                    _ => {}
                }
            }
            let has_glob = module.uses.iter().any(|u| u.alias.is_none());
            for mention in &module.mentions {
                let (path, first) = (&mention.path, mention.path[0].as_str());
                let found = if matches!(first, "crate" | "$crate" | "self" | "super") {
                    self.resolve(m, path, false, &mut seen)
                } else if path.len() == 1
                    && !has_glob
                    && !mention.is_macro
                    && !facade.contains_key(first)
                {
                    None
                } else {
                    match self.lookup(m, first, path.len() > 1, &mut seen) {
                        Some((Target::Module(_), _)) => self.resolve(m, path, false, &mut seen),
                        Some((target, true)) => Some(Found {
                            target,
                            via: m,
                            segment: 0,
                        }),
                        Some(_) if facade.contains_key(first) => {
                            facade.get(first).map(|&to| Found {
                                target: Target::Item(to),
                                via: m,
                                segment: 0,
                            })
                        }
                        // Bound by a `use` (counted there) or defined right here.
                        Some(_) => None,
                        None if mention.is_macro => match self.macros.get(first).map(Vec::as_slice)
                        {
                            Some(&[file]) => Some(Found {
                                target: Target::Item(file),
                                via: m,
                                segment: 0,
                            }),
                            _ => None,
                        },
                        None => None,
                    }
                };
                if let Some(Found {
                    target: Target::Item(to),
                    segment,
                    ..
                }) = found
                {
                    emit(to, &path[segment], mention.line);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The edges of a synthetic `src/` as `from -> to: name` lines.
    fn edges(files: &[(&str, &str)]) -> Vec<String> {
        let sources: Sources = files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect();
        let a = analyse(&sources);
        let mut out: Vec<String> = a
            .edges
            .iter()
            .map(|e| format!("{} -> {}: {}", a.files[e.from], a.files[e.to], e.name))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn module_paths_follow_files_and_mod_rs() {
        let got = edges(&[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "mod c; use crate::b::d::X; pub fn f() { c::g(); }"),
            ("a/c.rs", "pub fn g() {}"),
            ("b/mod.rs", "pub mod d;"),
            ("b/d.rs", "pub struct X; use super::super::a::f;"),
        ]);
        assert_eq!(
            got,
            [
                "a.rs -> a/c.rs: g",
                "a.rs -> b/d.rs: X",
                "b/d.rs -> a.rs: f"
            ]
        );
    }

    #[test]
    fn inline_paths_and_module_aliases_count() {
        let got = edges(&[
            ("lib.rs", "mod udf; mod placement; mod error;"),
            ("udf/mod.rs", "mod call;"),
            ("udf/call.rs", "pub fn record() {}"),
            ("error.rs", "pub struct Oops;"),
            (
                "placement.rs",
                "use crate::udf;\nfn f() { crate::udf::call::record(); udf::call::record(); let e = crate::error::Oops; }",
            ),
        ]);
        assert_eq!(
            got,
            [
                "placement.rs -> error.rs: Oops",
                "placement.rs -> udf/call.rs: record"
            ]
        );
    }

    #[test]
    fn reexports_are_followed_and_facades_make_no_edge() {
        let got = edges(&[
            (
                "lib.rs",
                "mod udf; mod user; mod error;\npub use udf::Kernel;",
            ),
            (
                "udf/mod.rs",
                "mod scalar; mod set;\npub use scalar::{Scalar as Renamed, Kernel};\npub(crate) use set::*;\nuse crate::error::Error;\npub use crate::error::Code;\npub struct Own;",
            ),
            (
                "udf/scalar.rs",
                "pub struct Scalar; pub trait Kernel {} use crate::udf::Own; use crate::udf::Set;",
            ),
            ("udf/set.rs", "pub struct Set;"),
            ("error.rs", "pub struct Error; pub struct Code;"),
            ("user.rs", "use crate::{Kernel, udf::Renamed, udf::Code};"),
        ]);
        assert_eq!(
            got,
            [
                "udf/mod.rs -> error.rs: Code",
                "udf/mod.rs -> error.rs: Error",
                "udf/scalar.rs -> udf/mod.rs: Own",
                "udf/scalar.rs -> udf/set.rs: Set",
                "user.rs -> error.rs: Code",
                "user.rs -> udf/scalar.rs: Kernel",
                "user.rs -> udf/scalar.rs: Renamed",
            ]
        );
    }

    #[test]
    fn a_facade_name_its_own_code_uses_is_an_edge() {
        let got = edges(&[
            ("lib.rs", "mod udf;"),
            (
                "udf/mod.rs",
                "mod scalar;\npub(crate) use self::scalar::{as_accel as as_accel_udf, Unused};\nfn f() { as_accel_udf(); }",
            ),
            ("udf/scalar.rs", "pub fn as_accel() {} pub struct Unused;"),
        ]);
        assert_eq!(got, ["udf/mod.rs -> udf/scalar.rs: as_accel_udf"]);
    }

    #[test]
    fn inline_modules_resolve_super_and_self() {
        let got = edges(&[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "pub struct A;\nmod inner { use super::A; fn f() { self::g(); super::super::b::B::new(); } fn g() {} }",
            ),
            ("b.rs", "pub struct B;"),
        ]);
        assert_eq!(got, ["a.rs -> b.rs: B"]);
    }

    #[test]
    fn test_code_makes_no_edges() {
        let got = edges(&[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "pub struct A;\n#[cfg(test)]\nmod tests { use crate::b::B; }\n#[cfg(test)]\nmod helper;",
            ),
            ("a/helper.rs", "use crate::b::B;"),
            ("b.rs", "pub struct B; use crate::a::A;"),
        ]);
        assert_eq!(got, ["b.rs -> a.rs: A"]);
    }

    #[test]
    fn globs_count_by_the_names_used() {
        let got = edges(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::b::*;\nfn f() -> Used { helper() }"),
            (
                "b.rs",
                "pub struct Used; pub struct Unused; pub fn helper() {} pub use crate::c::Deep;",
            ),
            ("c.rs", "pub struct Deep; use crate::a::*;"),
        ]);
        assert_eq!(
            got,
            [
                "a.rs -> b.rs: Used",
                "a.rs -> b.rs: helper",
                "b.rs -> c.rs: Deep"
            ]
        );
    }

    #[test]
    fn macros_point_to_the_defining_file() {
        let got = edges(&[
            ("lib.rs", "#[macro_use] mod error; mod a; mod b; mod c;"),
            (
                "error.rs",
                "#[macro_export]\nmacro_rules! oops { () => { $crate::error::Kind } }\nmacro_rules! local { () => {} }\npub(crate) use local;\npub struct Kind;",
            ),
            ("a.rs", "use crate::oops; fn f() { oops!(); }"),
            ("b.rs", "fn f() { crate::oops!(); crate::error::local!(); }"),
            ("c.rs", "fn f() { local!(); }"),
        ]);
        assert_eq!(
            got,
            [
                "a.rs -> error.rs: oops",
                "b.rs -> error.rs: local",
                "b.rs -> error.rs: oops",
                "c.rs -> error.rs: local"
            ]
        );
    }

    #[test]
    fn binaries_and_path_attributes() {
        let got = edges(&[
            ("lib.rs", "#[path = \"impls/x.rs\"]\nmod x; mod y;"),
            ("impls/x.rs", "mod z; pub use z::Z; use crate::y::Y;"),
            ("impls/z.rs", "pub struct Z;"),
            ("y.rs", "pub struct Y; use crate::x::Z;"),
            (
                "bin/tool.rs",
                "mod opts; use my_crate::x::Z; use opts::Opts;",
            ),
            ("bin/opts.rs", "pub struct Opts;"),
        ]);
        assert_eq!(
            got,
            [
                "bin/tool.rs -> bin/opts.rs: Opts",
                "impls/x.rs -> y.rs: Y",
                "y.rs -> impls/z.rs: Z"
            ]
        );
    }

    #[test]
    fn external_paths_are_no_edges() {
        let got = edges(&[
            (
                "lib.rs",
                "mod a;\nuse std::sync::Arc; use datafusion::prelude::*;\npub use other_crate as oc;\npub use other_crate::Thing;\nfn f() { oc::x(); Vec::new(); }",
            ),
            (
                "a.rs",
                "use ::std::fmt; use crate::Thing; use crate::oc::y; fn g() { crate::Thing::new(); }",
            ),
        ]);
        assert!(got.is_empty(), "{got:?}");
    }
}
