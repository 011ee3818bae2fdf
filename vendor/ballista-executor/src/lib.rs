// Licensed to the Apache Software Foundation (ASF) under one
// or more contributor license agreements.  See the NOTICE file
// distributed with this work for additional information
// regarding copyright ownership.  The ASF licenses this file
// to you under the Apache License, Version 2.0 (the
// "License"); you may not use this file except in compliance
// with the License.  You may obtain a copy of the License at
//
//   http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing,
// software distributed under the License is distributed on an
// "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
// KIND, either express or implied.  See the License for the
// specific language governing permissions and limitations
// under the License.

#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

/// Connection pool for `BallistaClient` instances.
mod client_pool;
/// Execution plan for collecting distributed query results into a single partition.
pub mod collect;
/// Command-line configuration for the executor binary.
#[cfg(feature = "build-binary")]
pub mod config;
/// Extension point for custom query stage execution engines.
pub mod execution_engine;
/// Pull-based task execution loop that polls the scheduler for work.
pub mod execution_loop;
/// Core executor implementation for running distributed query tasks.
pub mod executor;
/// Executor process lifecycle management and configuration.
pub mod executor_process;
/// gRPC server for receiving pushed tasks from the scheduler.
pub mod executor_server;
/// Arrow Flight service for streaming shuffle data between executors.
pub mod flight_service;
/// HTTP server for Kubernetes-style /healthz and /readyz probes.
pub mod health;
/// Metrics collection for executor runtime statistics.
pub mod metrics;
/// Session-scoped cache of shared executor runtime environments.
pub mod runtime_cache;
/// Graceful shutdown coordination for executor components.
pub mod shutdown;
/// Signal handling for process termination.
pub mod terminate;

mod cpu_bound_executor;
mod standalone;

use ballista_core::error::BallistaError;
use log::debug;
use std::net::SocketAddr;

pub use standalone::new_standalone_executor;
pub use standalone::new_standalone_executor_from_builder;
pub use standalone::new_standalone_executor_from_state;

use crate::shutdown::Shutdown;
use ballista_core::serde::protobuf::{
    FailedTask, OperatorMetricsSet, RuntimeStatsReport, ShuffleWritePartition,
    SuccessfulTask, TaskColumnStats, TaskStatus, WindowStateReport, task_status,
};
use ballista_core::serde::scheduler::TaskKey;
use ballista_core::utils::GrpcServerConfig;
use log::info;

/// [ArrowFlightServerProvider] provides a function which creates a new Arrow Flight server.
///
/// The function should take four arguments:
/// [String] - executor work directory
/// [SocketAddr] - the address to bind the server to
/// [Shutdown] - a shutdown signal to gracefully shutdown the server
/// [GrpcServerConfig] - the gRPC server configuration for timeout settings
/// Returns a [tokio::task::JoinHandle] which will be registered as service handler
///
pub type ArrowFlightServerProvider = dyn Fn(
        String,
        SocketAddr,
        Shutdown,
        GrpcServerConfig,
    ) -> tokio::task::JoinHandle<Result<(), BallistaError>>
    + Send
    + Sync;

/// Timestamps capturing the lifecycle of a task execution.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskExecutionTimes {
    /// Timestamp when the task was launched by the scheduler (milliseconds since epoch).
    launch_time: u64,
    /// Timestamp when task execution started on the executor (milliseconds since epoch).
    start_exec_time: u64,
    /// Timestamp when task execution completed (milliseconds since epoch).
    end_exec_time: u64,
}

/// Side-channel data harvested from a task's executed plan, attached to the
/// [`TaskStatus`] reported to the scheduler on success.
///
/// Marked `#[non_exhaustive]` so future additions (e.g. tracing IDs, further
/// runtime reports) are non-breaking for external callers that construct via
/// `TaskCompletionExtras { operator_metrics: …, ..Default::default() }`.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TaskCompletionExtras {
    /// Per-operator metrics collected from the executed plan.
    pub operator_metrics: Option<Vec<OperatorMetricsSet>>,
    /// Runtime-stats reports harvested from `RuntimeStatsExec` taps in the plan.
    pub runtime_stats: Vec<RuntimeStatsReport>,
    /// Finalized window-aggregate state captured by an ever-expanding-frame
    /// window, already stamped with the global partition each entry belongs
    /// to by the stage's `ShuffleWriterExec`.
    pub window_state: Vec<WindowStateReport>,
    /// Per-column statistics folded across this task's shuffle output. Empty
    /// when the executed plan collects none (e.g. non-sort shuffle paths).
    pub column_stats: Vec<TaskColumnStats>,
}

/// Converts a task execution result into a [`TaskStatus`] protobuf message.
///
/// This function wraps the outcome of task execution (success or failure)
/// along with timing and metrics information into a status message that
/// can be sent back to the scheduler.
pub fn as_task_status(
    execution_result: Result<Vec<ShuffleWritePartition>, BallistaError>,
    executor_id: String,
    stage_attempt_num: usize,
    key: TaskKey,
    execution_times: TaskExecutionTimes,
    extras: TaskCompletionExtras,
) -> TaskStatus {
    let TaskCompletionExtras {
        operator_metrics,
        runtime_stats,
        window_state,
        column_stats,
    } = extras;
    let metrics = operator_metrics.unwrap_or_default();
    let task_id = key.task_id;
    match execution_result {
        Ok(partitions) => {
            debug!(
                "Task {task_id} finished with operator_metrics array size {} \
                 and {} runtime-stats report(s), {} window-state report(s)",
                metrics.len(),
                runtime_stats.len(),
                window_state.len(),
            );
            TaskStatus {
                task_id: task_id as u32,
                job_id: key.job_id.clone().into(),
                stage_id: key.stage_id as u32,
                stage_attempt_num: stage_attempt_num as u32,
                launch_time: execution_times.launch_time,
                start_exec_time: execution_times.start_exec_time,
                end_exec_time: execution_times.end_exec_time,
                metrics,
                status: Some(task_status::Status::Successful(SuccessfulTask {
                    executor_id,
                    partitions,
                    runtime_stats,
                    task_column_stats: column_stats,
                    window_state,
                })),
            }
        }
        Err(e) => {
            let error_msg = e.to_string();
            info!("Task {task_id} failed: {error_msg}");

            TaskStatus {
                task_id: task_id as u32,
                job_id: key.job_id.clone().into(),
                stage_id: key.stage_id as u32,
                stage_attempt_num: stage_attempt_num as u32,
                launch_time: execution_times.launch_time,
                start_exec_time: execution_times.start_exec_time,
                end_exec_time: execution_times.end_exec_time,
                metrics,
                status: Some(task_status::Status::Failed(FailedTask::from(e))),
            }
        }
    }
}
