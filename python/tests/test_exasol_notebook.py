"""Exasol's "GPU Resource Considerations" notebook through the real pyexasol on `accelsql serve
--exasol-port` (one simulated GPU): its connections as the notebook connector opens them
(`compression=True`), its scripts and SQL as written (test_notebook.py has them), a GPU SET
script with `%perNodeAndCallInstanceLimit`, and a user without `USE GPU`."""

import os
import textwrap
import threading

import pytest

from test_notebook import GPU_OPTIONAL, GPU_REQUIRED, LONG_RUNNING_GPU

pyexasol = pytest.importorskip("pyexasol") if not os.environ.get("CI") else __import__("pyexasol")
pd = pytest.importorskip("pandas")

GPU_SET = textwrap.dedent("""
CREATE OR REPLACE PYTHON3 SET SCRIPT gpu_count(x INT)
EMITS (N INT, NVIDIA_VISIBLE_DEVICES VARCHAR(100)) AS
 %perInstanceRequiredAcceleratorDevices GpuNvidia;
 %perNodeAndCallInstanceLimit 1;
def run(ctx):
    n = 0
    while True:
        n += 1
        if not ctx.next():
            break
    ctx.emit(n, os.getenv('NVIDIA_VISIBLE_DEVICES', '<invalid>'))
/
""")


@pytest.fixture(scope="module")
def open_connection(exasol_server):
    dsn, token, _ = exasol_server

    def connect(user="sys", password=token):
        return pyexasol.connect(dsn=dsn, user=user, password=password, encryption=False,
                                compression=True, schema="GPU_NOTEBOOK")

    setup = pyexasol.connect(dsn=dsn, user="sys", password=token, encryption=False, compression=True)
    setup.execute("CREATE SCHEMA IF NOT EXISTS gpu_notebook")
    setup.close()
    conn = connect()
    conn.execute("ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=builtin_python3'")
    for script in (LONG_RUNNING_GPU, GPU_REQUIRED, GPU_OPTIONAL, GPU_SET):
        conn.execute(script)
    conn.close()
    return connect


def test_the_notebooks_cells_run_as_written(open_connection):
    conn = open_connection()
    count = conn.execute(
        "SELECT PARAM_VALUE FROM EXA_METADATA WHERE PARAM_NAME='acceleratorDeviceGpuNvidiaCount'"
    ).fetchall()[0][0]
    assert count == "1"
    with pytest.raises(pyexasol.ExaQueryError) as raised:
        conn.execute("SELECT gpu_required(), gpu_required();")
    assert raised.value.code == "22069"
    res = conn.export_to_pandas(
        "SELECT gpu_optional() as udf1, gpu_optional() as udf2, gpu_optional() as udf3, gpu_optional() as udf4;")
    assert list(res.columns) == ["UDF1", "UDF2", "UDF3", "UDF4"]
    assert sorted(str(v) for v in res.iloc[0]) == ["0", "<invalid>", "<invalid>", "<invalid>"]
    rows = conn.execute("SELECT gpu_count(value) FROM generate_series(1, 100)").fetchall()
    assert rows == [(100, "0")]
    conn.close()


def test_two_connections_in_threads_take_turns_on_the_gpu(open_connection):
    results = {}

    def run(id):
        conn = open_connection()
        stmt = conn.execute(f"SELECT long_running_gpu({id});")
        results[id] = pd.DataFrame(stmt.fetchall(), columns=list(stmt.columns()))
        conn.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    res = pd.concat([results[1], results[2]], ignore_index=True).sort_values(by="START_TIME")
    first, second = res.iloc[0], res.iloc[1]
    assert second["START_TIME"] >= first["END_TIME"], res
    assert list(res["NVIDIA_VISIBLE_DEVICES"]) == ["0", "0"], res


def test_a_user_without_use_gpu_is_refused_the_gpu(open_connection):
    admin = open_connection()
    admin.execute("CREATE USER nogpu IDENTIFIED BY \"Secret-1\"")
    admin.execute("GRANT CREATE SESSION TO nogpu")
    admin.execute("GRANT EXECUTE ON SCHEMA gpu_notebook TO nogpu")
    admin.close()
    conn = open_connection(user="nogpu", password="Secret-1")
    with pytest.raises(pyexasol.ExaQueryError) as raised:
        conn.execute("SELECT gpu_required()")
    assert raised.value.code == "42501", raised.value
    assert "USE GPU" in raised.value.message, raised.value.message
    conn.close()
