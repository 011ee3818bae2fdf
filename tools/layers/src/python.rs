//! A Python package as a file graph: its `import` and `from … import` statements between its
//! own modules, wherever they appear in a file (a lazy import inside a function is an edge too).
//!
//! `importlib.import_module(…)` and `__import__(…)` are not read: a name computed at run time
//! is no import structure.

use std::collections::BTreeMap;

use crate::graph::{Analysis, Edge, Sources};

/// One import statement: the module it reads from (dotted, relative to the package) and the
/// names it takes with the names they bind; no names for `import pkg.a.b`.
#[derive(Debug, PartialEq)]
struct Import {
    line: usize,
    base: Vec<String>,
    names: Vec<(String, String)>,
}

/// Builds the file graph of the package `package`; `sources` maps paths relative to its
/// directory to text.
pub(crate) fn analyse(sources: &Sources, package: &str) -> Analysis {
    let files: Vec<String> = sources
        .keys()
        .filter(|f| f.ends_with(".py"))
        .cloned()
        .collect();
    let modules: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (module_of(f), i))
        .collect();
    let imports: Vec<Vec<Import>> = files
        .iter()
        .map(|f| {
            let own = module_of(f);
            let home = if f == "__init__.py" || f.ends_with("/__init__.py") {
                own
            } else {
                own[..own.len().saturating_sub(1)].to_vec()
            };
            statements(&sources[f])
                .into_iter()
                .filter_map(|(line, s)| parse_import(&s, line, package, &home))
                .flatten()
                .collect()
        })
        .collect();
    let graph = Graph {
        files: &files,
        modules,
        imports: &imports,
    };
    let mut edges = Vec::new();
    for (from, file_imports) in imports.iter().enumerate() {
        let own = module_of(&files[from]);
        let init = files[from].ends_with("__init__.py");
        for import in file_imports {
            let targets: Vec<(Option<usize>, &str)> = if import.names.is_empty() {
                let found = (0..=import.base.len())
                    .rev()
                    .find_map(|n| graph.modules.get(&import.base[..n]).copied());
                vec![(found, import.base.last().map_or(package, String::as_str))]
            } else {
                import
                    .names
                    .iter()
                    .map(|(name, _)| (graph.target(&import.base, name, 0), name.as_str()))
                    .collect()
            };
            for (to, name) in targets {
                let Some(to) = to.filter(|&to| to != from) else {
                    continue;
                };
                // An `__init__.py` importing its own submodules is a facade.
                if !(init && module_of(&files[to]).starts_with(&own)) {
                    edges.push(Edge {
                        from,
                        to,
                        name: name.to_string(),
                        line: import.line,
                    });
                }
            }
        }
    }
    Analysis { files, edges }
}

/// The package's modules and their imports, for following `__init__.py` re-exports.
struct Graph<'a> {
    files: &'a [String],
    modules: BTreeMap<Vec<String>, usize>,
    imports: &'a [Vec<Import>],
}

impl Graph<'_> {
    /// The file `from BASE import NAME` reaches: the submodule `BASE.NAME` if there is one,
    /// else `BASE`, or the submodule its `__init__.py` takes `NAME` from.
    fn target(&self, base: &[String], name: &str, depth: usize) -> Option<usize> {
        let sub: Vec<String> = base.iter().cloned().chain([name.to_string()]).collect();
        if let Some(&file) = self.modules.get(&sub) {
            return Some(file);
        }
        let &file = self.modules.get(base)?;
        if depth < 8 && self.files[file].ends_with("__init__.py") {
            for import in self.imports[file]
                .iter()
                .filter(|i| i.base.starts_with(base))
            {
                if let Some((original, _)) = import.names.iter().find(|(_, bound)| bound == name) {
                    return self.target(&import.base, original, depth + 1);
                }
            }
        }
        Some(file)
    }
}

