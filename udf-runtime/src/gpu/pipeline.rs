//! [`GpuDevice::run_columnar`]: one batch through a [`GpuColumnarKernel`] — chunking by free
//! device memory, pinned staging, copies overlapped with compute on the device's streams,
//! out-of-memory retries with halved chunks, output checks, and the joined Arrow result.
//!
//! A chunk goes through one stream: its inputs are copied (by host threads) into the stream's
//! pinned staging buffer, uploaded, computed, and its output copied back into the same staging
//! buffer, all enqueued without waiting. Up to [`STREAMS`] chunks are in flight; the oldest is
//! finished (its stream synchronized, its output appended) before its stream takes a new chunk.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, new_empty_array};
use cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice};

use super::bitmap::combined_validity;
use super::chunk::{
    CHUNK_ROW_ALIGN, chunk_budget, current_device_memory_limit, current_max_chunk_bytes,
    rows_per_chunk,
};
use super::columnar::{
    DeviceArray, DeviceColumn, DeviceOperand, ElementType, GpuColumnarKernel, check_output,
};
use super::device::{GpuDevice, STREAMS, catch_panics};
use super::host::{
    ChunkLayout, ColumnRegions, HostOperand, OutputAssembler, Region, all_null_output,
};
use crate::kernels::{Operand, invalid_argument};
use crate::{Result, RuntimeError};

