//! One Rust file's module bodies: the items each defines, its `mod`, `use` and path mentions,
//! with everything under `#[cfg(test)]` left out.

use super::lex::{Tok, Token, tokenize};

/// The module body of the file itself (index 0) or of an inline `mod name { … }` in it.
#[derive(Debug, Default)]
pub(crate) struct Body {
    /// The inline module's name (empty for the file's own body).
    pub(crate) name: String,
    /// The body this one is declared in.
    pub(crate) parent: Option<usize>,
    /// Items defined here: fn, struct, enum, union, trait, type, const, static.
    pub(crate) defs: Vec<String>,
    /// `macro_rules!` macros defined here; `true` for a `#[macro_export]` one (which lives at
    /// the crate root).
    pub(crate) macros: Vec<(String, bool)>,
    /// `mod name;` declarations: the name and its `#[path]`, if any.
    pub(crate) mods: Vec<(String, Option<String>)>,
    /// Every leaf of every `use` tree (also those inside functions).
    pub(crate) uses: Vec<Use>,
    /// Paths written in code (`a::b::c`), bare identifiers and macro names (`name!`).
    pub(crate) mentions: Vec<Mention>,
}

/// One leaf of a `use` tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Use {
    /// The full path, `self` leaves folded into their parent (`a::{self}` is `a`).
    pub(crate) path: Vec<String>,
    /// The name it binds, `None` for a glob.
    pub(crate) alias: Option<String>,
    /// Whether it is a `pub`/`pub(…)` re-export.
    pub(crate) public: bool,
    /// The line of the leaf.
    pub(crate) line: usize,
}

/// A path, identifier or macro name written in code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mention {
    /// The segments (one for a bare identifier).
    pub(crate) path: Vec<String>,
    /// Whether it is followed by `!` (a macro call).
    pub(crate) is_macro: bool,
    /// Its line.
    pub(crate) line: usize,
}

/// What an open bracket belongs to.
#[derive(Clone, Copy, PartialEq)]
enum Frame {
    /// The body of an inline module.
    Body(usize),
    /// Any other `{ … }`.
    Block,
    /// `( … )` or `[ … ]`.
    Paren,
}

impl Frame {
    /// The inline module body this bracket opens, if it opens one.
    fn body(&self) -> Option<usize> {
        match self {
            Frame::Body(b) => Some(*b),
            _ => None,
        }
    }
}

/// A `#[cfg(test)]` item being skipped: the bracket depth it sits at, and whether only a `;`
/// ends it (`const`, `static`, `type`, `use`, `let`: their `{ … }` is part of the item).
struct Gate {
    depth: usize,
    semi_only: Option<bool>,
}

const ITEMS: [&str; 8] = [
    "fn", "struct", "enum", "union", "trait", "type", "const", "static",
];

