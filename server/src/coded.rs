//! Every Flight status a client gets carries an accelsql code: [`Coded`] wraps the Flight SQL
//! service, and a status that arrow-flight's request decoding made (a malformed ticket,
//! descriptor or action: a raw `DecodeError`) gets 08P01, an unknown command 0A000.

use std::pin::Pin;

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};

use crate::error::{ServerError, coded_status, status_code};

/// A boxed stream of results or statuses, as the Flight service's streams are.
type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// `status` with an accelsql code: as it is when it has one, else by its gRPC code.
pub(crate) fn coded(status: Status) -> Status {
    if status_code(&status).is_some() {
        return status;
    }
    let code = match status.code() {
        Code::InvalidArgument => ServerError::BAD_REQUEST,
        Code::Unimplemented => "0A000",
        Code::Unauthenticated => "28000",
        _ => return status,
    };
    coded_status(
        code,
        &format!(
            "[{code}] malformed or unsupported request: {}",
            status.message()
        ),
    )
}

fn coded_stream<T: Send + 'static>(inner: Boxed<T>) -> Boxed<T> {
    Box::pin(inner.map(|item| item.map_err(coded)))
}

/// The Flight SQL service `S` with every status coded (see the module's note).
#[derive(Clone)]
pub(crate) struct Coded<S>(pub S);

#[tonic::async_trait]
impl<S> FlightService for Coded<S>
where
    S: FlightService<
            HandshakeStream = Boxed<HandshakeResponse>,
            ListFlightsStream = Boxed<FlightInfo>,
            DoGetStream = Boxed<FlightData>,
            DoPutStream = Boxed<PutResult>,
            DoActionStream = Boxed<arrow_flight::Result>,
            ListActionsStream = Boxed<ActionType>,
            DoExchangeStream = Boxed<FlightData>,
        >,
{
    type HandshakeStream = Boxed<HandshakeResponse>;
    type ListFlightsStream = Boxed<FlightInfo>;
    type DoGetStream = Boxed<FlightData>;
    type DoPutStream = Boxed<PutResult>;
    type DoActionStream = Boxed<arrow_flight::Result>;
    type ListActionsStream = Boxed<ActionType>;
    type DoExchangeStream = Boxed<FlightData>;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        let response = self.0.handshake(request).await.map_err(coded)?;
        Ok(response.map(coded_stream))
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        let response = self.0.list_flights(request).await.map_err(coded)?;
        Ok(response.map(coded_stream))
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.0.get_flight_info(request).await.map_err(coded)
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        self.0.poll_flight_info(request).await.map_err(coded)
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        self.0.get_schema(request).await.map_err(coded)
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let response = self.0.do_get(request).await.map_err(coded)?;
        Ok(response.map(coded_stream))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let response = self.0.do_put(request).await.map_err(coded)?;
        Ok(response.map(coded_stream))
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        let response = self.0.do_exchange(request).await.map_err(coded)?;
        Ok(response.map(coded_stream))
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let response = self.0.do_action(request).await.map_err(coded)?;
        Ok(response.map(coded_stream))
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        let response = self.0.list_actions(request).await.map_err(coded)?;
        Ok(response.map(coded_stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncoded_statuses_get_a_code_and_coded_ones_keep_theirs() {
        let raw = Status::invalid_argument("DecodeError { description: \"buffer underflow\" }");
        let fixed = coded(raw);
        assert_eq!(status_code(&fixed).as_deref(), Some("08P01"));
        assert!(
            fixed.message().starts_with("[08P01]"),
            "{}",
            fixed.message()
        );
        assert_eq!(fixed.code(), Code::InvalidArgument);
        let unknown = coded(Status::unimplemented("no such command"));
        assert_eq!(status_code(&unknown).as_deref(), Some("0A000"));
        let ours = coded_status("42000", "[42000] bad SQL");
        assert_eq!(status_code(&coded(ours)).as_deref(), Some("42000"));
        let other = coded(Status::unavailable("shutting down"));
        assert_eq!(other.code(), Code::Unavailable);
    }
}