/// Chunks submitted to a device by any run of this process (see [`chunks_submitted`]).
static CHUNKS_SUBMITTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many chunks GPU runs of this process have submitted so far (tries after an
/// out-of-memory split included): for tests and diagnostics of how batches were split.
pub fn chunks_submitted() -> u64 {
    CHUNKS_SUBMITTED.load(std::sync::atomic::Ordering::Relaxed)
}

impl GpuDevice {
    /// Runs `kernel` over a batch of `rows` rows with arguments `args` and returns its output
    /// column (exactly `rows` values of [`GpuColumnarKernel::output_type`]).
    ///
    /// Columns must have `rows` values and scalars one ([`crate::RuntimeError::InvalidArgument`]
    /// otherwise); they may be Float32/Float64/Int32/Int64 or `List`/`LargeList`/`FixedSizeList`
    /// of those, sliced or not. Scalars are uploaded once. The batch is split into chunks sized
    /// from the device's free memory (and [`super::with_max_chunk_bytes`]); a chunk that runs out
    /// of device memory is halved and retried, down to a single row, which then fails with
    /// [`RuntimeError::GpuOutOfMemory`]. Any other CUDA failure is [`RuntimeError::Gpu`], as is
    /// an output of the wrong type or length; after a failure that left the CUDA context unusable
    /// (see [`GpuDevice::error`]), runs answer [`RuntimeError::GpuUnavailable`]. Never panics.
    pub fn run_columnar(
        &self,
        kernel: &dyn GpuColumnarKernel,
        rows: usize,
        args: &[Operand],
    ) -> Result<ArrayRef> {
        catch_panics(
            || self.run(kernel, rows, args),
            |m| {
                self.fail(format!(
                    "{} panicked in the GPU runtime: {m}",
                    kernel.name()
                ))
            },
        )
    }

    fn run(
        &self,
        kernel: &dyn GpuColumnarKernel,
        rows: usize,
        args: &[Operand],
    ) -> Result<ArrayRef> {
        let name = kernel.name();
        let output_type = kernel.output_type();
        let out = ElementType::of(&output_type).ok_or_else(|| {
            self.fail(format!(
                "the GPU implementation of {name} declares output type {output_type}; \
                 a GPU kernel returns FLOAT, DOUBLE, INT or BIGINT"
            ))
        })?;
        let propagate = kernel.propagates_nulls();
        let ops = args
            .iter()
            .enumerate()
            .map(|(i, a)| HostOperand::new(name, i + 1, a, rows))
            .collect::<Result<Vec<_>>>()?;
        if let Some(i) = ops.iter().position(HostOperand::all_null) {
            if propagate {
                return Ok(all_null_output(out, rows));
            }
            return Err(invalid_argument(
                name,
                format!(
                    "argument {} is NULL in every row, which its GPU implementation cannot take",
                    i + 1
                ),
            ));
        }
        if rows == 0 {
            return Ok(new_empty_array(&output_type));
        }
        let input_nulls = if propagate {
            combined_validity(args, rows)
        } else {
            None
        };
        let with_validity = !propagate;

        self.check_usable()?;
        let _serial = self.lock_runs();
        // Declared before `run`, so dropped after it: `Run`'s drop waits for every stream, and
        // only then may the scalars (read by kernels on every stream, while cudarc's read event
        // remembers only the last of them) be freed, also when the run ends in an error.
        let scalars = upload_scalars(self, name, &ops, with_validity)?;
        let mut run = Run::new(self);
        let (free, _total) = self
            .context()
            .mem_get_info()
            .map_err(|e| self.error("reading free device memory", e))?;
        // Under memory sharing the statement's reservation is all this instance may use.
        let free = match current_device_memory_limit() {
            Some(limit) => free.min(usize::try_from(limit).unwrap_or(usize::MAX)),
            None => free,
        };
        let fixed: usize = scalars.iter().flatten().map(device_bytes).sum();
        let budget = chunk_budget(free, fixed, STREAMS, current_max_chunk_bytes());
        let row_bytes = ops
            .iter()
            .map(|o| o.bytes_per_row(rows, with_validity))
            .sum::<usize>()
            + out.width()
            + 1
            + kernel.scratch_bytes_per_row();
        let mut per_chunk = rows_per_chunk(row_bytes, budget, CHUNK_ROW_ALIGN);
        let mut output = OutputAssembler::new(out, rows);
        let (mut start, mut slot) = (0, 0);
        while start < rows {
            let end = rows.min(start + per_chunk);
            while run.in_flight.iter().any(|c| c.slot == slot) {
                run.finish_oldest(&mut output)?;
            }
            match run.submit(kernel, &ops, &scalars, start..end, slot, with_validity, out) {
                Ok(()) => {
                    start = end;
                    slot = (slot + 1) % STREAMS;
                }
                Err(RuntimeError::GpuOutOfMemory { message, .. }) => {
                    run.drain(&mut output)?;
                    if end - start <= 1 {
                        return Err(RuntimeError::GpuOutOfMemory {
                            device: self.label().to_string(),
                            message: format!(
                                "{name}: a single row needs about {row_bytes} bytes of device \
                                 memory and does not fit ({free} bytes were free when the batch \
                                 started; {message})"
                            ),
                        });
                    }
                    per_chunk = (end - start) / 2;
                }
                Err(e) => return Err(e),
            }
        }
        run.drain(&mut output)?;
        drop(run);
        drop(scalars);
        output.finish(input_nulls).map_err(|e| self.relabel(e))
    }

    /// `e` with this device's label when it has none (errors of the host-side assembly).
    fn relabel(&self, e: RuntimeError) -> RuntimeError {
        match e {
            RuntimeError::Gpu { device, message } if device.is_empty() => self.fail(message),
            other => other,
        }
    }
}

/// Device bytes of an uploaded array.
fn device_bytes(a: &DeviceArray) -> usize {
    a.values.len()
        + a.offsets.as_ref().map_or(0, |o| o.len())
        + a.validity.as_ref().map_or(0, |v| v.len())
}

/// A chunk whose work is enqueued on its stream: it owns the device memory its work uses, and its
/// output will be in its stream's staging buffer once the stream is synchronized.
struct InFlight {
    slot: usize,
    rows: usize,
    out_values: Region,
    out_validity: Option<Region>,
    _inputs: Vec<Option<DeviceArray>>,
    _output: DeviceColumn,
}

/// The state of one run: per-stream staging buffers and the chunks in flight.
///
/// Dropping it (on success or on any error) synchronizes every stream before the staging
/// buffers go back to the pool, so no copy can touch a buffer after it is reused or freed.
struct Run<'d> {
    device: &'d GpuDevice,
    staging: Vec<Option<PinnedHostSlice<u8>>>,
    in_flight: VecDeque<InFlight>,
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        let mut idle = true;
        for stream in &self.device.streams {
            if let Err(e) = stream.synchronize() {
                idle = false;
                // Only for its side effect: a sticky error marks the device broken.
                let _ = self.device.error("waiting for the device", e);
            }
        }
        self.in_flight.clear();
        for buffer in self.staging.drain(..).flatten() {
            if idle {
                self.device.return_staging(buffer);
            } else {
                // A stream in error may still own a copy into the buffer: never free or reuse
                // it (the context is unusable after such an error anyway).
                std::mem::forget(buffer);
            }
        }
    }
}

