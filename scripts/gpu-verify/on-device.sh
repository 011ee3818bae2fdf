#!/usr/bin/env bash
# Runs the GPU verification on a machine with an NVIDIA GPU, from what scripts/gpu-verify/pack.sh
# packed (no Rust toolchain needed). Every step runs even if an earlier one failed; each step's
# output goes to $OUT/<step>.log and the summary (step, exit code, seconds) to $OUT/summary.txt.
# Steps: environment facts (driver, libcuda/libnvrtc/libnvidia-ml files, python3 and torch),
# `accelsql gpu status`, the differential tests (ACCELSQL_REQUIRE_GPU: a missing device fails),
# the GPU built-ins benchmark, the built-ins through SQL on the GPU, and a PyTorch script UDF run
# with a SCRIPT_LANGUAGES alias naming this machine's python3.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
bin="$here/bin"
mkdir -p "$bin"
summary="$out/summary.txt"
: > "$summary"

# step NAME LIMIT_SECONDS CMD...: runs CMD with a time limit, logs it, records its exit code.
step() {
  local name=$1 limit=$2
  shift 2
  local started=$SECONDS
  echo "=== $name: $*" | tee "$out/$name.log"
  timeout "$limit" "$@" >> "$out/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$out/$name.log"
  printf '%-16s rc=%-4s %4ss\n' "$name" "$rc" "$((SECONDS - started))" | tee -a "$summary"
}

# NVRTC may live outside the loader's path (a CUDA toolkit, or a pip wheel of torch).
extra=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \
  "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)/nvidia" \
  -name 'libnvrtc.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
export LD_LIBRARY_PATH="${extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$summary"
facts() {
  echo "commit: $(cat "$here/COMMIT" 2>/dev/null)"
  nvidia-smi || echo "nvidia-smi: not found or failed"
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
}
export -f facts
export here
step facts 120 bash -c facts

# Decompress (xz, or Python's lzma where the xz tool is absent).
for name in accelsql gpu_differential gpu_builtins; do
  if command -v xz > /dev/null; then
    xz -dc "$here/$name.xz" > "$bin/$name"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$here/$name.xz" "$bin/$name"
  fi
  chmod +x "$bin/$name"
done

export ACCELSQL_KERNEL_CACHE_DIR="$out/kernel-cache"

step gpu-status 60 sh -c "'$bin/accelsql' gpu status && '$bin/accelsql' gpu status --json"
step differential 300 env ACCELSQL_REQUIRE_GPU=1 "$bin/gpu_differential" --nocapture
step benchmark 400 "$bin/gpu_builtins" --json "$out/gpu_builtins.json"
step sql-builtins 240 "$bin/accelsql" --timing -f "$here/checks.sql"
python=$(command -v python3)
sed "s|@PYTHON3@|$python|" "$here/torch_probe.sql" > "$out/torch_probe.sql"
step torch-probe 180 "$bin/accelsql" -f "$out/torch_probe.sql"
echo "=== summary"
cat "$summary"
