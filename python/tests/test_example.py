"""The notebook example, examples/gpu_resource_considerations.py, runs and shows what it should."""

import pathlib
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "gpu_resource_considerations.py"


def test_the_notebook_example_runs():
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--simulated-gpus", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "=> serialized" in out, out
    assert "ERROR [22069]" in out, out
    assert "population_per_country" in out, out
    assert "device_of" in out, out
