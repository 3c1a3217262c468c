//! Freshet's streaming SQL dialect, turned into a statement DataFusion plans.
//!
//! The SQL is tokenized once. The clauses sqlparser cannot parse are turned into parseable
//! tokens first (`clauses`, `over`): the query options and `EMIT …` are taken out, a
//! `WINDOW TUMBLING|SLIDING|HOPPING|SESSION (…)` clause becomes a window key in its block's
//! GROUP BY (`tumble(ts, size)`, `hop(ts, slide, size)`, `session(ts, gap)`), the
//! predecessor's OVER forms become standard ones, and `TABLE t` in a window table function
//! becomes `t`. The tokens — with the spans of the user's SQL, so that errors point into
//! it — are parsed by sqlparser into one statement, on which every query block finds its
//! window and binds `window_start` / `window_end` (`blocks`). Because `tumble()` computes
//! what `date_bin` computes, the statement is also valid batch SQL.
//!
//! Accepted forms, all a window key in GROUP BY:
//! - `GROUP BY k WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)` → `GROUP BY tumble(ts, …), k`,
//!   also `TUMBLING (1m)` / `TUMBLING (INTERVAL '30' SECOND)` on the stream's event time,
//!   `WINDOW SLIDING|HOPPING (ts, size, advance)` → `hop(ts, advance, size)`, and
//!   `WINDOW SESSION (ts, gap)` → `session(ts, gap)`;
//! - `FROM TUMBLE(TABLE t, DESCRIPTOR(ts), size)`, `HOP(TABLE t, DESCRIPTOR(ts), slide,
//!   size)` and `SESSION(TABLE t [PARTITION BY k, …], DESCRIPTOR(ts), gap)`, also wrapped in
//!   Flink's `TABLE(…)` → `FROM t` with the window key (a session's PARTITION BY keys must
//!   be the block's other GROUP BY keys);
//! - `GROUP BY tumble(ts, size), k` (and `hop`, `session`) as written.

mod blocks;
mod clauses;
mod over;
mod tokens;
mod vocabulary;

use datafusion::common::{DataFusionError, Result, not_impl_err};
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::{Dialect, GenericDialect};
use datafusion::sql::sqlparser::parser::Parser;

use blocks::bind_windows;
use clauses::{
    refuse_temporal_joins, rewrite_window_clauses, take_emit, take_options, unwrap_window_tables,
};
use over::rewrite_over_clauses;
use tokens::{text, tokenize};
pub use vocabulary::{EmitMode, WindowKind};

/// A query in Freshet's dialect, ready for DataFusion.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamingSql {
    /// The statement to plan; `None` when the SQL holds no streaming syntax and is not a
    /// query in the generic dialect: DataFusion then parses it as written.
    pub statement: Option<Statement>,
    /// The statement as SQL (the SQL as written when it holds no streaming syntax).
    pub sql: String,
    pub emit: EmitMode,
    /// The window of the first query block that has one.
    pub window: Option<WindowKind>,
    /// Query options from a trailing `WITH ('key' = 'value', …)`.
    pub options: Vec<(String, String)>,
    /// `EXPIRE AFTER … INACTIVITY` of the query's OVER windows.
    pub expire_after: Option<std::time::Duration>,
}

/// [`rewrite_with`] sqlparser's generic dialect and DataFusion's default recursion limit.
pub fn rewrite(sql: &str, event_time_of: &dyn Fn(&str) -> Option<String>) -> Result<StreamingSql> {
    rewrite_with(sql, event_time_of, &GenericDialect {}, 50)
}

