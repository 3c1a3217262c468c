//! Running a query across workers on datafusion-distributed.
//!
//! The coordinator plans the query as one process would, on all the streams of all the
//! workers, and cuts the plan at its exchanges ([`distribute`]): each worker reads its share
//! of the source partitions and runs their exchange inputs, the exchanges' rows and progress
//! cross the network as record batches, each worker runs its share of the exchange outputs
//! and the operators above them, and the coordinator merges the outputs and writes them.
//! Workers ([`serve_worker`]) plan their parts themselves from the query's definition
//! ([`QuerySpec`], sent as the plan's [`FreshetCodec`] nodes), so they must see the query's
//! files at the same paths.

mod codec;
mod coordinator;
mod exchange_send;
mod fragment;
mod gather;
mod placement;
mod spec;
mod streams;
mod totals;
mod worker;

pub use codec::FreshetCodec;
pub use coordinator::{
    ContextAcrossWorkers, DistributedRun, RunReport, RunTotals, WorkerUrls, execute_distributed,
    execute_distributed_in, explain_distributed, is_cancelled_task_panic,
};
pub use exchange_send::ExchangeSendExec;
pub use fragment::FragmentExec;
pub use gather::GatherExec;
pub use placement::distribute;
pub use spec::QuerySpec;
pub use streams::{StreamSource, StreamSpec};
pub use worker::serve_worker;
