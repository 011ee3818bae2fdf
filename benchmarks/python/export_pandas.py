"""accelsql's export_to_pandas against DuckDB's .df(): 10M rows x 4 columns, same data, same run.

Needs the package built in release and duckdb beside it (a release build of DataFusion takes a
quarter of an hour on 2 cores):

    python3 -m venv /tmp/bench-env
    /tmp/bench-env/bin/pip install ./python duckdb pandas
    /tmp/bench-env/bin/python benchmarks/python/export_pandas.py [--rows 10000000] [--runs 5] [--warmup 1]

One data set (BIGINT id, DOUBLE x, VARCHAR s with 1000 distinct values, BOOLEAN b, ~5% NULLs
in x and s) is generated with numpy/pyarrow and loaded into both engines' memory (accelsql:
import_from_arrow; DuckDB: CREATE TABLE AS from the Arrow table). Each side then runs
`SELECT * FROM t` into a pandas DataFrame (`conn.export_to_pandas(sql)` / `con.sql(sql).df()`),
`--warmup` untimed runs, then `--runs` timed ones. Prints the medians, the ratio (accelsql /
DuckDB; below 1 means accelsql is faster), the frames' dtypes (with pandas 3 both sides give
Arrow-backed strings), and one JSON line with everything.
"""

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np
import pyarrow as pa


def make_data(rows, seed=7):
    rng = np.random.default_rng(seed)
    words = np.array([f"city_{i:04d}" for i in range(1000)], dtype=object)
    x_null = rng.random(rows) < 0.05
    s_null = rng.random(rows) < 0.05
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "x": pa.array(rng.random(rows) * 1000.0, mask=x_null),
            "s": pa.array(words[rng.integers(0, 1000, rows)], type=pa.string(), mask=s_null),
            "b": pa.array(rng.random(rows) < 0.5),
        }
    )


def timed(fn, warmup, runs):
    shape, dtypes = None, None
    for _ in range(warmup):
        shape = fn().shape
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        df = fn()
        samples.append(time.perf_counter() - start)
        shape, dtypes = df.shape, {name: str(dtype) for name, dtype in df.dtypes.items()}
        del df
    return {
        "samples_s": samples,
        "median_s": statistics.median(samples),
        "shape": list(shape),
        "dtypes": dtypes,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()

    import accelsql
    import duckdb
    import pandas as pd

    data = make_data(args.rows)
    sql = "SELECT * FROM t"

    conn = accelsql.connect(simulated_gpus=0)
    conn.import_from_arrow(data, "t")
    duck = duckdb.connect()
    duck.register("data_view", data)
    duck.execute("CREATE TABLE t AS SELECT * FROM data_view")
    duck.unregister("data_view")

    ours = timed(lambda: conn.export_to_pandas(sql), args.warmup, args.runs)
    peer = timed(lambda: duck.sql(sql).df(), args.warmup, args.runs)
    ratio = ours["median_s"] / peer["median_s"]

    print(f"export of {args.rows:,} rows x 4 columns to pandas (median of {args.runs}, {args.warmup} warm-up):")
    print(f"  accelsql export_to_pandas  {ours['median_s'] * 1e3:9.1f} ms")
    print(f"  DuckDB     .df()           {peer['median_s'] * 1e3:9.1f} ms")
    print(f"  ratio accelsql / DuckDB    {ratio:9.2f}   ({'faster' if ratio < 1 else 'slower'} than DuckDB)")
    same = "the same" if ours["dtypes"] == peer["dtypes"] else "DIFFERENT"
    print(f"  column dtypes: {same} on both sides {ours['dtypes']}")
    print(
        json.dumps(
            {
                "benchmark": "export_pandas",
                "rows": args.rows,
                "accelsql": {**ours, "version": accelsql.__version__},
                "duckdb": {**peer, "version": duckdb.__version__},
                "ratio": ratio,
                "pandas": pd.__version__,
                "pyarrow": pa.__version__,
                "python": platform.python_version(),
                "machine": platform.machine(),
            }
        )
    )
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
