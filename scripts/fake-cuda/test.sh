#!/usr/bin/env bash
# Runs the GPU tests on the fake CUDA driver (see README.md): the CPU/GPU differential tests of
# udf-runtime and the GPU SQL tests of the engine (and the differential tests once more under a
# second schedule of the streams' work, and the engine's test of a device that fails), then a
# smoke run of the GPU benchmark's GPU paths, with ACCELSQL_REQUIRE_GPU set so that a
# device that fails to open fails the run instead of skipping. Kernels run on the host: this
# checks the GPU path's logic, not a GPU. Without a C++ compiler it says SKIPPED and succeeds,
# except under CI (`CI` set), where that fails the run.
# Arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
cxx="${CXX:-c++}"
if ! command -v "$cxx" >/dev/null 2>&1; then
  case "${CI:-}" in
    "" | 0 | false | FALSE) ;;
    *)
      echo "fake-cuda: ERROR: no C++ compiler '$cxx', and CI is set: the GPU path must run (install g++)" >&2
      exit 1
      ;;
  esac
  echo "fake-cuda: SKIPPED (no C++ compiler '$cxx'; install g++ to run the GPU path on the host)" >&2
  exit 0
fi
lib="$(bash scripts/fake-cuda/build.sh target/fake-cuda)"
echo "fake-cuda: driver, NVRTC and NVML in $lib"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ACCELSQL_REQUIRE_GPU=1
export ACCELSQL_FAKE_CUDA_BUILD_DIR="$lib/modules"
unset ACCELSQL_SIMULATED_GPUS CUDA_VISIBLE_DEVICES
# --workspace keeps the features of `cargo test --workspace`, so nothing is rebuilt. First the
# lazy schedule (work runs when the host waits for it) with two devices, then the differential
# tests again with each wait running the other streams first (a missing cross-stream dependency
# shows there), then a device that fails mid-statement (its own process: the failure is sticky).
ACCELSQL_FAKE_CUDA_SCHEDULE=lazy ACCELSQL_FAKE_CUDA_DEVICES=2 \
  cargo test --workspace --test gpu_differential --test gpu_sql --test gpu_sharing_device "$@"
echo "fake-cuda: the differential tests again, other streams first (ACCELSQL_FAKE_CUDA_SCHEDULE=reversed)"
ACCELSQL_FAKE_CUDA_SCHEDULE=reversed cargo test --workspace --test gpu_differential "$@"
echo "fake-cuda: a device that fails mid-statement (ACCELSQL_FAKE_CUDA_FAIL_LAUNCH=haversine_km:2)"
ACCELSQL_FAKE_CUDA_FAIL_LAUNCH=haversine_km:2 cargo test --workspace --test gpu_faults "$@"
echo "fake-cuda: a device of 1 MiB (ACCELSQL_FAKE_CUDA_MEMORY_MIB=1)"
ACCELSQL_FAKE_CUDA_MEMORY_MIB=1 cargo test --workspace --test gpu_faults "$@"
echo "fake-cuda: the GPU benchmark's GPU paths, once each (a smoke run: it reports no GPU figure)"
ACCELSQL_BENCH_FAKE_GPU=1 cargo bench --workspace --profile dev --bench gpu_builtins -- \
  --max-rows 10000 --runs 1