/// Rewrites `sql`, parsed in `dialect`; `event_time_of(table)` gives a stream's declared
/// event-time column for the shorthand forms that do not name one.
pub fn rewrite_with(
    sql: &str,
    event_time_of: &dyn Fn(&str) -> Option<String>,
    dialect: &dyn Dialect,
    recursion_limit: usize,
) -> Result<StreamingSql> {
    let mut tokens = tokenize(sql)?;
    let options = take_options(&mut tokens)?;
    let emit = take_emit(&mut tokens)?;
    let expire_after = rewrite_over_clauses(&mut tokens)?;
    rewrite_window_clauses(&mut tokens, event_time_of)?;
    unwrap_window_tables(&mut tokens)?;
    refuse_temporal_joins(&tokens)?;
    let rewritten = text(&tokens) != sql;
    let as_written = |window| StreamingSql {
        statement: None,
        sql: sql.to_string(),
        emit,
        window,
        options: options.clone(),
        expire_after,
    };
    let parsed = Parser::new(dialect)
        .with_recursion_limit(recursion_limit)
        .with_tokens_with_locations(tokens)
        .parse_statements();
    let mut statements = match parsed {
        Ok(statements) => statements,
        // Not ours to judge: DataFusion parses it (its own statements too) and says what
        // is wrong.
        Err(_) if !rewritten => return Ok(as_written(None)),
        Err(error) => return Err(DataFusionError::SQL(Box::new(error), None)),
    };
    let mut statement = match statements.len() {
        1 => statements.remove(0),
        _ if !rewritten => return Ok(as_written(None)),
        _ => return not_impl_err!("a streaming query is one SQL statement"),
    };
    let (window, bound) = bind_windows(&mut statement)?;
    if !rewritten && !bound {
        // A plain query keeps its parsed statement, which DataFusion would parse again the
        // same way; in another dialect than the one tokenized in, or as another kind of
        // statement (DataFusion's parser has statements of its own), DataFusion parses it.
        let mut plain = as_written(window);
        if dialect.is::<GenericDialect>() && matches!(statement, Statement::Query(_)) {
            plain.statement = Some(statement);
        }
        return Ok(plain);
    }
    Ok(StreamingSql {
        sql: statement.to_string(),
        statement: Some(statement),
        emit,
        window,
        options,
        expire_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_event_time(_: &str) -> Option<String> {
        None
    }

    fn market_event_time(table: &str) -> Option<String> {
        (table == "market_data").then(|| "trade_time".to_string())
    }

    fn squash(sql: &str) -> String {
        sql.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn a_plain_query_is_parsed_once_in_the_generic_dialect_only() {
        let sql = "SELECT auction, price FROM bid WHERE price > 10";
        let out = rewrite(sql, &no_event_time).unwrap();
        assert_eq!(out.sql, sql);
        let Some(statement) = out.statement else {
            panic!("a plain query keeps its parsed statement");
        };
        assert_eq!(statement.to_string(), sql);
        // Another dialect tokenizes otherwise, and DataFusion's own statements are its own.
        let postgres = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let out = rewrite_with(sql, &no_event_time, &postgres, 50).unwrap();
        assert_eq!(out.statement, None);
        let out = rewrite("SET datafusion.execution.batch_size = 1024", &no_event_time).unwrap();
        assert_eq!(out.statement, None);
    }

    #[test]
    fn predecessor_tumbling_clause_becomes_a_group_key() {
        let out = rewrite(
            "SELECT trader_id, symbol, COUNT(*) AS n FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)",
            &no_event_time,
        )
        .unwrap();
        assert_eq!(
            squash(&out.sql),
            "SELECT trader_id, symbol, COUNT(*) AS n FROM market_data GROUP BY tumble(trade_time, INTERVAL '1' MINUTE), trader_id, symbol"
        );
        assert_eq!(out.window, Some(WindowKind::Tumble));
        assert_eq!(out.emit, EmitMode::Default);
    }

    #[test]
    fn emit_changes_is_taken_out() {
        let out = rewrite(
            "SELECT k, COUNT(*) FROM t GROUP BY k WINDOW TUMBLING (ts, INTERVAL '1' MINUTE) EMIT CHANGES;",
            &no_event_time,
        )
        .unwrap();
        assert_eq!(out.emit, EmitMode::Changes);
        assert!(!out.sql.contains("EMIT"), "{}", out.sql);
        let out = rewrite(
            "SELECT k, COUNT(*) FROM t GROUP BY k EMIT FINAL",
            &no_event_time,
        )
        .unwrap();
        assert_eq!(out.emit, EmitMode::Final);
        assert_eq!(out.window, None);
    }

    #[test]
    fn shorthand_uses_the_stream_event_time() {
        let out = rewrite(
            "SELECT symbol, COUNT(*) FROM market_data GROUP BY symbol WINDOW TUMBLING (1m)",
            &market_event_time,
        )
        .unwrap();
        assert!(
            out.sql.contains("tumble(trade_time, INTERVAL '1 minutes')"),
            "{}",
            out.sql
        );
        let error = rewrite(
            "SELECT COUNT(*) FROM t WINDOW TUMBLING (1m)",
            &market_event_time,
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("declares no event time"),
            "{error}"
        );
    }

    #[test]
    fn sliding_hopping_and_session_clauses() {
        let out = rewrite(
            "SELECT COUNT(*) FROM t GROUP BY k WINDOW SLIDING (ts, INTERVAL '10' MINUTE, INTERVAL '5' MINUTE)",
            &no_event_time,
        )
        .unwrap();
        assert!(
            out.sql
                .contains("hop(ts, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE), k"),
            "{}",
            out.sql
        );
        assert_eq!(out.window, Some(WindowKind::Hop));
        let out = rewrite(
            "SELECT COUNT(*) FROM t WINDOW HOPPING (ts, 10m, 5m)",
            &no_event_time,
        )
        .unwrap();
        assert!(
            out.sql
                .contains("GROUP BY hop(ts, INTERVAL '5 minutes', INTERVAL '10 minutes')"),
            "{}",
            out.sql
        );
        let out = rewrite(
            "SELECT k, COUNT(*) FROM t GROUP BY k WINDOW SESSION (ts, 30s)",
            &no_event_time,
        )
        .unwrap();
        assert!(
            out.sql.contains("session(ts, INTERVAL '30 seconds'), k"),
            "{}",
            out.sql
        );
    }

    #[test]
    fn window_bounds_become_expressions() {
        let out = rewrite(
            "SELECT window_start, _WINDOW_END, k, COUNT(*) AS n FROM t GROUP BY k WINDOW TUMBLING (ts, INTERVAL '1' MINUTE) HAVING window_start > TIMESTAMP '2024-01-01 00:00:00'",
            &no_event_time,
        )
        .unwrap();
        let sql = squash(&out.sql);
        assert!(sql.starts_with("SELECT tumble(ts, INTERVAL '1' MINUTE) AS window_start, (tumble(ts, INTERVAL '1' MINUTE) + INTERVAL '1' MINUTE) AS _WINDOW_END, k"), "{sql}");
        assert!(
            sql.contains("HAVING tumble(ts, INTERVAL '1' MINUTE) > TIMESTAMP"),
            "{sql}"
        );
    }

    #[test]
    fn flink_table_functions_and_window_grouping() {
        let out = rewrite(
            "SELECT window_start, window_end, k, SUM(v) FROM TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE) GROUP BY window_start, window_end, k",
            &no_event_time,
        )
        .unwrap();
        let sql = squash(&out.sql);
        assert!(
            sql.contains("FROM t GROUP BY tumble(ts, INTERVAL '1' MINUTE), k"),
            "{sql}"
        );
        let out = rewrite(
            "SELECT window_start, COUNT(*) FROM HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '5' MINUTE, INTERVAL '10' MINUTE) GROUP BY window_start",
            &no_event_time,
        )
        .unwrap();
        assert!(
            squash(&out.sql)
                .contains("GROUP BY hop(ts, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE)"),
            "{}",
            out.sql
        );
    }

    #[test]
    fn flink_table_wrappers_and_session_table_functions() {
        let rewritten = |sql: &str| squash(&rewrite(sql, &no_event_time).unwrap().sql);
        let sql = rewritten(
            "SELECT window_start, COUNT(*) FROM TABLE(\n  HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) GROUP BY window_start, window_end",
        );
        assert!(
            sql.contains("FROM t GROUP BY hop(ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)"),
            "{sql}"
        );
        let out = rewrite(
            "SELECT k, window_start, window_end, SUM(v) FROM TABLE(SESSION(TABLE s.t PARTITION BY k, DESCRIPTOR(ts), INTERVAL '5' MINUTE)) GROUP BY k, window_start, window_end",
            &no_event_time,
        )
        .unwrap();
        assert_eq!(out.window, Some(WindowKind::Session));
        let sql = squash(&out.sql);
        assert!(
            sql.contains("FROM s.t GROUP BY k, session(ts, INTERVAL '5' MINUTE)"),
            "{sql}"
        );
        assert!(
            sql.contains("session_end(max(ts), INTERVAL '5' MINUTE) AS window_end"),
            "{sql}"
        );
        let sql = rewritten(
            "SELECT window_start, COUNT(*) FROM SESSION(TABLE t PARTITION BY a, b, DESCRIPTOR(ts), INTERVAL '1' SECOND) GROUP BY window_start, B, a",
        );
        assert!(
            sql.contains("FROM t GROUP BY session(ts, INTERVAL '1' SECOND), B, a"),
            "{sql}"
        );
        let sql = rewritten(
            "SELECT window_start, COUNT(*) FROM TABLE(SESSION(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
        );
        assert!(
            sql.contains("FROM t GROUP BY session(ts, INTERVAL '1' SECOND)"),
            "{sql}"
        );
        // A session per PARTITION BY key; Freshet's are per GROUP BY key.
        let refused = |sql: &str| rewrite(sql, &no_event_time).unwrap_err().to_string();
        let error = refused(
            "SELECT COUNT(*) FROM SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), INTERVAL '1' SECOND) GROUP BY window_start, k, j",
        );
        assert!(
            error.contains("line 1, column 22")
                && error.contains("(PARTITION BY k; GROUP BY j, k)"),
            "{error}"
        );
        let error = refused(
            "SELECT COUNT(*) FROM TABLE(SESSION(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, k",
        );
        assert!(
            error.contains("(PARTITION BY nothing; GROUP BY k)"),
            "{error}"
        );
        let error = refused(
            "SELECT COUNT(*) FROM SESSION(TABLE t PARTITION BY DESCRIPTOR(ts), INTERVAL '1' SECOND) GROUP BY window_start",
        );
        assert!(error.contains("PARTITION BY names no key"), "{error}");
        let error = refused(
            "SELECT window_start, COUNT(*) FROM TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '1' HOUR)) GROUP BY window_start, window_end",
        );
        assert!(
            error.contains("CUMULATE windows are not supported"),
            "{error}"
        );
    }

    #[test]
    fn window_table_functions_take_flinks_named_arguments_in_any_order() {
        let rewritten = |sql: &str| squash(&rewrite(sql, &no_event_time).unwrap().sql);
        let sql = rewritten(
            "SELECT window_start, COUNT(*) FROM TABLE(HOP(SLIDE => INTERVAL '2' SECOND, DATA => TABLE t, SIZE => INTERVAL '10' SECOND, TIMECOL => DESCRIPTOR(ts))) GROUP BY window_start, window_end",
        );
        assert!(
            sql.contains("FROM t GROUP BY hop(ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)"),
            "{sql}"
        );
        let sql = rewritten(
            "SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), SIZE => INTERVAL '1' MINUTE)) GROUP BY window_start, window_end",
        );
        assert!(
            sql.contains("FROM t GROUP BY tumble(ts, INTERVAL '1' MINUTE)"),
            "{sql}"
        );
        // The keys of a named table, first or last.
        for sql in [
            "SELECT k, window_start, COUNT(*) FROM TABLE(SESSION(DATA => TABLE t PARTITION BY k, TIMECOL => DESCRIPTOR(ts), GAP => INTERVAL '5' SECOND)) GROUP BY k, window_start, window_end",
            "SELECT k, window_start, COUNT(*) FROM TABLE(SESSION(GAP => INTERVAL '5' SECOND, TIMECOL => DESCRIPTOR(ts), DATA => TABLE t PARTITION BY k)) GROUP BY k, window_start, window_end",
        ] {
            let sql = rewritten(sql);
            assert!(
                sql.contains("FROM t GROUP BY k, session(ts, INTERVAL '5' SECOND)"),
                "{sql}"
            );
        }
        let refused = |sql: &str| rewrite(sql, &no_event_time).unwrap_err().to_string();
        let error = refused(
            "SELECT COUNT(*) FROM TABLE(TUMBLE(DATA => TABLE t, TIMECOL => DESCRIPTOR(ts), SIZE => INTERVAL '1' MINUTE, OFFSET => INTERVAL '1' SECOND)) GROUP BY window_start",
        );
        assert!(
            error.contains("the OFFSET of a window table function is not supported"),
            "{error}"
        );
        for sql in [
            // Missing, repeated, unknown.
            "SELECT COUNT(*) FROM TABLE(TUMBLE(DATA => TABLE t, TIMECOL => DESCRIPTOR(ts))) GROUP BY window_start",
            "SELECT COUNT(*) FROM TABLE(TUMBLE(DATA => TABLE t, TIMECOL => DESCRIPTOR(ts), TIMECOL => DESCRIPTOR(ts), SIZE => INTERVAL '1' MINUTE)) GROUP BY window_start",
            "SELECT COUNT(*) FROM TABLE(TUMBLE(DATA => TABLE t, TIMECOL => DESCRIPTOR(ts), WIDTH => INTERVAL '1' MINUTE)) GROUP BY window_start",
        ] {
            let error = refused(sql);
            assert!(
                error.contains("malformed window table function")
                    && error.contains(
                        "TUMBLE(DATA => TABLE t, TIMECOL => DESCRIPTOR(ts), SIZE => size)"
                    ),
                "{sql}: {error}"
            );
        }
    }

    #[test]
    fn flink_group_window_auxiliary_functions_are_the_bounds() {
        let rewritten = |sql: &str| squash(&rewrite(sql, &no_event_time).unwrap().sql);
        let sql = rewritten(
            "SELECT b.k, count(*), SESSION_START(b.ts, INTERVAL '10' SECOND) AS s, SESSION_END(b.ts, INTERVAL '10' SECOND) AS e FROM t b GROUP BY b.k, SESSION(b.ts, INTERVAL '10' SECOND)",
        );
        assert!(
            sql.contains("SESSION(b.ts, INTERVAL '10' SECOND) AS s, session_end(max(b.ts), INTERVAL '10' SECOND) AS e"),
            "{sql}"
        );
        let sql = rewritten(
            "SELECT TUMBLE_START(ts, INTERVAL '1' MINUTE) AS s, tumble_end(ts, INTERVAL '1' MINUTE) AS e FROM t GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)",
        );
        assert!(
            sql.contains("SELECT TUMBLE(ts, INTERVAL '1' MINUTE) AS s, (TUMBLE(ts, INTERVAL '1' MINUTE) + INTERVAL '1' MINUTE) AS e"),
            "{sql}"
        );
        // Another kind's auxiliary function is not this window's bound.
        let sql = rewritten(
            "SELECT HOP_END(ts, INTERVAL '1' MINUTE) AS e FROM t GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)",
        );
        assert!(
            sql.contains("HOP_END(ts, INTERVAL '1' MINUTE) AS e"),
            "{sql}"
        );
    }

    #[test]
    fn arroyo_style_keys_are_recognized() {
        let out = rewrite(
            "SELECT window_end, COUNT(*) FROM t GROUP BY tumble(ts, INTERVAL '1' MINUTE), k",
            &no_event_time,
        )
        .unwrap();
        assert_eq!(out.window, Some(WindowKind::Tumble));
        assert!(
            out.sql
                .contains("(tumble(ts, INTERVAL '1' MINUTE) + INTERVAL '1' MINUTE) AS window_end"),
            "{}",
            out.sql
        );
    }

    #[test]
    fn malformed_clauses_say_where() {
        let error = rewrite(
            "SELECT COUNT(*) FROM t GROUP BY k WINDOW TUMBLING ts",
            &no_event_time,
        )
        .unwrap_err();
        assert!(error.to_string().contains("line 1, column 35"), "{error}");
        let error = rewrite(
            "SELECT COUNT(*) FROM t GROUP BY k WINDOW TUMBLING (a, b, c)",
            &no_event_time,
        )
        .unwrap_err();
        assert!(error.to_string().contains("got 3 arguments"), "{error}");
        let error = rewrite("SELECT COUNT(*) FROM t EMIT SOMETIMES", &no_event_time).unwrap_err();
        assert!(
            error.to_string().contains("EMIT CHANGES or EMIT FINAL"),
            "{error}"
        );
        let error = rewrite(
            "SELECT COUNT(*) FROM TUMBLE(TABLE t, ts, INTERVAL '1' MINUTE)",
            &no_event_time,
        )
        .unwrap_err();
        assert!(error.to_string().contains("DESCRIPTOR"), "{error}");
    }

    #[test]
    fn aliases_named_like_window_bounds_stay() {
        let out = rewrite(
            "SELECT _WINDOW_START AS window_start, COUNT(*) FROM t GROUP BY k WINDOW TUMBLING (ts, 1m)",
            &no_event_time,
        )
        .unwrap();
        assert!(
            out.sql
                .contains("tumble(ts, INTERVAL '1 minutes') AS window_start,"),
            "{}",
            out.sql
        );
    }

    #[test]
    fn emit_may_end_an_aggregating_subquery() {
        let out = rewrite(
            "SELECT * FROM (SELECT k, COUNT(*) AS n FROM t GROUP BY k EMIT CHANGES) WHERE n > 1",
            &no_event_time,
        )
        .unwrap();
        assert_eq!(out.emit, EmitMode::Changes);
        assert!(!out.sql.contains("EMIT"));
        assert!(rewrite("SELECT 1 EMIT CHANGES EMIT FINAL", &no_event_time).is_err());
    }

    #[test]
    fn query_options_are_taken_out_and_ctes_left_alone() {
        let out = rewrite(
            "SELECT k, COUNT(*) FROM t GROUP BY k WINDOW TUMBLING (ts, 1m) EMIT CHANGES WITH ('partitioning_strategy' = 'sticky')",
            &no_event_time,
        )
        .unwrap();
        assert_eq!(
            out.options,
            vec![("partitioning_strategy".to_string(), "sticky".to_string())]
        );
        assert_eq!(out.emit, EmitMode::Changes);
        assert!(!out.sql.contains("WITH"), "{}", out.sql);
        let cte = "WITH x AS (SELECT 1 AS a) SELECT a FROM x";
        assert_eq!(rewrite(cte, &no_event_time).unwrap().sql, cte);
        assert!(
            rewrite(
                "SELECT 1 WITH (partitioning_strategy = sticky)",
                &no_event_time
            )
            .is_err()
        );
    }

    #[test]
    fn plain_sql_passes_unchanged() {
        let sql = "SELECT a, \"window_start\" FROM t WHERE b > 1 ORDER BY a";
        let out = rewrite(sql, &no_event_time).unwrap();
        assert_eq!(out.sql, sql);
        assert_eq!(out.window, None);
    }

    #[test]
    fn each_query_block_binds_its_own_window() {
        let out = rewrite(
            "WITH w AS (SELECT k, window_start, COUNT(*) AS n FROM t GROUP BY k WINDOW TUMBLING (ts, 1m)) \
             SELECT window_start, n FROM w WHERE window_start > 0",
            &no_event_time,
        )
        .unwrap();
        let sql = squash(&out.sql);
        // Inside the CTE the bound is the key; outside it is the CTE's column.
        assert!(
            sql.contains("SELECT k, tumble(ts, INTERVAL '1 minutes') AS window_start, COUNT(*) AS n FROM t GROUP BY tumble(ts, INTERVAL '1 minutes'), k"),
            "{sql}"
        );
        assert!(
            sql.ends_with("SELECT window_start, n FROM w WHERE window_start > 0"),
            "{sql}"
        );
        let out = rewrite(
            "SELECT * FROM (SELECT window_end AS e FROM t GROUP BY session(ts, INTERVAL '5' SECOND)) AS s",
            &no_event_time,
        )
        .unwrap();
        assert_eq!(out.window, Some(WindowKind::Session));
        assert!(
            out.sql
                .contains("session_end(max(ts), INTERVAL '5' SECOND) AS e"),
            "{}",
            out.sql
        );
    }

    #[test]
    fn bounds_inside_expressions_are_bound() {
        let out = rewrite(
            "SELECT CAST(window_start AS BIGINT) AS s, date_trunc('hour', window_end) AS h FROM t GROUP BY k WINDOW TUMBLING (ts, 1m) HAVING (window_start > 0) ORDER BY window_start",
            &no_event_time,
        )
        .unwrap();
        let sql = squash(&out.sql);
        assert!(
            sql.contains("CAST(tumble(ts, INTERVAL '1 minutes') AS BIGINT) AS s"),
            "{sql}"
        );
        assert!(
            sql.contains(
                "date_trunc('hour', (tumble(ts, INTERVAL '1 minutes') + INTERVAL '1 minutes')) AS h"
            ),
            "{sql}"
        );
        assert!(
            sql.contains("HAVING (tumble(ts, INTERVAL '1 minutes') > 0)"),
            "{sql}"
        );
        assert!(
            sql.ends_with("ORDER BY tumble(ts, INTERVAL '1 minutes')"),
            "{sql}"
        );
    }

    #[test]
    fn quoted_and_qualified_bounds_stay() {
        let out = rewrite(
            "SELECT \"window_start\", t.window_end, COUNT(*) FROM t GROUP BY k WINDOW TUMBLING (ts, 1m)",
            &no_event_time,
        )
        .unwrap();
        assert!(
            out.sql
                .starts_with("SELECT \"window_start\", t.window_end,"),
            "{}",
            out.sql
        );
    }

    #[test]
    fn syntax_errors_point_into_the_sql_as_written() {
        // The WINDOW clause moves into the GROUP BY before parsing; the error still points
        // at the second `>` where the user wrote it.
        let error = rewrite(
            "SELECT k, COUNT(*) FROM t\nGROUP BY k WINDOW TUMBLING (ts, 1m) HAVING COUNT(*) > > 1",
            &no_event_time,
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("Line: 2, Column: 55"), "{error}");
    }
}
