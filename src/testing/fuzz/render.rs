//! The fuzzer's queries as SQL: Freshet's text and the batch SQL that must give the same
//! answer (see the grammar in `query.rs` for how each form is rendered on the batch side).

use std::fmt::Write;

use super::data::TimeType;
use super::query::Windowed;
use super::query::{Above, BoundSpelling, Emit, Form, FuzzQuery, Item, Window, WindowSyntax, Wrap};

pub(super) fn interval(ms: i64) -> String {
    if ms % 1_000 == 0 {
        format!("INTERVAL '{}' SECOND", ms / 1_000)
    } else {
        format!("INTERVAL '{ms} milliseconds'")
    }
}

impl FuzzQuery {
    /// The emit mode (`Final` for queries that are not aggregations).
    pub fn emit(&self) -> Emit {
        match self.form {
            Form::Aggregate { emit, .. } => emit,
            Form::TopN { changes: true, .. } => Emit::ChangesPerBatch,
            _ => Emit::Final,
        }
    }

    fn where_clause(&self) -> String {
        self.filter
            .as_ref()
            .map(|f| format!(" WHERE {f}"))
            .unwrap_or_default()
    }

    fn select_list(&self, text: impl Fn(&Item) -> String) -> String {
        self.items.iter().map(text).collect::<Vec<_>>().join(", ")
    }

    /// Freshet's SQL.
    pub fn streaming_sql(&self) -> String {
        let sql = self.wrap.apply(self.streaming_block());
        match self.limit {
            Some(limit) => format!("{sql} LIMIT {limit}"),
            None => sql,
        }
    }

    /// The batch SQL of the query's final result (for a changelog: its state at the end).
    pub fn batch_sql(&self) -> String {
        self.wrap.apply(self.batch_block())
    }

    /// The batch SQL of a per-record changelog: one row per record (per window it is in)
    /// with its group's running aggregates in stored order; `None` when an item has no
    /// running equivalent or the changelog is not per record.
    pub fn running_sql(&self) -> Option<String> {
        // A counted changelog is the counting aggregation's, a row per input batch, not
        // per record: there are no running aggregates to compare it with.
        if self.wrap == Wrap::Counted {
            return None;
        }
        self.running_block().map(|sql| self.wrap.apply(sql))
    }

    /// `time` plus `ms` milliseconds, in the event time's type.
    fn time_plus(&self, time: &str, ms: i64) -> String {
        let (sign, magnitude) = if ms < 0 { ("-", -ms) } else { ("+", ms) };
        match (ms, self.time_type) {
            (0, _) => time.to_string(),
            (_, TimeType::EpochMillis) => format!("{time} {sign} {magnitude}"),
            (_, TimeType::Timestamp) => format!("{time} {sign} {}", interval(magnitude)),
        }
    }

    /// Table `table` aggregated per key and tumbling window of `size_ms`, as Freshet SQL or
    /// batch SQL: the columns [`Windowed`] names.
    fn windowed_table(&self, table: &str, size_ms: i64, batch: bool) -> String {
        let keys: Vec<&str> = self.keys.iter().map(|(key, _)| key.as_str()).collect();
        let mut columns: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let aggregates = "COUNT(*) AS n, SUM(i) AS s, MAX(i) AS top";
        if !batch {
            columns.extend(["window_start".to_string(), "window_end".to_string()]);
            let group = match keys.is_empty() {
                true => String::new(),
                false => format!(" GROUP BY {}", keys.join(", ")),
            };
            return format!(
                "(SELECT {}, {aggregates} FROM {table}{group} WINDOW TUMBLING (ts, {}))",
                columns.join(", "),
                interval(size_ms)
            );
        }
        let start = match self.time_type {
            TimeType::Timestamp => format!(
                "date_bin(INTERVAL '{size_ms} milliseconds', ts, TIMESTAMP '1970-01-01 00:00:00')"
            ),
            TimeType::EpochMillis => format!("to_timestamp_millis(ts - ts % {size_ms})"),
        };
        columns.push(format!("{start} AS window_start"));
        columns.push(format!(
            "{start} + INTERVAL '{size_ms} milliseconds' AS window_end"
        ));
        let mut group: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        group.push(start);
        format!(
            "(SELECT {}, {aggregates} FROM {table} GROUP BY {})",
            columns.join(", "),
            group.join(", ")
        )
    }