/// The bytes of `region` in `buf`.
fn region<'b>(device: &GpuDevice, buf: &'b [u8], region: Region) -> Result<&'b [u8]> {
    buf.get(region.range())
        .ok_or_else(|| device.fail("a staging region lies outside its buffer"))
}

/// Allocates device memory for `bytes` and enqueues their copy on `stream`.
///
/// `bytes` is usually a region of a pinned staging buffer, passed as a plain slice: the driver
/// sees that the address is page-locked, so the copy is a true asynchronous DMA, but cudarc
/// records no event for a plain slice. Nothing may rewrite the region until `stream` has been
/// synchronized (see `Run`). cudarc copies `bytes.len()` bytes and asserts that the destination
/// is at least that long.
fn upload(device: &GpuDevice, stream: &Arc<CudaStream>, bytes: &[u8]) -> Result<CudaSlice<u8>> {
    // SAFETY: the memory is uninitialised; the copy enqueued right after fills every byte of it
    // before anything on this stream reads it (an empty region gets one byte nobody reads).
    let mut dst = unsafe { stream.alloc::<u8>(bytes.len().max(1)) }
        .map_err(|e| device.error("allocating device memory for an input", e))?;
    if !bytes.is_empty() {
        stream
            .memcpy_htod(bytes, &mut dst)
            .map_err(|e| device.error("copying an input to the device", e))?;
    }
    Ok(dst)
}

/// Uploads one operand's staged buffers (`src` holds the staging buffer the regions point into).
fn upload_array(
    device: &GpuDevice,
    stream: &Arc<CudaStream>,
    op: &HostOperand,
    regions: &ColumnRegions,
    rows: usize,
    src: &[u8],
) -> Result<DeviceArray> {
    let values = upload(device, stream, region(device, src, regions.values)?)?;
    let offsets = match regions.offsets {
        Some(r) => Some(upload(device, stream, region(device, src, r)?)?),
        None => None,
    };
    let validity = match regions.validity {
        Some(r) => Some(upload(device, stream, region(device, src, r)?)?),
        None => None,
    };
    Ok(DeviceArray {
        data_type: op.data_type.clone(),
        element: op.element,
        rows,
        list_size: op.list_size(),
        values,
        offsets,
        validity,
    })
}

/// Uploads a run's scalars once (on the first stream; kernels on the other streams wait for the
/// copies through cudarc's write events); `None` for the other operands.
fn upload_scalars(
    device: &GpuDevice,
    name: &str,
    ops: &[HostOperand],
    with_validity: bool,
) -> Result<Vec<Option<DeviceArray>>> {
    if !ops.iter().any(|o| o.scalar && !o.all_null()) {
        return Ok(ops.iter().map(|_| None).collect());
    }
    let layout = ChunkLayout::new(name, ops, 0..1, true, with_validity, 0)?;
    let mut buf = vec![0u8; layout.total];
    layout.fill(ops, &mut buf);
    let stream = &device.streams[0];
    // From pageable memory, `cuMemcpyHtoDAsync` has copied `buf` into a driver staging buffer
    // when it returns, so `buf` may be dropped right after.
    ops.iter()
        .zip(&layout.columns)
        .map(|(op, regions)| match regions {
            Some(r) => upload_array(device, stream, op, r, 1, &buf).map(Some),
            None => Ok(None),
        })
        .collect()
}

impl<'d> Run<'d> {
    fn new(device: &'d GpuDevice) -> Self {
        Self {
            device,
            staging: (0..STREAMS).map(|_| None).collect(),
            in_flight: VecDeque::with_capacity(STREAMS),
        }
    }

