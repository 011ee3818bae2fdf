//! Asking a cluster's scheduler how many nodes the cluster has — the first call of every client
//! and executor, so that a missing or wrong secret is found (and named) before anything else.

use std::error::Error as StdError;
use std::time::Duration;

use ballista_core::serde::protobuf::GetJobStatusParams;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::utils::{GrpcClientConfig, create_grpc_client_endpoint};

use crate::guard::{CLUSTER_INFO_JOB, nodes_of};
use crate::security::ClusterAuth;
use crate::{ClusterError, Result};

/// How long the scheduler has to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The cluster's node count as the scheduler at `address` (`HOST:PORT`) knows it (`None`: no
/// executor has registered and the scheduler was not told). A refused credential is
/// [`ClusterError::Authentication`]; a scheduler that does not answer,
/// [`ClusterError::SchedulerUnreachable`].
pub(crate) async fn cluster_nodes(address: &str, auth: &ClusterAuth) -> Result<Option<usize>> {
    let unreachable = |message: String| ClusterError::SchedulerUnreachable {
        address: address.to_string(),
        message,
    };
    let mut endpoint = create_grpc_client_endpoint(
        format!("http://{address}"),
        Some(&GrpcClientConfig::default()),
    )
    .map_err(|e| ClusterError::Config {
        message: format!("the scheduler address {address}: {e}"),
    })?;
    if let Some(secure) = auth.endpoint_override() {
        endpoint = secure(endpoint).map_err(|e| ClusterError::Config {
            message: format!("the scheduler address {address}: {e}"),
        })?;
    }
    let endpoint = endpoint.connect_timeout(ASK_TIMEOUT).timeout(ASK_TIMEOUT);
    let ask = async {
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| classify(address, auth, &e))?;
        SchedulerGrpcClient::new(channel)
            .get_job_status(GetJobStatusParams {
                job_id: CLUSTER_INFO_JOB.to_string(),
            })
            .await
            .map_err(|e| classify(address, auth, &e))
    };
    let answer = tokio::time::timeout(ASK_TIMEOUT + Duration::from_secs(1), ask)
        .await
        .map_err(|_| unreachable(format!("no answer within {ASK_TIMEOUT:?}")))??;
    Ok(nodes_of(answer.get_ref()))
}

/// An error's message with all its causes.
fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        source = source.and_then(StdError::source);
    }
    text
}

/// Whether a transport failure is a TLS or protocol refusal (a credential problem) rather than
/// an unreachable address.
fn is_refusal(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    [
        "certificate",
        "unknownissuer",
        "unknown ca",
        "unknownca",
        "handshake",
        "alert",
        "corrupt message",
        "invalidcontenttype",
        "http2 error",
        "h2 protocol error",
        "frame with invalid size",
        "connection reset",
        "broken pipe",
        "unexpected eof",
        "peer closed",
        "connection closed",
        // The scheduler closed the connection before HTTP/2 started: a plaintext client at a
        // TLS scheduler, seen this way when the close wins the race with the client's preface.
        "connection was not ready",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// The accelsql error a failed call to the scheduler stands for.
pub(crate) fn classify(
    address: &str,
    auth: &ClusterAuth,
    e: &(dyn StdError + 'static),
) -> ClusterError {
    let text = chain(e);
    let status = e.downcast_ref::<tonic::Status>();
    // A TLS or HTTP/2 failure arrives as a status of the transport (which code depends on when
    // the connection broke); any other status is the scheduler's own answer.
    let transport = status.is_none_or(|s| {
        matches!(
            s.code(),
            tonic::Code::Unavailable
                | tonic::Code::Unknown
                | tonic::Code::Internal
                | tonic::Code::Cancelled
        )
    });
    if transport && is_refusal(&text) {
        let ours = if auth.is_secured() {
            "this process's cluster secret (or certificate) is not the cluster's, or the \
             scheduler runs without one"
        } else {
            "the scheduler requires the cluster's secret: give --secret-file FILE (or \
             --tls-cert/--tls-key/--tls-ca)"
        };
        return ClusterError::Authentication {
            message: format!("the scheduler at {address} refused the connection: {ours} ({text})"),
        };
    }
    if let Some(status) = status.filter(|_| !transport) {
        return ClusterError::Process {
            message: format!("the scheduler at {address} answered: {}", status.message()),
        };
    }
    ClusterError::SchedulerUnreachable {
        address: address.to_string(),
        message: text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_closed_before_http2_is_a_refusal_and_a_refused_connect_is_not() {
        let auth = ClusterAuth::none();
        let closed = tonic::Status::cancelled("operation was canceled: connection was not ready");
        assert!(matches!(
            classify("127.0.0.1:1", &auth, &closed),
            ClusterError::Authentication { .. }
        ));
        let refused =
            tonic::Status::unavailable("tcp connect error: Connection refused (os error 111)");
        assert!(matches!(
            classify("127.0.0.1:1", &auth, &refused),
            ClusterError::SchedulerUnreachable { .. }
        ));
        let answered = tonic::Status::not_found("no such job");
        assert!(matches!(
            classify("127.0.0.1:1", &auth, &answered),
            ClusterError::Process { .. }
        ));
    }
}
