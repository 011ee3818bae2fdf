"""Runs SQLAlchemy's dialect compliance suite against ``accelsql://`` and reports how many of its
tests pass, fail and are skipped (requirements the engine does not meet, see requirements.py).
Exits non-zero when fewer than MIN_PASSED pass: the dialect got worse. The failures are what the
engine does differently (no transactions, LIKE escapes, true division of integers, …); the
counts go to stdout and to the file named by the first argument, if any."""

import os
import re
import subprocess
import sys

#: Tests that passed when the dialect was written (2026-11-28: 420 of 1397, 932 skipped).
MIN_PASSED = 400

here = os.path.dirname(os.path.abspath(__file__))
run = subprocess.run(
    [sys.executable, "-m", "pytest", "-q", "-rf", "--maxfail=100000"],
    cwd=here,
    capture_output=True,
    text=True,
    timeout=900,
)
summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary)}
passed = counts.get("passed", 0)
failed_tests = [line.split()[1] for line in run.stdout.splitlines() if line.startswith("FAILED ")]
print(f"sqlalchemy compliance suite: {summary.strip('= ')}")
for name in failed_tests:
    print(f"  failed: {name}")
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as out:
        out.write(summary + "\n")
if passed < MIN_PASSED:
    print(run.stdout[-8000:], run.stderr[-4000:], sep="\n", file=sys.stderr)
    print(f"sqlalchemy compliance suite: {passed} passed, fewer than {MIN_PASSED}", file=sys.stderr)
    sys.exit(1)
