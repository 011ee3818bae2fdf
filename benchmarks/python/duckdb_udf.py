"""DuckDB peers of the python_udf benchmark: the same Python scalar UDF in native and arrow mode.

Run by `cargo bench -p accelsql-benchmarks --bench python_udf` (with the interpreter of its
virtualenv, which has duckdb, pyarrow and numpy), or by hand:

    python3 benchmarks/python/duckdb_udf.py --rows 1000000 --runs 11 [--warmup 2]

The function is f(x DOUBLE) -> DOUBLE = x * 2.0 + 1.0, registered with `con.create_function`:
- native: `type='native'`, called once per row with a Python float;
- arrow:  `type='arrow'`, called once per chunk with a pyarrow array (pyarrow.compute).

Each case runs `SELECT sum(f(CAST(i AS DOUBLE))) FROM range(N) t(i)`, `--warmup` untimed runs,
then `--runs` timed ones. Prints one JSON object on stdout: versions, threads, and per case the
samples in seconds, their median/min/max, and the query's result (which must be N * N).
"""

import argparse
import json
import platform
import statistics
import sys
import time


def _double_type():
    """DuckDB's DOUBLE type object (duckdb.sqltypes since 1.4, duckdb.typing before)."""
    try:
        from duckdb.sqltypes import DOUBLE
    except ImportError:
        from duckdb.typing import DOUBLE
    return DOUBLE


def _f_native(x):
    return x * 2.0 + 1.0


def _make_f_arrow():
    import pyarrow.compute as pc

    def f_arrow(x):
        return pc.add(pc.multiply(x, 2.0), 1.0)

    return f_arrow


def _time_case(con, query, warmup, runs):
    result = None
    for _ in range(warmup):
        result = con.execute(query).fetchone()[0]
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        result = con.execute(query).fetchone()[0]
        samples.append(time.perf_counter() - start)
    return {
        "samples_s": samples,
        "median_s": statistics.median(samples) if samples else None,
        "min_s": min(samples) if samples else None,
        "max_s": max(samples) if samples else None,
        "result": result,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1000000)
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--cases", default="native,arrow", help="comma-separated: native, arrow")
    args = p.parse_args(argv)

    import duckdb
    import pyarrow

    double = _double_type()
    con = duckdb.connect()
    con.create_function("f_native", _f_native, [double], double, type="native")
    con.create_function("f_arrow", _make_f_arrow(), [double], double, type="arrow")
    out = {
        "rows": args.rows,
        "python": sys.executable,
        "python_version": platform.python_version(),
        "duckdb": duckdb.__version__,
        "pyarrow": pyarrow.__version__,
        "threads": con.execute("SELECT current_setting('threads')").fetchone()[0],
    }
    for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
        if case not in ("native", "arrow"):
            p.error("unknown case %r" % case)
        query = "SELECT sum(f_%s(CAST(i AS DOUBLE))) FROM range(%d) t(i)" % (case, args.rows)
        out[case] = _time_case(con, query, args.warmup, args.runs)
    con.close()
    json.dump(out, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
