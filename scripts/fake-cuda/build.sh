#!/usr/bin/env bash
# Builds the fake CUDA driver/NVRTC/NVML (fake_cuda.cpp) into DIR (default target/fake-cuda),
# with the library names cudarc and nvml-wrapper look for; put DIR on LD_LIBRARY_PATH to use it.
# Needs a C++17 compiler ($CXX, else c++). Prints DIR.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../target/fake-cuda}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cxx="${CXX:-c++}"
"$cxx" -std=c++17 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra \
  -DACCELSQL_FAKE_CUDA_HEADER_DIR="\"$here\"" \
  -o "$out/libaccelsql-fake-cuda.so" "$here/fake_cuda.cpp" -ldl -lpthread
for name in libcuda.so libcuda.so.1 libnvrtc.so libnvrtc.so.13 libnvidia-ml.so libnvidia-ml.so.1; do
  ln -sf libaccelsql-fake-cuda.so "$out/$name"
done
echo "$out"