    /// A join of `t` with itself or with `u`, and what reads its output, as Freshet SQL or
    /// batch SQL.
    fn join_block(&self, batch: bool) -> Option<String> {
        let Form::Join { above, .. } = &self.form else {
            return None;
        };
        let rows = self.join_rows(batch)?;
        let (time, key) = match above {
            Above::Rows => return Some(rows),
            Above::Window { time, key, .. } | Above::Over { time, key } => (time, key),
        };
        let keys: Vec<&str> = key.iter().map(|k| k.alias).collect();
        Some(match above {
            Above::Window { size_ms, .. } if batch => {
                let integer =
                    self.time_type == TimeType::EpochMillis && matches!(time.alias, "ats" | "bts");
                let start = match integer {
                    true => format!("to_timestamp_millis({0} - {0} % {size_ms})", time.alias),
                    false => format!(
                        "date_bin(INTERVAL '{size_ms} milliseconds', {}, TIMESTAMP '1970-01-01 00:00:00')",
                        time.alias
                    ),
                };
                let group = [keys.clone(), vec![start.as_str()]].concat().join(", ");
                let select = [keys, vec![&format!("{start} AS window_start")]]
                    .concat()
                    .join(", ");
                format!(
                    "SELECT {select}, COUNT(*) AS c, MAX({}) AS latest FROM ({rows}) AS j GROUP BY {group}",
                    time.alias
                )
            }
            Above::Window { size_ms, .. } => {
                let select = [keys.clone(), vec!["window_start"]].concat().join(", ");
                let group = match keys.is_empty() {
                    true => String::new(),
                    false => format!(" GROUP BY {}", keys.join(", ")),
                };
                format!(
                    "SELECT {select}, COUNT(*) AS c, MAX({0}) AS latest FROM ({rows}) AS j{group} WINDOW TUMBLING ({0}, {1})",
                    time.alias,
                    interval(*size_ms)
                )
            }
            _ => {
                let partition = match keys.is_empty() {
                    true => String::new(),
                    false => format!("PARTITION BY {} ", keys.join(", ")),
                };
                format!(
                    "SELECT *, COUNT(*) OVER ({partition}ORDER BY {}) AS c FROM ({rows}) AS j",
                    time.alias
                )
            }
        })
    }

