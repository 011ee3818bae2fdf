-- GPU sharing by memory on a real device (issue 33), run by on-device.sh with
-- ACCELSQL_GPU_SHARING=memory and this machine's python3 in place of @PYTHON3@.
-- 1. Two PyTorch script calls in one statement (two blocks: each call gets the GPU, each its
--    own worker process), each declaring
--    3 GiB and holding 1 GiB of tensors for 3 s: their workers share the one device at once,
--    each within its declaration (the start/end times overlap; each worker's device memory, as
--    NVML reports it, stays under 3 GiB).
-- 2. The system tables: per-process memory supported here? what was reserved?
-- 3. A script declaring 1 GiB that takes 3 GiB: stopped with 53U26, naming the declaration.
ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=builtin_python3 GPU_PY=@PYTHON3@';

CREATE OR REPLACE GPU_PY SCALAR SCRIPT hold_gib(gib INTEGER, seconds DOUBLE) RETURNS VARCHAR(400) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia;
%perInstanceRequiredAcceleratorMemory 3GiB;
%perNodeAndCallInstanceLimit 1;
import os, time
import torch
def run(ctx):
    began = time.time()
    x = torch.empty(ctx.gib << 30, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    time.sleep(ctx.seconds)
    return "pid=%d device=%s start=%.2f end=%.2f torch_reserved=%d" % (
        os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES"), began, time.time(),
        torch.cuda.memory_reserved())
/

SELECT 'a' AS which, hold_gib(1, 3.0) AS what
UNION ALL
SELECT 'b', hold_gib(1, 3.0);

SELECT index, gpu_sharing, memory_total, memory_reserved, memory_reservable, other_processes_memory,
       per_process_memory FROM accelsql.gpu_devices;

SELECT udf, placement, devices, instances, reserved_bytes, gpu_batches FROM accelsql.udf_calls
ORDER BY statement_id, call_id;

SELECT state, devices, reserved_bytes, backfilled FROM accelsql.gpu_leases ORDER BY lease_id;

CREATE OR REPLACE GPU_PY SCALAR SCRIPT over_declared(gib INTEGER) RETURNS VARCHAR(200) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia;
%perInstanceRequiredAcceleratorMemory 1GiB;
import time
import torch
def run(ctx):
    x = torch.empty(ctx.gib << 30, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    time.sleep(3)
    return "not stopped: took %d GiB with 1 GiB declared" % ctx.gib
/

-- Expected: [53U26] ... past the 1024.0 MiB it declares (%perInstanceRequiredAcceleratorMemory)
SELECT over_declared(3);
