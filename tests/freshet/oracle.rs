//! The oracle itself must fail when Freshet's result differs from DataFusion's.

use freshet::testing::{Differential, RandomStream, TestTable};

#[tokio::test]
async fn the_oracle_reports_a_wrong_result() {
    let table = TestTable::batches("t", RandomStream::schema(), RandomStream::new(1).generate());
    let error = Differential::new(
        "SELECT k1, q FROM t WHERE q > 10",
        "SELECT k1, q FROM t WHERE q > 11",
    )
    .table(table.clone())
    .run()
    .await
    .unwrap_err();
    assert!(error.contains("at 1 streams"), "{error}");
    let error = Differential::new("SELECT v + 1e-6 AS v FROM t", "SELECT v FROM t")
        .table(table)
        .run()
        .await
        .unwrap_err();
    assert!(error.contains("differs"), "{error}");
}

#[tokio::test]
async fn the_oracle_checks_order_when_asked() {
    let table = TestTable::batches("t", RandomStream::schema(), RandomStream::new(2).generate());
    Differential::same_sql("SELECT q, ts FROM t ORDER BY ts")
        .table(table.clone())
        .ordered()
        .run()
        .await
        .unwrap();
    let error = Differential::new(
        "SELECT q, ts FROM t ORDER BY ts DESC",
        "SELECT q, ts FROM t ORDER BY ts",
    )
    .table(table)
    .ordered()
    .run()
    .await
    .unwrap_err();
    assert!(error.contains("differs"), "{error}");
}
