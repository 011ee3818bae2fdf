//! accelsql's own sqllogictest suites (`sql-tests/slt`) run through a cluster of 3 executors in
//! this process: every file's session plans on the client and runs its queries on the nodes, and
//! must give the answers the files expect of one node. Records whose answer is a single node's
//! by nature (its devices, `iproc()`, EXPLAIN text) say `skipif cluster`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use accelsql_cluster::{
    ClusterAuth, ClusterClient, ConfigureEngine, ExecutorOptions, NodeOptions, SchedulerOptions,
    run_executor, start_scheduler,
};
use accelsql_engine::{Engine, SchedulerConfig, testing};
use accelsql_sql_tests::discover;
use accelsql_sql_tests::runner::{RunOptions, Summary, run_files};

const NODES: usize = 3;

#[test]
fn accelsql_suites_pass_through_a_cluster() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let fixtures: ConfigureEngine = Arc::new(|e: &Engine| testing::register_fixtures(e));
        let scheduler = start_scheduler(SchedulerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            configure: Some(Arc::clone(&fixtures)),
            ..SchedulerOptions::default()
        })
        .await
        .unwrap();
        let address = scheduler.address().to_string();
        let mut executors = Vec::new();
        for node in 0..NODES {
            let mut options = NodeOptions::new(
                node,
                NODES,
                SchedulerConfig::default().with_simulated_gpus(2),
            );
            options.configure = Some(Arc::clone(&fixtures));
            let mut executor = ExecutorOptions::new(address.clone(), options);
            executor.vcores = 2;
            executors.push(tokio::spawn(async move {
                if let Err(e) = run_executor(executor).await {
                    eprintln!("executor {node}: {e}");
                }
            }));
        }
        scheduler
            .wait_for_executors(NODES, Duration::from_secs(30))
            .await
            .unwrap();
        let client = ClusterClient::connect(&address, ClusterAuth::none(), None)
            .await
            .unwrap();

        let selection = discover::select(&[discover::suite_dir()], false).unwrap();
        assert!(!selection.files.is_empty());
        let options = RunOptions {
            engine_hook: Some(Arc::new(move |base| client.engine_options(base))),
            extra_label: Some("cluster".into()),
            skip_single_node: true,
            file_timeout: Duration::from_secs(300),
            ..RunOptions::default()
        };
        let reports = run_files(selection.files, &options, |r| println!("{r}")).await;
        let failed: Vec<String> = reports
            .iter()
            .filter(|r| !r.passed())
            .map(ToString::to_string)
            .collect();
        let summary = Summary::of(&reports, selection.excluded.len());
        for e in &executors {
            e.abort();
        }
        assert!(failed.is_empty(), "{summary}\n\n{}", failed.join("\n"));
        println!("{summary}");
    });
}
