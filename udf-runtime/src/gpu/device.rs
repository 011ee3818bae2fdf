//! One CUDA device as the runtime uses it ([`GpuDevice`]): its context, created lazily once per
//! device and found by UUID; its streams; its compiled kernel modules; its pool of pinned staging
//! buffers; and how CUDA failures become [`RuntimeError`]s.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use accelsql_gpu_scheduler::DeviceInfo;
use cudarc::driver::sys::CUresult;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, DriverError, PinnedHostSlice,
};
use cudarc::nvrtc::Ptx;

use super::CudaLibraries;
use super::kernel_cache::{CompileTarget, KernelDiskCache, KernelSource, ModuleImage};
use super::nvrtc;
use crate::{Result, RuntimeError};

/// Streams per device: chunks in flight at once, so that one chunk's copies overlap another's
/// compute and the host's staging of a third.
pub const STREAMS: usize = 3;

/// Pinned staging buffers are allocated in multiples of this many bytes (so they can be reused).
const STAGING_GRANULE: usize = 1 << 20;

/// A CUDA device opened for running GPU implementations: one per device UUID per process,
/// shared by every instance pinned to it.
///
/// Open one with [`GpuDevice::open`]; run a [`super::GpuColumnarKernel`] over a batch with
/// [`GpuDevice::run_columnar`]. Runs on one device are serialized (each uses all its streams).
pub struct GpuDevice {
    info: DeviceInfo,
    label: String,
    ordinal: usize,
    compute_capability: (i32, i32),
    target: CompileTarget,
    ctx: Arc<CudaContext>,
    pub(crate) streams: Vec<Arc<CudaStream>>,
    modules: Mutex<HashMap<u64, Arc<CudaModule>>>,
    staging: Mutex<Vec<PinnedHostSlice<u8>>>,
    runs: Mutex<()>,
    /// The first error that left the CUDA context unusable ([`is_sticky`]), if one did.
    broken: Mutex<Option<String>>,
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("device", &self.label)
            .field("ordinal", &self.ordinal)
            .field("compute_capability", &self.compute_capability)
            .finish_non_exhaustive()
    }
}

/// The CUDA libraries, probed once per process.
fn libraries() -> CudaLibraries {
    static LIBRARIES: OnceLock<CudaLibraries> = OnceLock::new();
    *LIBRARIES.get_or_init(CudaLibraries::probe)
}

/// Opened devices by normalized UUID.
fn registry() -> &'static Mutex<HashMap<String, Arc<GpuDevice>>> {
    static DEVICES: OnceLock<Mutex<HashMap<String, Arc<GpuDevice>>>> = OnceLock::new();
    DEVICES.get_or_init(Default::default)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn unavailable(message: impl Into<String>) -> RuntimeError {
    RuntimeError::GpuUnavailable {
        message: message.into(),
    }
}

/// How a device is named in errors: `0 (GPU-6f3c…)`.
pub fn device_label(info: &DeviceInfo) -> String {
    format!("{} ({})", info.index, info.uuid)
}

/// A CUDA device UUID formatted as NVML formats GPU UUIDs: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-
/// xxxxxxxxxxxx`, lowercase hex.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex = |r: std::ops::Range<usize>| {
        bytes[r]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

/// A UUID without its `GPU-` prefix, lowercase: the form two UUIDs are compared in.
pub fn normalize_uuid(uuid: &str) -> String {
    let uuid = uuid.trim();
    let bare = match uuid.get(..4) {
        Some(prefix) if prefix.eq_ignore_ascii_case("GPU-") => &uuid[4..],
        _ => uuid,
    };
    bare.to_ascii_lowercase()
}

/// Whether CUDA error `code` leaves the context unusable for the rest of the process (CUDA's
/// "sticky" errors: every later call in the context fails with it, until the process restarts).
pub(crate) fn is_sticky(code: CUresult) -> bool {
    matches!(
        code,
        CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_EXTERNAL_DEVICE
    )
}

