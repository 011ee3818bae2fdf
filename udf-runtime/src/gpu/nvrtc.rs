//! Compiling a [`KernelSource`] with NVRTC into a [`ModuleImage`]: CUBIN for a device NVRTC
//! supports, PTX for one newer than it knows (see [`CompileTarget`]), and the architectures this
//! NVRTC supports.
//!
//! cudarc's `compile_ptx_with_opts` only returns PTX, which the driver must JIT-compile when the
//! module is loaded, and which a driver older than NVRTC refuses
//! (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`); so this drives NVRTC's C API (through cudarc's thin
//! `result`/`sys` layers) to fetch the CUBIN instead.

use std::ffi::{CString, c_char, c_int};
use std::sync::OnceLock;

use cudarc::nvrtc::result::{self, NvrtcError};
use cudarc::nvrtc::sys;

use super::kernel_cache::{CompileTarget, KernelSource, ModuleImage};

/// The architectures this process's NVRTC supports (`nvrtcGetSupportedArchs`, e.g. 75 … 121 for
/// CUDA 13.0), asked once; empty when NVRTC cannot say. Call only where NVRTC is known to load.
pub(crate) fn supported_archs() -> Vec<i32> {
    static ARCHS: OnceLock<Vec<i32>> = OnceLock::new();
    ARCHS
        .get_or_init(|| {
            let mut count: c_int = 0;
            // SAFETY: NVRTC writes one int through the valid pointer it is given.
            if unsafe { sys::nvrtcGetNumSupportedArchs(&mut count) }
                .result()
                .is_err()
            {
                return Vec::new();
            }
            let Ok(len) = usize::try_from(count) else {
                return Vec::new();
            };
            let mut archs: Vec<c_int> = vec![0; len];
            // SAFETY: `archs` holds the `count` ints NVRTC said it will write.
            if unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
                .result()
                .is_err()
            {
                return Vec::new();
            }
            archs
        })
        .clone()
}

/// An NVRTC program, destroyed when dropped.
struct Program {
    prog: sys::nvrtcProgram,
    // NVRTC may keep pointers into the source and name until the program is destroyed.
    _src: CString,
    _name: CString,
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `prog` was created by `create_program` and is destroyed only here, once.
        let _ = unsafe { result::destroy_program(self.prog) };
    }
}

impl Program {
    /// NVRTC's log of the last compilation (warnings and errors), trimmed.
    fn log(&self) -> String {
        // SAFETY: `prog` is a live program.
        match unsafe { result::get_program_log(self.prog) } {
            Ok(log) => text_of(&log),
            Err(e) => format!("(no log: {e:?})"),
        }
    }

    /// The compiled image of kind `target`.
    fn image(&self, target: CompileTarget) -> Result<ModuleImage, NvrtcError> {
        match target {
            CompileTarget::Cubin(_) => {
                let mut size = 0usize;
                // SAFETY: `prog` is a live, compiled program; NVRTC writes one size_t.
                unsafe { sys::nvrtcGetCUBINSize(self.prog, &mut size) }.result()?;
                let mut bytes: Vec<c_char> = vec![0; size];
                // SAFETY: `bytes` holds the `size` bytes NVRTC said the CUBIN has.
                unsafe { sys::nvrtcGetCUBIN(self.prog, bytes.as_mut_ptr()) }.result()?;
                Ok(ModuleImage::Cubin(
                    bytes.into_iter().map(|b| b as u8).collect(),
                ))
            }
            CompileTarget::Ptx(_) => {
                // SAFETY: `prog` is a live, compiled program.
                let ptx = unsafe { result::get_ptx(self.prog) }?;
                Ok(ModuleImage::Ptx(text_of(&ptx)))
            }
        }
    }
}

/// The text of a NUL-terminated C buffer (up to its first NUL), lossily decoded and trimmed.
fn text_of(buffer: &[c_char]) -> String {
    let bytes: Vec<u8> = buffer
        .iter()
        .map(|&b| b as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).trim_end().to_string()
}

/// Compiles `source` for `target`; the image, or what went wrong (NVRTC's log included).
pub(crate) fn compile(
    source: &KernelSource,
    target: CompileTarget,
) -> std::result::Result<ModuleImage, String> {
    let name = source.name();
    let failed = |why: String| {
        format!(
            "compiling module {name} for {} with NVRTC failed: {why}",
            target.name()
        )
    };
    let src = CString::new(source.code())
        .map_err(|_| format!("the source of module {name} contains a NUL byte"))?;
    let file = CString::new(format!("{name}.cu"))
        .map_err(|_| format!("the name of module {name:?} contains a NUL byte"))?;
    let options = source.compile_options(target);
    if let Some(bad) = options.iter().find(|o| o.contains('\0')) {
        return Err(format!(
            "an NVRTC option of module {name} contains a NUL byte: {bad:?}"
        ));
    }
    let prog = result::create_program(&src, Some(&file)).map_err(|e| failed(format!("{e:?}")))?;
    let program = Program {
        prog,
        _src: src,
        _name: file,
    };
    // SAFETY: `prog` is a live program; the options hold no NUL byte (checked above), so
    // cudarc's conversion to C strings cannot panic.
    if let Err(e) = unsafe { result::compile_program(program.prog, &options) } {
        return Err(failed(format!(
            "{e:?} (options {}): {}",
            options.join(" "),
            program.log()
        )));
    }
    let image = program
        .image(target)
        .map_err(|e| failed(format!("fetching the {} image: {e:?}", target.name())))?;
    if image.bytes().is_empty() {
        return Err(failed(format!(
            "NVRTC returned an empty {} image",
            target.name()
        )));
    }
    Ok(image)
}
