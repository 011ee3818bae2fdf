//! The DataFusion functions of a session's UDFs and scripts, registered as each kind asks.

use std::sync::Arc;

use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::prelude::SessionContext;

use crate::core::error::Result;
use crate::udf::script::udf::ScriptUdf;
use crate::udf::{
    AccelAggregateUdf, AccelScalarUdf, EmitsAggregate, EmitsScalar, InputType, Output, SetUdf,
    emits_of, emits_of_aggregate,
};

/// The EMITS UDF registered in `state` under `name`, if any.
pub(super) fn emits_udf(state: &SessionState, name: &str) -> Option<Arc<SetUdf>> {
    if let Some(def) = state.scalar_functions().get(name).and_then(|f| emits_of(f)) {
        return Some(Arc::clone(def));
    }
    state
        .aggregate_functions()
        .get(name)
        .and_then(|f| emits_of_aggregate(f))
        .map(Arc::clone)
}

/// A UDF as DataFusion registers it.
pub(super) enum Function {
    Scalar(ScalarUDF),
    Aggregate(AggregateUDF),
}

/// The DataFusion function of a set or EMITS UDF: an aggregate (SET RETURNS), or an EMITS
/// placeholder (aggregate for SET, scalar for SCALAR).
pub(super) fn set_function(def: Arc<SetUdf>) -> Result<Function> {
    Ok(match (def.input_type(), def.output()) {
        (InputType::Set, Output::Returns(_)) => {
            Function::Aggregate(AggregateUDF::new_from_impl(AccelAggregateUdf::new(def)?))
        }
        (InputType::Set, Output::Emits(_)) => {
            Function::Aggregate(AggregateUDF::new_from_impl(EmitsAggregate::new(def)))
        }
        (InputType::Scalar, _) => Function::Scalar(ScalarUDF::new_from_impl(EmitsScalar::new(def))),
    })
}

/// The DataFusion function of a script.
pub(super) fn as_functions(udf: &ScriptUdf) -> Function {
    match udf {
        ScriptUdf::Scalar(def) => Function::Scalar(ScalarUDF::new_from_impl(AccelScalarUdf::new(
            Arc::new(def.clone()),
        ))),
        ScriptUdf::Set(def) => match set_function(Arc::new(def.clone())) {
            Ok(f) => f,
            // Only SET RETURNS can fail, and only for a definition that is not one.
            Err(_) => Function::Scalar(ScalarUDF::new_from_impl(EmitsScalar::new(Arc::new(
                def.clone(),
            )))),
        },
    }
}

/// Registers a set or EMITS UDF in `ctx` as its kind asks.
pub(super) fn register_set_udf(ctx: &SessionContext, def: Arc<SetUdf>) {
    match set_function(def) {
        Ok(Function::Scalar(f)) => ctx.register_udf(f),
        Ok(Function::Aggregate(f)) => ctx.register_udaf(f),
        Err(e) => log::error!("UDF unavailable in this session: {e}"),
    }
}

/// Every function name `ctx` has: DataFusion's, accelsql's built-ins, the engine's Rust UDFs.
pub(super) fn function_names(ctx: &SessionContext) -> std::collections::HashSet<String> {
    let state = ctx.state_ref();
    let state = state.read();
    state
        .scalar_functions()
        .keys()
        .chain(state.aggregate_functions().keys())
        .chain(state.window_functions().keys())
        .cloned()
        .collect()
}
