//! Kernel sources and the cache of their compiled PTX: the stable cache key (FNV-1a 64 of the
//! source, options and architecture), the on-disk store (atomic writes, checked reads) and where
//! it lives (`ACCELSQL_KERNEL_CACHE_DIR` or [`set_kernel_cache_dir`]).
//!
//! Nothing here calls CUDA: compiling and loading live in `GpuDevice::module`, so the cache is
//! tested on machines without a GPU.

use std::borrow::Cow;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Environment variable naming the directory of the on-disk PTX cache; unset or empty means no
/// disk cache (kernels are then compiled once per process and device architecture).
pub const ENV_KERNEL_CACHE_DIR: &str = "ACCELSQL_KERNEL_CACHE_DIR";

/// Bumped when the cache file format or the compile options change meaning.
const CACHE_FORMAT: &str = "accelsql-ptx-v1";

/// The CUDA C source of one module of kernels, with the NVRTC options it needs beyond the target
/// architecture (which the runtime adds from the device's compute capability).
///
/// Kernels are `extern "C" __global__` functions, so their names are not mangled.
///
/// ```
/// use accelsql_udf_runtime::gpu::KernelSource;
/// let source = KernelSource::new(
///     "scale",
///     r#"extern "C" __global__ void scale(double* x, long long n, double by) {
///            long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
///            if (i < n) x[i] *= by;
///        }"#,
/// )
/// .with_option("--fmad=false");
/// assert_eq!(source.name(), "scale");
/// // The cache key depends on the source, the options and the architecture.
/// assert_ne!(source.cache_key((9, 0)), source.cache_key((8, 0)));
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

    /// Every NVRTC option for a device of compute capability `cc`: the architecture first.
    pub fn compile_options(&self, cc: (i32, i32)) -> Vec<String> {
        let mut all = vec![format!("--gpu-architecture={}", arch_name(cc))];
        all.extend(self.options.iter().cloned());
        all
    }

    /// The key of this source compiled for compute capability `cc`: stable across processes,
    /// builds and Rust versions (FNV-1a 64 of the cache format, the code, each option and the
    /// architecture, separated by NUL bytes).
    pub fn cache_key(&self, cc: (i32, i32)) -> u64 {
        let mut h = Fnv1a64::new();
        h.write(CACHE_FORMAT.as_bytes());
        h.write(&[0]);
        h.write(self.code.as_bytes());
        for option in self.compile_options(cc) {
            h.write(&[0]);
            h.write(option.as_bytes());
        }
        h.finish()
    }
}

