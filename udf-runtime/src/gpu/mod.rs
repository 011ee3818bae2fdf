//! The GPU side of UDF execution (cudarc): devices and their CUDA contexts, the columnar GPU
//! implementation contract, the runtime that drives it over Arrow batches, and the built-in GPU
//! implementations (`cosine_similarity`/`dot_product`/`l2_distance`, `haversine_km`,
//! `black_scholes_call`/`_put`).
//!
//! # How a GPU implementation runs
//!
//! A Rust UDF keeps its CPU implementation (the fallback and the reference) and may add a GPU
//! one: a type implementing [`GpuColumnarKernel`]. Its `evaluate_columnar` receives one chunk of
//! the batch already on the device — each argument a [`DeviceOperand`], a column of the chunk's
//! rows or a scalar uploaded once for the whole batch — and a CUDA stream; it enqueues its
//! kernels on that stream and returns one [`DeviceColumn`]. Everything around that is the
//! runtime's job, in [`GpuDevice::run_columnar`]:
//!
//! 1. the device comes from the statement's lease as a scheduler `DeviceInfo`;
//!    [`GpuDevice::open`] finds it among CUDA's devices by UUID and creates its context on first
//!    use (no CUDA driver, NVRTC or device, or a simulated device: [`crate::RuntimeError::GpuUnavailable`],
//!    on which an optional GPU call falls back to the CPU);
//! 2. the batch is cut into chunks sized from the device's free memory ([`chunk`]);
//! 3. each chunk's Arrow buffers are copied by host threads into a pinned staging buffer (list
//!    values flattened, offsets re-based, validity re-aligned to bit 0 — [`bitmap`]) and
//!    uploaded; up to [`STREAMS`] chunks are in flight on their own streams, so copies and
//!    compute overlap;
//! 4. the kernel's output is checked (type, row count, buffer sizes: an error, never undefined
//!    behaviour), copied back and joined into one Arrow array of exactly the batch's rows, NULL
//!    wherever an argument was NULL (unless the kernel handles NULLs itself) or the kernel said
//!    so;
//! 5. a chunk that runs out of device memory is halved and retried; a single row that does not
//!    fit is [`crate::RuntimeError::GpuOutOfMemory`]; any other CUDA failure is
//!    [`crate::RuntimeError::Gpu`]. Device memory is freed when its `CudaSlice` is dropped.
//!
//! Kernels are CUDA C ([`KernelSource`]), compiled with NVRTC on first use to machine code
//! (CUBIN) for the device's architecture — so no PTX JIT, and no failure where NVRTC is newer
//! than the driver — or to PTX for a device newer than NVRTC knows ([`CompileTarget`]); kept per
//! device, and cached on disk when `ACCELSQL_KERNEL_CACHE_DIR` (or [`set_kernel_cache_dir`])
//! names a directory ([`kernel_cache`]).
//!
//! # Example, in prose
//!
//! A `scale(x DOUBLE, by DOUBLE)` UDF would hold a [`KernelSource`] with one
//! `extern "C" __global__ void scale(const double* x, int x_scalar, const double* by,
//! int by_scalar, long long n, double* out)`. Its `evaluate_columnar` gets the function with
//! [`GpuDevice::function`], allocates the output with [`DeviceColumn::alloc`] (`F64`, `rows`
//! rows, no validity), and launches it with `stream.launch_builder(&f)`, passing each operand's
//! [`DeviceArray::values`] and [`DeviceOperand::scalar_flag`], the row count as `i64` and the
//! output's values; errors go through [`GpuDevice::error`]. Calling
//! `GpuDevice::open(&device)?.run_columnar(&Scale, rows, &[x, by])` then returns the Float64
//! column, with `by` uploaded once when it is a constant. The built-ins in this module are
//! complete examples (`geo.rs` is the smallest). A kernel of exactly this shape (DOUBLE
//! arguments, a DOUBLE result, one thread per row) needs no Rust of its own: [`ElementwiseF64`]
//! runs it, as `examples/examples/gpu_scalar_udf.rs` does through the engine's
//! `ScalarUdfBuilder::gpu_columnar`.

