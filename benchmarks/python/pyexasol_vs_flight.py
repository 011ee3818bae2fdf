"""The Exasol port against accelsql's own Flight SQL port: the same 1M x 4 table fetched into Python
by pyexasol (unchanged, over `serve --exasol-port`) and by accelsql's package (over Flight SQL),
from one server, in one run.

Needs a release build of accelsql (a debug build's figures say little) and a virtualenv with
pyexasol, pandas and accelsql's package with its server extra:

    cargo build --release -p accelsql-cli --bin accelsql
    python3 -m venv /tmp/bench-env
    /tmp/bench-env/bin/pip install 'pyexasol>=3,<4' pandas './python[server]'
    /tmp/bench-env/bin/python benchmarks/python/pyexasol_vs_flight.py \\
        --binary target/release/accelsql [--rows 1000000] [--runs 5] [--warmup 1]

The table is `value AS a, value * 2 AS b, CAST(value AS DOUBLE) / 3 AS c, value % 97 AS d` over
1..=rows (the `server` suite's wide table), made in the server's memory. Each way of fetching
`SELECT * FROM t` runs `--warmup` untimed times, then `--runs` timed ones:

- pyexasol `export_to_pandas` (its HTTP transport: CSV through a tunnel, parsed by pandas),
- pyexasol `execute(...).fetchall()` (JSON over the WebSocket, rows of tuples),
- accelsql's `export_to_pandas` over Flight SQL (Arrow, converted by pyarrow),
- accelsql's `execute(...).fetchall()` over Flight SQL (Arrow, rows of tuples).

Prints each median, the ratios to Flight's `export_to_pandas`, and one JSON line with every
sample. The server is stopped by its pid at the end.
"""

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import time


def timed(fn, warmup, runs):
    for _ in range(warmup):
        fn()
    samples = []
    rows = None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - start)
        rows = len(result)
        del result
    return {"samples_s": samples, "median_s": statistics.median(samples), "rows": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True, help="the accelsql binary (release)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()

    import accelsql
    import pandas
    import pyexasol

    server = subprocess.Popen(
        [args.binary, "serve", "--listen", "127.0.0.1:0", "--exasol-port", "0", "--in-memory",
         "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        lines = [server.stdout.readline() for _ in range(4)]
        flight = re.match(r"listening: (\S+)", lines[0]).group(1)
        token = re.match(r"token: (\S+)", lines[1]).group(1)
        exasol = re.match(r"exasol: (\S+)", lines[2]).group(1)

        exa = pyexasol.connect(dsn=exasol, user="sys", password=token, encryption=False,
                               compression=False)
        exa.execute(
            "CREATE TABLE t AS SELECT value AS a, value * 2 AS b, CAST(value AS DOUBLE) / 3 AS c, "
            f"value % 97 AS d FROM generate_series(1, {args.rows})")
        own = accelsql.connect(flight, user="sys", password=token)
        sql = "SELECT * FROM t"
        results = {
            "pyexasol export_to_pandas": timed(lambda: exa.export_to_pandas(sql), args.warmup, args.runs),
            "pyexasol fetchall": timed(lambda: exa.execute(sql).fetchall(), args.warmup, args.runs),
            "flight export_to_pandas": timed(lambda: own.export_to_pandas(sql), args.warmup, args.runs),
            "flight fetchall": timed(lambda: own.execute(sql).fetchall(), args.warmup, args.runs),
        }
        exa.close()
        own.close()
    finally:
        server.terminate()
        server.wait(timeout=30)

    anchor = results["flight export_to_pandas"]["median_s"]
    print(f"{args.rows:,} rows x 4 columns, {args.runs} runs after {args.warmup} warm-up, "
          f"one server on loopback")
    for name, r in results.items():
        assert r["rows"] == args.rows, (name, r["rows"])
        print(f"  {name:28s} median {r['median_s']:8.3f} s   {r['median_s'] / anchor:6.2f}x "
              f"flight export_to_pandas")
    print(json.dumps({
        "benchmark": "pyexasol_vs_flight",
        "rows": args.rows,
        "runs": args.runs,
        "warmup": args.warmup,
        "results": results,
        "python": sys.version.split()[0],
        "pyexasol": pyexasol.__version__,
        "pandas": pandas.__version__,
        "machine": platform.machine(),
    }))


if __name__ == "__main__":
    main()
