"""DuckDB peer of the accelsql benchmark harness: runs SQL cases on DuckDB and prints timings.

Run by `accelsql-benchmarks` (with its virtualenv's interpreter, which has duckdb) as

    python3 benchmarks/python/duckdb_peer.py < spec.json

The spec is one JSON object:

    {"setup": ["CREATE TABLE points AS SELECT * FROM read_parquet('...')", ...],
     "cases": [{"name": "geo@1000", "sql": "SELECT ..."}, ...],
     "warmup": 1, "runs": 5, "max_rows": 20}

An optional "database" names a DuckDB database file to run in (else in memory). The setup
statements run once, untimed (loading Parquet into DuckDB tables, so the timed
queries run on memory as the in-process engines' do). Each case then runs `warmup` untimed and
`runs` timed times (`execute` + `fetchall`, timed with perf_counter). One line `tick` goes to
stderr per run (the harness's progress). Stdout gets one JSON object: versions, threads, and per
case its samples in seconds and its first `max_rows` rows -- or the error it raised.
"""

import json
import platform
import sys
import time


def _version(module):
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - a missing optional module is just "absent"
        return None


def _tick():
    sys.stderr.write("tick\n")
    sys.stderr.flush()


def main():
    spec = json.load(sys.stdin)
    import duckdb

    con = duckdb.connect(spec.get("database") or ":memory:")
    out = {
        "duckdb": duckdb.__version__,
        "python": platform.python_version(),
        "pyarrow": _version("pyarrow"),
        "numpy": _version("numpy"),
        "threads": con.execute("SELECT current_setting('threads')").fetchone()[0],
        "cases": {},
    }
    start = time.perf_counter()
    for sql in spec.get("setup", []):
        con.execute(sql)
    out["setup_s"] = time.perf_counter() - start
    warmup = int(spec.get("warmup", 1))
    runs = int(spec.get("runs", 5))
    max_rows = int(spec.get("max_rows", 20))
    for case in spec.get("cases", []):
        samples = []
        rows = []
        try:
            for i in range(warmup + runs):
                t0 = time.perf_counter()
                rows = con.execute(case["sql"]).fetchall()
                elapsed = time.perf_counter() - t0
                if i >= warmup:
                    samples.append(elapsed)
                _tick()
            out["cases"][case["name"]] = {
                "samples_s": samples,
                "rows": [list(r) for r in rows[:max_rows]],
            }
        except Exception as e:  # noqa: BLE001 - reported per case, the others still run
            out["cases"][case["name"]] = {"error": "%s: %s" % (type(e).__name__, e)}
    con.close()
    json.dump(out, sys.stdout, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
