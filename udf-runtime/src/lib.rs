//! How accelsql UDF code runs: CPU and GPU columnar kernels (cudarc) and, later, script runtimes
//! and instance pools. Depends on Arrow and the gpu-scheduler, never on DataFusion.

pub mod gpu;
