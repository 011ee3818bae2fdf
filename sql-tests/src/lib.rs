//! accelsql's sqllogictest runner: runs `.slt` files against an accelsql session, with results
//! printed as upstream DataFusion prints them, so that both accelsql's own suites
//! (`sql-tests/slt`) and upstream DataFusion's files (`sql-tests/upstream`) can run.
//!
//! ```no_run
//! use accelsql_sql_tests::{discover, runner};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let selection = discover::select(&[discover::suite_dir()], false).unwrap();
//! let reports = runner::run_files(selection.files, &runner::RunOptions::default(), |r| println!("{r}")).await;
//! assert!(reports.iter().all(|r| r.passed()));
//! # });
//! ```

pub mod database;
pub mod directives;
pub mod discover;
pub mod flavor;
pub mod fuzz;
pub mod runner;
pub mod slt_cli;
pub mod upstream;
pub mod workspace;

pub use database::{AccelsqlDb, SltError};
pub use flavor::Flavor;
pub use runner::{FileReport, RunOptions, Summary, run_file, run_files};
