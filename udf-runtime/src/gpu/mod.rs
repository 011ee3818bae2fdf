//! The GPU side of UDF execution; today: whether the CUDA libraries can be loaded at all.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_never_panics_and_is_consistent() {
        let first = CudaLibraries::probe();
        assert_eq!(first, CudaLibraries::probe());
        assert_eq!(first.usable(), first.driver && first.nvrtc);
    }
}
