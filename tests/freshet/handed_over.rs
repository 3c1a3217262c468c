//! Streams an application hands over as they come (`StreamingContext::register_live`, what
//! Python's readers become): read as the batches arrive, in their order, once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use datafusion::arrow::array::{
    AsArray, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use freshet::{StreamOptions, StreamingContext};
use futures::StreamExt;
use tokio::sync::mpsc;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, false),
        Field::new("v", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// Rows `first..first + rows`: key `k{i % 3}`, value `i`, one row a second.
fn batch(first: i64, rows: i64) -> RecordBatch {
    let range = first..first + rows;
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(StringArray::from_iter_values(
                range.clone().map(|i| format!("k{}", i % 3)),
            )),
            Arc::new(Int64Array::from_iter_values(range.clone())),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                range.map(|i| i * 1000),
            )),
        ],
    )
    .unwrap()
}

/// A stream fed by the returned sender, as an application would feed it.
fn channel_stream() -> (mpsc::Sender<RecordBatch>, SendableRecordBatchStream) {
    let (sender, receiver) = mpsc::channel::<RecordBatch>(4);
    let batches = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|batch| (Ok(batch), receiver))
    });
    (
        sender,
        Box::pin(RecordBatchStreamAdapter::new(schema(), batches)),
    )
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A stream fed by the returned sender, and a flag set once the stream is dropped.
fn watched_channel_stream() -> (
    mpsc::Sender<RecordBatch>,
    SendableRecordBatchStream,
    Arc<AtomicBool>,
) {
    let (sender, receiver) = mpsc::channel::<RecordBatch>(4);
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = SetOnDrop(Arc::clone(&dropped));
    let batches = futures::stream::unfold((receiver, guard), |(mut receiver, guard)| async move {
        receiver
            .recv()
            .await
            .map(|batch| (Ok(batch), (receiver, guard)))
    });
    (
        sender,
        Box::pin(RecordBatchStreamAdapter::new(schema(), batches)),
        dropped,
    )
}

fn timed() -> StreamOptions {
    StreamOptions {
        event_time: Some("ts".into()),
        ..StreamOptions::default()
    }
}

const WINDOWED: &str = "SELECT k, window_start, COUNT(*) AS n, SUM(v) AS s FROM live \
    GROUP BY k WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)";

#[tokio::test]
async fn windows_close_as_the_batches_arrive_and_the_stream_is_read_once() {
    let ctx = StreamingContext::with_partitions(2);
    let (sender, stream) = channel_stream();
    ctx.register_live("live", stream, false, timed()).unwrap();
    let query = ctx.sql(WINDOWED).await.unwrap();
    let mut results = query.execute_merged().unwrap();
    // The first two minutes, then the third minute's first second: the first two minutes'
    // windows close while the stream is still open.
    sender.send(batch(0, 60)).await.unwrap();
    sender.send(batch(60, 60)).await.unwrap();
    sender.send(batch(120, 1)).await.unwrap();
    let mut closed = Vec::new();
    while closed.len() < 6 {
        let batch = tokio::time::timeout(Duration::from_secs(10), results.next())
            .await
            .expect("windows close before the stream ends")
            .expect("the stream is still open")
            .unwrap();
        let n = batch
            .column_by_name("n")
            .unwrap()
            .as_primitive::<Int64Type>();
        closed.extend(n.iter().flatten());
    }
    assert_eq!(closed, vec![20; 6]);
    drop(sender);
    let rest: Vec<RecordBatch> = results.map(|b| b.unwrap()).collect().await;
    assert_eq!(rest.iter().map(RecordBatch::num_rows).sum::<usize>(), 1);

    let again = ctx.sql("SELECT k FROM live").await.unwrap();
    let error = again
        .execute_merged()
        .unwrap()
        .next()
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("stream 'live' was read by an earlier query"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_query_lets_go_of_a_stream_that_sends_nothing_more() {
    for partitions in [1, 2] {
        let ctx = StreamingContext::with_partitions(partitions);
        let (sender, stream, dropped) = watched_channel_stream();
        ctx.register_live("live", stream, false, timed()).unwrap();
        let query = ctx.sql(WINDOWED).await.unwrap();
        let mut results = query.execute_merged().unwrap();
        sender.send(batch(0, 10)).await.unwrap();
        // No window closes: the query waits for the next batch, which never comes.
        let waiting = async {
            while let Some(batch) = results.next().await {
                assert_eq!(batch.unwrap().num_rows(), 0, "no window closes yet");
            }
        };
        let waited = tokio::time::timeout(Duration::from_millis(300), waiting).await;
        assert!(waited.is_err(), "the query ended with its stream open");
        drop(results);
        drop(query);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dropped.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "the query's reader still holds the stream at {partitions} streams"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(sender);
    }
}

#[tokio::test]
async fn a_stream_that_ends_gives_the_batch_answer_at_every_stream_count() {
    let expected = {
        let ctx = StreamingContext::with_partitions(1);
        let all: Vec<RecordBatch> = (0..10).map(|b| batch(b * 37, 37)).collect();
        ctx.register_batches("live", schema(), all, timed())
            .unwrap();
        sorted(ctx.sql(WINDOWED).await.unwrap().execute_merged().unwrap()).await
    };
    for partitions in [1, 2, 4] {
        let ctx = StreamingContext::with_partitions(partitions);
        let (sender, stream) = channel_stream();
        ctx.register_live("live", stream, true, timed()).unwrap();
        let query = ctx.sql(WINDOWED).await.unwrap();
        assert!(!query.plan().boundedness().is_unbounded());
        tokio::spawn(async move {
            for b in 0..10 {
                sender.send(batch(b * 37, 37)).await.unwrap();
            }
        });
        assert_eq!(
            sorted(query.execute_merged().unwrap()).await,
            expected,
            "{partitions} streams"
        );
    }
}

async fn sorted(stream: SendableRecordBatchStream) -> Vec<String> {
    let batches: Vec<RecordBatch> = stream.map(|b| b.unwrap()).collect().await;
    let mut rows: Vec<String> = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string()
        .lines()
        .filter(|line| line.starts_with("| k"))
        .map(str::to_string)
        .collect();
    rows.sort();
    rows
}

#[tokio::test]
async fn a_stream_handed_over_refuses_partitions_and_an_option_that_says_it_ends() {
    let ctx = StreamingContext::with_partitions(2);
    let (_sender, stream) = channel_stream();
    let options = StreamOptions {
        partitions: Some(2),
        ..timed()
    };
    let error = ctx
        .register_live("live", stream, false, options)
        .unwrap_err();
    assert!(
        error.to_string().contains("read by one source partition"),
        "{error}"
    );
    let (_sender, stream) = channel_stream();
    let options = StreamOptions {
        bounded: Some(true),
        ..timed()
    };
    let error = ctx
        .register_live("live", stream, false, options)
        .unwrap_err();
    assert!(error.to_string().contains("bounded=True"), "{error}");
}
