//! A worker: datafusion-distributed's gRPC worker service, able to decode Freshet's plan
//! nodes ([`FreshetCodec`]).

use std::future::Future;

use datafusion::common::{DataFusionError, Result};
use datafusion_distributed::{DistributedExt, Worker, WorkerQueryContext};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::Server;

use super::codec::FreshetCodec;

/// Serves queries' stages on `listener` until `shutdown` completes.
pub async fn serve_worker(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    let worker = Worker::from_session_builder(|ctx: WorkerQueryContext| async move {
        Ok(ctx
            .builder
            .with_distributed_user_codec(FreshetCodec)
            .build())
    });
    let connections = futures::stream::unfold(listener, |listener| async move {
        let connection = listener
            .accept()
            .await
            .map(|(stream, _)| without_delay(stream));
        Some((connection, listener))
    });
    Server::builder()
        .add_service(worker.into_worker_server())
        .serve_with_incoming_shutdown(connections, shutdown)
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))
}

/// `stream` with Nagle's algorithm off. tonic leaves a socket it did not accept itself as the
/// kernel made it, with the algorithm on: a small response (a stage's last batch, its
/// metrics) then waits for the peer's delayed acknowledgement, 40 ms on Linux, at every
/// round trip, which made most of a short query's time across workers. A socket whose
/// option cannot be set still serves, only with those waits.
fn without_delay(stream: TcpStream) -> TcpStream {
    if let Err(error) = stream.set_nodelay(true) {
        eprintln!("freshet worker: TCP_NODELAY not set on a connection: {error}");
    }
    stream
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_accepted_connection_sends_small_writes_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let client = tokio::spawn(TcpStream::connect(address));
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(!accepted.nodelay().unwrap(), "the kernel's default changed");
        assert!(without_delay(accepted).nodelay().unwrap());
        client.await.unwrap().unwrap();
    }
}
