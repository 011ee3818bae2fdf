#!/usr/bin/env bash
# Builds what the GPU verification runs on a machine with an NVIDIA GPU but no Rust toolchain, and
# packs it into target/gpu-pack (stripped, xz-compressed; well under 64 MiB):
#   accelsql            the CLI (release): `gpu status`, the SQL checks
#   gpu_differential    the CPU/GPU differential tests (release)
#   gpu_builtins        the GPU built-ins benchmark (release)
#   on-device.sh, checks.sql, torch_probe.sql
# Then, on the GPU machine, from the repository root: `bash target/gpu-pack/on-device.sh`
# (results under $OUT, or target/gpu-pack/out without it). See README "GPU status".
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
# One cargo invocation, so that the three share one set of dependency features (and builds).
cargo build --release -p accelsql-cli -p accelsql-udf-runtime -p accelsql-benchmarks \
  --bin accelsql --test gpu_differential --bench gpu_builtins --message-format=json-render-diagnostics \
  > "$pack/build.json"
cli=target/release/accelsql
diff_bin=$(executable test gpu_differential < "$pack/build.json")
bench_bin=$(executable bench gpu_builtins < "$pack/build.json")
rm "$pack/build.json"
for f in "$cli" "$diff_bin" "$bench_bin"; do
  if [ ! -x "$f" ]; then
    echo "gpu-verify: ERROR: no executable at '$f'" >&2
    exit 1
  fi
done

for pair in "accelsql:$cli" "gpu_differential:$diff_bin" "gpu_builtins:$bench_bin"; do
  name=${pair%%:*}
  src=${pair#*:}
  strip -o "$pack/$name" "$src"
  xz -6 -T0 "$pack/$name"
done
cp scripts/gpu-verify/on-device.sh scripts/gpu-verify/checks.sql scripts/gpu-verify/torch_probe.sql "$pack/"
git rev-parse HEAD > "$pack/COMMIT" 2>/dev/null || echo unknown > "$pack/COMMIT"
du -ch "$pack"/* | tail -1
echo "gpu-verify: packed into $pack; on the GPU machine run: bash $pack/on-device.sh"