/// `name (description)` of a driver error, e.g. `CUDA_ERROR_OUT_OF_MEMORY (out of memory)`.
fn describe(e: DriverError) -> String {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    let text = match e.error_string() {
        Ok(text) => format!("{name} ({})", text.to_string_lossy()),
        Err(_) => name,
    };
    match hint(e.0) {
        Some(hint) => format!("{text}; {hint}"),
        None => text,
    }
}

/// What to do about CUDA error `code`, where the fix lies outside accelsql.
fn hint(code: CUresult) -> Option<&'static str> {
    match code {
        // Seen on the first real GPU: the CUDA toolkit's `lib/stubs` on LD_LIBRARY_PATH, ahead
        // of the driver's directory, so the loader found the link-time stub first.
        CUresult::CUDA_ERROR_STUB_LIBRARY => Some(
            "the libcuda.so loaded is the CUDA toolkit's link-time stub, not the driver's: take \
             the toolkit's `stubs` directory off LD_LIBRARY_PATH (or put the driver's library \
             directory before it)",
        ),
        _ => None,
    }
}

/// The text of a panic payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_string()
    }
}

/// Runs `f`, turning a panic inside it (cudarc panics on a missing library symbol, among
/// others) into the error `on_panic` builds from the panic's message.
pub(crate) fn catch_panics<T>(
    f: impl FnOnce() -> Result<T>,
    on_panic: impl FnOnce(String) -> RuntimeError,
) -> Result<T> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(on_panic(panic_text(payload.as_ref()))),
    }
}

impl GpuDevice {
    /// The device `info` names, with its CUDA context: created on the first call for a device
    /// (lazily, by the first GPU-placed instance), shared afterwards.
    ///
    /// The device is found among CUDA's devices by UUID, not by index, so a `CUDA_VISIBLE_DEVICES`
    /// that reorders devices is harmless. Fails with [`RuntimeError::GpuUnavailable`] (never a
    /// panic) when the device is simulated (it has no CUDA), when the CUDA driver or NVRTC
    /// library is missing, when CUDA cannot initialise, or when CUDA does not see the device.
    pub fn open(info: &DeviceInfo) -> Result<Arc<Self>> {
        if info.simulated {
            return Err(unavailable(format!(
                "GPU {} is a simulated device (ACCELSQL_SIMULATED_GPUS) and has no CUDA; \
                 its GPU implementations run on the CPU",
                device_label(info)
            )));
        }
        let key = normalize_uuid(&info.uuid);
        let mut devices = lock(registry());
        if let Some(device) = devices.get(&key) {
            device.check_usable()?;
            return Ok(Arc::clone(device));
        }
        // Look for the libraries before any cudarc call: cudarc panics when one is missing.
        let libraries = libraries();
        if !libraries.driver {
            return Err(unavailable(
                "the CUDA driver library (libcuda.so) cannot be loaded: install the NVIDIA driver, \
                 or check LD_LIBRARY_PATH",
            ));
        }
        if !libraries.nvrtc {
            return Err(unavailable(
                "the CUDA runtime compiler (libnvrtc.so) cannot be loaded, so kernels cannot be \
                 built: install the CUDA toolkit's NVRTC, or check LD_LIBRARY_PATH",
            ));
        }
        let label = device_label(info);
        let device = catch_panics(
            || Self::create(info).map(Arc::new),
            |m| {
                unavailable(format!(
                    "opening GPU {label} failed inside the CUDA library: {m}"
                ))
            },
        )?;
        devices.insert(key, Arc::clone(&device));
        Ok(device)
    }

