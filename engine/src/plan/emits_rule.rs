//! The EMITS analyzer rule: folds a select list of `get_field(f(…), 'col')` items (written by the
//! front end, see `sql.rs`) into one `UdfCall` node below a projection of its columns, and rejects
//! any EMITS call left where rows cannot come from.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::expr::{AggregateFunction, ScalarFunction};
use datafusion::logical_expr::{
    Aggregate, Expr, Extension, LogicalPlan, Projection, utils::expr_to_columns,
};
use datafusion::optimizer::AnalyzerRule;

use super::emits_node::{UdfCallNode, carried_name};
use crate::emits_err;
use crate::udf::{SetUdf, as_accel_aggregate, emits_of, emits_of_aggregate};

/// Rewrites EMITS calls into `UdfCall` nodes.
#[derive(Debug, Default)]
pub(crate) struct EmitsRule;

impl AnalyzerRule for EmitsRule {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let plan = plan
            .transform_up_with_subqueries(|node| match node {
                LogicalPlan::Projection(p) => rewrite_projection(p),
                other => Ok(Transformed::no(other)),
            })?
            .data;
        reject_leftovers(&plan)?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "accelsql_emits"
    }
}

/// `get_field(inner, 'name')`: the inner expression and the field name.
fn field_access(expr: &Expr) -> Option<(&Expr, &str)> {
    let Expr::ScalarFunction(ScalarFunction { func, args }) = expr.clone().unalias_nested().data
    else {
        return None;
    };
    if func.name() != "get_field" || args.len() != 2 {
        return None;
    }
    // Borrow from the original expression (unalias_nested cloned it).
    let Expr::ScalarFunction(ScalarFunction { args, .. }) = strip_alias(expr) else {
        return None;
    };
    match &args[1] {
        Expr::Literal(ScalarValue::Utf8(Some(name)), _) => Some((&args[0], name.as_str())),
        _ => None,
    }
}

fn strip_alias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(a) => strip_alias(&a.expr),
        e => e,
    }
}

/// Output expression `i` of `projection` as a column of the `UdfCall` output, same output name.
fn renamed(projection: &Projection, i: usize, column: Column) -> Expr {
    let (qualifier, field) = projection.schema.qualified_field(i);
    Expr::Column(column).alias_qualified(qualifier.cloned(), field.name())
}

fn rewrite_projection(projection: Projection) -> DfResult<Transformed<LogicalPlan>> {
    if let Some(call) = scalar_emits_in(&projection) {
        return rewrite_scalar(projection, call).map(Transformed::yes);
    }
    if let LogicalPlan::Aggregate(agg) = projection.input.as_ref()
        && agg.aggr_expr.iter().any(|e| set_emits(e).is_some())
    {
        let agg = agg.clone();
        return rewrite_set(projection, agg).map(Transformed::yes);
    }
    Ok(Transformed::no(LogicalPlan::Projection(projection)))
}

