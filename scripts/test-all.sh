#!/usr/bin/env bash
# Runs every test: prepares the Python packages the script-UDF tests use (pandas, numpy) in a
# virtualenv under target/, puts it first on PATH (so `builtin_python3` finds it), then runs
# `cargo test --workspace`. If the packages cannot be installed (no venv module, no network),
# it says so and goes on: those tests then check the "missing package" error and print SKIPPED.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ACCELSQL_TEST_VENV:-$PWD/target/python-test-env}"
if [ ! -x "$venv/bin/python3" ] || ! "$venv/bin/python3" -c "import pandas, numpy" 2>/dev/null; then
  echo "test-all: preparing Python test packages in $venv"
  if python3 -m venv "$venv" && "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check pandas numpy; then
    :
  else
    echo "test-all: WARNING: could not install pandas/numpy; their tests will be skipped" >&2
  fi
fi
if [ -x "$venv/bin/python3" ]; then
  export PATH="$venv/bin:$PATH"
fi
# Incremental artifacts only help repeated local builds; a one-shot run skips them (disk).
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
exec cargo test --workspace "$@"