    /// The join's rows, as Freshet SQL or batch SQL (the same but for windowed sides), with
    /// the columns what reads them needs.
    fn join_rows(&self, batch: bool) -> Option<String> {
        let Form::Join {
            kind,
            lower_ms,
            upper_ms,
            spelling,
            other_table,
            lookup,
            windowed,
            ref above,
        } = self.form
        else {
            return None;
        };
        let other = if other_table { "u" } else { "t" };
        let mut select: Vec<String> = self.items.iter().map(|i| i.streaming.clone()).collect();
        if let Above::Window { time, key, .. } | Above::Over { time, key } = above {
            for needed in std::iter::once(time).chain(key) {
                if !select
                    .iter()
                    .any(|item| item.ends_with(&format!(" AS {}", needed.alias)))
                {
                    select.push(needed.item.to_string());
                }
            }
        }
        let select = select.join(", ");
        let mut on: Vec<String> = self
            .keys
            .iter()
            .map(|(key, _)| format!("a.{key} = b.{key}"))
            .collect();
        if let Windowed::Both { size_ms } | Windowed::Right { size_ms } = windowed {
            let left = match windowed {
                Windowed::Both { .. } => {
                    on.push("a.window_start = b.window_start".to_string());
                    self.windowed_table("t", size_ms, batch)
                }
                _ => {
                    on.push(format!(
                        "a.ts BETWEEN b.window_end - {} AND b.window_end",
                        interval(size_ms)
                    ));
                    "t".to_string()
                }
            };
            if let Some(extra) = &self.having {
                on.push(extra.clone());
            }
            return Some(format!(
                "SELECT {select} FROM {left} a {} {} b ON {}",
                kind.sql(),
                self.windowed_table(other, size_ms, batch),
                on.join(" AND ")
            ));
        }
        // A lookup joins on the keys alone.
        on.extend((!lookup).then(|| match spelling {
            BoundSpelling::Between => format!(
                "b.ts BETWEEN {} AND {}",
                self.time_plus("a.ts", lower_ms),
                self.time_plus("a.ts", upper_ms)
            ),
            BoundSpelling::Inclusive => format!(
                "b.ts >= {} AND b.ts <= {}",
                self.time_plus("a.ts", lower_ms),
                self.time_plus("a.ts", upper_ms)
            ),
            BoundSpelling::Reversed => format!(
                "a.ts <= {} AND a.ts >= {}",
                self.time_plus("b.ts", -lower_ms),
                self.time_plus("b.ts", -upper_ms)
            ),
            BoundSpelling::Strict => format!(
                "b.ts > {} AND b.ts < {}",
                self.time_plus("a.ts", lower_ms - 1),
                self.time_plus("a.ts", upper_ms + 1)
            ),
        }));
        if let Some(extra) = &self.having {
            on.push(extra.clone());
        }
        if kind.is_subquery() {
            // A condition on `b` belongs in the subquery, one on `a` alone outside it.
            let mut outside = Vec::new();
            match &self.filter {
                Some(filter) if filter.contains("b.") => on.push(format!("({filter})")),
                Some(filter) => outside.push(filter.clone()),
                None => {}
            }
            outside.push(format!(
                "{} (SELECT 1 FROM {other} b WHERE {})",
                kind.sql(),
                on.join(" AND ")
            ));
            return Some(format!(
                "SELECT {select} FROM t a WHERE {}",
                outside.join(" AND ")
            ));
        }
        Some(format!(
            "SELECT {select} FROM t a {} {} b ON {}{}",
            kind.sql(),
            other,
            on.join(" AND "),
            self.where_clause()
        ))
    }

    /// A top-N of `t`, as Freshet SQL or batch SQL.
    fn top_n_block(&self, batch: bool) -> Option<String> {
        let Form::TopN {
            n,
            order,
            batch_order,
            spelling,
            ..
        } = self.form
        else {
            return None;
        };
        let limit = match spelling {
            _ if batch => format!("rn <= {n}"),
            1 => format!("rn < {}", n + 1),
            2 => format!("{n} >= rn"),
            3 if n == 1 => "rn = 1".to_string(),
            _ => format!("rn <= {n}"),
        };
        let select = self.select_list(|item| item.streaming.clone());
        let partition = match self.keys.first() {
            Some((key, _)) => format!("PARTITION BY {key} "),
            None => String::new(),
        };
        let order = if batch { batch_order } else { order };
        let kept = self
            .having
            .as_ref()
            .map(|condition| format!(" AND ({condition})"))
            .unwrap_or_default();
        Some(format!(
            "SELECT {select} FROM (SELECT *, ROW_NUMBER() OVER ({partition}ORDER BY {order}) AS rn \
             FROM t{}) AS r WHERE {limit}{kept}",
            self.where_clause()
        ))
    }

