//! The sqllogictest suites, accelsql's own and DataFusion's, and the book's error-code table
//! checked against the code, in one test binary: one link of DataFusion instead of one per suite
//! keeps the build's disk use and link time down. (The fuzz and soak runs stay in
//! `tests/fuzz.rs`, a process of their own: they count this process's workers and memory.) Run
//! one with `cargo test -p accelsql-sql-tests --test integration -- upstream::`.

mod docs;
mod slt;
mod upstream;
