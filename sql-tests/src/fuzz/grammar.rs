//! Random SQL from a small grammar of what accelsql users write around UDFs: scalar GPU/CPU
//! calls, EMITS calls, SET calls with `GROUP BY iproc()`, sub-selects, EXPLAIN.

use super::mutate::Rng;

/// The table every generated statement reads (see [`SETUP`]): the engine's sessions share it,
/// the first session's SETUP makes it.
pub const SETUP: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS t AS SELECT value AS id, CAST(value AS DOUBLE) / 7 AS x, \
     CASE WHEN value % 5 = 0 THEN NULL ELSE 'v' || CAST(value AS VARCHAR) END AS s, value % 4 AS g \
     FROM generate_series(1, 300)",
];

/// Python scripts the grammar may call (created once per engine).
pub const SCRIPTS: &[&str] = &[
    "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT py_twice(x DOUBLE) RETURNS DOUBLE AS\n\
     def run(ctx):\n    return None if ctx.x is None else ctx.x * 2\n/",
    "CREATE OR REPLACE PYTHON3 SET SCRIPT py_count(x DOUBLE) RETURNS BIGINT AS\n\
     def run(ctx):\n    n = 0\n    while True:\n        n += 1\n        if not ctx.next():\n            return n\n/",
    "CREATE OR REPLACE PYTHON3 SET SCRIPT py_emit(x DOUBLE) EMITS (y DOUBLE) AS\n\
     %perInstanceRequiredAcceleratorDevices GpuNvidia|None;\n\
     def run(ctx):\n    while True:\n        ctx.emit(ctx.x)\n        if not ctx.next():\n            break\n/",
];

/// A column, or an expression over columns, of `t`.
const COLUMNS: &[&str] = &["id", "x", "g", "s", "id * 2", "x + 1", "length(s)"];

fn column(rng: &mut Rng) -> &'static str {
    let picked: &&'static str = rng.pick(COLUMNS);
    picked
}

fn number(rng: &mut Rng) -> String {
    rng.pick(&[
        "0",
        "1",
        "2",
        "3",
        "-1",
        "0.5",
        "NULL",
        "1e10",
        "CAST(NULL AS DOUBLE)",
    ])
    .to_string()
}

/// A scalar expression of at most `depth` nested calls.
fn expr(rng: &mut Rng, depth: usize, python: bool) -> String {
    if depth == 0 || rng.chance(30) {
        return if rng.chance(60) {
            column(rng).to_string()
        } else {
            number(rng)
        };
    }
    let a = expr(rng, depth - 1, python);
    let b = expr(rng, depth - 1, python);
    match rng.below(13) {
        0 => "gpu_probe_optional()".into(),
        1 => "gpu_probe_required()".into(),
        2 => "cpu_probe()".into(),
        3 => format!("haversine_km({a}, {b}, 1.0, 2.0)"),
        4 => format!("black_scholes_call({a}, 100, 1, 0.01, 0.2)"),
        5 => "iproc()".into(),
        6 => "nproc()".into(),
        7 if python => format!("py_twice({a})"),
        8 => format!(
            "({a}) {} ({b})",
            rng.pick(&["+", "-", "*", "/", "%", "=", "<", "||"])
        ),
        9 => format!("CASE WHEN {a} > {b} THEN {a} ELSE {b} END"),
        10 => format!("coalesce({a}, {b})"),
        11 => format!(
            "CAST({a} AS {})",
            rng.pick(&["DOUBLE", "BIGINT", "VARCHAR", "DECIMAL(18,3)"])
        ),
        _ => format!("abs({a})"),
    }
}

/// A source of rows: the table, a sub-select, or a series.
fn source(rng: &mut Rng, depth: usize, python: bool) -> String {
    match rng.below(5) {
        0 if depth > 0 => format!("({}) AS sub", select(rng, depth - 1, python, true)),
        1 => "generate_series(1, 50) AS gs(id)".into(),
        _ => "t".into(),
    }
}