    fn create(info: &DeviceInfo) -> Result<Self> {
        use cudarc::driver::result;
        let label = device_label(info);
        let fail = |step: &str, e: DriverError| {
            unavailable(format!("GPU {label}: {step} failed: {}", describe(e)))
        };
        result::init().map_err(|e| fail("initialising CUDA (cuInit)", e))?;
        let count = result::device::get_count().map_err(|e| fail("counting devices", e))?;
        let want = normalize_uuid(&info.uuid);
        let mut seen = Vec::new();
        let mut found = None;
        for ordinal in 0..count {
            let dev = result::device::get(ordinal).map_err(|e| fail("getting a device", e))?;
            let uuid = result::device::get_uuid(dev).map_err(|e| fail("reading a UUID", e))?;
            let uuid = format_uuid(&uuid.bytes.map(|b| b as u8));
            if normalize_uuid(&uuid) == want {
                found = Some(ordinal);
                break;
            }
            seen.push(uuid);
        }
        let Some(ordinal) = found.and_then(|o| usize::try_from(o).ok()) else {
            return Err(unavailable(format!(
                "GPU {label} is not among the {count} device(s) CUDA sees ({}); is it hidden by \
                 CUDA_VISIBLE_DEVICES, or a MIG instance?",
                if seen.is_empty() {
                    "none".to_string()
                } else {
                    seen.join(", ")
                }
            )));
        };
        let ctx = CudaContext::new(ordinal).map_err(|e| fail("creating the CUDA context", e))?;
        let compute_capability = ctx
            .compute_capability()
            .map_err(|e| fail("reading the compute capability", e))?;
        let target = CompileTarget::choose(compute_capability, &nvrtc::supported_archs())
            .map_err(|m| unavailable(format!("GPU {label}: {m}")))?;
        let streams = (0..STREAMS)
            .map(|_| ctx.new_stream())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| fail("creating streams", e))?;
        Ok(Self {
            info: info.clone(),
            label,
            ordinal,
            compute_capability,
            target,
            ctx,
            streams,
            modules: Mutex::new(HashMap::new()),
            staging: Mutex::new(Vec::new()),
            runs: Mutex::new(()),
            broken: Mutex::new(None),
        })
    }

    /// The device as the inventory described it when it was opened.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// How errors name the device: `index (uuid)`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The device's CUDA ordinal in this process (after `CUDA_VISIBLE_DEVICES`).
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Compute capability, e.g. `(9, 0)` for an H100.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }

    /// What this device's kernels are compiled to: CUBIN for its architecture (`sm_90` on an
    /// H100), or PTX when NVRTC does not know the architecture (see [`CompileTarget::choose`]).
    pub fn compile_target(&self) -> CompileTarget {
        self.target
    }

    /// The device's CUDA context (the primary context).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The error for CUDA call `step` failing with `e`: [`RuntimeError::GpuOutOfMemory`] for
    /// `CUDA_ERROR_OUT_OF_MEMORY` (the runtime then splits the chunk), else [`RuntimeError::Gpu`].
    ///
    /// An error that leaves the context unusable (CUDA's sticky errors: an illegal address in a
    /// kernel, a launch failure, …) marks the device broken and is
    /// [`RuntimeError::GpuUnavailable`], now and from then on in [`GpuDevice::open`] and
    /// [`GpuDevice::run_columnar`]: an optional call runs the batch, and later ones, on the CPU
    /// (recording why), a required one fails, instead of every later statement failing with the
    /// same CUDA error.
    pub fn error(&self, step: &str, e: DriverError) -> RuntimeError {
        let message = format!("{step}: {}", describe(e));
        if is_sticky(e.0) {
            lock(&self.broken).get_or_insert_with(|| message.clone());
            return unavailable(format!(
                "GPU {} failed ({message}), which leaves its CUDA context unusable: it is not \
                 used again until the process restarts",
                self.label
            ));
        }
        if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            RuntimeError::GpuOutOfMemory {
                device: self.label.clone(),
                message,
            }
        } else {
            RuntimeError::Gpu {
                device: self.label.clone(),
                message,
            }
        }
    }

    /// [`RuntimeError::GpuUnavailable`] when an earlier error left the device's CUDA context
    /// unusable (see [`GpuDevice::error`]).
    pub(crate) fn check_usable(&self) -> Result<()> {
        match lock(&self.broken).as_ref() {
            None => Ok(()),
            Some(first) => Err(unavailable(format!(
                "GPU {} cannot be used until the process restarts: its CUDA context failed \
                 with {first}",
                self.label
            ))),
        }
    }

    /// A [`RuntimeError::Gpu`] on this device with `message`: for a GPU implementation's own
    /// failures (a wrong argument count, a size it cannot launch).
    pub fn fail(&self, message: impl Into<String>) -> RuntimeError {
        RuntimeError::Gpu {
            device: self.label.clone(),
            message: message.into(),
        }
    }

    /// Kernel `name` of `source`, compiled for this device (see [`GpuDevice::module`]).
    pub fn function(&self, source: &KernelSource, name: &str) -> Result<CudaFunction> {
        if name.contains('\0') {
            return Err(self.fail(format!("kernel name {name:?} contains a NUL byte")));
        }
        let module = self.module(source)?;
        module.load_function(name).map_err(|e| {
            self.error(
                &format!("finding kernel {name} in module {}", source.name()),
                e,
            )
        })
    }

    /// `source` compiled for this device and loaded: compiled with NVRTC once per process and
    /// [`CompileTarget`] (CUBIN for the device's architecture, `sm_90` on an H100), kept in memory
    /// per device, and in the on-disk cache when one is configured (see [`super::kernel_cache`]);
    /// a cache entry that is corrupt or does not load is recompiled.
    pub fn module(&self, source: &KernelSource) -> Result<Arc<CudaModule>> {
        let key = source.cache_key(self.target);
        let mut modules = lock(&self.modules);
        if let Some(module) = modules.get(&key) {
            return Ok(Arc::clone(module));
        }
        let module = catch_panics(
            || self.load_module(source, key),
            |m| {
                self.fail(format!(
                    "compiling or loading module {} panicked inside the CUDA library: {m}",
                    source.name()
                ))
            },
        )?;
        modules.insert(key, Arc::clone(&module));
        Ok(module)
    }

    fn load_module(&self, source: &KernelSource, key: u64) -> Result<Arc<CudaModule>> {
        // An image already built by this process (another device of the same architecture).
        let memo = lock(image_memo()).get(&key).cloned();
        if let Some(image) = memo
            && let Ok(module) = self.ctx.load_module(loadable(&image))
        {
            return Ok(module);
        }
        let disk = KernelDiskCache::configured();
        if let Some(image) = disk.as_ref().and_then(|d| d.load(key))
            && let Ok(module) = self.ctx.load_module(loadable(&image))
        {
            lock(image_memo()).insert(key, image);
            return Ok(module);
        }
        let image = nvrtc::compile(source, self.target).map_err(|m| self.fail(m))?;
        let module = self.ctx.load_module(loadable(&image)).map_err(|e| {
            self.error(
                &format!(
                    "loading module {} ({} {})",
                    source.name(),
                    image.kind(),
                    self.target.name()
                ),
                e,
            )
        })?;
        if let Some(disk) = &disk {
            // A cache that cannot be written only costs a compile next time.
            let _ = disk.store(key, &image);
        }
        lock(image_memo()).insert(key, image);
        Ok(module)
    }

    /// Host-to-device bandwidth of a plain copy of `bytes` bytes from pinned host memory, in
    /// bytes per second (median of `repeats` timed copies after one untimed): the ceiling any
    /// run's input transfer can reach, for benchmarks and diagnostics.
    pub fn pinned_upload_bandwidth(&self, bytes: usize, repeats: usize) -> Result<f64> {
        let _serial = self.lock_runs();
        catch_panics(
            || {
                let bytes = bytes.max(1);
                let stream = &self.streams[0];
                let staging = self.take_staging(bytes)?;
                let measured = (|| {
                    let src = staging
                        .as_slice()
                        .map_err(|e| self.error("mapping pinned host memory", e))?;
                    let src = src
                        .get(..bytes)
                        .ok_or_else(|| self.fail("staging too small"))?;
                    // SAFETY: uninitialised device memory that the copies below only write and
                    // nothing reads.
                    let mut dst = unsafe { stream.alloc::<u8>(bytes) }
                        .map_err(|e| self.error("allocating device memory", e))?;
                    let mut times = Vec::with_capacity(repeats);
                    for i in 0..=repeats.max(1) {
                        let start = std::time::Instant::now();
                        stream
                            .memcpy_htod(src, &mut dst)
                            .map_err(|e| self.error("copying to the device", e))?;
                        stream
                            .synchronize()
                            .map_err(|e| self.error("waiting for the copy", e))?;
                        if i > 0 {
                            times.push(start.elapsed().as_secs_f64());
                        }
                    }
                    times.sort_by(f64::total_cmp);
                    let median = times.get(times.len() / 2).copied().unwrap_or(f64::INFINITY);
                    Ok(bytes as f64 / median)
                })();
                // Every copy was waited for (or never started): the buffer is free again, unless
                // the stream is in error (then it is never reused; see `Run`'s drop).
                if stream.synchronize().is_ok() {
                    self.return_staging(staging);
                } else {
                    std::mem::forget(staging);
                }
                measured
            },
            |m| self.fail(format!("measuring the copy bandwidth panicked: {m}")),
        )
    }

    /// Serializes runs on this device (held for a whole [`GpuDevice::run_columnar`]).
    pub(crate) fn lock_runs(&self) -> MutexGuard<'_, ()> {
        lock(&self.runs)
    }

    /// A zeroed pinned host buffer of at least `len` bytes, from the pool or newly allocated.
    pub(crate) fn take_staging(&self, len: usize) -> Result<PinnedHostSlice<u8>> {
        {
            let mut pool = lock(&self.staging);
            if let Some(i) = pool.iter().position(|b| b.len() >= len) {
                return Ok(pool.swap_remove(i));
            }
        }
        let len = len.max(1).next_multiple_of(STAGING_GRANULE);
        // Not write-combined (flags 0): the host reads results back from these buffers too.
        // SAFETY: the memory is uninitialised after this call; it is zeroed right below, before
        // any slice of it is made.
        let mut buffer = unsafe { self.ctx.alloc_pinned_with_flags::<u8>(len, 0) }
            .map_err(|e| self.error("allocating pinned host memory", e))?;
        let ptr = buffer
            .as_mut_ptr()
            .map_err(|e| self.error("mapping pinned host memory", e))?;
        // SAFETY: `ptr` points to the `len` bytes just allocated, which nothing else uses yet.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(buffer)
    }

    /// Returns a staging buffer to the pool. The caller guarantees no copy into or out of it is
    /// pending (its stream was synchronized). The pool keeps the [`STREAMS`] largest buffers.
    pub(crate) fn return_staging(&self, buffer: PinnedHostSlice<u8>) {
        let mut pool = lock(&self.staging);
        pool.push(buffer);
        if pool.len() > STREAMS {
            pool.sort_by_key(|b| std::cmp::Reverse(b.len()));
            pool.truncate(STREAMS);
        }
    }
}

