#!/usr/bin/env bash
# Runs every test: prepares the Python packages the script-UDF tests use (pandas, numpy) in a
# virtualenv under target/, puts it first on PATH (so `builtin_python3` finds it), adds NVIDIA's
# NVRTC wheel to LD_LIBRARY_PATH (the kernels' compile tests), then runs `cargo test --workspace`, then the GPU tests again on the fake CUDA driver
# (scripts/fake-cuda/test.sh). If the packages cannot be installed (no venv module, no network),
# it says so and goes on: those tests then check the "missing package" error and print SKIPPED.
# Under CI (`CI` set, as `.ci/run` does) nothing may be skipped: a prerequisite that cannot be
# installed (pandas, numpy, NVRTC, a C++ compiler for the fake CUDA driver) fails the run, and
# the tests themselves fail instead of printing SKIPPED.
#
# Then the Python package (python/): it is built in the dev profile, reusing what `cargo test`
# just built, into a fresh virtualenv (target/python-pkg-env) with pytest, pandas, pyarrow,
# numpy, polars, SQLAlchemy, Jupyter (nbclient, ipykernel, JupySQL: notebooks run in a kernel), the
# ADBC Flight SQL driver and PEP 249's compliance suite (dbapi-compliance) from
# PyPI, and its pytest suite runs (test_server.py
# drives the `accelsql serve` binary that `cargo test` built). That part needs PyPI: without it the script fails.
# Arguments go to `cargo test` only.
set -euo pipefail
cd "$(dirname "$0")/.."
strict=""
case "${CI:-}" in "" | 0 | false | FALSE) ;; *) strict=1 ;; esac
# A prerequisite is missing: under CI that fails the run, elsewhere its tests are skipped.
missing() {
  if [ -n "$strict" ]; then
    echo "test-all: ERROR: $1 (CI is set, so nothing may be skipped)" >&2
    exit 1
  fi
  echo "test-all: WARNING: $1; its tests will be skipped" >&2
}
# The fake CUDA driver is C++: install a compiler where the machine lets us (Debian, as root).
if ! command -v "${CXX:-c++}" >/dev/null 2>&1 && [ -n "$strict" ] && [ "$(id -u)" = 0 ] \
  && command -v apt-get >/dev/null 2>&1; then
  echo "test-all: installing g++ for the fake CUDA driver"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
fi
base_python="$(command -v python3)"
venv="${ACCELSQL_TEST_VENV:-$PWD/target/python-test-env}"
if [ ! -x "$venv/bin/python3" ] || ! "$venv/bin/python3" -c "import pandas, numpy" 2>/dev/null; then
  echo "test-all: preparing Python test packages in $venv"
  if python3 -m venv "$venv" && "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check pandas numpy; then
    :
  else
    missing "could not install pandas/numpy into $venv"
  fi
fi
if [ -x "$venv/bin/python3" ]; then
  export PATH="$venv/bin:$PATH"
  # NVIDIA's NVRTC wheel, so that the built-in kernels are compiled by the real CUDA compiler
  # for every architecture it supports (udf-runtime gpu::nvrtc tests; SKIPPED without it).
  nvrtc_dirs=("$venv"/lib/python3*/site-packages/nvidia/cu13/lib)
  if [ ! -e "${nvrtc_dirs[0]}/libnvrtc.so.13" ]; then
    "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check 'nvidia-cuda-nvrtc>=13,<14' \
      || missing "could not install NVRTC (nvidia-cuda-nvrtc)"
    nvrtc_dirs=("$venv"/lib/python3*/site-packages/nvidia/cu13/lib)
  fi
  if [ -e "${nvrtc_dirs[0]}/libnvrtc.so.13" ]; then
    export LD_LIBRARY_PATH="${nvrtc_dirs[0]}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
# Incremental artifacts only help repeated local builds; a one-shot run skips them (disk).
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
started=$SECONDS
cargo test --workspace "$@"
echo "test-all: cargo test (build and run) took $((SECONDS - started)) s"

# The GPU path end to end on the fake CUDA driver (kernels run on the host; scripts/fake-cuda).
started=$SECONDS
bash scripts/fake-cuda/test.sh
echo "test-all: the fake CUDA driver's runs took $((SECONDS - started)) s"

# The dashboard's browser test drives Debian's headless Chromium through WebDriver.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test-all: installing chromium and chromium-driver (the dashboard's browser test)"
    { apt-get install -y -q chromium chromium-driver || { apt-get update -q && apt-get install -y -q chromium chromium-driver; }; } >/dev/null 2>&1 \
      || echo "test-all: WARNING: could not install chromium; the dashboard's browser test will be skipped" >&2
  else
    echo "test-all: WARNING: no chromium/chromedriver and no root to install them; the dashboard's browser test will be skipped" >&2
  fi
fi

# The Python package, in a fresh virtualenv.
pkg_env="$PWD/target/python-pkg-env"
echo "test-all: building the Python package into a fresh virtualenv $pkg_env"
rm -rf "$pkg_env"
started=$SECONDS
if ! "$base_python" -m venv "$pkg_env" \
  || ! "$pkg_env/bin/python" -m pip install --quiet --disable-pip-version-check pytest pandas pyarrow numpy \
    adbc-driver-flightsql adbc-driver-manager dbapi-compliance polars 'sqlalchemy>=2' \
    nbclient nbformat ipykernel jupysql deltalake 'pyexasol>=3,<4' 'sqlalchemy-exasol>=7,<8' prometheus-client selenium; then
  echo "test-all: ERROR: could not create $pkg_env with pytest, pandas, pyarrow, numpy, polars, SQLAlchemy, Jupyter (nbclient, ipykernel, JupySQL), the ADBC Flight SQL driver the DB-API compliance suite (dbapi-compliance), pyexasol 3, sqlalchemy-exasol 7, prometheus-client and selenium from PyPI;" \
    "the Python package's tests need them" >&2
  exit 1
fi
echo "test-all: the package's virtualenv took $((SECONDS - started)) s"
# maturin builds the package alone; with the workspace's features it reuses the build above.
if ! "$base_python" python/tools/feature_parity.py; then
  # A second build of DataFusion costs CI most of its time budget: under CI that is an error.
  if [ -n "$strict" ]; then
    echo "test-all: ERROR: the package's dependencies would be built a second time (see above)" >&2
    exit 1
  fi
  echo "test-all: WARNING: the package's dependencies will be built a second time (see above)" >&2
fi
started=$SECONDS
MATURIN_PEP517_ARGS="--profile dev" CARGO_TARGET_DIR="$PWD/target" \
  "$pkg_env/bin/python" -m pip install --quiet --disable-pip-version-check ./python
echo "test-all: built and installed the Python package in $((SECONDS - started)) s"
# SQLAlchemy's own dialect compliance suite against accelsql:// (counts printed; fails below a floor).
"$pkg_env/bin/python" python/sqla_suite/run.py
# test_server.py starts `accelsql serve` from the binary `cargo test` built.
export ACCELSQL_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/accelsql"
exec "$pkg_env/bin/python" -m pytest -q -p no:cacheprovider python/tests