/// The NVRTC architecture of compute capability `cc`, e.g. `sm_90` for (9, 0).
pub fn arch_name(cc: (i32, i32)) -> String {
    format!("sm_{}{}", cc.0, cc.1)
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

/// Sets the directory of the on-disk PTX cache for this process, overriding
/// `ACCELSQL_KERNEL_CACHE_DIR`; `None` turns the disk cache off.
pub fn set_kernel_cache_dir(dir: Option<PathBuf>) {
    *EXPLICIT_DIR.write().unwrap_or_else(|e| e.into_inner()) = Some(dir);
}

/// The directory of the on-disk PTX cache: the one [`set_kernel_cache_dir`] set, else
/// `ACCELSQL_KERNEL_CACHE_DIR` when set and not empty, else none.
pub fn kernel_cache_dir() -> Option<PathBuf> {
    if let Some(explicit) = EXPLICIT_DIR
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        return explicit.clone();
    }
    std::env::var_os(ENV_KERNEL_CACHE_DIR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// PTX files in a directory, one per cache key.
///
/// A file is a header line `// accelsql-ptx-v1 fnv1a64=<hash> len=<bytes>` and the PTX text.
/// [`PtxDiskCache::load`] returns the text only when the header, length and hash check out and
/// the text has no NUL byte; anything else (truncated, corrupt, unreadable, another format) is a
/// miss, so the kernel is compiled again and the entry rewritten. [`PtxDiskCache::store`] writes
/// a temporary file and renames it into place, so readers never see half a file.
#[derive(Debug, Clone)]
pub struct PtxDiskCache {
    dir: PathBuf,
}

impl PtxDiskCache {
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
        self.dir.join(format!("{key:016x}.ptx"))
    }

    /// The PTX stored under `key`, if there is a sound entry.
    pub fn load(&self, key: u64) -> Option<String> {
        let text = fs::read(self.path(key)).ok()?;
        let text = String::from_utf8(text).ok()?;
        let (header, body) = text.split_once('\n')?;
        let mut fields = header.strip_prefix("// ")?.split(' ');
        if fields.next()? != CACHE_FORMAT {
            return None;
        }
        let hash = u64::from_str_radix(fields.next()?.strip_prefix("fnv1a64=")?, 16).ok()?;
        let len: usize = fields.next()?.strip_prefix("len=")?.parse().ok()?;
        let sound = fields.next().is_none()
            && body.len() == len
            && Fnv1a64::hash(body.as_bytes()) == hash
            && !body.is_empty()
            && !body.contains('\0');
        sound.then(|| body.to_string())
    }

    /// Stores `ptx` under `key`, atomically (temporary file, then rename).
    pub fn store(&self, key: u64, ptx: &str) -> std::io::Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        fs::create_dir_all(&self.dir)?;
        let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .dir
            .join(format!(".{key:016x}.{}.{unique}.tmp", std::process::id()));
        let header = format!(
            "// {CACHE_FORMAT} fnv1a64={:016x} len={}\n",
            Fnv1a64::hash(ptx.as_bytes()),
            ptx.len()
        );
        let written = (|| {
            let mut file = fs::File::create(&tmp)?;
            file.write_all(header.as_bytes())?;
            file.write_all(ptx.as_bytes())?;
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
        let key = base.cache_key((9, 0));
        // Stable: the same inputs always give the same key (a changed constant here means every
        // cache on disk is invalidated: bump CACHE_FORMAT on purpose, not by accident).
        assert_eq!(key, base.clone().cache_key((9, 0)));
        assert_eq!(key, 0xbb03_2f4b_e7bc_9573, "{key:016x}");
        // The name is not part of the key; the code, options and architecture are.
        let renamed = KernelSource::new("other", base.code().to_string());
        assert_eq!(renamed.cache_key((9, 0)), key);
        assert_ne!(base.cache_key((8, 0)), key);
        assert_ne!(base.cache_key((9, 1)), key);
        assert_ne!(
            base.clone().with_option("--fmad=false").cache_key((9, 0)),
            key
        );
        let edited = KernelSource::new("k", "extern \"C\" __global__ void k() { }");
        assert_ne!(edited.cache_key((9, 0)), key);
        // Option boundaries matter: ["ab"] and ["a", "b"] differ.
        let one = base.clone().with_option("ab");
        let two = base.clone().with_option("a").with_option("b");
        assert_ne!(one.cache_key((9, 0)), two.cache_key((9, 0)));
        assert_eq!(
            base.with_option("--fmad=false").compile_options((12, 0)),
            vec![
                "--gpu-architecture=sm_120".to_string(),
                "--fmad=false".into()
            ]
        );
    }

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "accelsql-ptx-cache-test-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn stored_entries_load_back_and_misses_are_none() {
        let dir = scratch_dir("roundtrip");
        let cache = PtxDiskCache::new(dir.join("nested"));
        assert_eq!(cache.load(1), None);
        cache.store(1, PTX).unwrap();
        assert_eq!(cache.load(1).as_deref(), Some(PTX));
        assert_eq!(cache.load(2), None);
        // Overwriting replaces the entry; no temporary files are left behind.
        cache.store(1, "// other\n").unwrap();
        assert_eq!(cache.load(1).as_deref(), Some("// other\n"));
        let names: Vec<_> = fs::read_dir(cache.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![format!("{:016x}.ptx", 1)]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn corrupt_entries_are_misses_not_errors() {
        let dir = scratch_dir("corrupt");
        let cache = PtxDiskCache::new(&dir);
        cache.store(7, PTX).unwrap();
        let path = cache.path(7);
        let good = fs::read(&path).unwrap();
        let mut variants: Vec<Vec<u8>> = vec![
            Vec::new(),                           // empty
            good[..good.len() - 3].to_vec(),      // truncated
            good[..20].to_vec(),                  // header cut short
            b"garbage without a header".to_vec(), // not ours
            vec![0xff, 0xfe, 0x00, 0x12],         // not UTF-8
        ];
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
            .replace(CACHE_FORMAT, "accelsql-ptx-v0");
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
        let cache = PtxDiskCache::new(dir.join("sub"));
        assert!(cache.store(1, PTX).is_err());
        assert_eq!(cache.load(1), None);
        fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn the_explicit_directory_overrides_the_environment() {
        // Only this test touches the process-wide setting.
        set_kernel_cache_dir(Some(PathBuf::from("/tmp/explicit-ptx")));
        assert_eq!(kernel_cache_dir(), Some(PathBuf::from("/tmp/explicit-ptx")));
        assert_eq!(
            PtxDiskCache::configured().unwrap().dir(),
            Path::new("/tmp/explicit-ptx")
        );
        set_kernel_cache_dir(None);
        assert_eq!(kernel_cache_dir(), None);
        assert!(PtxDiskCache::configured().is_none());
    }
}
