//! GPU failures through SQL, on the fake CUDA driver (`scripts/fake-cuda`), each test in a
//! process of its own set up by `scripts/fake-cuda/test.sh`; anywhere else they print `SKIPPED`.
//!
//! - With `ACCELSQL_FAKE_CUDA_FAIL_LAUNCH=haversine_km:2` (the second `haversine_km` launch fails
//!   as a kernel hitting an illegal address does, which leaves the device unusable): the
//!   optional call that hit the failure still answers, from the CPU (the batch that failed and
//!   every later one), and says so in `accelsql.udf_calls`; later statements use the CPU for
//!   optional calls and fail with 58U21 for required ones, naming the first failure; the
//!   session stays usable and no lease is left held.
//! - With `ACCELSQL_FAKE_CUDA_MEMORY_MIB=1` (a device of 1 MiB): batches larger than a chunk
//!   still run entirely on the GPU, in several chunks; a row that does not fit at all
//!   (53U23) runs on the CPU for an optional call.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

mod common;

use accelsql_engine::{Engine, SchedulerConfig, Session};
use common::{engine_with_affine, open_gpu_engine, texts, values, with_tables};

/// The injection the first test expects.
const INJECTION: &str = "haversine_km:2";

/// The device size (MiB) the second test expects.
const SMALL_DEVICE_MIB: &str = "1";

/// Whether `variable` is `value`; else prints why `test` is skipped.
fn set_up(variable: &str, value: &str, test: &str) -> bool {
    if std::env::var(variable).ok().as_deref() == Some(value) {
        return true;
    }
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED (needs the fake CUDA driver with {variable}={value}): {test}"
    );
    false
}

const HAVERSINE: &str = "SELECT id, haversine_km(lat1, lon1, lat2, lon2) FROM pts ORDER BY id";

/// The engine on the fake device, a session of it with the tables, and the rows of
/// [`HAVERSINE`] as an engine without a GPU computes them.
async fn fake_gpu_session() -> (Engine, Session, Vec<Vec<Option<f64>>>) {
    let gpu = open_gpu_engine().unwrap();
    let cpu = engine_with_affine(SchedulerConfig::default().with_simulated_gpus(1)).unwrap();
    let session = with_tables(gpu.session()).await;
    let expected = values(
        &with_tables(cpu.session())
            .await
            .sql(HAVERSINE)
            .await
            .unwrap(),
    );
    (gpu, session, expected)
}

#[tokio::test]
async fn a_gpu_that_fails_mid_statement_hands_optional_calls_to_the_cpu() {
    if !set_up(
        "ACCELSQL_FAKE_CUDA_FAIL_LAUNCH",
        INJECTION,
        "a_gpu_that_fails_mid_statement_hands_optional_calls_to_the_cpu",
    ) {
        return;
    }
    let (gpu, session, expected) = fake_gpu_session().await;

    // The statement that meets the failure: every row still there, and right.
    let got = values(&session.sql(HAVERSINE).await.unwrap());
    assert_eq!(got, expected);
    let calls = session
        .sql(
            "SELECT placement, gpu_batches, cpu_fallback_batches, fallback_reason
             FROM accelsql.udf_calls WHERE udf = 'haversine_km'",
        )
        .await
        .unwrap();
    assert_eq!(texts(&calls, 0), ["GPU"]);
    let gpu_batches: u64 = texts(&calls, 1)[0].parse().unwrap();
    let fallback: u64 = texts(&calls, 2)[0].parse().unwrap();
    assert!(gpu_batches >= 1, "the first batch ran on the GPU");
    assert!(
        fallback >= 1,
        "the failed batch and those after it ran on the CPU"
    );
    let reason = &texts(&calls, 3)[0];
    assert!(reason.contains("58U21"), "{reason}");
    assert!(reason.contains("CUDA_ERROR_LAUNCH_FAILED"), "{reason}");

    // Later statements: optional calls on the CPU at once, required ones fail clearly.
    let again = values(&session.sql(HAVERSINE).await.unwrap());
    assert_eq!(again, expected);
    let e = session
        .sql("SELECT affine(lat1, 2.0, 1.0) FROM pts")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "58U21", "{e}");
    let message = e.to_string();
    assert!(
        message.contains("cannot be used until the process restarts"),
        "{message}"
    );
    assert!(
        message.contains("launch"),
        "names the first failure: {message}"
    );

    // The session is usable and every lease was given back.
    assert_eq!(texts(&session.sql("SELECT 1").await.unwrap(), 0), ["1"]);
    assert!(gpu.lease_queue().snapshot().holder.is_none());
}

#[tokio::test]
async fn a_small_device_takes_smaller_chunks_and_hands_rows_that_never_fit_to_the_cpu() {
    if !set_up(
        "ACCELSQL_FAKE_CUDA_MEMORY_MIB",
        SMALL_DEVICE_MIB,
        "a_small_device_takes_smaller_chunks_and_hands_rows_that_never_fit_to_the_cpu",
    ) {
        return;
    }
    let (gpu, session, expected) = fake_gpu_session().await;
    // Batches of up to 20000 rows of four DOUBLEs and a DOUBLE out (800 KB): more than the half
    // of the device's free memory a chunk may take, so they run in several chunks.
    session
        .sql("SET datafusion.execution.batch_size = 20000")
        .await
        .unwrap();
    assert_eq!(values(&session.sql(HAVERSINE).await.unwrap()), expected);
    // One row of two 300000-FLOAT vectors: 2.4 MB, on a 1 MiB device.
    let huge = "SELECT cosine_similarity(v, v) FROM (SELECT array_repeat(CAST(0.5 AS FLOAT), 300000) AS v)";
    let cosine = values(&session.sql(huge).await.unwrap());
    let cosine = cosine[0][0].unwrap();
    assert!(
        (cosine - 1.0).abs() < 1e-12,
        "a vector's cosine with itself: {cosine}"
    );
    let calls = session
        .sql(
            "SELECT udf, placement, gpu_batches, cpu_fallback_batches, fallback_reason
             FROM accelsql.udf_calls ORDER BY statement_id",
        )
        .await
        .unwrap();
    assert_eq!(texts(&calls, 0), ["haversine_km", "cosine_similarity"]);
    assert_eq!(texts(&calls, 1), ["GPU", "GPU"]);
    assert_ne!(texts(&calls, 2)[0], "0", "haversine ran on the GPU");
    assert_eq!(texts(&calls, 3), ["0", "1"], "only the huge row fell back");
    let reason = &texts(&calls, 4)[1];
    assert!(reason.contains("53U23"), "{reason}");
    assert!(gpu.lease_queue().snapshot().holder.is_none());
}
