"""The "GPU Resource Considerations" notebook, cell by cell, against the accelsql Python package.

Python script UDFs with Exasol's accelerator annotations, a Python callable as a UDF, and two
connections running GPU statements at once: the node lease serializes them, so one call's START
comes after the other's END. Runs on the GPUs NVML finds, or on two simulated ones where there
are none (or as ``--simulated-gpus N`` says).

Run (after ``pip install ./python`` into the active environment; scripts need pandas only for
printing here)::

    python examples/gpu_resource_considerations.py              # threads: two connections, one engine
    python examples/gpu_resource_considerations.py --processes  # a multiprocessing.Pool of two
    python examples/gpu_resource_considerations.py --processes --server grpc://127.0.0.1:50051 \
        [--user alice --password ...]                            # clients of one `accelsql serve`

With ``--processes`` each worker process has its own engine; they share the scripts through a data
directory and the GPUs through cross-process device locks (``ACCELSQL_DEVICE_LOCK_DIR``), so their
GPU statements are serialized too. With ``--server`` every connection is a client of one
``accelsql serve`` (needs ``pip install './python[server]'``): the server's engine and lease queue
serialize the two sessions' GPU statements, as two pyexasol connections to one Exasol do.
"""

import argparse
import atexit
import multiprocessing
import os
import shutil
import tempfile
import threading

import pandas as pd
import pyarrow as pa

import accelsql

# The notebook's scripts exactly as it writes them (cells 11, 16, 18 and 23; its
# `{slc.language_alias}` is PYTHON3): `os` and `datetime` are used without an import, as
# Exasol's script environment allows. Each ends with a line holding only "/".
NOTEBOOK_SCRIPTS = r"""
CREATE OR REPLACE PYTHON3 SCALAR SCRIPT
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

CREATE OR REPLACE PYTHON3 SCALAR SCRIPT
gpu_required()
RETURNS VARCHAR(10000) AS
 %perInstanceRequiredAcceleratorDevices GpuNvidia;
def run(ctx):
    return os.getenv('NVIDIA_VISIBLE_DEVICES', "<invalid>")
/

CREATE OR REPLACE PYTHON3 SCALAR SCRIPT
gpu_optional()
RETURNS VARCHAR(10000) AS
 %perInstanceRequiredAcceleratorDevices GpuNvidia|None;
def run(ctx):
    return os.getenv('NVIDIA_VISIBLE_DEVICES', "<invalid>")
/

CREATE OR REPLACE PYTHON3 SCALAR SCRIPT
gpu_nvidia_smi()
RETURNS VARCHAR(10000) AS
 %perInstanceRequiredAcceleratorDevices GpuNvidia;
import subprocess
def run(ctx):
    cmd = ["nvidia-smi"] #List GPUs
    process = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    exit_code = process.wait()
    if exit_code != 0:
        raise Exception(f"nvidia-smi returned non-zero exit code: '{process.stderr}'")
    return process.stdout.read()
/
"""

# Beyond the notebook: a SET script grouped per GPU.
SCRIPTS = NOTEBOOK_SCRIPTS + r"""
CREATE OR REPLACE PYTHON3 SET SCRIPT population_per_country(country VARCHAR(100), population BIGINT)
EMITS (country VARCHAR(100), population BIGINT, device VARCHAR(200)) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia|None;
%perNodeAndCallInstanceLimit 2;
import os
def run(ctx):
    totals = {}
    while True:
        totals[ctx.country] = totals.get(ctx.country, 0) + ctx.population
        if not ctx.next():
            break
    for country, total in totals.items():
        ctx.emit(country, total, os.environ.get("CUDA_VISIBLE_DEVICES") or "<invalid>")
/
"""

CITIES = pd.DataFrame(
    {
        "name": ["Berlin", "Hamburg", "Munich", "Paris", "Lyon", "Madrid", "Barcelona", "Rome"],
        "country": ["DE", "DE", "DE", "FR", "FR", "ES", "ES", "IT"],
        "population": [3645000, 1841000, 1472000, 2161000, 513000, 3223000, 1620000, 2873000],
    }
)

def long_running(id):
    """Cell 13's statement."""
    return f"SELECT long_running_gpu({id});"


def show(conn, title, sql):
    """One notebook cell: the query, then its result as a DataFrame (or its error)."""
    print(f"-- {title}\n{sql}")
    try:
        print(conn.export_to_pandas(sql).to_string(index=False), end="\n\n")
    except accelsql.AccelsqlError as e:
        print(f"ERROR [{e.code}] {e.message}\n")


def print_sessions(frames):
    """The two sessions' rows, ordered by START, and whether they overlapped."""
    df = pd.concat(frames, ignore_index=True).sort_values(by="START_TIME")
    print(df.to_string(index=False))
    first, second = df.iloc[0], df.iloc[1]
    verdict = "serialized" if first["END_TIME"] <= second["START_TIME"] else "OVERLAPPED"
    print(f"=> {verdict}: the second START comes {'after' if verdict == 'serialized' else 'before'} the first END\n")


def connect(target):
    """A connection to ``target``: (simulated GPUs, data directory, catalog user or None) in
    process, or a server's (URL, user, password)."""
    if isinstance(target[0], str):
        url, user, password = target
        return accelsql.connect(url, user=user, password=password)
    gpus, data_dir, user = target
    return accelsql.connect(gpus, data_dir=data_dir, user=user)


