"""Exasol's "GPU Resource Considerations" notebook, its scripts and SQL exactly as the notebook
writes them (the language alias it formats in is PYTHON3; no imports or aliases added): the
scripts use `os` and `datetime` without importing them, call sites end with `;`, and a select
list repeats a call. The notebook's two pyexasol connections in two processes are two
connections here in two threads (one process: one engine and its node lease queue)."""

import textwrap
from multiprocessing.pool import ThreadPool

import pandas as pd
import pytest

import accelsql

LANGUAGE_ALIAS = "PYTHON3"

# Cell 11, as written.
LONG_RUNNING_GPU = f"""
CREATE OR REPLACE {LANGUAGE_ALIAS} SCALAR SCRIPT
long_running_gpu(id INTEGER)
EMITS (ID INT, START_TIME VARCHAR(1000), END_TIME VARCHAR(1000), NVIDIA_VISIBLE_DEVICES VARCHAR(10000)) AS
 %perInstanceRequiredAcceleratorDevices GpuNvidia|None;
import time
def timestamp():
    now = datetime.datetime.now().time()
    return str(now)
def run(ctx):
    start_timestamp = timestamp() 
    time.sleep(5)
    nvidia_vis_devices = os.getenv('NVIDIA_VISIBLE_DEVICES', "<invalid>")
    end_timestamp = timestamp()
    ctx.emit(ctx.id, start_timestamp, end_timestamp,  nvidia_vis_devices)
/
"""

# Cells 16 and 18, as written.
GPU_REQUIRED = textwrap.dedent(f"""
CREATE OR REPLACE {LANGUAGE_ALIAS} SCALAR SCRIPT
gpu_required()
RETURNS VARCHAR(10000) AS
 %perInstanceRequiredAcceleratorDevices GpuNvidia;
def run(ctx):
    return os.getenv('NVIDIA_VISIBLE_DEVICES', "<invalid>")
/
""")

GPU_OPTIONAL = textwrap.dedent(f"""
CREATE OR REPLACE {LANGUAGE_ALIAS} SCALAR SCRIPT
gpu_optional()
RETURNS VARCHAR(10000) AS
 %perInstanceRequiredAcceleratorDevices GpuNvidia|None;
def run(ctx):
    return os.getenv('NVIDIA_VISIBLE_DEVICES', "<invalid>")
/
""")


@pytest.fixture
def schema(unique):
    name = unique("gpu_notebook")
    with accelsql.connect(simulated_gpus=1, schema=name) as conn:
        conn.execute(LONG_RUNNING_GPU)
        conn.execute(GPU_REQUIRED)
        conn.execute(GPU_OPTIONAL)
    return name


def test_two_connections_run_the_optional_gpu_udf_one_after_the_other(schema):
    # Cell 13, with threads for processes.
    def run_long_running_udf(id):
        with accelsql.connect(simulated_gpus=1, schema=schema) as local_conn:
            sql = f"SELECT long_running_gpu({id});"
            result = local_conn.execute(sql)
            df = pd.DataFrame(result.fetchall(), columns=result.column_names())
            return df

    with ThreadPool(processes=2) as pool:
        results = pool.map(run_long_running_udf, [1, 2])
    res = pd.concat(results, ignore_index=True)
    res = res.sort_values(by="START_TIME")
    assert list(res.columns) == ["ID", "START_TIME", "END_TIME", "NVIDIA_VISIBLE_DEVICES"]
    first, second = res.iloc[0], res.iloc[1]
    # Sequential, as the notebook shows: the second started after the first ended.
    assert second["START_TIME"] >= first["END_TIME"], res
    # Both had the GPU (an optional call waits for it by default, as in Exasol).
    assert list(res["NVIDIA_VISIBLE_DEVICES"]) == ["0", "0"], res


def test_two_required_gpu_calls_in_one_select_fail_with_22069(schema):
    # Cells 16 and 18: both run "SELECT gpu_required(), gpu_required();".
    with accelsql.connect(simulated_gpus=1, schema=schema) as conn:
        with pytest.raises(accelsql.AccelsqlError) as e:
            conn.execute("SELECT gpu_required(), gpu_required();")
    assert e.value.code == "22069"


def test_four_optional_calls_one_gets_the_gpu(schema):
    # Cell 20.
    with accelsql.connect(simulated_gpus=1, schema=schema) as conn:
        res = conn.export_to_pandas(
            "SELECT gpu_optional() as udf1, gpu_optional() as udf2, gpu_optional() as udf3, gpu_optional() as udf4;"
        )
    assert list(res.columns) == ["UDF1", "UDF2", "UDF3", "UDF4"]
    values = list(res.iloc[0])
    assert sorted(values) == ["0", "<invalid>", "<invalid>", "<invalid>"], values


def test_the_accelerator_count_is_in_exa_metadata(schema):
    # Cell 26.
    with accelsql.connect(simulated_gpus=1, schema=schema) as conn:
        nAvailableGPU = conn.execute(
            "SELECT PARAM_VALUE FROM EXA_METADATA WHERE PARAM_NAME='acceleratorDeviceGpuNvidiaCount'"
        ).fetchall()[0][0]
    assert nAvailableGPU == "1"
