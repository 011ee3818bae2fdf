//! The checks on one package's file graph: import cycles (Tarjan's strongly connected
//! components) and imports that reach up to a higher layer.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::report::Report;
use crate::table::Package;

/// Source files of one tree: path relative to its directory (with `/`) to text.
pub(crate) type Sources = BTreeMap<String, String>;

/// One package's files and the imports between them.
#[derive(Debug, Default)]
pub(crate) struct Analysis {
    /// Paths relative to the package directory.
    pub(crate) files: Vec<String>,
    pub(crate) edges: Vec<Edge>,
}

/// File `from` imports `name`, defined in file `to`, on `line` (indices into `files`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edge {
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) name: String,
    pub(crate) line: usize,
}

/// The strongly connected components of more than one node, each sorted, in order of their
/// smallest node (Tarjan's algorithm).
pub(crate) fn cycles(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adjacency: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.adjacency[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(index) if s.on_stack[w] => s.low[v] = s.low[v].min(index),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort_unstable();
                s.found.push(component);
            }
        }
    }
    let n = adjacency.len();
    let mut s = State {
        adjacency,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.found.sort();
    s.found
}

/// A shortest path from `from` to `to` that stays inside `members` (breadth first).
fn shortest_path(
    adjacency: &[Vec<usize>],
    members: &BTreeSet<usize>,
    from: usize,
    to: usize,
) -> Vec<usize> {
    let mut came_from: BTreeMap<usize, usize> = BTreeMap::from([(from, from)]);
    let mut queue = VecDeque::from([from]);
    while let Some(v) = queue.pop_front() {
        if v == to {
            let mut path = vec![to];
            while let Some(&p) = path
                .last()
                .and_then(|last| came_from.get(last))
                .filter(|&&p| p != path[path.len() - 1])
            {
                path.push(p);
            }
            path.reverse();
            return path;
        }
        for &w in adjacency[v].iter().filter(|w| members.contains(w)) {
            if let std::collections::btree_map::Entry::Vacant(entry) = came_from.entry(w) {
                entry.insert(v);
                queue.push_back(w);
            }
        }
    }
    vec![from, to]
}

/// The shortest cycle through each edge among `members`, each once, starting at its smallest
/// file, shortest first.
fn cycles_through_each_edge(
    adjacency: &[Vec<usize>],
    members: &BTreeSet<usize>,
) -> Vec<Vec<usize>> {
    let mut found = BTreeSet::new();
    for &a in members {
        for &b in adjacency[a].iter().filter(|b| members.contains(b)) {
            let mut cycle = vec![a];
            cycle.extend(shortest_path(adjacency, members, b, a));
            cycle.pop();
            let first = cycle
                .iter()
                .enumerate()
                .min_by_key(|(_, f)| **f)
                .map_or(0, |(i, _)| i);
            cycle.rotate_left(first);
            cycle.push(cycle[0]);
            found.insert((cycle.len(), cycle));
        }
    }
    found.into_iter().map(|(_, cycle)| cycle).collect()
}

/// How many cycles of one strongly connected set a report lists (the shortest ones).
const SHOWN: usize = 30;

/// Checks one package's graph, adding what it finds to `report`.
pub(crate) fn check(package: &Package, analysis: &Analysis, report: &mut Report) {
    let files = &analysis.files;
    let mut edges: BTreeMap<(usize, usize), Vec<(&str, usize)>> = BTreeMap::new();
    for e in &analysis.edges {
        edges
            .entry((e.from, e.to))
            .or_default()
            .push((&e.name, e.line));
    }
    let mut adjacency = vec![Vec::new(); files.len()];
    for &(from, to) in edges.keys() {
        adjacency[from].push(to);
    }
    for component in cycles(&adjacency) {
        let members: BTreeSet<usize> = component.iter().copied().collect();
        let path = |cycle: &Vec<usize>| {
            cycle
                .iter()
                .map(|&f| files[f].as_str())
                .collect::<Vec<_>>()
                .join(" -> ")
        };
        let loops = cycles_through_each_edge(&adjacency, &members);
        let mut text = match loops.as_slice() {
            [only] => format!("{}: {}", package.dir, path(only)),
            _ => {
                let mut text = format!(
                    "{}: {} files, {} cycles (the shortest through each import):",
                    package.dir,
                    component.len(),
                    loops.len()
                );
                loops
                    .iter()
                    .take(SHOWN)
                    .for_each(|cycle| text += &format!("\n    {}", path(cycle)));
                if loops.len() > SHOWN {
                    text += &format!(
                        "\n    … and {} longer ones through the imports below",
                        loops.len() - SHOWN
                    );
                }
                text + "\n  the imports among them:"
            }
        };
        for ((from, to), uses) in edges
            .iter()
            .filter(|((f, t), _)| members.contains(f) && members.contains(t))
        {
            text += &format!(
                "\n    {} -> {}: {}",
                files[*from],
                files[*to],
                describe(uses)
            );
        }
        report.cycles.push(text);
    }
    if package.layers.is_empty() {
        return;
    }
    let layers: Vec<Option<usize>> = files.iter().map(|f| package.layer_of(f)).collect();
    for (file, layer) in files.iter().zip(&layers) {
        if layer.is_none() {
            report.unplaced.push(format!(
                "{}/{file}: in no layer of tools/layers/layers.txt",
                package.dir
            ));
        }
    }
    for e in &analysis.edges {
        if let (Some(own), Some(theirs)) = (layers[e.from], layers[e.to])
            && theirs > own
        {
            let (above, below) = (&package.layers[theirs].name, &package.layers[own].name);
            let line = format!(
                "{}/{}:{}: imports {} from layer {above} (above layer {below})",
                package.dir, files[e.from], e.line, e.name
            );
            if !report.upward.contains(&line) {
                report.upward.push(line);
            }
        }
    }
}