    fn streaming_block(&self) -> String {
        if let Some(join) = self.join_block(false) {
            return join;
        }
        if let Some(top_n) = self.top_n_block(false) {
            return top_n;
        }
        let select = self.select_list(|item| item.streaming.clone());
        let filter = self.where_clause();
        let Form::Aggregate {
            window,
            syntax,
            emit,
        } = self.form
        else {
            return format!("SELECT {select} FROM t{filter}");
        };
        let keys: Vec<&str> = self.keys.iter().map(|(e, _)| e.as_str()).collect();
        let mut sql = String::new();
        let window_args = |window: Window| match window {
            Window::Tumble { size_ms } => ("tumble", interval(size_ms)),
            Window::Hop { slide_ms, size_ms } => (
                "hop",
                format!("{}, {}", interval(slide_ms), interval(size_ms)),
            ),
            Window::Session { gap_ms } => ("session", interval(gap_ms)),
        };
        match (window, syntax) {
            (None, _) => {
                let _ = write!(sql, "SELECT {select} FROM t{filter}");
                if !keys.is_empty() {
                    let _ = write!(sql, " GROUP BY {}", keys.join(", "));
                }
            }
            (Some(window), WindowSyntax::Clause) => {
                let _ = write!(sql, "SELECT {select} FROM t{filter}");
                if !keys.is_empty() {
                    let _ = write!(sql, " GROUP BY {}", keys.join(", "));
                }
                let clause = match window {
                    Window::Tumble { size_ms } => format!("TUMBLING (ts, {})", interval(size_ms)),
                    // The clause's order: time, size, advance.
                    Window::Hop { slide_ms, size_ms } => {
                        format!(
                            "HOPPING (ts, {}, {})",
                            interval(size_ms),
                            interval(slide_ms)
                        )
                    }
                    Window::Session { gap_ms } => format!("SESSION (ts, {})", interval(gap_ms)),
                };
                let _ = write!(sql, " WINDOW {clause}");
            }
            (Some(window), WindowSyntax::Function) => {
                let (name, args) = window_args(window);
                let mut group = vec![format!("{name}(ts, {args})")];
                group.extend(keys.iter().map(|k| k.to_string()));
                let _ = write!(
                    sql,
                    "SELECT {select} FROM t{filter} GROUP BY {}",
                    group.join(", ")
                );
            }
            (Some(window), WindowSyntax::TableFunction) => {
                let table = match window {
                    Window::Tumble { size_ms } => {
                        format!("TUMBLE(TABLE t, DESCRIPTOR(ts), {})", interval(size_ms))
                    }
                    Window::Hop { slide_ms, size_ms } => format!(
                        "HOP(TABLE t, DESCRIPTOR(ts), {}, {})",
                        interval(slide_ms),
                        interval(size_ms)
                    ),
                    Window::Session { gap_ms } => {
                        format!("SESSION(TABLE t, DESCRIPTOR(ts), {})", interval(gap_ms))
                    }
                };
                let mut group = vec!["window_start".to_string(), "window_end".to_string()];
                group.extend(keys.iter().map(|k| k.to_string()));
                let _ = write!(
                    sql,
                    "SELECT {select} FROM {table}{filter} GROUP BY {}",
                    group.join(", ")
                );
            }
        }
        if let Some(having) = &self.having {
            let _ = write!(sql, " HAVING {having}");
        }
        if emit != Emit::Final {
            sql.push_str(" EMIT CHANGES");
        }
        sql
    }

    /// The rows with their window columns, as batch SQL: a CTE named `w` over `t` (after
    /// the WHERE clause) with `window_start` and `window_end` per row.
    fn windowed_rows(&self, window: Window) -> String {
        let filter = self.where_clause();
        let timestamp = self.time_type == TimeType::Timestamp;
        // Window bounds are timestamps, also over an integer event time (epoch ms).
        let start = |slide_ms: i64, back: i64| {
            let base = if timestamp {
                format!(
                    "date_bin(INTERVAL '{slide_ms} milliseconds', ts, TIMESTAMP '1970-01-01 00:00:00')"
                )
            } else {
                format!("to_timestamp_millis(ts - ts % {slide_ms})")
            };
            if back == 0 {
                base
            } else {
                format!("{base} - INTERVAL '{back} milliseconds'")
            }
        };
        let plus =
            |expression: &str, ms: i64| format!("{expression} + INTERVAL '{ms} milliseconds'");
        match window {
            Window::Tumble { size_ms } => {
                let s = start(size_ms, 0);
                format!(
                    "w AS (SELECT *, {s} AS window_start, {} AS window_end FROM t{filter})",
                    plus(&s, size_ms)
                )
            }
            Window::Hop { slide_ms, size_ms } => {
                let copies: Vec<String> = (0..size_ms / slide_ms)
                    .map(|j| {
                        let s = start(slide_ms, j * slide_ms);
                        format!(
                            "SELECT *, {s} AS window_start, {} AS window_end FROM t{filter}",
                            plus(&s, size_ms)
                        )
                    })
                    .collect();
                format!("w AS ({})", copies.join(" UNION ALL "))
            }
            Window::Session { gap_ms } => {
                let partition = if self.keys.is_empty() {
                    String::new()
                } else {
                    let keys: Vec<&str> = self.keys.iter().map(|(e, _)| e.as_str()).collect();
                    format!("PARTITION BY {} ", keys.join(", "))
                };
                let mut sessions = partition.clone();
                sessions.push_str("session_id");
                let sessions = if partition.is_empty() {
                    "PARTITION BY session_id".to_string()
                } else {
                    format!("{partition}, session_id")
                };
                let (gap, bound) = if timestamp {
                    (format!("INTERVAL '{gap_ms} milliseconds'"), "")
                } else {
                    (gap_ms.to_string(), "to_timestamp_millis")
                };
                format!(
                    "f AS (SELECT * FROM t{filter}), \
                     marked AS (SELECT *, CASE WHEN ts - LAG(ts) OVER ({partition}ORDER BY ts, id) < {gap} THEN 0 ELSE 1 END AS fresh FROM f), \
                     numbered AS (SELECT *, SUM(fresh) OVER ({partition}ORDER BY ts, id ROWS UNBOUNDED PRECEDING) AS session_id FROM marked), \
                     w AS (SELECT *, {bound}(MIN(ts) OVER ({sessions})) AS window_start, {bound}(MAX(ts) OVER ({sessions}) + {gap}) AS window_end FROM numbered)"
                )
            }
        }
    }

