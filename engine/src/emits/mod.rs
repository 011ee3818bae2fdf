//! EMITS calls: the front-end rewrite of select lists, the analyzer rule that builds `UdfCall`
//! nodes, and their physical planning and execution.

mod exec;
mod node;
mod planner;
mod rule;
mod sql;

pub(crate) use exec::{CallSpec, UdfCallExec};
pub(crate) use node::UdfCallNode;
pub(crate) use planner::AccelQueryPlanner;
pub(crate) use rule::EmitsRule;
pub(crate) use sql::expand_emits_calls;
