#!/usr/bin/env bash
# Runs the GPU verification on a machine with an NVIDIA GPU, from what scripts/gpu-verify/pack.sh
# packed (no Rust toolchain, no network needed). Run from the repository root (the .slt files are
# read from sql-tests/slt). Every step runs even if an earlier one failed, within a time budget
# (KIT_BUDGET seconds, default 480: a step that would not fit is skipped and says so). Each step's
# output goes to a log; what comes back under $OUT is at most 7 files:
#   summary.txt        step, exit code, seconds; driver/CUDA versions; device memory before/after
#   logs.tar.gz        every step's log, the harness's REPORT.md and plots
#   gpu_builtins.json  the GPU built-ins benchmark's figures
#   harness.json       the harness's results.json (vectors, geo, options, scheduler suites)
#   harness.md         the harness's REPORT.md
# Steps, most important first: facts (driver, libraries, NVRTC, torch, CuPy, memory baseline),
# `accelsql gpu status`, the differential tests (ACCELSQL_REQUIRE_GPU: no device fails), the
# built-ins through SQL, PyTorch/CuPy scripts under a SCRIPT_LANGUAGES alias, facts for GPU
# sharing by memory (NVML per-process memory, MPS), sharing by memory through SQL (two PyTorch
# scripts within their declarations at once, one past it stopped), the built-ins
# benchmark (bandwidth, crossover, NVRTC cold compile, per-call overhead), `accelsql serve` with
# two Flight SQL clients taking turns (and the server's device memory between rounds), the
# harness's GPU suites, the .slt suites on this machine's GPUs, and device memory at the end.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-verify.XXXXXX")"
logs="$work/logs"
bin="$work/bin"
mkdir -p "$logs" "$bin"
summary="$out/summary.txt"
budget="${KIT_BUDGET:-480}"
scale="${KIT_SCALE:-0.5}"
: > "$summary"
echo "kit: commit $(cat "$here/COMMIT" 2>/dev/null), budget ${budget}s, harness scale $scale" | tee -a "$summary"

# step NAME LIMIT_SECONDS CMD...: runs CMD with a time limit (cut to what is left of the budget,
# keeping 25 s for the end), logs it, records its exit code; 124 means it ran out of time.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - SECONDS - 25))
  if [ "$left" -lt 15 ]; then
    printf '%-16s skipped (budget spent)\n' "$name" | tee -a "$summary"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local started=$SECONDS
  echo "=== $name (limit ${limit}s): $*" > "$logs/$name.log"
  timeout -k 5 "$limit" "$@" >> "$logs/$name.log" 2>&1
  local rc=$?
  tail -n 30 "$logs/$name.log"
  printf '%-16s rc=%-4s %4ss\n' "$name" "$rc" "$((SECONDS - started))" | tee -a "$summary"
}

memory() {
  nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.used,memory.total --format=csv,noheader 2>&1
}

# NVRTC may live outside the loader's path (a CUDA toolkit, or a pip wheel of torch).
extra=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \
  "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)/nvidia" \
  -name 'libnvrtc.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
# Never the CUDA toolkit's stubs (their libcuda.so answers CUDA_ERROR_STUB_LIBRARY): the
# driver's own libraries must be found.
export LD_LIBRARY_PATH=$(printf '%s' "${extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" | tr ':' '\n' \
  | grep -v -E '(^|/)stubs/?$' | grep -v '^$' | paste -sd: -)
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$summary"
{
  echo "device memory before (index, name, uuid, driver, used, total):"
  memory
  echo "CUDA (nvidia-smi): $(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1)"
} | tee -a "$summary"

facts() {
  nvidia-smi || echo "nvidia-smi: not found or failed"
  nvidia-smi -q | head -60 || true
  echo "--- libraries (ldconfig)"
  ldconfig -p | grep -E 'libcuda\.so|libnvrtc|libnvidia-ml' || true
  echo "--- libraries (files)"
  find / -xdev \( -name 'libcuda.so*' -o -name 'libnvrtc.so*' -o -name 'libnvrtc-builtins.so*' \
    -o -name 'libnvidia-ml.so*' \) 2>/dev/null | sort | head -40
  echo "--- NVRTC as the loader finds it (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
  python3 - <<'PY' || true
import ctypes
for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"):
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        continue
    major, minor, n = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    lib.nvrtcGetNumSupportedArchs(ctypes.byref(n))
    archs = (ctypes.c_int * n.value)()
    lib.nvrtcGetSupportedArchs(archs)
    print(name, "version %d.%d" % (major.value, minor.value), "archs", list(archs))
    break
else:
    print("libnvrtc: not loadable by name")
PY
  echo "--- python3: $(command -v python3)"
  python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' \
    || echo "torch: not importable"
  python3 -c 'import cupy; print("cupy", cupy.__version__, "devices", cupy.cuda.runtime.getDeviceCount())' \
    || echo "cupy: not importable"
  python3 -c 'import pyarrow, pandas; print("pyarrow", pyarrow.__version__, "pandas", pandas.__version__)' \
    || echo "pyarrow/pandas: not importable"
  echo "--- cores: $(nproc); memory: $(grep MemTotal /proc/meminfo)"
}
export -f facts
step facts 60 bash -c facts

