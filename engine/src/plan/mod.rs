//! The plan layer: what happens to a statement's logical plan before it runs.
//!
//! Owns the statement's scope shared by its calls ([`statement`]: id, placements, the devices of
//! its lease once granted, why placement failed), the GPU placement rule ([`placement`]: at
//! most one call per query block gets the GPUs), and the EMITS call's logical node with the
//! analyzer rule that builds it ([`emits_node`], [`emits_rule`]), and the Exasol dialect's rule
//! that makes empty strings NULL ([`empty_strings`]) and the expression planner
//! that makes strings in arithmetic numbers ([`string_arithmetic`]); the one list of accelsql's
//! analyzer rules, in their order ([`rules`]).
//!
//! May use: `core`, `udf`.

pub(crate) mod emits_node;
pub(crate) mod emits_rule;
pub(crate) mod empty_strings;
pub(crate) mod exasol_booleans;
pub(crate) mod placement;
pub(crate) mod rules;
pub(crate) mod statement;
pub(crate) mod string_arithmetic;

/// The schema of a plan node's inputs merged, what its expressions read; made the first time an
/// expression needs a type (most rewrites need none).
pub(crate) struct InputSchema {
    inputs: Vec<datafusion::common::DFSchemaRef>,
    merged: std::cell::OnceCell<datafusion::common::DFSchema>,
}

impl InputSchema {
    /// The inputs of `node`.
    pub(crate) fn of(node: &datafusion::logical_expr::LogicalPlan) -> Self {
        Self {
            inputs: node
                .inputs()
                .iter()
                .map(|i| std::sync::Arc::clone(i.schema()))
                .collect(),
            merged: std::cell::OnceCell::new(),
        }
    }

    /// Whether the node has no inputs (a scan, an empty relation).
    pub(crate) fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// The merged schema.
    pub(crate) fn get(&self) -> &datafusion::common::DFSchema {
        self.merged.get_or_init(|| {
            let mut schema = datafusion::common::DFSchema::empty();
            for input in &self.inputs {
                schema.merge(input);
            }
            schema
        })
    }
}