    /// Stages, uploads and computes rows `rows` on stream `slot`, and enqueues the copy of the
    /// output back into the slot's staging buffer.
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        kernel: &dyn GpuColumnarKernel,
        ops: &[HostOperand],
        scalars: &[Option<DeviceArray>],
        rows: Range<usize>,
        slot: usize,
        with_validity: bool,
        out: ElementType,
    ) -> Result<()> {
        CHUNKS_SUBMITTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let device = self.device;
        let name = kernel.name();
        let n = rows.len();
        let layout = ChunkLayout::new(name, ops, rows, false, with_validity, out.width())?;
        let stream = &device.streams[slot];
        // The slot's previous chunk is finished (its stream synchronized), so its staging
        // buffer is free to rewrite or replace.
        let staging = &mut self.staging[slot];
        if staging.as_ref().is_none_or(|b| b.len() < layout.total) {
            if let Some(old) = staging.take() {
                device.return_staging(old);
            }
            *staging = Some(device.take_staging(layout.total)?);
        }
        let Some(staging) = staging.as_mut() else {
            return Err(device.fail("no staging buffer"));
        };
        let buf = staging
            .as_mut_slice()
            .map_err(|e| device.error("mapping pinned host memory", e))?;
        layout.fill(ops, buf);

        let mut inputs = Vec::with_capacity(ops.len());
        for (op, regions) in ops.iter().zip(&layout.columns) {
            inputs.push(match regions {
                Some(r) => Some(upload_array(device, stream, op, r, n, buf)?),
                None => None,
            });
        }
        let operands = ops
            .iter()
            .zip(inputs.iter().zip(scalars))
            .map(|(op, (column, scalar))| {
                if op.scalar {
                    scalar.as_ref().map(DeviceOperand::Scalar)
                } else {
                    column.as_ref().map(DeviceOperand::Column)
                }
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| device.fail(format!("{name}: an operand was not uploaded")))?;
        let output = kernel.evaluate_columnar(device, stream, n, &operands)?;
        drop(operands);
        check_output(name, device.label(), &kernel.output_type(), n, &output)?;

        // The output regions come after every input region; split there so both can be written.
        let (_, outs) = buf
            .split_at_mut_checked(layout.out_values.offset)
            .ok_or_else(|| device.fail("the output region lies outside the staging buffer"))?;
        let validity_at = layout.out_validity.offset - layout.out_values.offset;
        let (values_dst, validity_dst) = outs
            .split_at_mut_checked(validity_at)
            .ok_or_else(|| device.fail("the output region lies outside the staging buffer"))?;
        let values_dst = values_dst
            .get_mut(..layout.out_values.len)
            .ok_or_else(|| device.fail("the output region lies outside the staging buffer"))?;
        // cudarc's `memcpy_dtoh` copies as many bytes as the *destination* holds (and panics when
        // the source is shorter), so both must be exactly the same size: `check_output` made
        // sure of it, checked again here because a mismatch would read past a device buffer.
        let same_size = values_dst.len() == output.values().len()
            && output
                .validity()
                .is_none_or(|v| v.len() == layout.out_validity.len);
        if !same_size {
            return Err(device.fail(format!(
                "{name}: the output buffers do not match the {n}-row staging regions"
            )));
        }
        stream
            .memcpy_dtoh(output.values(), values_dst)
            .map_err(|e| device.error("copying the output back", e))?;
        let out_validity = match output.validity() {
            Some(validity) => {
                let dst = validity_dst
                    .get_mut(..layout.out_validity.len)
                    .ok_or_else(|| {
                        device.fail("the output region lies outside the staging buffer")
                    })?;
                stream
                    .memcpy_dtoh(validity, dst)
                    .map_err(|e| device.error("copying the output validity back", e))?;
                Some(layout.out_validity)
            }
            None => None,
        };
        self.in_flight.push_back(InFlight {
            slot,
            rows: n,
            out_values: layout.out_values,
            out_validity,
            _inputs: inputs,
            _output: output,
        });
        Ok(())
    }

    /// Waits for the oldest chunk in flight and appends its output.
    fn finish_oldest(&mut self, output: &mut OutputAssembler) -> Result<()> {
        let Some(chunk) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let device = self.device;
        device.streams[chunk.slot]
            .synchronize()
            .map_err(|e| device.error("running a chunk", e))?;
        let staging = self.staging[chunk.slot]
            .as_ref()
            .ok_or_else(|| device.fail("a finished chunk has no staging buffer"))?;
        let buf = staging
            .as_slice()
            .map_err(|e| device.error("reading pinned host memory", e))?;
        let values = region(device, buf, chunk.out_values)?;
        let validity = match chunk.out_validity {
            Some(r) => Some(region(device, buf, r)?),
            None => None,
        };
        output
            .append(chunk.rows, values, validity)
            .map_err(|e| device.relabel(e))
    }

    /// Finishes every chunk in flight, in order, then waits for every stream (a chunk that failed
    /// half-enqueued may have left copies behind).
    fn drain(&mut self, output: &mut OutputAssembler) -> Result<()> {
        while !self.in_flight.is_empty() {
            self.finish_oldest(output)?;
        }
        for stream in &self.device.streams {
            stream
                .synchronize()
                .map_err(|e| self.device.error("waiting for the device", e))?;
        }
        Ok(())
    }
}
