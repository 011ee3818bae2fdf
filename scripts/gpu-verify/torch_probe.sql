-- A PyTorch script UDF on a real GPU (run by on-device.sh, which puts this machine's python3 in
-- place of @PYTHON3@): each GPU-placed instance must see exactly its pinned device
-- (torch.cuda.device_count() = 1, CUDA_VISIBLE_DEVICES = its UUID) and compute on it; a
-- CPU-placed instance must see none.
ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=builtin_python3 GPU_PY=@PYTHON3@';

CREATE OR REPLACE GPU_PY SET SCRIPT torch_probe(x DOUBLE)
EMITS (vm_id VARCHAR(40), cuda_visible VARCHAR(200), nvidia_visible VARCHAR(200), device_count INTEGER,
       device_name VARCHAR(200), rows_seen INTEGER, gpu_sum DOUBLE, cpu_sum DOUBLE) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia;
%perNodeAndCallInstanceLimit 2;
import os
import torch
def run(ctx):
    values = []
    while True:
        values.append(ctx.x)
        if not ctx.next():
            break
    t = torch.tensor(values, dtype=torch.float64, device="cuda")
    ctx.emit(str(exa.meta.vm_id), os.environ.get("CUDA_VISIBLE_DEVICES"),
             os.environ.get("NVIDIA_VISIBLE_DEVICES"), torch.cuda.device_count(),
             torch.cuda.get_device_name(0), len(values), float((t * 2).sum().item()),
             2 * sum(values))
/

SELECT torch_probe(x) FROM (SELECT CAST(value AS DOUBLE) AS x FROM generate_series(1, 100000)) GROUP BY iproc();

CREATE OR REPLACE GPU_PY SCALAR SCRIPT torch_devices() RETURNS VARCHAR(300) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia|None;
import os
import torch
def run(ctx):
    return "device_count=%d CUDA_VISIBLE_DEVICES=%r" % (
        torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))
/

-- The first call gets the GPU, the second runs on the CPU and must see no device.
SELECT torch_devices() AS gpu_placed, torch_devices() AS cpu_placed;

-- CuPy under the same alias: a GPU-placed instance computes on its one device (skipped in the
-- answer, not failed, where CuPy does not import).
CREATE OR REPLACE GPU_PY SCALAR SCRIPT cupy_probe(n INTEGER) RETURNS VARCHAR(300) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia;
import os
def run(ctx):
    try:
        import cupy
    except Exception as e:
        return "cupy: not importable (%s)" % type(e).__name__
    x = cupy.arange(ctx.n, dtype=cupy.float64)
    return "cupy %s devices=%d CUDA_VISIBLE_DEVICES=%r sum=%.1f expected=%.1f" % (
        cupy.__version__, cupy.cuda.runtime.getDeviceCount(), os.environ.get("CUDA_VISIBLE_DEVICES"),
        float(x.sum()), ctx.n * (ctx.n - 1) / 2.0)
/

SELECT cupy_probe(1000000) AS cupy_on_gpu;

SELECT statement_id, udf, placement, reason, devices, instances, rows_in
FROM accelsql.udf_calls ORDER BY statement_id, call_id;
