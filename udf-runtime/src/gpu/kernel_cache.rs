//! Kernel sources, what NVRTC compiles them to ([`CompileTarget`], [`ModuleImage`]) and the
//! cache of compiled modules: the stable cache key (FNV-1a 64 of the source, options and target),
//! the on-disk store (atomic writes, checked reads) and where it lives (`ACCELSQL_KERNEL_CACHE_DIR`
//! or [`set_kernel_cache_dir`]).
//!
//! Nothing here calls CUDA: compiling and loading live in `GpuDevice::module`, so the target
//! choice and the cache are tested on machines without a GPU.

use std::borrow::Cow;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Environment variable naming the directory of the on-disk module cache. Unset: the per-user
/// default ([`default_kernel_cache_dir`]); empty: no disk cache (kernels are then compiled once
/// per process and device architecture).
pub const ENV_KERNEL_CACHE_DIR: &str = "ACCELSQL_KERNEL_CACHE_DIR";

/// Bumped when the cache file format or the compile options change meaning (v2: CUBIN or PTX
/// images, binary-safe, with their kind in the header).
const CACHE_FORMAT: &str = "accelsql-module-v2";

/// What NVRTC compiles a module to for one device.
///
/// Machine code (CUBIN) for the device's own architecture is the normal case: the driver loads it
/// without JIT-compiling PTX, so it loads even where NVRTC is newer than the driver (a PTX image
/// from a newer NVRTC fails with `CUDA_ERROR_UNSUPPORTED_PTX_VERSION` there). Only a device newer
/// than every architecture NVRTC knows gets PTX for the newest one NVRTC knows, which the driver
/// JIT-compiles for the device.
///
/// ```
/// use accelsql_udf_runtime::gpu::CompileTarget;
/// // An H100 (compute capability 9.0) with CUDA 13's NVRTC: sm_90 machine code.
/// let nvrtc_13 = [75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121];
/// let h100 = CompileTarget::choose((9, 0), &nvrtc_13).unwrap();
/// assert_eq!(h100, CompileTarget::Cubin(90));
/// assert_eq!(h100.arch_option(), "--gpu-architecture=sm_90");
/// // A device newer than NVRTC knows: PTX of the newest architecture, JIT-compiled by the driver.
/// assert_eq!(CompileTarget::choose((13, 0), &nvrtc_13).unwrap().name(), "compute_121");
/// // A device older than NVRTC supports (CUDA 13 dropped Volta and older): an error.
/// assert!(CompileTarget::choose((7, 0), &nvrtc_13).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompileTarget {
    /// CUBIN for real architecture `sm_<n>` (e.g. 90 for compute capability 9.0).
    Cubin(u32),
    /// PTX for virtual architecture `compute_<n>`, JIT-compiled by the driver when loaded.
    Ptx(u32),
}

impl CompileTarget {
    /// The architecture number of compute capability `cc`: `major * 10 + minor` (90 for 9.0,
    /// 120 for 12.0), as NVRTC numbers them; `None` for a negative or absurd capability.
    pub fn arch_of(cc: (i32, i32)) -> Option<u32> {
        let (major, minor) = (u32::try_from(cc.0).ok()?, u32::try_from(cc.1).ok()?);
        if minor >= 10 {
            return None;
        }
        major.checked_mul(10)?.checked_add(minor)
    }

    /// CUBIN for the device's own architecture (what [`CompileTarget::choose`] picks whenever
    /// NVRTC supports the device).
    pub fn native(cc: (i32, i32)) -> Option<Self> {
        Self::arch_of(cc).map(Self::Cubin)
    }

    /// The target for a device of compute capability `cc`, given the architectures NVRTC
    /// supports (`nvrtcGetSupportedArchs`; empty when unknown, then the device's own is tried):
    /// CUBIN for the device's architecture when NVRTC supports it, else PTX for the newest
    /// supported architecture below it (PTX runs on later devices), else an error saying why.
    pub fn choose(cc: (i32, i32), supported: &[i32]) -> Result<Self, String> {
        let arch = Self::arch_of(cc)
            .ok_or_else(|| format!("compute capability {}.{} is not valid", cc.0, cc.1))?;
        let supported: Vec<u32> = supported
            .iter()
            .filter_map(|&a| u32::try_from(a).ok())
            .collect();
        if supported.is_empty() || supported.contains(&arch) {
            return Ok(Self::Cubin(arch));
        }
        if let Some(&below) = supported.iter().filter(|&&a| a < arch).max() {
            return Ok(Self::Ptx(below));
        }
        let oldest = supported.iter().min().copied().unwrap_or(0);
        Err(format!(
            "this NVRTC cannot compile for compute capability {}.{}: the oldest it supports is \
             {}.{} (CUDA 13 dropped compute capabilities below 7.5)",
            cc.0,
            cc.1,
            oldest / 10,
            oldest % 10
        ))
    }

