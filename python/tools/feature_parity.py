"""Checks that building the Python package alone resolves dependency features as `cargo test --workspace` does.

maturin builds the extension with `cargo rustc -p accelsql-python`, so Cargo unifies features
over that package's dependencies only, while `cargo test --workspace` unifies them over every
member and their dev-dependencies. Where the two differ for a crate below DataFusion (tokio,
half, libc, ...), that crate and everything above it, DataFusion included, is built a second
time. python/Cargo.toml asks for the workspace's extra features explicitly; this script lists
any crate whose features still differ. Exit status 1 when some do.

Usage: python3 python/tools/feature_parity.py   (from the repository root)
"""

import re
import subprocess
import sys
from typing import Dict, Set


def features(args):
    out = subprocess.run(
        ["cargo", "tree", "--quiet", "-e", "features", "-f", "{p} {f}", "--prefix", "none", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found: Dict[str, Set[str]] = {}
    for line in out.splitlines():
        line = line.replace(" (*)", "").strip()
        m = re.match(r"^(\S+) (v\S+)(?: \([^)]*\))*(?: (\S+))?$", line)
        if not m or m.group(1) == "accelsql-python":
            continue
        found.setdefault(f"{m.group(1)} {m.group(2)}", set()).update(
            f for f in (m.group(3) or "").split(",") if f
        )
    return found


def main() -> int:
    workspace = features(["--workspace", "-e", "normal,build,dev"])
    package = features(["-p", "accelsql-python", "-e", "normal,build"])
    differ = []
    for crate, feats in sorted(package.items()):
        extra = workspace.get(crate, set()) - feats
        if extra:
            differ.append(f"  {crate}: the workspace also enables {', '.join(sorted(extra))}")
    if differ:
        print(
            "feature_parity: building accelsql-python alone resolves these crates with fewer features "
            "than `cargo test --workspace`, so they (and DataFusion above them) are built twice; "
            "add the features to the parity section of python/Cargo.toml:",
            *differ,
            sep="\n",
        )
        return 1
    print("feature_parity: accelsql-python resolves every shared crate as the workspace does")
    return 0


if __name__ == "__main__":
    sys.exit(main())