/// A file's module path in its package (`a/b.py` is `a.b`, `a/__init__.py` is `a`).
fn module_of(file: &str) -> Vec<String> {
    let stem = file.trim_end_matches(".py");
    let stem = stem
        .strip_suffix("__init__")
        .unwrap_or(stem)
        .trim_end_matches('/');
    stem.split('/')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// The logical lines of Python source, with the line each starts on: comments and string
/// contents dropped, bracketed and backslash continuations joined, `;` splitting statements.
fn statements(src: &str) -> Vec<(usize, String)> {
    let c: Vec<char> = src.chars().collect();
    let (mut out, mut current, mut start, mut line, mut depth, mut i) =
        (Vec::new(), String::new(), 1, 1, 0usize, 0);
    while i < c.len() {
        let ch = c[i];
        if !ch.is_whitespace() && current.trim().is_empty() {
            start = line;
        }
        match ch {
            '#' => {
                while i + 1 < c.len() && c[i + 1] != '\n' {
                    i += 1;
                }
            }
            '\'' | '"' => {
                let triple = c.get(i + 1) == Some(&ch) && c.get(i + 2) == Some(&ch);
                let quote = if triple { 3 } else { 1 };
                i += quote;
                while i < c.len()
                    && !(c[i] == ch
                        && (!triple || (c.get(i + 1) == Some(&ch) && c.get(i + 2) == Some(&ch))))
                {
                    let escape = c[i] == '\\';
                    line += usize::from(c.get(i + usize::from(escape)) == Some(&'\n'));
                    i += 1 + usize::from(escape);
                }
                i += quote - 1;
                current.push_str("\"\"");
            }
            '\\' if c.get(i + 1) == Some(&'\n') => {
                i += 1;
                line += 1;
            }
            '\n' | ';' if depth == 0 => {
                line += usize::from(ch == '\n');
                if !current.trim().is_empty() {
                    out.push((
                        start,
                        current.split_whitespace().collect::<Vec<_>>().join(" "),
                    ));
                }
                current.clear();
            }
            '\n' => {
                line += 1;
                current.push(' ');
            }
            _ => {
                depth = match ch {
                    '(' | '[' | '{' => depth + 1,
                    ')' | ']' | '}' => depth.saturating_sub(1),
                    _ => depth,
                };
                current.push(ch);
            }
        }
        i += 1;
    }
    if !current.trim().is_empty() {
        out.push((
            start,
            current.split_whitespace().collect::<Vec<_>>().join(" "),
        ));
    }
    out
}

/// The imports of one statement that stay inside `package`; `home` is the package the
/// importing file sits in (for relative imports).
fn parse_import(
    statement: &str,
    line: usize,
    package: &str,
    home: &[String],
) -> Option<Vec<Import>> {
    let inside = |dotted: &str| -> Option<Vec<String>> {
        let level = dotted.chars().take_while(|&c| c == '.').count();
        let rest = dotted[level..]
            .split('.')
            .filter(|s| !s.is_empty())
            .map(String::from);
        if level == 0 {
            let mut parts = rest;
            (parts.next()? == package).then(|| parts.collect())
        } else {
            let keep = home.len().checked_sub(level - 1)?;
            Some(home[..keep].iter().cloned().chain(rest).collect())
        }
    };
    let words = |list: &str| -> Vec<(String, String)> {
        let list = list.replace(['(', ')'], " ");
        let parts = list
            .split(',')
            .map(|n| n.split_whitespace().collect::<Vec<_>>());
        parts
            .filter_map(|w| match w.as_slice() {
                [name] => Some((name.to_string(), name.to_string())),
                [name, "as", alias] => Some((name.to_string(), alias.to_string())),
                _ => None,
            })
            .collect()
    };
    if let Some(rest) = statement.strip_prefix("from ") {
        let (module, names) = rest
            .replacen(".import ", ". import ", 1)
            .split_once(" import ")
            .map(|(m, n)| (m.trim().to_string(), n.to_string()))?;
        return Some(vec![Import {
            line,
            base: inside(&module)?,
            names: words(&names),
        }]);
    }
    let list = statement.strip_prefix("import ")?;
    Some(
        words(list)
            .into_iter()
            .filter_map(|(dotted, _)| {
                Some(Import {
                    line,
                    base: inside(&dotted)?,
                    names: Vec::new(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(files: &[(&str, &str)]) -> Vec<String> {
        let sources: Sources = files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect();
        let a = analyse(&sources, "pkg");
        let mut out: Vec<String> = a
            .edges
            .iter()
            .map(|e| {
                format!(
                    "{}:{} -> {}: {}",
                    a.files[e.from], e.line, a.files[e.to], e.name
                )
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn statements_drop_comments_and_strings_and_join_lines() {
        let src = "import os  # import pkg.a\n\"\"\"from . import x\nstill doc\"\"\"\nfrom .a import (\n    b,  # c\n    d,\n)\nx = 'import y'; import z\ny = 1 + \\\n  2\nw = 3";
        let got = statements(src);
        assert_eq!(got[0], (1, "import os".to_string()));
        assert_eq!(got[2], (4, "from .a import ( b, d, )".to_string()));
        assert_eq!(got[3], (8, "x = \"\"".to_string()));
        assert_eq!(got[4], (8, "import z".to_string()));
        assert_eq!(got[6], (11, "w = 3".to_string()));
    }

    #[test]
    fn relative_absolute_and_lazy_imports() {
        let got = edges(&[
            ("__init__.py", "from .a import A\nfrom . import sub\n"),
            (
                "a.py",
                "from . import b\nimport pkg.sub.c as c\nimport os, pkg.b\nfrom pkg import state\nA = 1\n",
            ),
            (
                "b.py",
                "def f():\n    from .a import A\n    from .sub.c import C\n",
            ),
            (
                "state.py",
                "from ._native import X\nfrom elsewhere import a\n",
            ),
            ("sub/__init__.py", "from .c import C as D\n"),
            (
                "sub/c.py",
                "from .. import a\nfrom ..b import f\nfrom . import D\nfrom pkg.sub import D\n",
            ),
        ]);
        assert_eq!(
            got,
            [
                "a.py:1 -> b.py: b",
                "a.py:2 -> sub/c.py: c",
                "a.py:3 -> b.py: b",
                "a.py:4 -> state.py: state",
                "b.py:2 -> a.py: A",
                "b.py:3 -> sub/c.py: C",
                "sub/c.py:1 -> a.py: a",
                "sub/c.py:2 -> b.py: f",
            ]
        );
    }

    #[test]
    fn names_from_an_init_follow_its_reexport() {
        let got = edges(&[
            ("__init__.py", "from .impl import thing as public\n"),
            ("impl.py", "thing = 1\n"),
            (
                "user.py",
                "from . import public\nfrom pkg import public as p\n",
            ),
        ]);
        assert_eq!(
            got,
            [
                "user.py:1 -> impl.py: public",
                "user.py:2 -> impl.py: public"
            ]
        );
    }
}
