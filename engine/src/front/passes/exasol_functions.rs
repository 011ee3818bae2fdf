//! Exasol scalar functions that users' SQL calls beside UDFs, mapped onto DataFusion's before
//! planning: `MOD(a, b)` → `a % b`, `LEN` → `character_length`, `UNICODECHR` → `chr`, `UNICODE`
//! → `ascii` (the first character's code point), `LCASE`/`UCASE` → `lower`/`upper`,
//! `ZEROIFNULL(x)` → `coalesce(x, 0)`, `NULLIFZERO(x)` → `nullif(x, 0)`, `LOCATE(sub, s)` →
//! `strpos(s, sub)`, `HASH_MD5` → `md5`; and the niladic `DBTIMEZONE`, `SESSIONTIMEZONE` and
//! `CURRENT_SCHEMA`, `CURRENT_USER` → their values as string literals. Only plain (unqualified) names are
//! mapped: `schema.mod(…)` still calls a script.

use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArguments, Ident, ObjectName, ObjectNamePart, Query, SelectItem, SetExpr, Value,
    VisitMut, VisitorMut,
};

/// What the niladic Exasol functions evaluate to in this session.
#[derive(Debug, Clone)]
pub(crate) struct SessionValues {
    /// `DBTIMEZONE`.
    pub(crate) db_time_zone: String,
    /// `SESSIONTIMEZONE`.
    pub(crate) session_time_zone: String,
    /// `CURRENT_SCHEMA`, as Exasol shows it; `None` (NULL) with no schema open.
    pub(crate) current_schema: Option<String>,
    /// `CURRENT_USER`: the session's user (`SYS` for the embedding program's).
    pub(crate) current_user: String,
}

/// Rewrites the Exasol function calls of `statement` (see the module docs).
pub(crate) fn map_exasol_functions(statement: &mut DfStatement, values: &SessionValues) {
    match statement {
        DfStatement::Statement(inner) => {
            let _ = inner.visit(&mut Mapper { values });
        }
        DfStatement::Explain(explain) => map_exasol_functions(&mut explain.statement, values),
        _ => {}
    }
}

struct Mapper<'a> {
    values: &'a SessionValues,
}

fn plain_name(name: &ObjectName) -> Option<String> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(ident)] if ident.quote_style.is_none() => {
            Some(ident.value.to_ascii_lowercase())
        }
        _ => None,
    }
}

