//! CPU reference kernels of the built-in UDFs: plain functions over Arrow arrays. They are the
//! CPU implementation (and fallback) of each built-in; GPU kernels are checked against them.

pub mod geo;
