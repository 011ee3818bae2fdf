"""Notebooks, run for real by nbclient in a Jupyter kernel: Exasol's "GPU Resource
Considerations" flow (scripts, ``SELECT f(), f()`` and its 22069, two connections taking turns
on the GPU) once with the package's own API and once through JupySQL's ``%sql``/``%%sql`` on the
SQLAlchemy dialect. Results show as HTML tables."""

import os
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

# The notebook's scripts (cells 11, 16, 18) as test_notebook.py has them, the long one sleeping
# 1 s instead of 5.
from test_notebook import GPU_OPTIONAL, GPU_REQUIRED  # noqa: E402
from test_notebook import LONG_RUNNING_GPU as _LONG_RUNNING_GPU  # noqa: E402

LONG_RUNNING_GPU = _LONG_RUNNING_GPU.replace("time.sleep(5)", "time.sleep(1)")
assert LONG_RUNNING_GPU != _LONG_RUNNING_GPU

# Two connections, each in a thread, run the long GPU call: the lease makes them take turns.
TAKING_TURNS = """
import threading
spans = []
def session(i, connect):
    rows = connect().execute(f"SELECT long_running_gpu({i});").fetchall()
    spans.append((rows[0][1], rows[0][2]))
threads = [threading.Thread(target=session, args=(i, CONNECT)) for i in (1, 2)]
[t.start() for t in threads]
[t.join() for t in threads]
spans.sort()
assert spans[0][1] <= spans[1][0], spans
print("took turns:", spans)
"""


def run_notebook(cells, tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(
        nb,
        timeout=180,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    # The kernel is this interpreter's (its accelsql, JupySQL), with scripts run by it too.
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    client.execute()
    nbformat.write(nb, str(tmp_path / "executed.ipynb"))
    return nb


def outputs(cell):
    text = []
    for o in cell.outputs:
        text.append(o.get("text", ""))
        text.extend(str(v) for v in o.get("data", {}).values())
    return "\n".join(text)


@pytest.fixture(autouse=True)
def kernel_of_this_python(monkeypatch):
    # nbclient starts the `python3` kernel: make it this interpreter.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


def test_the_flow_with_the_packages_api(tmp_path):
    nb = run_notebook(
        [
            "import accelsql\nconn = accelsql.connect(simulated_gpus=2)\n"
            "CONNECT = lambda: accelsql.connect(simulated_gpus=2)",
            f"conn.execute({LONG_RUNNING_GPU!r})\nconn.execute({GPU_REQUIRED!r})\nconn.execute({GPU_OPTIONAL!r});",
            "conn.execute('SELECT gpu_optional(), gpu_optional();')",
            "try:\n    conn.execute('SELECT gpu_required(), gpu_required();')\n"
            "except accelsql.DataError as e:\n    print('refused', e.code)",
            TAKING_TURNS,
        ],
        tmp_path,
    )
    assert "<table>" in outputs(nb.cells[2])  # the result, shown as HTML
    assert "refused 22069" in outputs(nb.cells[3])
    assert "took turns:" in outputs(nb.cells[4])


def test_the_flow_through_jupysql(tmp_path):
    pytest.importorskip("sql")  # JupySQL
    nb = run_notebook(
        [
            "%load_ext sql\n%config SqlMagic.displaylimit = 20",
            "%sql accelsql://?simulated_gpus=2 --alias first",
            f"%%sql\n{LONG_RUNNING_GPU.strip()}",
            f"%%sql\n{GPU_REQUIRED.strip()}\n\n{GPU_OPTIONAL.strip()}",
            "%sql SELECT gpu_optional() AS a, gpu_optional() AS b",
            "try:\n    %sql SELECT gpu_required(), gpu_required()\n"
            "except Exception as e:\n    print('refused', '[22069]' in str(e))",
            "import sqlalchemy\nCONNECT = lambda: sqlalchemy.create_engine('accelsql://?simulated_gpus=2').connect().connection.dbapi_connection",
            TAKING_TURNS,
        ],
        tmp_path,
    )
    assert "<table>" in outputs(nb.cells[4]) or "| a " in outputs(nb.cells[4]), outputs(nb.cells[4])
    assert "refused True" in outputs(nb.cells[5])
    assert "took turns:" in outputs(nb.cells[7])


def test_the_examples_notebook_runs_as_a_user_opens_it(tmp_path):
    """examples/gpu_resource_considerations.ipynb, the file a user opens in Jupyter, executed
    whole in a kernel: the 22069 refusal, one optional call of four on a GPU, and two sessions
    taking turns on the lease."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gpu_resource_considerations.ipynb")
    nb = nbformat.read(path, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit it without outputs"
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    client = nbclient.NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    nbformat.write(nb, str(tmp_path / "executed.ipynb"))
    code = [c for c in nb.cells if c.cell_type == "code"]
    text = [outputs(c) for c in code]
    assert "GPUs: 2 (simulated)" in text[0] or "(real)" in text[0], text[0]
    assert "ERROR [22069]" in text[2], text[2]
    assert "<table" in text[3] and "udf4" in text[3].lower(), text[3]
    import re

    placements = code[4].outputs[0]["data"]["text/plain"]
    gpu, cpu = len(re.findall(r"\bGPU\b", placements)), len(re.findall(r"\bCPU\b", placements))
    assert (gpu, cpu) == (1, 3), placements
    assert "serialized" in text[5] and "OVERLAPPED" not in text[5], text[5]