/// Module images compiled by this process, by cache key (shared by devices of the same
/// architecture).
fn image_memo() -> &'static Mutex<HashMap<u64, ModuleImage>> {
    static MEMO: OnceLock<Mutex<HashMap<u64, ModuleImage>>> = OnceLock::new();
    MEMO.get_or_init(Default::default)
}

/// `image` as cudarc loads it (`cuModuleLoadData`): a CUBIN as its bytes, PTX as a
/// NUL-terminated string (the text has no NUL byte, see [`ModuleImage`], so cudarc's
/// conversion cannot panic).
fn loadable(image: &ModuleImage) -> Ptx {
    match image {
        ModuleImage::Cubin(bytes) => Ptx::from_binary(bytes.clone()),
        ModuleImage::Ptx(text) => Ptx::from_src(text.clone()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_stub_library_error_says_what_to_do() {
        let hint = hint(CUresult::CUDA_ERROR_STUB_LIBRARY).unwrap_or_default();
        assert!(
            hint.contains("stub") && hint.contains("LD_LIBRARY_PATH"),
            "{hint}"
        );
        assert!(super::hint(CUresult::CUDA_ERROR_OUT_OF_MEMORY).is_none());
    }

    fn device(uuid: &str, simulated: bool) -> DeviceInfo {
        DeviceInfo {
            uuid: uuid.to_string(),
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_total: 80 << 30,
            memory_free: 80 << 30,
            simulated,
            ..DeviceInfo::simulated(0)
        }
    }

    #[test]
    fn uuids_are_formatted_as_nvml_does_and_compared_loosely() {
        let bytes = [
            0x6f, 0x3c, 0x1b, 0x2a, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99,
            0xaa, 0xff,
        ];
        let text = format_uuid(&bytes);
        assert_eq!(text, "GPU-6f3c1b2a-0011-2233-4455-66778899aaff");
        assert_eq!(text.len(), 40);
        assert_eq!(
            normalize_uuid(&text),
            "6f3c1b2a-0011-2233-4455-66778899aaff"
        );
        assert_eq!(
            normalize_uuid(" gpu-6F3C1B2A-0011-2233-4455-66778899AAFF "),
            normalize_uuid(&text)
        );
        assert_eq!(
            normalize_uuid("6f3c1b2a-0011-2233-4455-66778899aaff"),
            normalize_uuid(&text)
        );
        assert_ne!(
            normalize_uuid("GPU-6f3c1b2a-0011-2233-4455-66778899aaf0"),
            normalize_uuid(&text)
        );
        // c_char may be signed: bytes above 0x7f survive the round trip through i8.
        let signed: [i8; 16] = bytes.map(|b| b as i8);
        assert_eq!(format_uuid(&signed.map(|b| b as u8)), text);
    }

    #[test]
    fn simulated_devices_have_no_cuda() {
        let e =
            GpuDevice::open(&device("GPU-5131a7ed-0000-4000-8000-000000000000", true)).unwrap_err();
        assert_eq!(e.code(), RuntimeError::GPU_UNAVAILABLE);
        assert!(e.to_string().contains("simulated"), "{e}");
    }

    #[test]
    fn without_a_driver_opening_is_unavailable_not_a_panic() {
        if CudaLibraries::probe().usable() {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED (CUDA libraries present): without_a_driver_opening_is_unavailable_not_a_panic"
            );
            return;
        }
        let info = device("GPU-6f3c1b2a-0011-2233-4455-66778899aaff", false);
        for _ in 0..2 {
            let e = GpuDevice::open(&info).unwrap_err();
            assert_eq!(e.code(), RuntimeError::GPU_UNAVAILABLE, "{e}");
            assert!(e.to_string().contains("cannot be loaded"), "{e}");
        }
    }

    #[test]
    fn only_context_killing_errors_are_sticky() {
        for code in [
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
            CUresult::CUDA_ERROR_MISALIGNED_ADDRESS,
        ] {
            assert!(is_sticky(code), "{code:?}");
        }
        // Out of memory (the chunk is split), bad launches and bad images leave the context
        // usable.
        for code in [
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            CUresult::CUDA_ERROR_INVALID_VALUE,
            CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
            CUresult::CUDA_ERROR_NOT_FOUND,
        ] {
            assert!(!is_sticky(code), "{code:?}");
        }
    }

    #[test]
    fn panics_become_errors() {
        let r: Result<()> = catch_panics(|| panic!("missing symbol cuFoo"), unavailable);
        let e = r.unwrap_err();
        assert_eq!(e.code(), RuntimeError::GPU_UNAVAILABLE);
        assert!(e.to_string().contains("missing symbol cuFoo"), "{e}");
        let r: Result<()> = catch_panics(|| panic!("{}", String::from("owned")), unavailable);
        assert!(r.unwrap_err().to_string().contains("owned"));
        assert_eq!(catch_panics(|| Ok(7), unavailable).unwrap(), 7);
    }
}