/// The plain positional arguments of a call, if that is all it has.
fn plain_args(f: &Function) -> Option<Vec<Expr>> {
    let list = match &f.args {
        // `CURRENT_SCHEMA` and friends, written without parentheses.
        FunctionArguments::None if f.over.is_none() => return Some(Vec::new()),
        FunctionArguments::List(list) => list,
        _ => return None,
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() || f.over.is_some() {
        return None;
    }
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

fn string(value: &str) -> Expr {
    Expr::value(Value::SingleQuotedString(value.to_string()))
}

fn zero() -> Expr {
    Expr::value(Value::Number("0".into(), false))
}

/// `f` renamed to `name` with `args`.
fn call(mut f: Function, name: &str, args: Vec<Expr>) -> Expr {
    f.name = ObjectName::from(vec![Ident::new(name)]);
    if let FunctionArguments::List(list) = &mut f.args {
        list.args = args
            .into_iter()
            .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
            .collect();
    }
    Expr::Function(f)
}

/// The niladic functions: a select item that is one of them keeps its name as the column's.
const NILADIC: [&str; 4] = [
    "dbtimezone",
    "sessiontimezone",
    "current_schema",
    "current_user",
];

/// The niladic function `expr` calls, if it is a bare one.
fn niladic(expr: &Expr) -> Option<String> {
    let name = match expr {
        Expr::Identifier(ident) if ident.quote_style.is_none() => ident.value.to_ascii_lowercase(),
        Expr::Function(f) if plain_args(f).is_some_and(|a| a.is_empty()) => plain_name(&f.name)?,
        _ => return None,
    };
    NILADIC.contains(&name.as_str()).then_some(name)
}

impl Mapper<'_> {
    /// `CURRENT_SCHEMA`: the open schema's name, or a VARCHAR NULL with none open.
    fn current_schema(&self) -> Expr {
        match &self.values.current_schema {
            Some(name) => string(name),
            None => Expr::Cast {
                kind: CastKind::Cast,
                expr: Box::new(Expr::value(Value::Null)),
                data_type: DataType::Varchar(None),
                array: false,
                format: None,
            },
        }
    }
}

impl VisitorMut for Mapper<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(expr) = item
                    && let Some(name) = niladic(expr)
                {
                    *item = SelectItem::ExprWithAlias {
                        expr: expr.clone(),
                        alias: Ident::new(name),
                    };
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let replacement = match expr {
            Expr::Identifier(ident) if ident.quote_style.is_none() => {
                match ident.value.to_ascii_lowercase().as_str() {
                    "dbtimezone" => Some(string(&self.values.db_time_zone)),
                    "sessiontimezone" => Some(string(&self.values.session_time_zone)),
                    "current_schema" => Some(self.current_schema()),
                    "current_user" => Some(string(&self.values.current_user)),
                    _ => None,
                }
            }
            Expr::Function(f) => {
                let (Some(name), Some(args)) = (plain_name(&f.name), plain_args(f)) else {
                    return ControlFlow::Continue(());
                };
                let f = f.clone();
                match (name.as_str(), args.as_slice()) {
                    ("mod", [a, b]) => Some(Expr::Nested(Box::new(Expr::BinaryOp {
                        left: Box::new(Expr::Nested(Box::new(a.clone()))),
                        op: BinaryOperator::Modulo,
                        right: Box::new(Expr::Nested(Box::new(b.clone()))),
                    }))),
                    ("len", [_]) => Some(call(f, "character_length", args)),
                    ("unicodechr", [_]) => Some(call(f, "chr", args)),
                    ("unicode", [_]) => Some(call(f, "ascii", args)),
                    ("lcase", [_]) => Some(call(f, "lower", args)),
                    ("ucase", [_]) => Some(call(f, "upper", args)),
                    ("hash_md5", [_]) => Some(call(f, "md5", args)),
                    ("zeroifnull", [x]) => Some(call(f, "coalesce", vec![x.clone(), zero()])),
                    ("nullifzero", [x]) => Some(call(f, "nullif", vec![x.clone(), zero()])),
                    ("locate", [sub, s]) => Some(call(f, "strpos", vec![s.clone(), sub.clone()])),
                    ("dbtimezone", []) => Some(string(&self.values.db_time_zone)),
                    ("sessiontimezone", []) => Some(string(&self.values.session_time_zone)),
                    ("current_schema", []) => Some(self.current_schema()),
                    ("current_user", []) => Some(string(&self.values.current_user)),
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some(replacement) = replacement {
            *expr = replacement;
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::DFParser;

    fn mapped(sql: &str) -> String {
        let mut statement = DFParser::parse_sql(sql).unwrap().pop_front().unwrap();
        let values = SessionValues {
            db_time_zone: "UTC".into(),
            session_time_zone: "EUROPE/BERLIN".into(),
            current_schema: Some("LAB".into()),
            current_user: "ANN".into(),
        };
        map_exasol_functions(&mut statement, &values);
        statement.to_string()
    }

    #[test]
    fn exasol_functions_become_datafusion_expressions() {
        assert_eq!(
            mapped(
                "SELECT MOD(ROW_NUMBER() OVER (), 2), len(s), UnicodeChr(65), unicode(s) FROM t"
            ),
            "SELECT ((ROW_NUMBER() OVER ()) % (2)), character_length(s), chr(65), ascii(s) FROM t"
        );
        assert_eq!(
            mapped("SELECT zeroifnull(x), nullifzero(x), locate('b', s), lcase(s), hash_md5(s)"),
            "SELECT coalesce(x, 0), nullif(x, 0), strpos(s, 'b'), lower(s), md5(s)"
        );
        assert_eq!(
            mapped("SELECT DBTIMEZONE, SESSIONTIMEZONE, CURRENT_SCHEMA AS s, \"dbtimezone\""),
            "SELECT 'UTC' AS dbtimezone, 'EUROPE/BERLIN' AS sessiontimezone, 'LAB' AS s, \"dbtimezone\""
        );
        // Qualified calls are scripts'; other arities are left for DataFusion to judge.
        assert_eq!(
            mapped("SELECT s.mod(1, 2), len(a, b)"),
            "SELECT s.mod(1, 2), len(a, b)"
        );
    }
}
