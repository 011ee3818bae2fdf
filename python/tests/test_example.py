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


def test_the_notebook_example_runs_as_a_user_granted_just_what_it_needs():
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--simulated-gpus", "2", "--as-user", "notebook"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "running as NOTEBOOK" in out, out
    assert "=> serialized" in out, out
    assert "ERROR [22069]" in out, out
    assert "ERROR [42501]" not in out, out
    assert "population_per_country" in out, out