pub mod bitmap;
pub mod chunk;
mod columnar;
mod device;
mod elementwise;
mod geo;
mod host;
pub mod kernel_cache;
mod launch;
mod nvrtc;
mod options;
mod pipeline;
pub use pipeline::chunks_submitted;
mod vectors;

pub use chunk::{
    CONTEXT_ALLOWANCE, ESTIMATE_BATCH_ROWS, builtin_device_memory, current_device_memory_limit,
    current_max_chunk_bytes, with_device_memory_limit, with_max_chunk_bytes,
};
pub use columnar::{
    DeviceArray, DeviceColumn, DeviceOperand, ElementType, GpuColumnarKernel, check_output,
};
pub use device::{GpuDevice, STREAMS, device_label, format_uuid, normalize_uuid};
pub use elementwise::ElementwiseF64;
pub use geo::{geo_source, haversine_km};
pub use kernel_cache::{
    CompileTarget, ENV_KERNEL_CACHE_DIR, KernelDiskCache, KernelSource, ModuleImage,
    kernel_cache_dir, set_kernel_cache_dir,
};
pub use launch::{BLOCK_THREADS, thread_per_row};
pub use options::{black_scholes, options_source};
pub use vectors::{vector_similarity, vectors_source};

/// Which CUDA libraries this process can load (cudarc's `dynamic-loading`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaLibraries {
    /// The driver API (`libcuda.so`).
    pub driver: bool,
    /// The runtime compiler (`libnvrtc.so`), needed to build kernels.
    pub nvrtc: bool,
}

impl CudaLibraries {
    /// Looks for the libraries without initialising CUDA.
    ///
    /// Call this before any other cudarc function: cudarc panics inside its first call when a
    /// library is missing, and a GPU engine on a machine without CUDA must run on the CPU instead.
    pub fn probe() -> Self {
        // SAFETY: `is_culib_present` only tries `dlopen` on the library's candidate names and
        // drops the handle; it calls no CUDA function.
        let driver = unsafe { cudarc::driver::sys::is_culib_present() };
        // SAFETY: as above, for NVRTC.
        let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
        Self { driver, nvrtc }
    }

    /// Whether kernels can be compiled and launched.
    pub fn usable(&self) -> bool {
        self.driver && self.nvrtc
    }
}

/// For tests of GPU code: the device (or whatever stands for it) in `found` as `Some`, or `None`
/// after printing `SKIPPED (no CUDA device): <test> (<why>)` straight to stderr (past the test
/// harness's capture, so the skip shows), for the test to return.
///
/// # Panics
///
/// Where there is no device and `ACCELSQL_REQUIRE_GPU` is set: on a GPU machine a skip would
/// hide a broken setup.
pub fn device_or_skip<'a, T>(test: &str, found: &'a Result<T, String>) -> Option<&'a T> {
    match found {
        Ok(device) => Some(device),
        Err(why) if std::env::var_os("ACCELSQL_REQUIRE_GPU").is_some() => {
            panic!("ACCELSQL_REQUIRE_GPU is set but there is no CUDA device for {test}: {why}")
        }
        Err(why) => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED (no CUDA device): {test} ({why})"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Whether the dynamic loader finds a library `lib<name>.so` under one of the names cudarc
    /// tries first, checked independently of cudarc.
    fn loader_finds(name: &str) -> bool {
        ["", ".13", ".12", ".11", ".1"].iter().any(|suffix| {
            let Ok(file) = std::ffi::CString::new(format!("lib{name}.so{suffix}")) else {
                return false;
            };
            // SAFETY: dlopen with a NUL-terminated name; the handle is closed right away.
            let handle = unsafe { libc::dlopen(file.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
            if handle.is_null() {
                return false;
            }
            // SAFETY: a handle dlopen returned, closed once.
            unsafe { libc::dlclose(handle) };
            true
        })
    }

    #[test]
    fn the_probe_agrees_with_the_dynamic_loader() {
        let found = CudaLibraries::probe();
        assert_eq!(found, CudaLibraries::probe(), "probing twice differs");
        assert_eq!(found.driver, loader_finds("cuda"), "{found:?}");
        assert_eq!(found.nvrtc, loader_finds("nvrtc"), "{found:?}");
    }
}
