//! A worker: datafusion-distributed's gRPC worker service, able to decode Freshet's plan
//! nodes ([`FreshetCodec`]).

use std::future::Future;

use datafusion::common::{DataFusionError, Result};
use datafusion_distributed::{DistributedExt, Worker, WorkerQueryContext};
use tokio::net::TcpListener;
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
        let connection = listener.accept().await.map(|(stream, _)| stream);
        Some((connection, listener))
    });
    Server::builder()
        .add_service(worker.into_worker_server())
        .serve_with_incoming_shutdown(connections, shutdown)
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))
}
