//! `UdfCall`, the logical plan node of an EMITS call: input rows in (grouped by the GROUP BY keys
//! for SET UDFs), the keys and the EMITS columns out.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::common::DFSchemaRef;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{Expr, LogicalPlan, UserDefinedLogicalNodeCore};

use crate::udf::{InputType, PlacedCall, SetUdf, same_placement};

/// One EMITS call and the rows it reads.
#[derive(Debug, Clone)]
pub(crate) struct UdfCallNode {
    pub(crate) def: Arc<SetUdf>,
    pub(crate) input: LogicalPlan,
    /// GROUP BY keys (SET only).
    pub(crate) keys: Vec<Expr>,
    /// Which keys start the output, before the EMITS columns (those the select list shows).
    pub(crate) output_keys: Vec<usize>,
    pub(crate) args: Vec<Expr>,
    /// SCALAR EMITS: the select list's other items, evaluated on each input row and repeated for
    /// each row it emits; the output's first columns, named [`carried_name`].
    pub(crate) carried: Vec<Expr>,
    pub(crate) schema: DFSchemaRef,
    pub(crate) placed: Option<Arc<PlacedCall>>,
}

/// The output column of the `i`th carried item of a `UdfCall` node.
pub(crate) fn carried_name(i: usize) -> String {
    format!("__accelsql_carried_{i}")
}

impl UdfCallNode {
    /// A copy carrying the placement rule's decision.
    pub(crate) fn placed(&self, call: Arc<PlacedCall>) -> Self {
        Self {
            placed: Some(call),
            ..self.clone()
        }
    }
}

impl PartialEq for UdfCallNode {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.def, &other.def)
            && self.input == other.input
            && self.keys == other.keys
            && self.output_keys == other.output_keys
            && self.args == other.args
            && self.carried == other.carried
            && self.schema == other.schema
            && same_placement(&self.placed, &other.placed)
    }
}

impl Eq for UdfCallNode {}

impl PartialOrd for UdfCallNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (self == other).then_some(Ordering::Equal)
    }
}

impl Hash for UdfCallNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.def.name().hash(state);
        self.input.hash(state);
        self.keys.hash(state);
        self.args.hash(state);
        self.carried.hash(state);
        self.placed.as_ref().map(|c| c.decision.call_id).hash(state);
    }
}

impl UserDefinedLogicalNodeCore for UdfCallNode {
    fn name(&self) -> &str {
        "UdfCall"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        self.keys
            .iter()
            .chain(&self.args)
            .chain(&self.carried)
            .cloned()
            .collect()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.def.input_type() {
            InputType::Scalar => "SCALAR",
            InputType::Set => "SET",
        };
        write!(f, "UdfCall: {kind} {}(", self.def.name())?;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{a}")?;
        }
        write!(f, ") {}", self.def.output())?;
        if !self.carried.is_empty() {
            f.write_str(", carrying [")?;
            for (i, c) in self.carried.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{c}")?;
            }
            f.write_str("]")?;
        }
        if !self.keys.is_empty() {
            f.write_str(", group by [")?;
            for (i, k) in self.keys.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{k}")?;
            }
            f.write_str("]")?;
        }
        match &self.placed {
            Some(call) => write!(f, ", placement={}", call.decision.placement),
            None => Ok(()),
        }
    }

    fn with_exprs_and_inputs(
        &self,
        exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> DfResult<Self> {
        if inputs.len() != 1
            || exprs.len() != self.keys.len() + self.args.len() + self.carried.len()
        {
            return Err(DataFusionError::Internal(format!(
                "UdfCall of {} rebuilt with {} inputs and {} expressions",
                self.def.name(),
                inputs.len(),
                exprs.len()
            )));
        }
        let mut keys = exprs;
        let mut args = keys.split_off(self.keys.len());
        let carried = args.split_off(self.args.len());
        Ok(Self {
            input: inputs.remove(0),
            keys,
            args,
            carried,
            ..self.clone()
        })
    }
}