    /// The architecture's name: `sm_90` (CUBIN) or `compute_90` (PTX).
    pub fn name(self) -> String {
        match self {
            Self::Cubin(arch) => format!("sm_{arch}"),
            Self::Ptx(arch) => format!("compute_{arch}"),
        }
    }

    /// The NVRTC option selecting it: `--gpu-architecture=sm_90`.
    pub fn arch_option(self) -> String {
        format!("--gpu-architecture={}", self.name())
    }
}

/// A compiled module, as NVRTC produced it and `cuModuleLoadData` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleImage {
    /// Machine code (an ELF image).
    Cubin(Vec<u8>),
    /// PTX text (without a NUL byte; the loader adds the terminator).
    Ptx(String),
}

impl ModuleImage {
    /// `cubin` or `ptx`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Cubin(_) => "cubin",
            Self::Ptx(_) => "ptx",
        }
    }

    /// The image's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::Cubin(bytes) => bytes,
            Self::Ptx(text) => text.as_bytes(),
        }
    }

    /// The image of kind `kind` (`cubin` or `ptx`) made of `bytes`, if they can be one: a CUBIN
    /// starts with the ELF magic; PTX is UTF-8 text without NUL bytes. Neither may be empty.
    pub fn from_parts(kind: &str, bytes: Vec<u8>) -> Option<Self> {
        match kind {
            "cubin" if bytes.starts_with(b"\x7fELF") => Some(Self::Cubin(bytes)),
            "ptx" if !bytes.is_empty() && !bytes.contains(&0) => {
                String::from_utf8(bytes).ok().map(Self::Ptx)
            }
            _ => None,
        }
    }
}

/// The CUDA C source of one module of kernels, with the NVRTC options it needs beyond the target
/// architecture (which the runtime adds from the device's compute capability).
///
/// Kernels are `extern "C" __global__` functions, so their names are not mangled. NVRTC has no
/// system headers: use the CUDA built-ins (`sqrt`, `exp`, `erfc`, `atomicOr`, `long long`, …),
/// never `#include <math.h>` or `<stdint.h>`.
///
/// ```
/// use accelsql_udf_runtime::gpu::{CompileTarget, KernelSource};
/// let source = KernelSource::new(
///     "scale",
///     r#"extern "C" __global__ void scale(double* x, long long n, double by) {
///            long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
///            if (i < n) x[i] *= by;
///        }"#,
/// )
/// .with_option("--fmad=false");
/// assert_eq!(source.name(), "scale");
/// // The cache key depends on the source, the options and the target.
/// let (h100, a100) = (CompileTarget::Cubin(90), CompileTarget::Cubin(80));
/// assert_ne!(source.cache_key(h100), source.cache_key(a100));
/// assert_ne!(source.cache_key(h100), source.cache_key(CompileTarget::Ptx(90)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSource {
    name: Cow<'static, str>,
    code: Cow<'static, str>,
    options: Vec<String>,
}

impl KernelSource {
    /// A module named `name` (for messages) with CUDA C `code`.
    pub fn new(name: impl Into<Cow<'static, str>>, code: impl Into<Cow<'static, str>>) -> Self {
        Self {
            name: name.into(),
            code: code.into(),
            options: Vec::new(),
        }
    }

    /// Adds an NVRTC option, e.g. `--fmad=false`.
    pub fn with_option(mut self, option: impl Into<String>) -> Self {
        self.options.push(option.into());
        self
    }

    /// The module's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The CUDA C source.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The NVRTC options besides the architecture.
    pub fn options(&self) -> &[String] {
        &self.options
    }

    /// Every NVRTC option for `target`: the architecture first.
    pub fn compile_options(&self, target: CompileTarget) -> Vec<String> {
        let mut all = vec![target.arch_option()];
        all.extend(self.options.iter().cloned());
        all
    }

