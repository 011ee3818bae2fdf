//! accelsql-cluster's tests of in-process Ballista clusters, in one test binary: one link of
//! DataFusion and Ballista instead of two keeps the build's disk use and link time down. Run one
//! module with `cargo test -p accelsql-cluster --test integration -- slt::`.

mod cluster;
mod metrics;
mod security;
mod slt;
