//! What a check found, printable as the readable report the workspace test fails with.

use std::fmt;

/// What a check found.
#[derive(Debug, Default)]
pub struct Report {
    /// One line per package checked: its files, edges and layers.
    pub summary: Vec<String>,
    /// Each set of files that import each other in a cycle: its cycles, then every import
    /// among its files with the names it takes.
    pub cycles: Vec<String>,
    /// Each import from a higher layer: `path:line: imports NAME from layer X (above layer Y)`.
    pub upward: Vec<String>,
    /// Files of a layered package that no layer holds.
    pub unplaced: Vec<String>,
    /// Workspace members whose `src/` is missing from the table.
    pub unlisted: Vec<String>,
}

impl Report {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.cycles.is_empty()
            && self.upward.is_empty()
            && self.unplaced.is_empty()
            && self.unlisted.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.summary {
            writeln!(f, "{line}")?;
        }
        let sections = [
            ("import cycles", &self.cycles),
            ("imports from a higher layer", &self.upward),
            ("files in no layer", &self.unplaced),
            (
                "workspace members missing from tools/layers/layers.txt",
                &self.unlisted,
            ),
        ];
        for (title, items) in sections.into_iter().filter(|(_, items)| !items.is_empty()) {
            writeln!(f, "\n{} {title}:", items.len())?;
            for item in items {
                writeln!(f, "  {item}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_the_summary_and_each_nonempty_section() {
        let report = Report {
            summary: vec!["a/src: 2 files".into()],
            upward: vec!["a/src/x.rs:3: imports Y".into()],
            ..Report::default()
        };
        assert!(!report.is_clean());
        assert_eq!(
            report.to_string(),
            "a/src: 2 files\n\n1 imports from a higher layer:\n  a/src/x.rs:3: imports Y\n"
        );
        assert!(Report::default().is_clean());
    }
}