    /// The key of this source compiled for `target`: stable across processes, builds and Rust
    /// versions (FNV-1a 64 of the cache format, the code, each option and the architecture,
    /// separated by NUL bytes).
    pub fn cache_key(&self, target: CompileTarget) -> u64 {
        let mut h = Fnv1a64::new();
        h.write(CACHE_FORMAT.as_bytes());
        h.write(&[0]);
        h.write(self.code.as_bytes());
        for option in self.compile_options(target) {
            h.write(&[0]);
            h.write(option.as_bytes());
        }
        h.finish()
    }
}

/// FNV-1a, 64 bits: a stable, dependency-free hash for cache keys and checksums (not for
/// anything adversarial).
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a64(u64);

impl Fnv1a64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// The empty hash.
    pub fn new() -> Self {
        Self(Self::OFFSET)
    }

    /// Adds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }

    /// The hash of `bytes`.
    pub fn hash(bytes: &[u8]) -> u64 {
        let mut h = Self::new();
        h.write(bytes);
        h.finish()
    }
}

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}

/// `None`: no explicit setting (the environment decides); `Some(x)`: [`set_kernel_cache_dir`]
/// was called with `x`.
static EXPLICIT_DIR: RwLock<Option<Option<PathBuf>>> = RwLock::new(None);

/// Sets the directory of the on-disk module cache for this process, overriding
/// `ACCELSQL_KERNEL_CACHE_DIR`; `None` turns the disk cache off.
pub fn set_kernel_cache_dir(dir: Option<PathBuf>) {
    *EXPLICIT_DIR.write().unwrap_or_else(|e| e.into_inner()) = Some(dir);
}

/// The directory of the on-disk module cache: the one [`set_kernel_cache_dir`] set, else
/// `ACCELSQL_KERNEL_CACHE_DIR` (empty: none), else the per-user default.
pub fn kernel_cache_dir() -> Option<PathBuf> {
    if let Some(explicit) = EXPLICIT_DIR
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        return explicit.clone();
    }
    match std::env::var_os(ENV_KERNEL_CACHE_DIR) {
        Some(v) if v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => Some(default_kernel_cache_dir()),
    }
}

/// This user's own cache directory: `$XDG_CACHE_HOME/accelsql/kernels`, else
/// `$HOME/.cache/accelsql/kernels`, else `<tmp>/accelsql-kernels-<uid>`. Never shared: code found
/// there runs on the GPU, so another user must not be able to put it there.
pub fn default_kernel_cache_dir() -> PathBuf {
    let home_cache = || {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".cache"))
    };
    match std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(home_cache)
    {
        Some(base) => base.join("accelsql").join("kernels"),
        None => std::env::temp_dir().join(format!("accelsql-kernels-{}", my_uid())),
    }
}

/// This process's effective user id.
fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `meta` (of a file or directory not reached through a symlink) is ours and writable by
/// no one else: what a cache entry, and the cache's directory, must be.
fn owned_privately(meta: &fs::Metadata) -> bool {
    meta.uid() == my_uid() && meta.mode() & 0o022 == 0
}

/// Compiled modules in a directory, one file per cache key.
///
/// A file is a header line `// accelsql-module-v2 kind=<cubin|ptx> fnv1a64=<hash> len=<bytes>`
/// and the image's bytes. [`KernelDiskCache::load`] returns the image only when the header,
/// length and hash check out and the bytes can be an image of that kind
/// ([`ModuleImage::from_parts`]); anything else (truncated, corrupt, unreadable, another format)
/// is a miss, so the kernel is compiled again and the entry rewritten. [`KernelDiskCache::store`]
/// writes a temporary file and renames it into place, so readers never see half a file.
#[derive(Debug, Clone)]
pub struct KernelDiskCache {
    dir: PathBuf,
}

