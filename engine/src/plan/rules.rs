//! accelsql's analyzer rules: the one list, in the order they run after DataFusion's own.

use std::sync::Arc;

use datafusion::optimizer::AnalyzerRule;

use super::emits_rule::EmitsRule;
use super::empty_strings::EmptyStringsAreNull;
use super::exasol_booleans::ExasolBooleans;
use super::placement::PlacementRule;
use super::statement::StatementScope;

/// An analyzer rule as a session state holds it.
pub(crate) type Rule = Arc<dyn AnalyzerRule + Send + Sync>;

/// Where a rule is added.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RuleSet<'a> {
    /// The session's context: rules every plan it makes gets, a DataFrame's too.
    Session,
    /// One statement's state, planned in `scope` (in the Exasol dialect: `exasol`).
    Statement {
        /// The statement's placement scope.
        scope: &'a Arc<StatementScope>,
        /// The Exasol dialect.
        exasol: bool,
    },
}

/// The analyzer rules `set` adds, in order. A session's context gets [`EmitsRule`] (an EMITS
/// call becomes its own plan node); each statement adds, after it, the GPU [`PlacementRule`]
/// for its scope and, in the Exasol dialect, [`ExasolBooleans`] (booleans as text are
/// `TRUE`/`FALSE`) and then [`EmptyStringsAreNull`].
pub(crate) fn analyzer_rules(set: RuleSet<'_>) -> Vec<Rule> {
    match set {
        RuleSet::Session => vec![Arc::new(EmitsRule)],
        RuleSet::Statement { scope, exasol } => {
            let mut rules: Vec<Rule> = vec![Arc::new(PlacementRule::new(Arc::clone(scope)))];
            if exasol {
                rules.push(Arc::new(ExasolBooleans));
                rules.push(Arc::new(EmptyStringsAreNull));
            }
            rules
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(set: RuleSet<'_>) -> Vec<String> {
        analyzer_rules(set)
            .iter()
            .map(|r| r.name().to_string())
            .collect()
    }

    #[test]
    fn the_session_gets_the_emits_rule_and_each_statement_its_placement_then_the_dialects() {
        let scope = Arc::new(StatementScope::new(1, 0));
        assert_eq!(names(RuleSet::Session).len(), 1);
        let default = names(RuleSet::Statement {
            scope: &scope,
            exasol: false,
        });
        let exasol = names(RuleSet::Statement {
            scope: &scope,
            exasol: true,
        });
        assert_eq!(default.len(), 1);
        assert_eq!(exasol.len(), 3);
        assert_eq!(exasol[0], default[0]);
    }
}
