//! The SQL fuzzer on fixed seeds: random streaming queries over random tables (every storage,
//! window form, emit mode and stream count) equal DataFusion batch SQL. A longer run on fresh
//! seeds is `freshet fuzz --cases N --seed S`.

use freshet::testing::fuzz::{Form, FuzzCase, Outcome, fuzz};

/// Cases in the test suite's run; `FRESHET_FUZZ_CASES` raises it.
fn budget() -> usize {
    std::env::var("FRESHET_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(400)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queries_equal_batch_sql() {
    let summary = fuzz(1, budget(), 100, |failure| eprintln!("{failure}\n")).await;
    eprintln!("{summary}");
    assert!(
        summary.failures.is_empty(),
        "{summary}\n{}",
        summary.failures.join("\n\n")
    );
    assert!(
        summary.matches > summary.cases / 2,
        "{summary}: too few cases ran to a comparison"
    );
}

#[tokio::test]
async fn the_fuzzer_finds_a_wrong_answer() {
    // The judge must be able to fail: the same case against a batch query that is off by one.
    let mut case = FuzzCase::generate(7);
    while case.data.rows.is_empty() {
        case = FuzzCase::generate(case.seed + 1);
    }
    case.query = freshet::testing::fuzz::FuzzQuery {
        form: freshet::testing::fuzz::Form::Stateless,
        keys: Vec::new(),
        items: vec![freshet::testing::fuzz::Item {
            streaming: "id".into(),
            batch: "id + 1 AS id".into(),
            running: None,
            changelog_key: false,
            aggregate: false,
        }],
        filter: None,
        having: None,
        settings: Vec::new(),
        time_type: case.data.time_type,
        wrap: freshet::testing::fuzz::Wrap::None,
        limit: None,
    };
    assert!(matches!(case.run().await, Outcome::Mismatch(_)));
    // Under a LIMIT too: its rows must be rows of the query without it.
    case.query.limit = Some(1);
    assert!(matches!(case.run().await, Outcome::Mismatch(_)));
}

#[tokio::test]
async fn cases_that_once_hung_finish() {
    // Source partitions merged in event-time order while also aligned in the exchange's input
    // tasks: a partition ahead waited for one blocked on a merge that waited for it.
    all_match(&[7_006_471, 7_007_885]).await;
}

#[tokio::test]
async fn joins_of_windowed_aggregations_lose_no_window() {
    // A window created after a later one (disorder, or partial states arriving out of order)
    // is emitted after it: the aggregation's progress must not pass the older window, nor may
    // the exchange above take the later window's rows for progress, or the join above drops
    // the older window as late.
    all_match(&[67, 23_000_624, 23_000_731]).await;
}

#[tokio::test]
async fn windows_and_over_windows_over_joins_plan_and_answer() {
    // A LEFT join DataFusion removes (the other side unique on the keys) reads `t` once; an
    // OVER left to DataFusion over an interval join gets its order back after the repartition
    // (29000203); a sort DataFusion pushed under a join for the OVER above does not keep the
    // join from becoming an interval join (29000536).
    all_match(&[29_000_044, 29_000_203, 29_000_536]).await;
}

/// Asserts that the fuzz cases of `seeds` match batch SQL.
async fn all_match(seeds: &[u64]) {
    for &seed in seeds {
        let outcome = FuzzCase::generate(seed).run().await;
        assert!(
            matches!(outcome, Outcome::Match),
            "seed {seed}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn limits_over_joins_and_window_functions_answer() {
    // DataFusion pushes a LIMIT over an outer join into its preserved side: over a stream, the
    // limited side merged its source partitions out of event-time order (a LEFT interval join
    // at two streams gave 1 row of 10), and a windowed aggregation under the limit no longer
    // became a window join (the query failed). Both keep the LIMIT above the join. Under a
    // LIMIT above a window function, DataFusion kept only the rows a batch plan returns
    // first below the window: a stream's first rows came from partitions cut short.
    all_match(&[79_000_160, 79_000_854, 81_000_146]).await;
    // A LIMIT DataFusion folded into a join of one output partition limits the whole result:
    // a lookup then probed three source partitions, each given the LIMIT (2 rows of 1).
    all_match(&[91_001_946]).await;
}

#[tokio::test]
async fn changelogs_keep_their_order_and_refuse_joins() {
    // A keyless changelog with HAVING at two streams: a round-robin exchange DataFusion put
    // above it for the projection dealt its rows to two streams, and the merged output
    // applied them out of order (the final row 20 instead of 51).
    all_match(&[95_002_592]).await;
    // A changelog joined to itself failed inside the aggregation rule with DataFusion's
    // internal assertion; it is now the documented refusal.
    let outcome = FuzzCase::generate(95_003_818).run().await;
    assert!(
        matches!(&outcome, Outcome::Refused(message) if message.contains("over a changelog")),
        "{outcome:?}"
    );
    // A changelog counted by another aggregation (once refused, and before that a crash: the
    // outer aggregation was given an op column of its own) is applied by it.
    let case = FuzzCase::generate(96_000_043);
    let reproduction = case.reproduction();
    let outcome = case.run().await;
    assert!(
        matches!(outcome, Outcome::Match),
        "{reproduction}: {outcome:?}"
    );
    // Counted without GROUP BY keys, its changelog is keyed by nothing: one row, updated;
    // its rows follow its input's batches, so only its final state is the same at 1, 2 and
    // 4 streams.
    all_match(&[11_270_289, 11_270_946, 11_271_636]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_top_n_queries_equal_batch_sql() {
    // Top-Ns and keep-last de-duplications, final and as changelogs, over every storage: the
    // batch query ranks ties by `id`, the arrival order Freshet ranks them by.
    let wanted = budget() / 4;
    let (mut drawn, mut answered, mut changelogs) = (0, 0, 0);
    let mut seed = 41_000_000;
    while drawn < wanted {
        let case = FuzzCase::generate(seed);
        seed += 1;
        let Form::TopN { changes, .. } = case.query.form else {
            continue;
        };
        drawn += 1;
        let reproduction = case.reproduction();
        match case.run().await {
            Outcome::Match => answered += 1,
            Outcome::Refused(_) => {}
            outcome => panic!("{reproduction}: {outcome:?}"),
        }
        changelogs += usize::from(changes);
    }
    eprintln!("{drawn} top-N cases, {answered} answered, {changelogs} changelogs");
    assert!(answered * 10 >= drawn * 9, "{answered} of {drawn} answered");
    assert!(
        changelogs > 0 && changelogs < drawn,
        "{changelogs} of {drawn}"
    );
}