# Unpack the binaries (xz, or Python's lzma where the xz tool is absent).
unpack() {
  if command -v xz > /dev/null; then
    xz -dc "$here/bins.tar.xz" | tar -x -C "$bin"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' \
      "$here/bins.tar.xz" | tar -x -C "$bin"
  fi
  chmod +x "$bin"/*
  ls -la "$bin"
}
export -f unpack
export here bin
step unpack 90 bash -c unpack

export ACCELSQL_KERNEL_CACHE_DIR="$work/kernel-cache"
mkdir -p -m 700 "$ACCELSQL_KERNEL_CACHE_DIR"

step gpu-status 60 sh -c "'$bin/accelsql' gpu status && '$bin/accelsql' gpu status --json"
step differential 240 env ACCELSQL_REQUIRE_GPU=1 "$bin/gpu_differential" --nocapture --test-threads 4
step sql-builtins 120 "$bin/accelsql" --timing -f "$here/checks.sql"
python=$(command -v python3)
sed "s|@PYTHON3@|$python|" "$here/torch_probe.sql" > "$work/torch_probe.sql"
step torch-probe 120 "$bin/accelsql" -f "$work/torch_probe.sql"
# Facts GPU sharing by memory (issue 33) depends on: whether NVML reports per-process device
# memory in this container (two PyTorch processes holding 1 and 2 GiB on one device at once),
# what `accelsql gpu status --json` says about free memory meanwhile, and whether CUDA MPS is
# there. Nothing here fails the kit; it is read by a person.
sharing_facts() {
  local hold="$work/hold.py"
  cat > "$hold" <<'PY'
import sys, time, torch
gib = int(sys.argv[1])
x = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print("holding", gib, "GiB, pid", __import__("os").getpid(), flush=True)
time.sleep(float(sys.argv[2]))
PY
  python3 "$hold" 1 8 & local a=$!
  python3 "$hold" 2 8 & local b=$!
  sleep 5
  echo "--- nvidia-smi compute apps while pids $a (1 GiB) and $b (2 GiB) hold memory"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1
  echo "--- nvidia-smi memory"
  memory
  echo "--- accelsql gpu status --json meanwhile"
  "$bin/accelsql" gpu status --json
  wait "$a" "$b"
  echo "--- MPS"
  command -v nvidia-cuda-mps-control || echo "nvidia-cuda-mps-control: not found"
  nvidia-smi -q | grep -i -E 'compute mode|MIG Mode|Current *:' | head -8
}
export -f sharing_facts memory
export work
step sharing-facts 40 bash -c sharing_facts
# Sharing by memory on the device (issue 33): two PyTorch scripts within their declarations at
# once, the system tables, and one past its declaration stopped with 53U26.
sed "s|@PYTHON3@|$python|" "$here/sharing.sql" > "$work/sharing.sql"
step sharing 60 env ACCELSQL_GPU_SHARING=memory "$bin/accelsql" --timing -f "$work/sharing.sql"
step benchmark 200 "$bin/gpu_builtins" --max-rows 10000000 --runs 3 --json "$out/gpu_builtins.json"

# accelsql serve with two Flight SQL clients at once, twice; the server's device memory after
# each round (it must not grow: no leak across statements).
serve_clients() {
  local port=50561
  local first="$work/serve.out"
  # flight_clients logs in as "flight_clients": as the admin, it reads every session's calls.
  "$bin/accelsql" serve --listen "127.0.0.1:$port" --admin-user flight_clients -q > "$first" &
  local pid=$!
  trap 'kill "$pid" 2>/dev/null' EXIT TERM
  # The second line of its output is the token clients log in with.
  for _ in $(seq 1 50); do
    grep -q '^token: ' "$first" 2>/dev/null && break
    sleep 0.2
  done
  export ACCELSQL_TOKEN
  ACCELSQL_TOKEN=$(sed -n 's/^token: //p' "$first")
  local rc=0
  for round in 1 2; do
    echo "--- round $round"
    "$bin/flight_clients" --url "grpc://127.0.0.1:$port" --clients 2 --statements 20 || rc=1
    echo "server (pid $pid) device memory after round $round:"
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | grep -E "^$pid," || echo "  (pid $pid holds no device memory)"
  done
  kill "$pid"
  wait "$pid"
  echo "server exit status: $?"
  return $rc
}
export -f serve_clients
step serve-clients 90 bash -c serve_clients

step harness 200 "$bin/accelsql-benchmarks" scheduler vectors geo options --scale "$scale" \
  --runs 3 --warmup 1 --no-python-peers --fresh --out "$work/harness" \
  --note "GPU verification kit on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
step slt 150 "$bin/accelsql-slt" sql-tests/slt

{
  echo "device memory after (index, name, uuid, driver, used, total):"
  memory
  echo "processes still holding device memory:"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1
} | tee -a "$summary"

[ -f "$work/harness/results.json" ] && cp "$work/harness/results.json" "$out/harness.json"
[ -f "$work/harness/REPORT.md" ] && cp "$work/harness/REPORT.md" "$out/harness.md"
find "$work/harness" -maxdepth 1 \( -name '*.png' -o -name '*.md' \) -exec cp {} "$logs/" \; 2>/dev/null
tar -czf "$out/logs.tar.gz" -C "$work" logs
echo "=== summary ($SECONDS s)"
cat "$summary"
rm -rf "$work"
