//! Submitting a placed plan to the scheduler and reading its result: what Ballista's
//! `execute_physical_plan` does (push mode: the scheduler streams the job's status), over
//! connections a client keeps — one to the scheduler, one to each executor's Flight port —
//! instead of making them again, TLS handshakes included, for every statement.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ballista_core::client::BallistaClient;
use ballista_core::extension::{BallistaConfigGrpcEndpoint, SessionConfigExt};
use ballista_core::serde::protobuf::get_job_status_result::FlightProxy;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::{
    ExecuteQueryParams, GetJobStatusResult, KeyValuePair, PartitionLocation, SuccessfulJob,
    execute_query_params::Query, job_status,
};
use ballista_core::utils::{GrpcClientConfig, create_grpc_client_endpoint};
use ballista_core::version;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use datafusion_proto::physical_plan::{AsExecutionPlan, PhysicalExtensionCodec};
use datafusion_proto::protobuf::PhysicalPlanNode;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tonic::transport::Channel;

/// The connections of one cluster client, kept between its statements (a gRPC channel carries
/// many requests at once; a broken one is replaced on the next request).
#[derive(Default)]
pub(crate) struct Connections {
    scheduler: Mutex<Option<SchedulerGrpcClient<Channel>>>,
    /// By the host and port a client connects to.
    executors: Mutex<HashMap<(String, u16), BallistaClient>>,
}

/// What a connection is made with: the session's Ballista settings.
struct Dial {
    grpc: GrpcClientConfig,
    customize: Option<Arc<BallistaConfigGrpcEndpoint>>,
    use_tls: bool,
}

impl Dial {
    fn of(config: &SessionConfig) -> Self {
        Self {
            grpc: GrpcClientConfig::from(&config.ballista_config()),
            customize: config.ballista_override_create_grpc_client_endpoint(),
            use_tls: config.ballista_use_tls(),
        }
    }
}

/// An error as Ballista's client words it (the client's error relay reads these words).
fn execution<E: std::fmt::Debug>(e: E) -> DataFusionError {
    DataFusionError::Execution(format!("{e:?}"))
}

impl Connections {
    /// The scheduler's client: the kept one, or a new connection (`fresh`: always new).
    async fn scheduler(
        &self,
        url: &str,
        dial: &Dial,
        fresh: bool,
    ) -> Result<SchedulerGrpcClient<Channel>> {
        if !fresh
            && let Some(client) = self
                .scheduler
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        {
            return Ok(client);
        }
        let mut endpoint =
            create_grpc_client_endpoint(url.to_string(), Some(&dial.grpc)).map_err(execution)?;
        if let Some(customize) = &dial.customize {
            endpoint = customize.configure_endpoint(endpoint).map_err(execution)?;
        }
        let channel = endpoint.connect().await.map_err(execution)?;
        let client = SchedulerGrpcClient::new(channel)
            .max_encoding_message_size(dial.grpc.max_message_size)
            .max_decoding_message_size(dial.grpc.max_message_size);
        *self.scheduler.lock().unwrap_or_else(|e| e.into_inner()) = Some(client.clone());
        Ok(client)
    }

    /// The Flight client of `host:port`: the kept one, or a new connection (`fresh`: always new).
    async fn executor(
        &self,
        host: &str,
        port: u16,
        dial: &Dial,
        fresh: bool,
    ) -> Result<BallistaClient> {
        let key = (host.to_string(), port);
        if !fresh
            && let Some(client) = self
                .executors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
                .cloned()
        {
            return Ok(client);
        }
        let client = BallistaClient::try_new(
            host,
            port,
            dial.grpc.max_message_size,
            dial.use_tls,
            dial.customize.clone(),
            dial.grpc.io_retries_times,
            dial.grpc.io_retry_wait_time_ms,
            dial.grpc.initial_connection_window_size,
            dial.grpc.initial_stream_window_size,
        )
        .await
        .map_err(execution)?;
        self.executors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, client.clone());
        Ok(client)
    }
}

