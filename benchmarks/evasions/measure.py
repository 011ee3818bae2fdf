"""Peak resident memory of `accelsql serve` while a restricted session runs each statement that
used to slip past its memory budget (issue 53, item 6), one fresh server per statement.

Usage: python benchmarks/evasions/measure.py [path/to/accelsql]  (a release build gives the
honest figures; needs adbc-driver-flightsql). Prints a Markdown table: the statement, its
outcome (the error code, or `ok`), and the server's peak RSS (VmHWM) against its budget."""

import os
import re
import subprocess
import sys
import tempfile
import time

import adbc_driver_flightsql.dbapi as flightsql

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/accelsql"
MB = 1024 * 1024

# (label, pool, session budget, statement)
CASES = [
    ("replace", "1GiB", "256MiB",
     "SELECT length(replace(repeat('x', 10000000), 'x', repeat('y', 100)))"),
    ("regexp_replace", "1GiB", "256MiB",
     "SELECT length(regexp_replace(repeat('x', 10000000), 'x', repeat('y', 100), 'g'))"),
    ("concat", "1GiB", "256MiB",
     "SELECT length(concat(repeat('x', 200000000), repeat('x', 200000000), "
     "repeat('x', 200000000), repeat('x', 200000000)))"),
    ("array_repeat", "1GiB", "256MiB",
     "SELECT cardinality(array_repeat(repeat('x', 1000), 2000000))"),
    ("translate", "1GiB", "256MiB",
     "SELECT length(translate(repeat('x', 300000000), 'x', 'y'))"),
    ("repeat 800 MB, default budgets", None, None,
     "SELECT length(repeat('x', 800000000))"),
    ("baseline SELECT 1", "1GiB", "256MiB", "SELECT 1"),
]


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def run(label, pool, budget, sql):
    with tempfile.TemporaryDirectory() as tmp:
        args = [BIN, "serve", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "d"),
                "--restricted", "--quiet"]
        if pool:
            args += ["--memory-limit", pool, "--session-memory-limit", budget]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            url = re.match(r"listening: (\S+)", proc.stdout.readline()).group(1)
            token = re.match(r"token: (\S+)", proc.stdout.readline()).group(1)
            before = peak_rss(proc.pid)
            started = time.monotonic()
            with flightsql.connect(url, db_kwargs={"username": "u", "password": token},
                                   autocommit=True) as conn:
                cur = conn.cursor()
                try:
                    cur.execute(sql)
                    cur.fetchall()
                    outcome = "ok"
                except Exception as e:  # noqa: BLE001 - any driver error: report its code
                    m = re.search(r"\[([0-9A-Z]{5})\]", str(e))
                    outcome = m.group(1) if m else type(e).__name__
            elapsed = time.monotonic() - started
            return outcome, before, peak_rss(proc.pid), elapsed
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main():
    print("| statement | pool / session budget | outcome | peak RSS before | peak RSS after | s |")
    print("|---|---|---|---:|---:|---:|")
    for label, pool, budget, sql in CASES:
        outcome, before, after, elapsed = run(label, pool, budget, sql)
        limits = f"{pool} / {budget}" if pool else "defaults"
        print(f"| {label} | {limits} | {outcome} | {before / MB:.0f} MiB | {after / MB:.0f} MiB "
              f"| {elapsed:.2f} |")


if __name__ == "__main__":
    main()
