#!/usr/bin/env bash
# Builds what the GPU verification runs on a machine with an NVIDIA GPU but no Rust toolchain, and
# packs it into target/gpu-pack: one xz tarball of stripped release binaries (well under the
# 64 MiB a device call carries) and the kit's scripts:
#   accelsql              the CLI (`gpu status`, `serve`, the SQL checks): the kit's multi-call
#                         binary (`kit/`): run through a link named accelsql-slt it is the .slt runner,
#                         named accelsql-benchmarks the harness (one DataFusion binary, not three)
#   gpu_differential      the CPU/GPU differential tests
#   gpu_builtins          the GPU built-ins benchmark (bandwidth, crossover, compile, per-call)
#   flight_clients        Flight SQL clients taking turns on `accelsql serve`
#   on-device.sh, checks.sql, torch_probe.sql, sharing.sql
# Then, on the GPU machine, from the repository root: `bash target/gpu-pack/on-device.sh`
# (results under $OUT, or target/gpu-pack/out without it). See scripts/gpu-verify/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
pack=target/gpu-pack
rm -rf "$pack"
mkdir -p "$pack"

# The executable cargo built for the first artifact of kind $1 named $2, from JSON messages.
executable() {
  python3 -c '
import json, sys
kind, name = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target") or {}
    if m.get("reason") == "compiler-artifact" and name == t.get("name") and kind in t.get("kind", []) and m.get("executable"):
        print(m["executable"])
        break
' "$1" "$2"
}

echo "gpu-verify: building (release)"
# One cargo invocation, so that all of them share one set of dependency features (and builds).
cargo build --release -p accelsql-kit -p accelsql-udf-runtime -p accelsql-benchmarks -p accelsql-sql-tests \
  --bin accelsql-kit --test gpu_differential \
  --bench gpu_builtins --bench flight_clients --message-format=json-render-diagnostics \
  > "$pack/build.json"
bins="$pack/bins"
mkdir -p "$bins"
for spec in bin:accelsql-kit test:gpu_differential bench:gpu_builtins bench:flight_clients; do
  kind=${spec%%:*}
  name=${spec#*:}
  src=$(executable "$kind" "$name" < "$pack/build.json")
  if [ ! -x "$src" ]; then
    echo "gpu-verify: ERROR: no executable for $kind $name" >&2
    exit 1
  fi
  # The kit's binary travels as `accelsql` (the command), beside its two other names.
  [ "$name" = accelsql-kit ] && name=accelsql
  strip -o "$bins/$name" "$src"
done
rm "$pack/build.json"
ln -s accelsql "$bins/accelsql-slt"
ln -s accelsql "$bins/accelsql-benchmarks"
tar -C "$bins" -cf - . | xz -9 -T0 > "$pack/bins.tar.xz"
rm -rf "$bins"
cp scripts/gpu-verify/on-device.sh scripts/gpu-verify/checks.sql scripts/gpu-verify/torch_probe.sql \
  scripts/gpu-verify/sharing.sql "$pack/"
git rev-parse HEAD > "$pack/COMMIT" 2>/dev/null || echo unknown > "$pack/COMMIT"
size=$(du -cb "$pack"/* | tail -1 | cut -f1)
echo "gpu-verify: $((size >> 20)) MiB in $pack"
if [ "$size" -gt $((60 << 20)) ]; then
  echo "gpu-verify: ERROR: the pack is over 60 MiB; a device call carries at most 64 MiB" >&2
  exit 1
fi
echo "gpu-verify: packed into $pack; on the GPU machine, from the repository root: bash $pack/on-device.sh"
