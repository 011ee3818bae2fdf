//! Statements that nest deeply: refused with 54001 before anything recursive sees them, the
//! session usable after, and a statement at the limit planned and run on a statement's stack.

use accelsql_engine::{Engine, EngineOptions, STATEMENT_STACK_BYTES};

/// Runs `work` on a thread with a statement's stack, in a runtime whose threads have one too
/// (what the shell, `serve` and the Python package do).
fn on_statement_stack<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    std::thread::Builder::new()
        .stack_size(STATEMENT_STACK_BYTES)
        .spawn(move || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_stack_size(STATEMENT_STACK_BYTES)
                .enable_all()
                .build()
                .unwrap()
                .block_on(work)
        })
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn statements_deeper_than_the_limit_get_54001_and_the_session_goes_on() {
    on_statement_stack(async {
        let engine = Engine::with_options(EngineOptions {
            max_statement_depth: 300,
            ..EngineOptions::default()
        })
        .unwrap();
        let session = engine.session();
        let shapes = [
            format!("SELECT 1{}", " + 1".repeat(5_000)),
            format!(
                "SELECT count(*) FROM (VALUES (1)) v(a) WHERE {}",
                vec!["a = 1"; 400].join(" OR ")
            ),
            format!("SELECT 1 AS x{}", " UNION ALL SELECT 2".repeat(400)),
            format!("SELECT {}1{}", "(".repeat(100_000), ")".repeat(100_000)),
            format!("SELECT {}true", "NOT ".repeat(100_000)),
        ];
        for sql in &shapes {
            let e = session.sql(sql).await.unwrap_err();
            assert_eq!(e.code(), "54001", "{}: {e}", &sql[..40]);
            assert!(e.to_string().contains("more than the 300"), "{e}");
        }
        // Deep but within the limit: answered.
        let sum = format!("SELECT 1{}", " + 1".repeat(250));
        let batches = session.sql(&sum).await.unwrap();
        let shown = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(shown.contains("251"), "{shown}");
        // The session goes on.
        assert_eq!(session.sql("SELECT 2").await.unwrap()[0].num_rows(), 1);
    });
}

#[test]
fn a_statement_at_the_default_limit_runs_on_a_statements_stack() {
    on_statement_stack(async {
        let engine = Engine::new().unwrap();
        let session = engine.session();
        let depth = accelsql_engine::DEFAULT_MAX_STATEMENT_DEPTH;
        // An OR chain of conditions counts two levels per term.
        let ors = format!(
            "SELECT count(*) FROM generate_series(1, 2000) t(v) WHERE {}",
            (0..depth / 2 - 1)
                .map(|i| format!("v = {}", i * 3))
                .collect::<Vec<_>>()
                .join(" OR ")
        );
        let batches = session.sql(&ors).await.unwrap();
        let shown = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        // v = 3, 6, …, 2997 within 1..=2000: 666 values.
        assert!(shown.contains("666"), "{shown}");
        let past = format!("SELECT 1{}", " + 1".repeat(depth + 1));
        assert_eq!(session.sql(&past).await.unwrap_err().code(), "54001");
    });
}
