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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::gpu::{geo_source, options_source, vectors_source};

    /// The PTX parameter types (`u64` for pointers and `long long`, `u32` for `int`, `f64` for
    /// `double`) of every kernel the built-ins launch, in the order their `launch_builder` calls
    /// push arguments (`vectors.rs`, `geo.rs`, `options.rs`). A kernel whose signature drifts from
    /// its launch would read garbage on a GPU; this catches it wherever NVRTC loads.
    fn launched_kernels() -> Vec<(KernelSource, String, Vec<&'static str>)> {
        let operand = ["u64", "u64", "u64", "u32"]; // values, offsets, dim, is_scalar
        let vector_params: Vec<&str> = operand
            .iter()
            .chain(&operand)
            .chain(&["u64", "u32", "u64", "u64"]) // rows, op, out, valid
            .copied()
            .collect();
        let mut kernels: Vec<(KernelSource, String, Vec<&str>)> = ["f32", "f64"]
            .iter()
            .flat_map(|a| ["f32", "f64"].map(|b| format!("vector_similarity_{a}_{b}")))
            .map(|name| (vectors_source(), name, vector_params.clone()))
            .collect();
        let mut haversine = ["u64", "u32"].repeat(4);
        haversine.extend(["u64", "f64", "u64"]); // rows, radius, out
        kernels.push((geo_source(), "haversine_km".into(), haversine));
        let mut black_scholes = ["u64", "u32"].repeat(5);
        black_scholes.extend(["u64", "u32", "u64", "u64"]); // rows, put, out, valid
        kernels.push((options_source(), "black_scholes".into(), black_scholes));
        kernels
    }

    /// The parameter types of `.entry name(...)` in `ptx`, or `None` without such an entry.
    fn entry_params(ptx: &str, name: &str) -> Option<Vec<String>> {
        let start = ptx.find(&format!(".entry {name}("))?;
        let rest = &ptx[start..];
        let params = &rest[rest.find('(')? + 1..rest.find(')')?];
        Some(
            params
                .split(',')
                .filter_map(|p| {
                    // `.param .u64 .ptr .global .align 8 name_param_0` or `.param .u32 name_param_1`.
                    let mut words = p.split_whitespace();
                    (words.next()? == ".param").then_some(())?;
                    Some(words.next()?.trim_start_matches('.').to_string())
                })
                .collect(),
        )
    }

    fn nvrtc_or_skip(test: &str) -> bool {
        // SAFETY: only tries to dlopen the library's candidate names.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return true;
        }
        crate::prerequisite::skip_test(
            test,
            "there is no NVRTC library (LD_LIBRARY_PATH may name one)",
        );
        false
    }

    #[test]
    fn builtin_kernels_compile_for_every_supported_architecture() {
        if !nvrtc_or_skip("builtin_kernels_compile_for_every_supported_architecture") {
            return;
        }
        let archs = supported_archs();
        assert!(!archs.is_empty(), "NVRTC loads but lists no architectures");
        let sources = [vectors_source(), geo_source(), options_source()];
        for arch in archs {
            let arch = u32::try_from(arch).unwrap();
            for source in &sources {
                let cubin = compile(source, CompileTarget::Cubin(arch)).unwrap();
                assert!(
                    matches!(&cubin, ModuleImage::Cubin(b) if b.starts_with(b"\x7fELF")),
                    "{} for sm_{arch} is not an ELF image",
                    source.name()
                );
            }
        }
    }

    #[test]
    fn builtin_kernel_signatures_match_their_launches() {
        if !nvrtc_or_skip("builtin_kernel_signatures_match_their_launches") {
            return;
        }
        for (source, name, expected) in launched_kernels() {
            let image = compile(&source, CompileTarget::Ptx(90)).unwrap();
            let ModuleImage::Ptx(ptx) = image else {
                panic!("{name}: PTX requested, got {}", image.kind());
            };
            let params = entry_params(&ptx, &name)
                .unwrap_or_else(|| panic!("no entry {name} in module {}", source.name()));
            assert_eq!(params, expected, "parameters of {name}");
        }
    }

    #[test]
    fn a_compile_error_reports_the_log() {
        if !nvrtc_or_skip("a_compile_error_reports_the_log") {
            return;
        }
        let bad = KernelSource::new("broken", "extern \"C\" __global__ void k() { nope(); }");
        let err = compile(&bad, CompileTarget::Cubin(90)).unwrap_err();
        assert!(err.contains("compiling module broken for sm_90"), "{err}");
        assert!(
            err.contains("nope"),
            "the log names the bad identifier: {err}"
        );
        let nul = KernelSource::new("nul", "int x;\0");
        assert!(
            compile(&nul, CompileTarget::Cubin(90))
                .unwrap_err()
                .contains("NUL byte")
        );
    }

    #[test]
    fn entry_params_reads_ptx_signatures() {
        let ptx = ".visible .entry k(\n\t.param .u64 .ptr .global .align 8 k_param_0,\n\t\
                   .param .u32 k_param_1,\n\t.param .f64 k_param_2\n)\n{\n}";
        assert_eq!(entry_params(ptx, "k").unwrap(), ["u64", "u32", "f64"]);
        assert_eq!(entry_params(ptx, "other"), None);
    }
}