/// Parses one file into its module bodies (index 0 is the file's own).
pub(crate) fn parse(src: &str) -> Vec<Body> {
    let t = tokenize(src);
    let is = |i: usize, tok: Tok| t.get(i).is_some_and(|x| x.tok == tok);
    let ident = |i: usize| match t.get(i).map(|x| &x.tok) {
        Some(Tok::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    let mut bodies = vec![Body::default()];
    let (mut frames, mut gate, mut next_body) = (Vec::<Frame>::new(), None::<Gate>, None);
    let (mut path_attr, mut export) = (None::<String>, false);
    let mut i = 0;
    while i < t.len() {
        let body = frames.iter().rev().find_map(Frame::body).unwrap_or(0);
        let item_scope = matches!(frames.last(), None | Some(Frame::Body(_)));
        match &t[i].tok {
            Tok::Punct(open @ ('{' | '(' | '[')) => {
                let frame = match (open, next_body.take()) {
                    ('{', Some(b)) => Frame::Body(b),
                    ('{', None) => Frame::Block,
                    _ => Frame::Paren,
                };
                if let Some(g) = gate
                    .as_mut()
                    .filter(|g| *open == '{' && g.depth == frames.len())
                {
                    g.semi_only.get_or_insert(false);
                }
                frames.push(frame);
            }
            Tok::Punct(close @ ('}' | ')' | ']')) => {
                frames.pop();
                if *close == '}' {
                    (path_attr, export) = (None, false);
                }
                let ends = |g: &Gate| {
                    frames.len() < g.depth
                        || (*close == '}' && frames.len() == g.depth && g.semi_only == Some(false))
                };
                if gate.as_ref().is_some_and(ends) {
                    gate = None;
                }
            }
            Tok::Punct(sep @ (';' | ',')) => {
                (path_attr, export) = (None, false);
                let block = frames.last() == Some(&Frame::Block);
                if gate
                    .as_ref()
                    .is_some_and(|g| g.depth == frames.len() && (*sep == ';' || block))
                {
                    gate = None;
                }
            }
            Tok::Punct('#')
                if is(i + 1, Tok::Punct('['))
                    || (is(i + 1, Tok::Punct('!')) && is(i + 2, Tok::Punct('['))) =>
            {
                let end = closing(&t, i + usize::from(is(i + 1, Tok::Punct('!'))) + 1);
                let attr: Vec<&Tok> = t[i..end].iter().map(|x| &x.tok).collect();
                let word = |w: &str| attr.iter().any(|x| matches!(x, Tok::Ident(s) if s == w));
                if word("cfg") && word("test") && !word("not") && !word("any") && gate.is_none() {
                    gate = Some(Gate {
                        depth: frames.len(),
                        semi_only: None,
                    });
                }
                if let [.., Tok::Ident(p), Tok::Punct('='), Tok::Str(s), _] = attr.as_slice() {
                    path_attr = (p == "path").then(|| s.clone()).or(path_attr);
                }
                export |= word("macro_export");
                i = end;
                continue;
            }
            _ if gate.is_some() => {
                if let (Some(g), Some(word)) = (gate.as_mut(), ident(i)) {
                    let fn_next =
                        matches!(ident(i + 1), Some("fn" | "unsafe" | "async" | "extern"));
                    if g.semi_only.is_none()
                        && matches!(word, "const" | "static" | "type" | "use" | "let")
                        && !fn_next
                    {
                        g.semi_only = Some(true);
                    }
                }
            }
            Tok::Ident(word)
                if !is(i.wrapping_sub(1), Tok::PathSep)
                    && !is(i.wrapping_sub(1), Tok::Punct('.')) =>
            {
                match word.as_str() {
                    "use" => {
                        let public = visibility_before(&t, i);
                        let mut leaves = Vec::new();
                        i = use_tree(&t, i + 1, Vec::new(), &mut leaves);
                        let uses = leaves.into_iter().map(|(path, alias, line)| Use {
                            path,
                            alias,
                            public,
                            line,
                        });
                        bodies[body].uses.extend(uses);
                        continue;
                    }
                    "mod" if ident(i + 1).is_some() => {
                        let name = ident(i + 1).unwrap_or_default().to_string();
                        if is(i + 2, Tok::Punct('{')) {
                            next_body = Some(bodies.len());
                            bodies.push(Body {
                                name,
                                parent: Some(body),
                                ..Body::default()
                            });
                        } else {
                            bodies[body].mods.push((name, path_attr.take()));
                        }
                        i += 2;
                        continue;
                    }
                    "macro_rules" if is(i + 1, Tok::Punct('!')) => {
                        if let Some(name) = ident(i + 2).filter(|_| item_scope) {
                            bodies[body].macros.push((name.to_string(), export));
                        }
                        export = false;
                        i += 3;
                        continue;
                    }
                    w if ITEMS.contains(&w) && item_scope => {
                        let mut name = ident(i + 1);
                        if matches!(name, Some("mut")) {
                            name = ident(i + 2);
                        }
                        let qualifier =
                            matches!(name, Some("fn" | "unsafe" | "async" | "extern" | "_"));
                        let contextual = w == "union"
                            && !matches!(t.get(i + 2).map(|x| &x.tok), Some(Tok::Punct('{' | '<')));
                        if let Some(name) = name.filter(|_| !qualifier && !contextual) {
                            bodies[body].defs.push(name.to_string());
                        }
                    }
                    _ => {
                        let mut path = vec![word.clone()];
                        while is(i + 1, Tok::PathSep) && ident(i + 2).is_some() {
                            path.push(ident(i + 2).unwrap_or_default().to_string());
                            i += 2;
                        }
                        let is_macro = is(i + 1, Tok::Punct('!')) && !is(i + 2, Tok::Punct('='));
                        bodies[body].mentions.push(Mention {
                            path,
                            is_macro,
                            line: t[i].line,
                        });
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    bodies
}

/// Whether the item whose keyword is at `i` is `pub` or `pub(…)`.
fn visibility_before(t: &[Token], i: usize) -> bool {
    let mut j = i;
    if j > 0 && t[j - 1].tok == Tok::Punct(')') {
        while j > 0 && t[j - 1].tok != Tok::Punct('(') {
            j -= 1;
        }
        j = j.saturating_sub(1);
    }
    j > 0 && t[j - 1].tok == Tok::Ident("pub".into())
}

/// The index after the bracket that closes the one at `open`.
fn closing(t: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, tok) in t.iter().enumerate().skip(open) {
        match tok.tok {
            Tok::Punct('{' | '(' | '[') => depth += 1,
            Tok::Punct('}' | ')' | ']') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 {
            return j + 1;
        }
    }
    t.len()
}

/// Reads one use tree starting at `i` under `prefix`, pushing its leaves (path, alias, line);
/// returns the index after it (after the `;` for a whole `use` item).
fn use_tree(
    t: &[Token],
    mut i: usize,
    mut path: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>, usize)>,
) -> usize {
    while let Some(token) = t.get(i) {
        match &token.tok {
            Tok::PathSep => path.push("::".into()),
            Tok::Ident(s) => {
                path.push(s.clone());
                if t.get(i + 1).is_some_and(|x| x.tok == Tok::PathSep) {
                    i += 2;
                    continue;
                }
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                }
                let mut alias = path.last().cloned();
                if let Some(Tok::Ident(a)) = t
                    .get(i + 2)
                    .map(|x| &x.tok)
                    .filter(|_| t[i + 1].tok == Tok::Ident("as".into()))
                {
                    alias = Some(a.clone());
                    i += 2;
                }
                out.push((path, alias, token.line));
                return i + 1 + usize::from(t.get(i + 1).is_some_and(|x| x.tok == Tok::Punct(';')));
            }
            Tok::Punct('*') => {
                out.push((path, None, token.line));
                return i + 1 + usize::from(t.get(i + 1).is_some_and(|x| x.tok == Tok::Punct(';')));
            }
            Tok::Punct('{') => {
                i += 1;
                while t.get(i).is_some_and(|x| x.tok != Tok::Punct('}')) {
                    let next = use_tree(t, i, path.clone(), out);
                    i = if t.get(next).is_some_and(|x| x.tok == Tok::Punct(',')) {
                        next + 1
                    } else {
                        next.max(i + 1)
                    };
                }
                return i + 1 + usize::from(t.get(i + 1).is_some_and(|x| x.tok == Tok::Punct(';')));
            }
            _ => return i + 1,
        }
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(src: &str) -> Vec<(String, Option<String>, bool)> {
        parse(src)[0]
            .uses
            .iter()
            .map(|u| (u.path.join("::"), u.alias.clone(), u.public))
            .collect()
    }

    fn l(path: &str, alias: Option<&str>, public: bool) -> (String, Option<String>, bool) {
        (path.into(), alias.map(String::from), public)
    }

    #[test]
    fn use_trees_with_braces_self_renames_and_globs() {
        let src = "use crate::{a::{B, c as d}, e::*, f::{self}};\npub(crate) use super::g as h;\npub use ::std::x;";
        assert_eq!(
            leaves(src),
            [
                l("crate::a::B", Some("B"), false),
                l("crate::a::c", Some("d"), false),
                l("crate::e", None, false),
                l("crate::f", Some("f"), false),
                l("super::g", Some("h"), true),
                l("::::std::x", Some("x"), true),
            ]
        );
    }

    #[test]
    fn inline_paths_macros_and_lines() {
        let body = &parse(
            "fn f() {\n  crate::udf::call::record(x);\n  super::Foo::new();\n  m!(1); a != b; y.z::<u8>();\n}",
        )[0];
        let paths: Vec<(String, bool, usize)> = body
            .mentions
            .iter()
            .filter(|m| m.path.len() > 1 || m.is_macro)
            .map(|m| (m.path.join("::"), m.is_macro, m.line))
            .collect();
        assert_eq!(
            paths,
            [
                ("crate::udf::call::record".into(), false, 2),
                ("super::Foo::new".into(), false, 3),
                ("m".into(), true, 4)
            ]
        );
    }

    #[test]
    fn items_are_defs_only_at_module_scope() {
        let src = "pub fn a() { fn inner() {} }\nstruct B;\nimpl B { fn method() {} const K: u8 = 1; }\npub(crate) const fn c() {}\nstatic mut D: u8 = 0;\n#[macro_export]\nmacro_rules! e { () => {} }\nmacro_rules! f { () => {} }\nconst _: () = ();\nunion U { x: u8 }\nlet union = 1;";
        let body = &parse(src)[0];
        assert_eq!(body.defs, ["a", "B", "c", "D", "U"]);
        assert_eq!(
            body.macros,
            [("e".to_string(), true), ("f".to_string(), false)]
        );
    }

    #[test]
    fn inline_modules_nest_and_file_modules_keep_their_path() {
        let src =
            "mod a { mod b { use super::X; } pub struct Y; }\n#[path = \"p/q.rs\"]\nmod c;\nmod d;";
        let bodies = parse(src);
        assert_eq!(bodies.len(), 3);
        assert_eq!((bodies[1].name.as_str(), bodies[1].parent), ("a", Some(0)));
        assert_eq!((bodies[2].name.as_str(), bodies[2].parent), ("b", Some(1)));
        assert_eq!(bodies[2].uses[0].path, ["super", "X"]);
        assert_eq!(bodies[1].defs, ["Y"]);
        assert_eq!(
            bodies[0].mods,
            [
                ("c".to_string(), Some("p/q.rs".to_string())),
                ("d".to_string(), None)
            ]
        );
    }

    #[test]
    fn cfg_test_items_are_skipped() {
        let src = "#[cfg(test)]\nmod tests { use crate::a::B; fn t() { crate::c::d(); } }\n#[cfg(test)]\nuse crate::e::F;\n#[cfg(test)]\nconst G: S = S { x: 1 };\n#[cfg(test)]\nmod helper;\nstruct H {\n  #[cfg(test)]\n  field: crate::i::J,\n  other: crate::k::L,\n}\n#[cfg(all(test, unix))]\nfn m() { crate::n::o(); }\n#[cfg(not(test))]\nuse crate::p::Q;\nuse crate::r::S;";
        let body = &parse(src)[0];
        let uses: Vec<String> = body.uses.iter().map(|u| u.path.join("::")).collect();
        assert_eq!(uses, ["crate::p::Q", "crate::r::S"]);
        let paths: Vec<String> = body
            .mentions
            .iter()
            .filter(|m| m.path.len() > 1)
            .map(|m| m.path.join("::"))
            .collect();
        assert_eq!(paths, ["crate::k::L"]);
        assert!(body.mods.is_empty());
        assert_eq!(parse(src).len(), 1, "the gated inline module has no body");
    }
}