/// `Foo, bar (lines 3, 9)`: the names an edge takes, and where (the first eight of each).
fn describe(uses: &[(&str, usize)]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in uses {
        if !names.contains(name) {
            names.push(name);
        }
    }
    let lines: BTreeSet<usize> = uses.iter().map(|u| u.1).collect();
    let lines: Vec<String> = lines.iter().map(usize::to_string).collect();
    let some = |all: &[String]| match all.len() {
        0..=8 => all.join(", "),
        n => format!("{}, … ({n} in all)", all[..8].join(", ")),
    };
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    format!(
        "{} (line{} {})",
        some(&names),
        if lines.len() > 1 { "s" } else { "" },
        some(&lines)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::parse;

    fn graph(files: &[&str], edges: &[(usize, usize, &str)]) -> Analysis {
        let edges = edges
            .iter()
            .enumerate()
            .map(|(line, &(from, to, name))| Edge {
                from,
                to,
                name: name.into(),
                line: line + 1,
            })
            .collect();
        Analysis {
            files: files.iter().map(|f| f.to_string()).collect(),
            edges,
        }
    }

    #[test]
    fn tarjan_finds_each_strongly_connected_set() {
        let adjacency = vec![
            vec![1],
            vec![2],
            vec![0, 3],
            vec![4],
            vec![3],
            vec![5],
            vec![],
        ];
        assert_eq!(cycles(&adjacency), [vec![0, 1, 2], vec![3, 4]]);
        assert!(cycles(&[vec![1], vec![2], vec![]]).is_empty());
    }

    #[test]
    fn cycles_are_reported_in_order_with_their_names() {
        let package = &parse("rust x/src").unwrap()[0];
        let analysis = graph(
            &["a.rs", "b.rs", "c.rs"],
            &[
                (0, 1, "B"),
                (1, 2, "C"),
                (2, 0, "A"),
                (2, 0, "a2"),
                (0, 2, "C"),
            ],
        );
        let mut report = Report::default();
        check(package, &analysis, &mut report);
        let expected = "x/src: 3 files, 2 cycles (the shortest through each import):\n    a.rs -> c.rs -> a.rs\n    a.rs -> b.rs -> c.rs -> a.rs\n  the imports among them:\n    a.rs -> b.rs: B (line 1)\n    a.rs -> c.rs: C (line 5)\n    b.rs -> c.rs: C (line 2)\n    c.rs -> a.rs: A, a2 (lines 3, 4)";
        assert_eq!(report.cycles, [expected]);
        let two = graph(&["a.rs", "b.rs"], &[(0, 1, "B"), (1, 0, "A")]);
        let mut report = Report::default();
        check(package, &two, &mut report);
        assert_eq!(
            report.cycles,
            [
                "x/src: a.rs -> b.rs -> a.rs\n    a.rs -> b.rs: B (line 1)\n    b.rs -> a.rs: A (line 2)"
            ]
        );
        let many: Vec<(&str, usize)> = (1..=10).map(|n| ("N", n)).collect();
        assert_eq!(
            describe(&many),
            "N (lines 1, 2, 3, 4, 5, 6, 7, 8, … (10 in all))"
        );
    }

    #[test]
    fn layers_allow_only_downward_imports_and_place_every_file() {
        let package =
            &parse("rust e/src\nlayer core core/ error.rs\nlayer udf udf/\nlayer facade lib.rs")
                .unwrap()[0];
        let files = ["core/a.rs", "error.rs", "udf/mod.rs", "lib.rs", "stray.rs"];
        let analysis = graph(
            &files,
            &[
                (2, 0, "A"),
                (3, 2, "Udf"),
                (0, 1, "Error"),
                (1, 2, "Udf"),
                (0, 3, "Engine"),
                (4, 0, "A"),
            ],
        );
        let mut report = Report::default();
        check(package, &analysis, &mut report);
        assert_eq!(
            report.upward,
            [
                "e/src/error.rs:4: imports Udf from layer udf (above layer core)",
                "e/src/core/a.rs:5: imports Engine from layer facade (above layer core)"
            ]
        );
        assert_eq!(
            report.unplaced,
            ["e/src/stray.rs: in no layer of tools/layers/layers.txt"]
        );
        assert_eq!(
            report.cycles.len(),
            1,
            "core/a.rs -> lib.rs -> udf/mod.rs -> core/a.rs"
        );
    }
}