/// The first SCALAR EMITS call in the projection's expressions.
fn scalar_emits_in(projection: &Projection) -> Option<(Arc<SetUdf>, Vec<Expr>)> {
    let mut found = None;
    for expr in &projection.expr {
        let _ = expr.apply(|e| {
            if let Expr::ScalarFunction(ScalarFunction { func, args }) = e
                && let Some(def) = emits_of(func)
            {
                found = Some((Arc::clone(def), args.clone()));
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        if found.is_some() {
            break;
        }
    }
    found
}

fn alone_err(def: &SetUdf) -> datafusion::error::DataFusionError {
    emits_err!(
        def.name(),
        "a SET EMITS call shares its select list only with GROUP BY keys (as in Exasol); \
         select other expressions in an outer query"
    )
    .into_datafusion()
}

fn rewrite_scalar(
    projection: Projection,
    (def, args): (Arc<SetUdf>, Vec<Expr>),
) -> DfResult<LogicalPlan> {
    reject_set_arguments(&def, &args, &projection.input)?;
    let mut exprs = Vec::with_capacity(projection.expr.len());
    let mut carried = Vec::new();
    let mut carried_fields = Vec::new();
    for (i, expr) in projection.expr.iter().enumerate() {
        if let Some((Expr::ScalarFunction(ScalarFunction { func, args: a }), name)) =
            field_access(expr)
            && emits_of(func).is_some()
        {
            if emits_of(func).is_none_or(|d| !Arc::ptr_eq(d, &def)) || a != &args {
                return Err(emits_err!(
                    def.name(),
                    "only one EMITS call may stand in a select list; call the other in a subquery"
                )
                .into_datafusion());
            }
            exprs.push(renamed(&projection, i, Column::new_unqualified(name)));
            continue;
        }
        // Another item (Exasol allows them beside a SCALAR EMITS call): evaluated on each input
        // row and repeated for each row that row emits.
        let name = carried_name(carried.len());
        let (_, field) = projection.schema.qualified_field(i);
        carried_fields.push(Arc::new(field.as_ref().clone().with_name(&name)));
        carried.push(strip_alias(expr).clone());
        exprs.push(renamed(&projection, i, Column::new_unqualified(name)));
    }
    let mut fields = carried_fields;
    fields.extend(def.emits().into_iter().flatten().cloned());
    let schema = DFSchema::from_unqualified_fields(fields.into(), Default::default())?;
    let node = UdfCallNode {
        def,
        input: Arc::unwrap_or_clone(projection.input),
        keys: Vec::new(),
        output_keys: Vec::new(),
        args,
        carried,
        schema: Arc::new(schema),
        placed: None,
    };
    project_over(node, exprs)
}

/// Rejects a SCALAR EMITS call whose arguments read a SET call of the aggregate below it.
fn reject_set_arguments(def: &SetUdf, args: &[Expr], input: &LogicalPlan) -> DfResult<()> {
    let LogicalPlan::Aggregate(agg) = input else {
        return Ok(());
    };
    let keys = agg.group_expr.len();
    let mut used = HashSet::new();
    for arg in args {
        expr_to_columns(arg, &mut used)?;
    }
    for (i, aggr) in agg.aggr_expr.iter().enumerate() {
        let Expr::AggregateFunction(f) = strip_alias(aggr) else {
            continue;
        };
        if as_accel_aggregate(f.func.inner().as_ref()).is_none() {
            continue;
        }
        let (q, field) = agg.schema.qualified_field(keys + i);
        if used.contains(&Column::new(q.cloned(), field.name())) {
            return Err(emits_err!(
                def.name(),
                "encapsulated set function: a SET UDF call cannot be an argument of a SCALAR EMITS \
                 call (Exasol rejects it too); call the SET UDF in a subquery and pass its column"
            )
            .into_datafusion());
        }
    }
    Ok(())
}

/// The SET EMITS UDF an aggregate expression calls, with its arguments.
fn set_emits(expr: &Expr) -> Option<(Arc<SetUdf>, &AggregateFunction)> {
    match strip_alias(expr) {
        Expr::AggregateFunction(f) => emits_of_aggregate(&f.func).map(|d| (Arc::clone(d), f)),
        _ => None,
    }
}

fn rewrite_set(projection: Projection, agg: Aggregate) -> DfResult<LogicalPlan> {
    let Some((def, function)) = agg.aggr_expr.iter().find_map(set_emits) else {
        return Ok(LogicalPlan::Projection(projection));
    };
    if agg.aggr_expr.len() > 1 {
        return Err(emits_err!(
            def.name(),
            "an EMITS call cannot share its select list with aggregate functions; aggregate \
             its rows in an outer query"
        )
        .into_datafusion());
    }
    let params = &function.params;
    if params.distinct || params.filter.is_some() || !params.order_by.is_empty() {
        return Err(emits_err!(
            def.name(),
            "DISTINCT, FILTER and ORDER BY are not supported in EMITS calls"
        )
        .into_datafusion());
    }
    if agg
        .group_expr
        .iter()
        .any(|e| matches!(e, Expr::GroupingSet(_)))
    {
        return Err(emits_err!(
            def.name(),
            "GROUPING SETS, ROLLUP and CUBE cannot group an EMITS call"
        )
        .into_datafusion());
    }
    let keys = agg.group_expr.len();
    let key_columns: HashSet<Column> = agg
        .schema
        .iter()
        .take(keys)
        .map(|(q, f)| Column::new(q.cloned(), f.name()))
        .collect();
    let call_column = {
        let (q, f) = agg.schema.qualified_field(keys);
        Column::new(q.cloned(), f.name())
    };
    let mut exprs = Vec::with_capacity(projection.expr.len());
    let mut used_keys = HashSet::new();
    for (i, expr) in projection.expr.iter().enumerate() {
        if let Some((Expr::Column(c), name)) = field_access(expr)
            && c == &call_column
        {
            exprs.push(renamed(&projection, i, Column::new_unqualified(name)));
            continue;
        }
        let mut used = HashSet::new();
        expr_to_columns(expr, &mut used)?;
        if !used.is_subset(&key_columns) {
            return Err(alone_err(&def));
        }
        used_keys.extend(used);
        exprs.push(expr.clone());
    }
    // Only the keys the select list shows are output (GROUP BY country with EMITS (country, …)
    // is fine as long as the select list does not also name the key).
    let output_keys: Vec<usize> = agg
        .schema
        .iter()
        .take(keys)
        .enumerate()
        .filter(|(_, (q, f))| used_keys.contains(&Column::new(q.cloned(), f.name())))
        .map(|(i, _)| i)
        .collect();
    let mut fields: Vec<_> = agg
        .schema
        .iter()
        .enumerate()
        .filter(|(i, _)| output_keys.contains(i))
        .map(|(_, (q, f))| (q.cloned(), Arc::clone(f)))
        .collect();
    fields.extend(
        def.emits()
            .into_iter()
            .flatten()
            .map(|f| (None, Arc::clone(f))),
    );
    let schema = DFSchema::new_with_metadata(fields, Default::default()).map_err(|e| {
        emits_err!(
            def.name(),
            "its EMITS columns clash with the GROUP BY keys ({e}); rename the keys"
        )
        .into_datafusion()
    })?;
    // A NULL key (the front end adds one, see `sql.rs`) groups nothing: left out unless shown.
    let kept: Vec<usize> = (0..keys)
        .filter(|i| {
            output_keys.contains(i)
                || !matches!(&agg.group_expr[*i], Expr::Literal(v, _) if v.is_null())
        })
        .collect();
    let output_keys = output_keys
        .iter()
        .filter_map(|i| kept.iter().position(|k| k == i))
        .collect();
    let node = UdfCallNode {
        def,
        input: Arc::unwrap_or_clone(agg.input),
        keys: kept.iter().map(|&i| agg.group_expr[i].clone()).collect(),
        output_keys,
        args: function.params.args.clone(),
        carried: Vec::new(),
        schema: Arc::new(schema),
        placed: None,
    };
    project_over(node, exprs)
}

/// `exprs` over the `UdfCall` node `node`: the select list as the user wrote it, reading the
/// node's columns.
fn project_over(node: UdfCallNode, exprs: Vec<Expr>) -> DfResult<LogicalPlan> {
    let input = LogicalPlan::Extension(Extension {
        node: Arc::new(node),
    });
    Ok(LogicalPlan::Projection(Projection::try_new(
        exprs,
        Arc::new(input),
    )?))
}

/// Fails on any EMITS call the rewrite could not take (HAVING, window, nested expressions…).
fn reject_leftovers(plan: &LogicalPlan) -> DfResult<()> {
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                let def = match e {
                    Expr::ScalarFunction(f) => emits_of(&f.func),
                    Expr::AggregateFunction(f) => emits_of_aggregate(&f.func),
                    _ => None,
                };
                match def {
                    Some(def) => Err(emits_err!(
                        def.name(),
                        "emitting function in expression (as Exasol says): an EMITS call must \
                         be an item of its select list, with no HAVING, window or expression \
                         around it"
                    )
                    .into_datafusion()),
                    None => Ok(TreeNodeRecursion::Continue),
                }
            })
        })
    })?;
    Ok(())
}
