//! Exasol's UDF annotations: `%perInstanceRequiredAcceleratorDevices`,
//! `%perNodeAndCallInstanceLimit` and accelsql's `%perInstanceRequiredAcceleratorMemory`, parsed
//! the same way for Rust and script UDFs.

use std::fmt;

use crate::{Result, RuntimeError};

/// Name of the accelerator annotation.
pub const ACCELERATOR_OPTION: &str = "perInstanceRequiredAcceleratorDevices";
/// Name of the instance-limit annotation.
pub const INSTANCE_LIMIT_OPTION: &str = "perNodeAndCallInstanceLimit";

/// Name of the device-memory annotation (accelsql's): what one GPU instance needs.
pub const DEVICE_MEMORY_OPTION: &str = "perInstanceRequiredAcceleratorMemory";

/// What a UDF asks of the GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AcceleratorRequest {
    /// `None`: runs on the CPU (the default).
    #[default]
    None,
    /// `GpuNvidia`: must run on a GPU; a statement that cannot give it one fails with 22069.
    Required,
    /// `GpuNvidia|None` (or `None|GpuNvidia`): runs on a GPU when it gets one, else on the CPU.
    Preferred,
}

impl AcceleratorRequest {
    /// Parses an annotation value: `None`, `GpuNvidia`, `GpuNvidia|None`, `None|GpuNvidia`
    /// (case-insensitive, spaces around `|` allowed, a trailing `;` ignored).
    pub fn parse(text: &str) -> Result<Self> {
        let cleaned = text.trim().trim_end_matches(';').trim();
        let mut parts: Vec<String> = cleaned
            .split('|')
            .map(|p| p.trim().to_ascii_lowercase())
            .collect();
        parts.sort();
        parts.dedup();
        match parts
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["none"] => Ok(Self::None),
            ["gpunvidia"] => Ok(Self::Required),
            ["gpunvidia", "none"] => Ok(Self::Preferred),
            _ => Err(RuntimeError::InvalidAnnotation {
                option: format!("%{ACCELERATOR_OPTION}"),
                message: format!(
                    "{text:?} is not an accelerator request; use None, GpuNvidia or GpuNvidia|None"
                ),
            }),
        }
    }

    /// Whether the UDF asks for a GPU at all.
    pub fn wants_gpu(self) -> bool {
        self != Self::None
    }
}

impl fmt::Display for AcceleratorRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "None",
            Self::Required => "GpuNvidia",
            Self::Preferred => "GpuNvidia|None",
        })
    }
}

/// Parses `%perNodeAndCallInstanceLimit`: a positive integer.
pub fn parse_instance_limit(text: &str) -> Result<usize> {
    let cleaned = text.trim().trim_end_matches(';').trim();
    match cleaned.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(RuntimeError::InvalidAnnotation {
            option: format!("%{INSTANCE_LIMIT_OPTION}"),
            message: format!("{text:?} is not a positive instance count"),
        }),
    }
}

/// Parses `%perInstanceRequiredAcceleratorMemory`: a positive size such as `6GiB`, `512MiB`,
/// `1.5GB` or a byte count.
pub fn parse_device_memory(text: &str) -> Result<u64> {
    let cleaned = text.trim().trim_end_matches(';').trim();
    match accelsql_gpu_scheduler::units::parse_bytes(cleaned) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(RuntimeError::InvalidAnnotation {
            option: format!("%{DEVICE_MEMORY_OPTION}"),
            message: format!(
                "{text:?} is not a positive size of device memory per instance; write e.g. \
                 6GiB, 512MiB or 1.5GB"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_memory_values() {
        assert_eq!(parse_device_memory("6GiB;").unwrap(), 6 << 30);
        assert_eq!(parse_device_memory(" 512 MiB ").unwrap(), 512 << 20);
        assert_eq!(parse_device_memory("1.5GB").unwrap(), 1_500_000_000);
        for bad in ["", "0", "lots", "-1GiB", "6 parsecs"] {
            let e = parse_device_memory(bad).unwrap_err();
            assert_eq!(e.code(), "22U01");
            assert!(
                e.to_string()
                    .contains("perInstanceRequiredAcceleratorMemory"),
                "{e}"
            );
        }
    }

    #[test]
    fn accelerator_values() {
        assert_eq!(
            AcceleratorRequest::parse("None").unwrap(),
            AcceleratorRequest::None
        );
        assert_eq!(
            AcceleratorRequest::parse("GpuNvidia;").unwrap(),
            AcceleratorRequest::Required
        );
        assert_eq!(
            AcceleratorRequest::parse("gpunvidia | none").unwrap(),
            AcceleratorRequest::Preferred
        );
        assert_eq!(
            AcceleratorRequest::parse("None|GpuNvidia").unwrap(),
            AcceleratorRequest::Preferred
        );
        for bad in ["", "GpuAmd", "GpuNvidia|Tpu", "yes"] {
            let e = AcceleratorRequest::parse(bad).unwrap_err();
            assert_eq!(e.code(), "22U01");
            assert!(e.to_string().contains("GpuNvidia|None"), "{e}");
        }
        assert_eq!(AcceleratorRequest::Preferred.to_string(), "GpuNvidia|None");
        assert!(!AcceleratorRequest::None.wants_gpu());
    }

    #[test]
    fn instance_limits() {
        assert_eq!(parse_instance_limit(" 4;").unwrap(), 4);
        assert!(parse_instance_limit("0").is_err());
        assert!(parse_instance_limit("many").is_err());
    }
}