impl KernelDiskCache {
    /// The cache in `dir` (created on the first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The cache in [`kernel_cache_dir`], if one is configured.
    pub fn configured() -> Option<Self> {
        kernel_cache_dir().map(Self::new)
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `key`.
    pub fn path(&self, key: u64) -> PathBuf {
        self.dir.join(format!("{key:016x}.module"))
    }

    /// Whether the directory is fit to load code from: a real directory (not a symlink), ours,
    /// writable by no one else. One that is not is not used (a warning is logged once per
    /// process): every kernel is then compiled again.
    pub fn trusted(&self) -> bool {
        let fit = fs::symlink_metadata(&self.dir).is_ok_and(|m| m.is_dir() && owned_privately(&m));
        if !fit {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!(
                    "accelsql: kernel cache {} is not a directory of this user's that no one else \
                     can write; it is not used (kernels are compiled again)",
                    self.dir.display()
                );
            });
        }
        fit
    }

    /// The image stored under `key`, if there is a sound entry: in a [trusted](Self::trusted)
    /// directory, a regular file (no symlink followed) of ours that no one else can write, whose
    /// header, length and hash check out. Anything else is a miss (compiled and rewritten).
    pub fn load(&self, key: u64) -> Option<ModuleImage> {
        if !fs::symlink_metadata(&self.dir).is_ok_and(|m| m.is_dir()) || !self.trusted() {
            return None;
        }
        let mut handle = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.path(key))
            .ok()?;
        let meta = handle.metadata().ok()?;
        if !meta.is_file() || !owned_privately(&meta) {
            return None;
        }
        let mut file = Vec::new();
        handle.read_to_end(&mut file).ok()?;
        let newline = file.iter().position(|&b| b == b'\n')?;
        let body = file.split_off(newline + 1);
        let header = std::str::from_utf8(&file[..newline]).ok()?;
        let mut fields = header.strip_prefix("// ")?.split(' ');
        if fields.next()? != CACHE_FORMAT {
            return None;
        }
        let kind = fields.next()?.strip_prefix("kind=")?;
        let hash = u64::from_str_radix(fields.next()?.strip_prefix("fnv1a64=")?, 16).ok()?;
        let len: usize = fields.next()?.strip_prefix("len=")?.parse().ok()?;
        let sound = fields.next().is_none() && body.len() == len && Fnv1a64::hash(&body) == hash;
        if !sound {
            return None;
        }
        ModuleImage::from_parts(kind, body)
    }

    /// Stores `image` under `key`, atomically (temporary file, then rename).
    pub fn store(&self, key: u64, image: &ModuleImage) -> std::io::Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        if !self.trusted() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not a directory of this user's that no one else can write",
                    self.dir.display()
                ),
            ));
        }
        let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .dir
            .join(format!(".{key:016x}.{}.{unique}.tmp", std::process::id()));
        let bytes = image.bytes();
        let header = format!(
            "// {CACHE_FORMAT} kind={} fnv1a64={:016x} len={}\n",
            image.kind(),
            Fnv1a64::hash(bytes),
            bytes.len()
        );
        let written = (|| {
            // A fresh file of ours, owner-only, never through a symlink.
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)?;
            file.write_all(header.as_bytes())?;
            file.write_all(bytes)?;
            file.sync_all()?;
            fs::rename(&tmp, self.path(key))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const PTX: &str = "//\n.version 8.0\n.target sm_90\n.address_size 64\n";

    fn ptx() -> ModuleImage {
        ModuleImage::Ptx(PTX.to_string())
    }

    /// The start of an ELF image with a NUL and a newline in it, as a CUBIN has.
    fn cubin() -> ModuleImage {
        ModuleImage::Cubin(b"\x7fELF\x02\x01\x01\x00\n\x00\xff\xfe rest".to_vec())
    }

    /// The key of `k` below for sm_90 (see the test).
    const STABLE_KEY: u64 = 0xbe9d_c9e2_05b2_c944;

    /// CUDA 13.0's `nvrtcGetSupportedArchs`.
    const NVRTC_13: [i32; 12] = [75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121];

    #[test]
    fn targets_are_machine_code_for_supported_devices_and_ptx_beyond() {
        let choose = |cc| CompileTarget::choose(cc, &NVRTC_13);
        assert_eq!(choose((9, 0)), Ok(CompileTarget::Cubin(90)));
        assert_eq!(choose((8, 9)), Ok(CompileTarget::Cubin(89)));
        assert_eq!(choose((12, 1)), Ok(CompileTarget::Cubin(121)));
        assert_eq!(choose((10, 3)), Ok(CompileTarget::Cubin(103)));
        // Newer than NVRTC knows: PTX of the newest architecture below the device's.
        assert_eq!(choose((13, 0)), Ok(CompileTarget::Ptx(121)));
        // Between known ones (not in the list): PTX of the one below.
        assert_eq!(choose((9, 1)), Ok(CompileTarget::Ptx(90)));
        // Older than NVRTC supports: an error naming both.
        let e = choose((7, 0)).unwrap_err();
        assert!(e.contains("7.0") && e.contains("7.5"), "{e}");
        assert!(choose((6, 1)).is_err());
        // Unknown support list: the device's own architecture.
        assert_eq!(
            CompileTarget::choose((9, 0), &[]),
            Ok(CompileTarget::Cubin(90))
        );
        assert!(CompileTarget::choose((-1, 0), &NVRTC_13).is_err());
        assert!(CompileTarget::choose((9, 10), &NVRTC_13).is_err());
        // Names and options: sm_ for machine code, compute_ for PTX, never `sm_9` + `0` glued
        // wrongly (12.0 is 120, 10.3 is 103).
        assert_eq!(CompileTarget::Cubin(90).name(), "sm_90");
        assert_eq!(CompileTarget::Ptx(121).name(), "compute_121");
        assert_eq!(
            CompileTarget::native((12, 0)).unwrap().arch_option(),
            "--gpu-architecture=sm_120"
        );
        assert_eq!(CompileTarget::arch_of((10, 3)), Some(103));
    }

    #[test]
    fn images_are_checked_by_kind() {
        assert_eq!(
            ModuleImage::from_parts("cubin", cubin().bytes().to_vec()),
            Some(cubin())
        );
        assert_eq!(
            ModuleImage::from_parts("ptx", PTX.as_bytes().to_vec()),
            Some(ptx())
        );
        // PTX bytes are not a CUBIN, a CUBIN (with its NUL bytes) is not PTX.
        assert_eq!(
            ModuleImage::from_parts("cubin", PTX.as_bytes().to_vec()),
            None
        );
        assert_eq!(
            ModuleImage::from_parts("ptx", cubin().bytes().to_vec()),
            None
        );
        assert_eq!(ModuleImage::from_parts("ptx", Vec::new()), None);
        assert_eq!(
            ModuleImage::from_parts("fatbin", cubin().bytes().to_vec()),
            None
        );
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        // From the FNV reference (draft-eastlake-fnv): "" and "a" and "foobar".
        assert_eq!(Fnv1a64::hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(Fnv1a64::hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(Fnv1a64::hash(b"foobar"), 0x8594_4171_f739_67e8);
        let mut h = Fnv1a64::default();
        h.write(b"foo");
        h.write(b"bar");
        assert_eq!(h.finish(), Fnv1a64::hash(b"foobar"));
    }

    #[test]
    fn cache_keys_are_stable_and_cover_source_options_and_architecture() {
        let base = KernelSource::new("k", "extern \"C\" __global__ void k() {}");
        let sm90 = CompileTarget::Cubin(90);
        let key = base.cache_key(sm90);
        // Stable: the same inputs always give the same key (a changed constant here means every
        // cache on disk is invalidated: bump CACHE_FORMAT on purpose, not by accident).
        assert_eq!(key, base.clone().cache_key(sm90));
        assert_eq!(key, STABLE_KEY, "{key:016x}");
        // The name is not part of the key; the code, options and target are.
        let renamed = KernelSource::new("other", base.code().to_string());
        assert_eq!(renamed.cache_key(sm90), key);
        assert_ne!(base.cache_key(CompileTarget::Cubin(80)), key);
        assert_ne!(base.cache_key(CompileTarget::Cubin(91)), key);
        assert_ne!(base.cache_key(CompileTarget::Ptx(90)), key);
        assert_ne!(
            base.clone().with_option("--fmad=false").cache_key(sm90),
            key
        );
        let edited = KernelSource::new("k", "extern \"C\" __global__ void k() { }");
        assert_ne!(edited.cache_key(sm90), key);
        // Option boundaries matter: ["ab"] and ["a", "b"] differ.
        let one = base.clone().with_option("ab");
        let two = base.clone().with_option("a").with_option("b");
        assert_ne!(one.cache_key(sm90), two.cache_key(sm90));
        assert_eq!(
            base.with_option("--fmad=false")
                .compile_options(CompileTarget::Cubin(120)),
            vec![
                "--gpu-architecture=sm_120".to_string(),
                "--fmad=false".into()
            ]
        );
    }

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "accelsql-module-cache-test-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn stored_entries_load_back_and_misses_are_none() {
        let dir = scratch_dir("roundtrip");
        let cache = KernelDiskCache::new(dir.join("nested"));
        assert_eq!(cache.load(1), None);
        cache.store(1, &ptx()).unwrap();
        assert_eq!(cache.load(1), Some(ptx()));
        assert_eq!(cache.load(2), None);
        // Overwriting replaces the entry (binary images with NUL bytes and newlines survive); no
        // temporary files are left behind.
        cache.store(1, &cubin()).unwrap();
        assert_eq!(cache.load(1), Some(cubin()));
        let names: Vec<_> = fs::read_dir(cache.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![format!("{:016x}.module", 1)]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn corrupt_entries_are_misses_not_errors() {
        let dir = scratch_dir("corrupt");
        let cache = KernelDiskCache::new(&dir);
        cache.store(7, &ptx()).unwrap();
        let path = cache.path(7);
        let good = fs::read(&path).unwrap();
        let mut variants: Vec<Vec<u8>> = vec![
            Vec::new(),                           // empty
            good[..good.len() - 3].to_vec(),      // truncated
            good[..20].to_vec(),                  // header cut short
            b"garbage without a header".to_vec(), // not ours
            vec![0xff, 0xfe, 0x00, 0x12],         // not UTF-8
        ];
        // PTX whose header claims a CUBIN.
        let claims_cubin =
            String::from_utf8(good.clone())
                .unwrap()
                .replacen("kind=ptx", "kind=cubin", 1);
        variants.push(claims_cubin.into_bytes());
        let mut flipped = good.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0x01; // one bit of the body
        variants.push(flipped);
        let mut nul = good.clone();
        let at = nul.len() - 2;
        nul[at] = 0; // a NUL inside the PTX (CUDA would stop reading there)
        variants.push(nul);
        let other_format = String::from_utf8(good.clone())
            .unwrap()
            .replace(CACHE_FORMAT, "accelsql-ptx-v1");
        variants.push(other_format.into_bytes());
        for bad in variants {
            fs::write(&path, &bad).unwrap();
            assert_eq!(cache.load(7), None, "{:?}", String::from_utf8_lossy(&bad));
        }
        // A directory where the file should be: unreadable, still a miss.
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        assert_eq!(cache.load(7), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_store_that_cannot_write_is_an_error_not_a_panic() {
        let dir = scratch_dir("blocked");
        fs::write(&dir, "a file where the directory should be").unwrap();
        let cache = KernelDiskCache::new(dir.join("sub"));
        assert!(cache.store(1, &ptx()).is_err());
        assert_eq!(cache.load(1), None);
        fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn the_explicit_directory_overrides_the_environment() {
        // Only this test touches the process-wide setting.
        set_kernel_cache_dir(Some(PathBuf::from("/tmp/explicit-modules")));
        assert_eq!(
            kernel_cache_dir(),
            Some(PathBuf::from("/tmp/explicit-modules"))
        );
        assert_eq!(
            KernelDiskCache::configured().unwrap().dir(),
            Path::new("/tmp/explicit-modules")
        );
        set_kernel_cache_dir(None);
        assert_eq!(kernel_cache_dir(), None);
        assert!(KernelDiskCache::configured().is_none());
    }

    #[test]
    fn entries_others_could_have_written_are_refused_and_recompiled() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch_dir("planted");
        let cache = KernelDiskCache::new(&dir);
        cache.store(7, &ptx()).unwrap();
        assert_eq!(fs::metadata(cache.path(7)).unwrap().mode() & 0o777, 0o600);
        // Writable by others: someone could have put their code there.
        fs::set_permissions(cache.path(7), fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(cache.load(7), None);
        // The recompiled kernel is stored again, safely, and loads.
        cache.store(7, &ptx()).unwrap();
        assert_eq!(cache.load(7), Some(ptx()));
        // A symlink to a sound entry elsewhere is not followed.
        let elsewhere = scratch_dir("planted-elsewhere");
        let other = KernelDiskCache::new(&elsewhere);
        other.store(8, &cubin()).unwrap();
        std::os::unix::fs::symlink(other.path(8), cache.path(8)).unwrap();
        assert_eq!(cache.load(8), None);
        // A directory others can write is not used at all.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(!cache.trusted());
        assert_eq!(cache.load(7), None);
        assert!(cache.store(9, &ptx()).is_err());
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&elsewhere).unwrap();
    }

    #[test]
    fn the_default_directory_is_the_users_own() {
        let dir = default_kernel_cache_dir();
        let home = std::env::var_os("XDG_CACHE_HOME")
            .or_else(|| std::env::var_os("HOME"))
            .filter(|h| !h.is_empty());
        match home {
            Some(home) => assert!(dir.starts_with(home), "{}", dir.display()),
            None => assert!(dir.to_string_lossy().ends_with(&my_uid().to_string())),
        }
        assert!(dir.ends_with("accelsql/kernels") || home_is_unset());
    }

    fn home_is_unset() -> bool {
        std::env::var_os("HOME").is_none() && std::env::var_os("XDG_CACHE_HOME").is_none()
    }
}
