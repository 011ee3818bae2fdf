//! `accelsql-benchmarks`: runs benchmark suites beside their peers and writes the report.

/// The process's allocator: mimalloc reuses freed memory where glibc's malloc maps (and the
/// kernel zeroes) fresh pages for each large buffer; a Flight result's encoding and decoding
/// allocate one per message (measured in the `server` suite: glibc's faults cost a third of a
/// wide fetch).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    accelsql_benchmarks::cli::main()
}