/// Submits `plan` as one job to the scheduler at `url` and streams its result: every partition
/// of its final stage, read from the executors that hold them, one after the other.
pub(crate) async fn submit(
    connections: Arc<Connections>,
    url: String,
    plan: Arc<dyn ExecutionPlan>,
    codec: &dyn PhysicalExtensionCodec,
    session_id: String,
    config: SessionConfig,
) -> Result<impl Stream<Item = Result<datafusion::arrow::array::RecordBatch>> + Send + use<>> {
    let node = PhysicalPlanNode::try_from_physical_plan(plan, codec).map_err(|e| {
        DataFusionError::Internal(format!("failed to serialize physical plan: {e:?}"))
    })?;
    let settings = config
        .options()
        .entries()
        .into_iter()
        .map(|entry| KeyValuePair {
            key: entry.key,
            value: entry.value,
        })
        .collect();
    let query = ExecuteQueryParams {
        query: Some(Query::PhysicalPlan(node.encode_to_vec())),
        settings,
        session_id,
        operation_id: ballista_core::ids::new_instance_id(),
    };
    let dial = Dial::of(&config);
    let request = |query: ExecuteQueryParams| {
        let mut request = tonic::Request::new(query);
        version::insert_version_header(request.metadata_mut());
        request
    };
    // A kept channel that no longer works (its scheduler restarted, or the runtime that made it
    // ended) fails before the job is submitted: submit again over a new one.
    let mut scheduler = connections.scheduler(&url, &dial, false).await?;
    let response = match scheduler.execute_query_push(request(query.clone())).await {
        Err(status) if not_sent(&status) => {
            scheduler = connections.scheduler(&url, &dial, true).await?;
            scheduler.execute_query_push(request(query)).await
        }
        other => other,
    }
    .map_err(execution)?;
    let scheduler_version = version::version_from_metadata(response.metadata()).map(str::to_string);
    version::check_compatibility(
        Some(ballista_core::BALLISTA_VERSION),
        scheduler_version.as_deref(),
    )
    .map_err(DataFusionError::Execution)?;
    let mut statuses = response.into_inner();
    let (job_id, partitions, proxy) = loop {
        let GetJobStatusResult {
            status,
            flight_proxy,
        } = statuses
            .next()
            .await
            .ok_or_else(|| {
                DataFusionError::Execution("Stream closed without job completing".to_string())
            })?
            .map_err(|e| DataFusionError::Execution(e.to_string()))?;
        let job_id = status
            .as_ref()
            .map_or_else(|| "unknown_job_id".to_string(), |s| s.job_id.clone());
        match status.and_then(|s| s.status) {
            None | Some(job_status::Status::Queued(_) | job_status::Status::Running(_)) => {}
            Some(job_status::Status::Failed(err)) => {
                return Err(DataFusionError::Execution(format!(
                    "Job {job_id} failed: {}",
                    err.error
                )));
            }
            Some(job_status::Status::Successful(SuccessfulJob {
                partition_location, ..
            })) => break (job_id, partition_location, flight_proxy),
        }
    };
    log::debug!(
        "job {job_id} done: {} result partition(s)",
        partitions.len()
    );
    let fetches = partitions.into_iter().map(move |location| {
        let fetched = fetch(
            Arc::clone(&connections),
            location,
            url.clone(),
            proxy.clone(),
            Dial {
                grpc: dial.grpc.clone(),
                customize: dial.customize.clone(),
                use_tls: dial.use_tls,
            },
        );
        futures::stream::once(fetched).try_flatten()
    });
    Ok(futures::stream::iter(fetches).flatten())
}

/// Reads one result partition from the executor that holds it (or the proxy in front of it).
async fn fetch(
    connections: Arc<Connections>,
    location: PartitionLocation,
    scheduler_url: String,
    proxy: Option<FlightProxy>,
    dial: Dial,
) -> Result<SendableRecordBatchStream> {
    let layout = location.layout();
    let metadata = location
        .executor_meta
        .ok_or_else(|| DataFusionError::Internal("Received empty executor metadata".to_owned()))?;
    let partition_id = location
        .partition_id
        .ok_or_else(|| DataFusionError::Internal("Received empty partition id".to_owned()))?;
    let partition_id: ballista_core::serde::scheduler::PartitionId = partition_id.into();
    let (host, port) = (metadata.host.as_str(), metadata.port as u16);
    let (client_host, client_port) = match &proxy {
        Some(FlightProxy::External(address)) => split_host_port(&format!("http://{address}"))?,
        Some(FlightProxy::Local(true)) => split_host_port(&scheduler_url)?,
        Some(FlightProxy::Local(false)) | None => (host.to_string(), port),
    };
    let mut fresh = false;
    loop {
        let mut client = connections
            .executor(&client_host, client_port, &dial, fresh)
            .await?;
        match client
            .fetch_partition_proxied(
                &metadata.id,
                &partition_id,
                location.file_id,
                layout,
                host,
                port,
                true,
            )
            .await
        {
            Ok(stream) => return Ok(stream),
            // A kept connection that no longer works: once more over a new one.
            Err(e) if !fresh && is_unavailable(&e) => fresh = true,
            Err(e) => return Err(e.into_datafusion()),
        }
    }
}

/// What a connection that could not carry a request at all (as opposed to an error of the
/// request) says: the peer is gone, or the task that drove the connection ended with the
/// runtime that made it.
const NOT_SENT: [&str; 5] = [
    "Service was not ready",
    "transport error",
    "connection error",
    "Connection refused",
    "broken pipe",
];

/// Whether the scheduler's answer `status` says the request never reached it.
fn not_sent(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unavailable
        || NOT_SENT.iter().any(|sign| status.message().contains(sign))
}

/// Whether a fetch failed because its connection could not carry the request.
fn is_unavailable(e: &ballista_core::error::BallistaError) -> bool {
    let text = format!("{e:?}");
    text.contains("Unavailable") || NOT_SENT.iter().any(|sign| text.contains(sign))
}

/// `host` and `port` of a URL such as `http://10.0.0.1:50050`.
fn split_host_port(address: &str) -> Result<(String, u16)> {
    let rest = address
        .split_once("://")
        .map_or(address, |(_, rest)| rest)
        .trim_end_matches('/');
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| DataFusionError::Execution(format!("No port in {address:?}")))?;
    let port = port.parse().map_err(|e| {
        DataFusionError::Execution(format!("Cannot parse host:port in {address:?}: {e}"))
    })?;
    Ok((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_of_a_url() {
        assert_eq!(
            split_host_port("http://127.0.0.1:50050").unwrap(),
            ("127.0.0.1".to_string(), 50050)
        );
        assert_eq!(
            split_host_port("https://[::1]:7/").unwrap(),
            ("::1".to_string(), 7)
        );
        assert!(split_host_port("http://host").is_err());
        assert!(split_host_port("http://host:port").is_err());
    }
}