# What the notebook needs, and nothing more, when it runs as a user of its own (--as-user).
NOTEBOOK_PRIVILEGES = "CREATE SESSION, CREATE SCRIPT, CREATE TABLE, USE GPU"


def create_notebook_user(gpus, data_dir, name):
    """Creates catalog user ``name`` (as the embedding program, SYS) with NOTEBOOK_PRIVILEGES."""
    with accelsql.connect(gpus, data_dir=data_dir) as sys_conn:
        sys_conn.execute(f'CREATE USER "{name}" IDENTIFIED BY "{os.urandom(12).hex()}"')
        sys_conn.execute(f'GRANT {NOTEBOOK_PRIVILEGES} TO "{name}"')


def run_in_threads(target):
    """Two connections (one engine, one lease queue), one thread each."""
    frames = [None, None]

    def session(i):
        with connect(target) as conn:
            df = conn.export_to_pandas(long_running(i + 1))
            frames[i] = df

    threads = [threading.Thread(target=session, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print_sessions(frames)


def pool_session(args):
    """One worker process's session: its own engine (scripts from the shared data directory),
    or a client of the server."""
    label, target = args
    with connect(target) as conn:
        return conn.export_to_pandas(long_running(label))


def run_in_processes(target):
    """Two worker processes, as the notebook's multiprocessing.Pool."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        print_sessions(pool.map(pool_session, [(1, target), (2, target)]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulated-gpus", type=int, help="use N simulated GPUs (default: real ones, else 2 simulated)")
    parser.add_argument("--processes", action="store_true", help="run the two sessions in a multiprocessing.Pool")
    parser.add_argument("--server", metavar="URL", help="be a client of `accelsql serve` at URL (grpc://host:port)")
    parser.add_argument("--user", help="the server's user (when it has a users file)")
    parser.add_argument("--password", help="that user's password")
    parser.add_argument(
        "--as-user",
        metavar="NAME",
        help=f"in process: run as a new catalog user granted only {NOTEBOOK_PRIVILEGES}",
    )
    args = parser.parse_args()

    if args.server:
        target = (args.server, args.user, args.password)
        gpus = None
    else:
        gpus = args.simulated_gpus
        if gpus is None:
            with accelsql.connect() as probe:
                gpus = None if probe.gpu_count > 0 else 2
        data_dir = tempfile.mkdtemp(prefix="accelsql-notebook-")
        atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
        if args.processes:
            # Engines of different processes share the devices through cross-process locks.
            os.environ.setdefault("ACCELSQL_DEVICE_LOCK_DIR", os.path.join(data_dir, "device-locks"))
        user = None
        if args.as_user:
            user = args.as_user.upper()
            create_notebook_user(gpus, data_dir, user)
            print(f"running as {user}, granted {NOTEBOOK_PRIVILEGES}")
        target = (gpus, data_dir, user)

    conn = connect(target)
    kind = "the server's" if args.server else ("simulated" if gpus else "real")
    print(f"GPUs: {conn.gpu_count} ({kind})\n")
    conn.execute(SCRIPTS)
    conn.import_from_pandas(CITIES, "cities")

    how = "processes (multiprocessing.Pool)" if args.processes else "threads"
    print(f"-- two sessions ({how}), each {long_running('<id>')}, at the same time")
    if args.processes:
        run_in_processes(target)
    else:
        run_in_threads(target)

    show(conn, "two GPU-required calls in one select: 22069", "SELECT gpu_required(), gpu_required();")
    show(
        conn,
        "four optional calls: exactly one gets a device, the others run on the CPU",
        "SELECT gpu_optional() as udf1, gpu_optional() as udf2, gpu_optional() as udf3, gpu_optional() as udf4;",
    )
    show(conn, "the nvidia-smi probe (fails where nvidia-smi is not installed)", "SELECT gpu_nvidia_smi();")
    show(
        conn,
        "the number of GPUs",
        "SELECT PARAM_VALUE FROM EXA_METADATA WHERE PARAM_NAME='acceleratorDeviceGpuNvidiaCount'",
    )
    show(
        conn,
        "population per country, one group per node (GROUP BY iproc())",
        "SELECT population_per_country(country, population) FROM cities GROUP BY iproc() ORDER BY country",
    )
    show(
        conn,
        "the same with %perNodeAndCallInstanceLimit 2, grouped by country: two instances, each pinned to its own GPU",
        "SELECT population_per_country(country, population) FROM cities GROUP BY iproc(), country ORDER BY country",
    )

    if args.server:
        # A Python callable of this program cannot run inside the server.
        conn.close()
        return

    # Beyond the notebook: a Python callable of this program as a GPU-optional UDF. It runs in
    # this process, so it is told its device rather than restricted to it.
    def device_of(population, ctx):
        return pa.array([ctx.cuda_visible_devices or "<cpu>"] * len(population))

    conn.register_udf(device_of, inputs=["BIGINT"], returns="VARCHAR(200)", accelerator="GpuNvidia|None")
    show(
        conn,
        "a Python callable as a GPU-optional UDF: the first call gets the GPUs, the second the CPU",
        "SELECT name, device_of(population) AS first_call, device_of(population) AS second_call FROM cities ORDER BY name LIMIT 3",
    )
    show(
        conn,
        "where each call ran",
        "SELECT udf, placement, reason, devices, instances FROM accelsql.udf_calls ORDER BY statement_id",
    )
    conn.close()


if __name__ == "__main__":
    main()