    fn batch_block(&self) -> String {
        if let Some(join) = self.join_block(true) {
            return join;
        }
        if let Some(top_n) = self.top_n_block(true) {
            return top_n;
        }
        let select = self.select_list(|item| item.batch.clone());
        let keys: Vec<&str> = self.keys.iter().map(|(e, _)| e.as_str()).collect();
        let having = self
            .having
            .as_ref()
            .map(|h| format!(" HAVING {h}"))
            .unwrap_or_default();
        match self.form {
            Form::Stateless | Form::Over | Form::TopN { .. } | Form::Join { .. } => {
                format!("SELECT {select} FROM t{}", self.where_clause())
            }
            Form::Aggregate { window: None, .. } => {
                let group = if keys.is_empty() {
                    String::new()
                } else {
                    format!(" GROUP BY {}", keys.join(", "))
                };
                format!(
                    "SELECT {select} FROM t{}{group}{having}",
                    self.where_clause()
                )
            }
            Form::Aggregate {
                window: Some(window),
                ..
            } => {
                let mut group = keys.iter().map(|k| k.to_string()).collect::<Vec<_>>();
                group.push("window_start".into());
                group.push("window_end".into());
                format!(
                    "WITH {} SELECT {select} FROM w GROUP BY {}{having}",
                    self.windowed_rows(window),
                    group.join(", ")
                )
            }
        }
    }

    fn running_block(&self) -> Option<String> {
        let Form::Aggregate {
            window,
            emit: Emit::ChangesPerRecord,
            ..
        } = self.form
        else {
            return None;
        };
        // Sessions merge, and HAVING deletes: neither is a running aggregate.
        if matches!(window, Some(Window::Session { .. })) || self.having.is_some() {
            return None;
        }
        let mut select = Vec::new();
        for item in &self.items {
            select.push(if item.aggregate {
                item.running.clone()?
            } else {
                item.batch.clone()
            });
        }
        let mut partition: Vec<String> = self.keys.iter().map(|(e, _)| e.clone()).collect();
        let rows = match window {
            Some(window) => {
                partition.push("window_start".into());
                format!("WITH {} SELECT", self.windowed_rows(window))
            }
            None => "SELECT".to_string(),
        };
        let from = if window.is_some() {
            " FROM w".to_string()
        } else {
            format!(" FROM t{}", self.where_clause())
        };
        let partition = if partition.is_empty() {
            String::new()
        } else {
            format!("PARTITION BY {} ", partition.join(", "))
        };
        Some(format!(
            "{rows} {}{from} WINDOW running AS ({partition}ORDER BY id ROWS UNBOUNDED PRECEDING)",
            select.join(", ")
        ))
    }
}