/// A SELECT; `plain` asks for one whose columns an outer query can use by the names id, x, g, s.
fn select(rng: &mut Rng, depth: usize, python: bool, plain: bool) -> String {
    if plain {
        return format!(
            "SELECT id, {} AS x, g, s FROM t WHERE {} IS NOT NULL",
            expr(rng, depth, python),
            column(rng)
        );
    }
    let from = source(rng, depth, python);
    let filter = if rng.chance(30) {
        format!(" WHERE {} > {}", column(rng), number(rng))
    } else {
        String::new()
    };
    let limit = if rng.chance(30) {
        format!(" LIMIT {}", rng.below(20))
    } else {
        String::new()
    };
    match rng.below(8) {
        // A SCALAR EMITS call, alone or beside other items.
        0 => format!(
            "SELECT explode({}){} FROM {from}{filter}{limit}",
            rng.pick(&["2", "g", "id % 3", "-1"]),
            if rng.chance(50) { ", id" } else { "" }
        ),
        // SET EMITS per group, on the GPUs or not.
        1 => format!(
            "SELECT {}(x) FROM {from}{filter} GROUP BY {}",
            rng.pick(&[
                "group_probe",
                "gpu_group_probe",
                if python { "py_emit" } else { "group_probe" }
            ]),
            rng.pick(&["g", "iproc()", "id % 3"])
        ),
        // SET RETURNS (an aggregate) per group.
        2 => format!(
            "SELECT {}, {}(x) FROM {from}{filter} GROUP BY {}",
            rng.pick(&["g", "iproc()"]),
            rng.pick(&[
                "group_sum",
                if python { "py_count" } else { "group_sum" },
                "sum"
            ]),
            rng.pick(&["1", "g", "iproc()"])
        ),
        // A sub-select in the select list.
        3 => format!(
            "SELECT {}, (SELECT {} FROM t LIMIT 1) FROM {from}{filter}{limit}",
            expr(rng, depth, python),
            expr(rng, depth, python)
        ),
        _ => {
            let n = 1 + rng.below(3);
            let items: Vec<String> = (0..n).map(|_| expr(rng, depth, python)).collect();
            format!("SELECT {} FROM {from}{filter}{limit}", items.join(", "))
        }
    }
}

/// A deeply nested statement: a long operator chain, boolean chain or UNION ALL chain, nested
/// brackets, subqueries or struct values, from a few levels to far past the engine's limit
/// (which must refuse it with 54001, never overflow a stack).
pub fn deep(rng: &mut Rng) -> String {
    let n = *rng.pick(&[8usize, 60, 400, 1_500, 2_500, 20_000]);
    let repeat = |piece: &str, n: usize| piece.repeat(n);
    match rng.below(7) {
        0 => format!("SELECT 1{}", repeat(" + 1", n)),
        1 => format!(
            "SELECT count(*) FROM t WHERE {}",
            (0..n)
                .map(|i| format!("id = {i}"))
                .collect::<Vec<_>>()
                .join(" OR ")
        ),
        2 => format!("SELECT 1 AS x{}", repeat(" UNION ALL SELECT 2", n)),
        3 => format!("SELECT {}1{}", repeat("(", n), repeat(")", n)),
        4 => format!(
            "SELECT {} 1 {}",
            repeat("(SELECT", n.min(400)),
            repeat(")", n.min(400))
        ),
        5 => format!(
            "SELECT {}1{}",
            repeat("named_struct('a', ", n.min(400)),
            repeat(")", n.min(400))
        ),
        _ => format!("SELECT {}", repeat("NOT ", n) + "true"),
    }
}

/// One statement: a SELECT, sometimes under EXPLAIN, sometimes a [`deep`] one.
pub fn statement(rng: &mut Rng, python: bool) -> String {
    if rng.below(20) == 0 {
        return deep(rng);
    }
    let depth = 1 + rng.below(3);
    let query = select(rng, depth, python, false);
    match rng.below(10) {
        0 => format!("EXPLAIN {query}"),
        1 => format!("EXPLAIN ANALYZE {query}"),
        _ => query,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_vary_and_mention_udfs() {
        let mut rng = Rng::new(3);
        let all: Vec<String> = (0..200).map(|_| statement(&mut rng, true)).collect();
        let distinct: std::collections::HashSet<&String> = all.iter().collect();
        assert!(distinct.len() > 150);
        for needle in [
            "explode(", "iproc()", "EXPLAIN", "py_", "(SELECT", "GROUP BY",
        ] {
            assert!(all.iter().any(|s| s.contains(needle)), "{needle}");
        }
    }
}
