//! The fuzzer's grammar: random streaming queries over the fuzz table `t`, each rendered
//! twice (in `render.rs`), as Freshet SQL and as the plain batch SQL that must give the same
//! answer.
//!
//! Forms: a stateless filter and projection; an aggregation without a window (final at the
//! end of input, or a changelog); a windowed aggregation (tumbling, hopping or session, in
//! each accepted syntax, EMIT FINAL or EMIT CHANGES per record or per batch, window bounds in
//! expressions, HAVING, DISTINCT and FILTER); window functions (OVER) with ROWS frames and
//! RANGE frames reaching a fixed time back; a top-N or keep-last de-duplication (`rn <= N` over
//! a ROW_NUMBER, final or as a changelog); a
//! self-join of `t` (INNER, LEFT, RIGHT or FULL) on no key, `k`, `g` or both and a bound on
//! the two sides' event times in each accepted spelling, with or without another ON
//! condition and a WHERE.
//!
//! Batch equivalents: a window becomes a per-row `window_start` column of a CTE (`date_bin`
//! for tumbling windows, one shifted copy of the rows per window a row is in for hopping
//! windows, gap splitting with `LAG` for sessions), grouped like any column. A changelog's
//! per-record rows are the batch's running aggregates (`OVER (… ORDER BY id ROWS UNBOUNDED
//! PRECEDING)`: stored order is arrival order from one source partition). Window functions
//! order ties by `id`, the stored order, which is the arrival order Freshet promises for ties.
//! A top-N ranks ties by arrival, the batch query by `id` (descending for keep-last
//! de-duplication, where the later arrival wins). A join is the same SQL on both sides.

use super::data::{FuzzData, Storage, TimeType};
use crate::testing::TestRng;

/// A window of an aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Tumble { size_ms: i64 },
    Hop { slide_ms: i64, size_ms: i64 },
    Session { gap_ms: i64 },
}

/// How the window is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSyntax {
    /// `GROUP BY … WINDOW TUMBLING (ts, INTERVAL …)`.
    Clause,
    /// `GROUP BY tumble(ts, INTERVAL …), …`.
    Function,
    /// `FROM TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL …)` (tumbling and hopping).
    TableFunction,
}

/// The emit mode of an aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emit {
    Final,
    ChangesPerRecord,
    ChangesPerBatch,
}

/// A query's shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Form {
    Stateless,
    Aggregate {
        window: Option<Window>,
        syntax: WindowSyntax,
        emit: Emit,
    },
    Over,
    /// `ROW_NUMBER() OVER (PARTITION BY <the key> ORDER BY <order>) AS rn` over `t`'s rows (after
    /// the WHERE), its first `n` rows per key kept (`rn <= n`, with the HAVING condition ANDed
    /// over them): a top-N, or with `n = 1` and `ts DESC` a keep-last de-duplication.
    TopN {
        n: usize,
        /// The ORDER BY of Freshet's query.
        order: &'static str,
        /// The batch query's: ties ranked by arrival, which is `id` order.
        batch_order: &'static str,
        /// `SET freshet.emit = 'changes'`: the changelog keyed by the key and `rn`.
        changes: bool,
        /// How the rank's limit is written: `rn <= n`, `rn < n + 1`, `n >= rn` or `rn = 1`.
        spelling: u8,
    },
    /// A join of `t` (as `a`) with itself or with `u` (as `b`) on keys and an event-time
    /// bound.
    Join {
        kind: JoinKind,
        /// `b.ts - a.ts` lies in `[lower_ms, upper_ms]`.
        lower_ms: i64,
        upper_ms: i64,
        spelling: BoundSpelling,
        /// Whether the right side is the table `u` rather than `t` again.
        other_table: bool,
        /// Whether `u` is a bounded table the stream looks up (joined on the keys alone),
        /// rather than a stream.
        lookup: bool,
        /// Which sides are windowed aggregations rather than rows.
        windowed: Windowed,
        /// What reads the join's output.
        above: Above,
    },
}

/// What reads a join's output: its rows, or a window or an OVER window over one of the
/// output's time columns (an event time of the output, or, drawn sometimes, one that can be
/// null, which must be refused).
#[derive(Debug, Clone, PartialEq)]
pub enum Above {
    Rows,
    /// `COUNT(*)` and the latest time per tumbling window of `size_ms` over `time` (and per
    /// `key`).
    Window {
        time: JoinColumn,
        size_ms: i64,
        key: Option<JoinColumn>,
    },
    /// A running `COUNT(*)` over `time` (per `key`).
    Over {
        time: JoinColumn,
        key: Option<JoinColumn>,
    },
}

/// A column of a join's output: the select item that makes it and its alias.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinColumn {
    pub item: &'static str,
    pub alias: &'static str,
}

impl JoinColumn {
    const fn new(item: &'static str, alias: &'static str) -> Self {
        Self { item, alias }
    }
}

/// The sides of a join that are tumbling-window aggregations (`k`, `g`, `window_start`,
/// `window_end`, `COUNT(*) AS n`, `SUM(i) AS s`, `MAX(i) AS top` per key and window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Windowed {
    /// Rows joined with rows within the time bound.
    No,
    /// A window join: both sides windowed, joined on their keys and `window_start`.
    Both { size_ms: i64 },
    /// Each row of `a` joined with `b`'s window ending within `size_ms` after it (the
    /// Nexmark q7 form: `a.ts BETWEEN b.window_end - size AND b.window_end`).
    Right { size_ms: i64 },
}

/// The type of a join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    /// `WHERE EXISTS (SELECT 1 FROM … b WHERE <the ON conditions>)`: a semi join.
    Exists,
    /// `WHERE NOT EXISTS (…)`: an anti join.
    NotExists,
}

impl JoinKind {
    pub(super) fn sql(self) -> &'static str {
        match self {
            Self::Inner => "JOIN",
            Self::Left => "LEFT JOIN",
            Self::Right => "RIGHT JOIN",
            Self::Full => "FULL JOIN",
            Self::Exists => "EXISTS",
            Self::NotExists => "NOT EXISTS",
        }
    }

    /// Whether the output has the left side's columns only.
    pub(super) fn is_subquery(self) -> bool {
        matches!(self, Self::Exists | Self::NotExists)
    }
}

/// How a join's time bound is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundSpelling {
    /// `b.ts BETWEEN a.ts + lower AND a.ts + upper`.
    Between,
    /// `b.ts >= a.ts + lower AND b.ts <= a.ts + upper`.
    Inclusive,
    /// `a.ts <= b.ts - lower AND a.ts >= b.ts - upper`, the other side first.
    Reversed,
    /// `b.ts > a.ts + (lower - 1) AND b.ts < a.ts + (upper + 1)` (millisecond times).
    Strict,
}

/// One item of the select list, as Freshet SQL and as batch SQL.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub streaming: String,
    pub batch: String,
    /// For a running (per-record) batch equivalent: the batch text with every aggregate
    /// followed by `OVER running`; `None` when the item has no running equivalent.
    pub running: Option<String>,
    /// The item is a key of a changelog (a GROUP BY key or the window start).
    pub changelog_key: bool,
    /// The item is an aggregate (or an expression over aggregates).
    pub aggregate: bool,
}

/// A random query over the fuzz table.
#[derive(Debug, Clone, PartialEq)]
pub struct FuzzQuery {
    pub form: Form,
    /// GROUP BY or PARTITION BY keys: `(expression, alias)`.
    pub keys: Vec<(String, String)>,
    pub items: Vec<Item>,
    pub filter: Option<String>,
    /// The HAVING clause; for a join, an extra condition of its ON clause.
    pub having: Option<String>,
    /// `SET` statements for Freshet's session.
    pub settings: Vec<(String, String)>,
    pub time_type: TimeType,
    /// The query as a subquery or CTE of an outer `SELECT *`.
    pub wrap: Wrap,
    /// A `LIMIT` on the streaming query (whichever rows come first: the oracle's result,
    /// without it, must hold them).
    pub limit: Option<usize>,
}

/// How the query is nested in an outer one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrap {
    None,
    /// `SELECT * FROM (…) AS q`.
    Subquery,
    /// `WITH q AS (…) SELECT * FROM q`.
    Cte,
    /// `SELECT COUNT(*) AS n FROM (…) AS q`: over a changelog, a documented refusal.
    Counted,
    /// The query joined to itself on its column `.0` (a GROUP BY key's alias): over a
    /// changelog, a documented refusal.
    SelfJoined(&'static str),
}

impl Wrap {
    pub(super) fn apply(self, sql: String) -> String {
        match self {
            Self::None => sql,
            Self::Subquery => format!("SELECT * FROM ({sql}) AS q"),
            Self::Cte => format!("WITH q AS ({sql}) SELECT * FROM q"),
            Self::Counted => format!("SELECT COUNT(*) AS n FROM ({sql}) AS q"),
            Self::SelfJoined(key) => format!(
                "WITH q AS ({sql}) SELECT a.{key} AS ak, b.{key} AS bk FROM q a JOIN q b ON a.{key} = b.{key}"
            ),
        }
    }
}

pub(super) const KEY_CHOICES: &[(&str, &str)] = &[("k", "k"), ("g", "g"), ("g % 2", "g2")];

/// Mixed into the RANGE-frame draws' generator.
const RANGE_SALT: u64 = 0x5241_4e47_4500_0001;

/// A random predicate over the table's columns.
fn predicate(rng: &mut TestRng, data: &FuzzData) -> String {
    let mut atoms = vec![
        "i > -10",
        "i % 3 <> 0",
        "v > 0",
        "k = 'a'",
        "k IS NOT NULL",
        "g IN (0, 1)",
        "v IS NULL OR i < 20",
        "coalesce(k, 'z') <> 'b'",
        "arrow_cast(k, 'Utf8View') = 'b' OR arrow_cast(k, 'Utf8View') IN ('c', 'past twelve bytes')",
        "i = 3 OR i = -4 OR i IN (7, 11)",
    ];
    if data.nan {
        atoms.push("NOT isnan(v)");
    }
    let first = rng.pick(&atoms).to_string();
    match rng.below(4) {
        0 => format!("({first}) AND ({})", rng.pick(&atoms)),
        1 => format!("({first}) OR ({})", rng.pick(&atoms)),
        _ => first,
    }
}

impl FuzzQuery {
    /// A random query for `data`.
    pub fn random(rng: &mut TestRng, data: &FuzzData) -> Self {
        let mut query = match rng.below(12) {
            0 | 1 => Self::stateless(rng, data),
            2..=7 => Self::aggregate(rng, data),
            8 | 9 => Self::over(rng, data),
            _ => Self::join(rng, data),
        };
        query.wrap = match rng.below(10) {
            0 => Wrap::Subquery,
            1 => Wrap::Cte,
            _ => Wrap::None,
        };
        query
    }

    fn base(form: Form, data: &FuzzData) -> Self {
        Self {
            form,
            keys: Vec::new(),
            items: Vec::new(),
            filter: None,
            having: None,
            settings: Vec::new(),
            time_type: data.time_type,
            wrap: Wrap::None,
            limit: None,
        }
    }

    fn stateless(rng: &mut TestRng, data: &FuzzData) -> Self {
        let mut query = Self::base(Form::Stateless, data);
        let mut choices = vec![
            "id",
            "k",
            "i * 2 + 1 AS i2",
            "coalesce(k, 'none') AS kn",
            "CASE WHEN v > 0 THEN 'pos' ELSE 'other' END AS sign",
            "abs(i) AS ai",
            "i % -7 AS im",
            "i / 4 AS iq",
            "v",
            "ts",
            "g",
            "v IS NULL AS nv",
        ];
        if data.time_type == TimeType::Timestamp {
            choices.push("date_trunc('second', ts) AS sec");
        }
        let count = 1 + rng.below(4) as usize;
        for _ in 0..count {
            let text = rng.pick(&choices).to_string();
            if !query.items.iter().any(|item| item.streaming == text) {
                query.items.push(plain_item(&text));
            }
        }
        if rng.chance(0.8) {
            query.filter = Some(predicate(rng, data));
        }
        if rng.chance(0.2) {
            let strategy = *rng.pick(&["round_robin", "sticky", "fan_in", "hash"]);
            query
                .settings
                .push(("freshet.partitioning_strategy".into(), strategy.into()));
        }
        query
    }

    fn aggregate(rng: &mut TestRng, data: &FuzzData) -> Self {
        let window = match rng.below(6) {
            0 => None,
            1 | 2 => Some(Window::Tumble {
                size_ms: *rng.pick(&[1_000, 2_000, 5_000, 60_000, 700]),
            }),
            3 | 4 => {
                let slide_ms = *rng.pick(&[500, 1_000, 2_000]);
                Some(Window::Hop {
                    slide_ms,
                    size_ms: slide_ms * (1 + rng.below(3) as i64),
                })
            }
            _ => Some(Window::Session {
                gap_ms: *rng.pick(&[300, 1_000, 3_000]),
            }),
        };
        let emit = match rng.below(5) {
            0 => Emit::ChangesPerRecord,
            1 => Emit::ChangesPerBatch,
            _ => Emit::Final,
        };
        let syntax = match (window, rng.below(3)) {
            (Some(Window::Session { .. }), 2) => WindowSyntax::Clause,
            (_, 0) => WindowSyntax::Clause,
            (_, 1) => WindowSyntax::Function,
            _ => WindowSyntax::TableFunction,
        };
        let mut query = Self::base(
            Form::Aggregate {
                window,
                syntax,
                emit,
            },
            data,
        );
        let changes = emit != Emit::Final;
        let session_changes = changes && matches!(window, Some(Window::Session { .. }));
        // Keys: none to two.
        let key_count = rng.below(3) as usize;
        for _ in 0..key_count {
            let (expression, alias) = *rng.pick(KEY_CHOICES);
            if !query.keys.iter().any(|(_, a)| a == alias) {
                query.keys.push((expression.to_string(), alias.to_string()));
            }
        }
        for (expression, alias) in query.keys.clone() {
            let text = if expression == alias {
                expression
            } else {
                format!("{expression} AS {alias}")
            };
            let mut item = plain_item(&text);
            item.changelog_key = true;
            query.items.push(item);
        }
        if window.is_some() {
            let bounds = [
                "window_start",
                "window_end",
                "CAST(window_start AS BIGINT) AS ws_ms",
                "date_trunc('minute', window_start) AS ws_minute",
                "window_end - window_start AS length",
            ];
            // A changelog is keyed by the window start as well.
            if changes || rng.chance(0.7) {
                let mut item = plain_item("window_start");
                item.changelog_key = true;
                query.items.push(item);
            }
            if rng.chance(0.5) {
                let text = rng.pick(&bounds[1..]).to_string();
                query.items.push(plain_item(&text));
            }
        }
        // Aggregates: one to four.
        let ints = ["i", "g"];
        let mut aggregates: Vec<String> = vec![
            "COUNT(*)".into(),
            "COUNT(v)".into(),
            "SUM(i)".into(),
            "SUM(v)".into(),
            "AVG(i)".into(),
            "AVG(v)".into(),
            "MIN(i)".into(),
            "MAX(i)".into(),
            format!("MAX({})", rng.pick(&ints)),
            "MIN(ts)".into(),
            "MAX(ts)".into(),
        ];
        if !data.nan {
            aggregates.push("MIN(v)".into());
            aggregates.push("MAX(v)".into());
        }
        if !session_changes {
            aggregates.extend([
                "COUNT(DISTINCT k)".to_string(),
                "COUNT(DISTINCT i % 5)".to_string(),
                // Distinct counts of one column under several FILTERs share one table.
                "COUNT(DISTINCT i % 5) FILTER (WHERE k = 'a')".to_string(),
                "COUNT(DISTINCT i) FILTER (WHERE v > 0)".to_string(),
                "COUNT(DISTINCT i) FILTER (WHERE v <= 0)".to_string(),
                "SUM(i) FILTER (WHERE v > 0)".to_string(),
                "COUNT(*) FILTER (WHERE k = 'a')".to_string(),
                "stddev(i)".to_string(),
                "SUM(i) * 2 + COUNT(*)".to_string(),
            ]);
        }
        let count = 1 + rng.below(4) as usize;
        let mut chosen: Vec<String> = Vec::new();
        if session_changes {
            // A deletion is a row whose aggregates are all NULL: COUNT(*) tells them apart.
            chosen.push("COUNT(*)".into());
        }
        for _ in 0..count {
            let text = rng.pick(&aggregates).clone();
            if !chosen.contains(&text) {
                chosen.push(text);
            }
        }
        for (index, text) in chosen.iter().enumerate() {
            let alias = format!("a{index}");
            query.items.push(Item {
                streaming: format!("{text} AS {alias}"),
                batch: format!("{text} AS {alias}"),
                running: running_text(text).map(|t| format!("{t} AS {alias}")),
                changelog_key: false,
                aggregate: true,
            });
        }
        if rng.chance(0.6) {
            query.filter = Some(predicate(rng, data));
        }
        if !changes && rng.chance(0.3) {
            query.having = Some(
                rng.pick(&["COUNT(*) > 1", "SUM(i) > 0", "MAX(i) < 40 OR COUNT(*) = 1"])
                    .to_string(),
            );
            if window.is_some() && rng.chance(0.5) {
                query.having = Some(
                    "(window_end > TIMESTAMP '2023-11-14 22:14:03') AND COUNT(*) > 0".to_string(),
                );
            }
        }
        if emit == Emit::ChangesPerBatch {
            query
                .settings
                .push(("freshet.changes_per".into(), "batch".into()));
        }
        if rng.chance(0.25) {
            // Any strategy: a wrong one for the query is a documented refusal.
            let strategy = *rng.pick(&["two_phase", "hash", "sticky", "fan_in", "round_robin"]);
            query
                .settings
                .push(("freshet.partitioning_strategy".into(), strategy.into()));
        }
        if window.is_some() && rng.chance(0.2) {
            query
                .settings
                .push(("freshet.allowed_lateness_ms".into(), "1000".into()));
        }
        if window.is_some() && rng.chance(0.5) {
            // Runs of a few records, so that a file's windows spread over the streams.
            let records = *rng.pick(&["8", "16", "64"]);
            query
                .settings
                .push(("freshet.time_run_records".into(), records.into()));
        }
        query
    }

    fn join(rng: &mut TestRng, data: &FuzzData) -> Self {
        let kind = *rng.pick(&[
            JoinKind::Inner,
            JoinKind::Left,
            JoinKind::Right,
            JoinKind::Full,
            JoinKind::Exists,
            JoinKind::NotExists,
        ]);
        let (lower_ms, upper_ms) = match rng.below(6) {
            0 => (0, 0),
            _ => (
                *rng.pick(&[-3_000, -1_000, -500, -1, 0]),
                *rng.pick(&[0, 1, 500, 1_000, 2_000]),
            ),
        };
        let spelling = *rng.pick(&[
            BoundSpelling::Between,
            BoundSpelling::Inclusive,
            BoundSpelling::Reversed,
            BoundSpelling::Strict,
        ]);
        let size_ms = *rng.pick(&[1_000, 2_000, 5_000]);
        let windowed = match rng.below(10) {
            0 | 1 => Windowed::Both { size_ms },
            // `a.ts` against `b.window_end`: both timestamps.
            2 | 3 if data.time_type == TimeType::Timestamp => Windowed::Right { size_ms },
            _ => Windowed::No,
        };
        let kind = match (windowed, kind.is_subquery()) {
            (Windowed::No, _) | (_, false) => kind,
            (_, true) => JoinKind::Inner,
        };
        let above = Self::above_join(rng, kind, windowed);
        let mut query = Self::base(
            Form::Join {
                kind,
                lower_ms,
                upper_ms,
                spelling,
                other_table: false,
                lookup: false,
                windowed,
                above,
            },
            data,
        );
        // Equality keys: none (one stream), k, g or both.
        match rng.below(5) {
            0 => {}
            1 => query.keys.push(("g".into(), "g".into())),
            2 => {
                query.keys.push(("k".into(), "k".into()));
                query.keys.push(("g".into(), "g".into()));
            }
            _ => query.keys.push(("k".into(), "k".into())),
        }
        if windowed != Windowed::No {
            let items: &[&str] = match windowed {
                Windowed::Both { .. } => &[
                    "a.window_start AS aws",
                    "b.window_start AS bws",
                    "a.n AS an",
                    "b.n AS bn",
                    "b.s AS bs",
                    "a.k AS ak",
                    "b.g AS bg",
                ],
                _ => &[
                    "a.id AS aid",
                    "a.ts AS ats",
                    "b.window_end AS bwe",
                    "b.top AS btop",
                    "b.k AS bk",
                ],
            };
            // Key columns only where the aggregation keeps them.
            let has_key = |key: &str| query.keys.iter().any(|(k, _)| k == key);
            let items: Vec<&str> = items
                .iter()
                .copied()
                .filter(|text| {
                    (has_key("k") || !text.contains(".k "))
                        && (has_key("g") || !text.contains(".g "))
                })
                .collect();
            let count = 3 + rng.below(items.len() as u64 - 2) as usize;
            query.items = items[..count].iter().map(|text| plain_item(text)).collect();
            if rng.chance(0.3) {
                query.having = Some(match windowed {
                    Windowed::Both { .. } => "a.n <> b.n".to_string(),
                    _ => "a.i = b.top".to_string(),
                });
            }
            return query;
        }
        // The row ids make every output row tell which pair (or unmatched row) it is.
        query.items.push(plain_item("a.id AS aid"));
        if !kind.is_subquery() {
            query.items.push(plain_item("b.id AS bid"));
        }
        let choices = [
            "a.k AS ak",
            "b.k AS bk",
            "a.v AS av",
            "b.i AS bi",
            "a.ts AS ats",
            "b.ts AS bts",
            "b.g AS bg",
            "a.i + b.i AS isum",
        ];
        for _ in 0..rng.below(3) {
            let text = rng.pick(&choices).to_string();
            // An EXISTS subquery's columns are not in the output.
            let subquery_column = kind.is_subquery() && text.contains("b.");
            if !subquery_column && !query.items.iter().any(|item| item.streaming == text) {
                query.items.push(plain_item(&text));
            }
        }
        if rng.chance(0.3) {
            query.filter = Some(
                rng.pick(&[
                    "a.i % 3 <> 0",
                    "b.v > 0 OR b.v IS NULL",
                    "a.i <= b.i",
                    "coalesce(a.k, b.k) <> 'b'",
                ])
                .to_string(),
            );
        }
        if rng.chance(0.2) {
            query.having = Some("a.i <> b.i".to_string());
        }
        if rng.chance(0.15) {
            query
                .settings
                .push(("freshet.allowed_lateness_ms".into(), "1000".into()));
        }
        query
    }

    /// What reads a join's output: mostly its rows; else a window or OVER window over a
    /// time column every output row carries, or (one time in eight) any time column.
    fn above_join(rng: &mut TestRng, kind: JoinKind, windowed: Windowed) -> Above {
        let (left, right) = match windowed {
            Windowed::No => (
                JoinColumn::new("a.ts AS ats", "ats"),
                JoinColumn::new("b.ts AS bts", "bts"),
            ),
            Windowed::Both { .. } => (
                JoinColumn::new("a.window_start AS aws", "aws"),
                JoinColumn::new("b.window_start AS bws", "bws"),
            ),
            Windowed::Right { .. } => (
                JoinColumn::new("a.ts AS ats", "ats"),
                JoinColumn::new("b.window_end AS bwe", "bwe"),
            ),
        };
        let mut times = match kind {
            JoinKind::Inner => vec![left.clone(), right.clone()],
            JoinKind::Left | JoinKind::Exists | JoinKind::NotExists => vec![left.clone()],
            JoinKind::Right => vec![right.clone()],
            JoinKind::Full => Vec::new(),
        };
        if times.is_empty() || rng.chance(0.125) {
            times = match kind.is_subquery() {
                true => vec![left],
                false => vec![left, right],
            };
        }
        let time = rng.pick(&times).clone();
        let key = match (windowed, rng.below(3)) {
            (_, 0) => None,
            (Windowed::Both { .. }, _) => Some(JoinColumn::new("a.n AS an", "an")),
            _ => Some(JoinColumn::new("a.g AS ag", "ag")),
        };
        match rng.below(4) {
            0 => Above::Window {
                time,
                size_ms: *rng.pick(&[2_000, 5_000, 10_000]),
                key,
            },
            1 => Above::Over { time, key },
            _ => Above::Rows,
        }
    }

    /// A top-N or keep-last de-duplication of `t`'s rows per key (or of all rows), ranked by
    /// a random ORDER BY: on the event time (ties ranked by arrival, which the batch query
    /// reads as `id` order) or on other columns with `id` last (a total order, whatever the
    /// arrival order of ties).
    pub fn top_n(rng: &mut TestRng, data: &FuzzData) -> Self {
        let n = *rng.pick(&[1, 1, 2, 3, 10]);
        let changes = rng.chance(0.4);
        let spelling = rng.below(4) as u8;
        // Where arrival is stored order (one source partition, not split by key), ties of
        // other columns are ranked by arrival too.
        let arrival_is_stored =
            data.ties && !matches!(data.storage, Storage::KeyedPartitions(n) if n > 1);
        let keep_last = n == 1 && rng.chance(0.4);
        let (order, batch_order) = match rng.below(9) {
            // Keep-last de-duplication: the later arrival of equal times wins.
            _ if keep_last => ("ts DESC", "ts DESC, id DESC"),
            0 | 1 if n == 1 => ("ts DESC", "ts DESC, id DESC"),
            0 | 1 => ("ts DESC", "ts DESC, id"),
            2 => ("ts", "ts, id"),
            3 => ("i DESC, id", "i DESC, id"),
            4 => ("v, id", "v, id"),
            5 => ("k DESC, ts", "k DESC, ts, id"),
            6 if arrival_is_stored => ("i DESC", "i DESC, id"),
            7 if arrival_is_stored => ("g, v", "g, v, id"),
            _ => ("i, v DESC, id", "i, v DESC, id"),
        };
        let form = Form::TopN {
            n,
            order,
            batch_order,
            changes,
            spelling,
        };
        let mut query = Self::base(form, data);
        if changes {
            query
                .settings
                .push(("freshet.emit".into(), "changes".into()));
        }
        if rng.chance(0.75) {
            let (expression, alias) = *rng.pick(KEY_CHOICES);
            query.keys.push((expression.to_string(), alias.to_string()));
            let text = match expression == alias {
                true => expression.to_string(),
                false => format!("{expression} AS {alias}"),
            };
            query.items.push(Item {
                changelog_key: true,
                ..plain_item(&text)
            });
        }
        query.items.push(Item {
            changelog_key: true,
            ..plain_item("rn")
        });
        query.items.push(plain_item("id"));
        for column in ["i", "v", "ts", "k"] {
            let selected = query.items.iter().any(|item| item.streaming == column);
            if !selected && rng.chance(0.4) {
                query.items.push(plain_item(column));
            }
        }
        if rng.chance(0.4) {
            query.filter = Some(predicate(rng, data));
        }
        // A condition over the kept rows, ANDed to the rank's.
        if rng.chance(0.25) {
            query.having = Some(predicate(rng, data));
        }
        query.wrap = match rng.below(10) {
            0 => Wrap::Subquery,
            1 => Wrap::Cte,
            _ => Wrap::None,
        };
        query
    }

    fn over(rng: &mut TestRng, data: &FuzzData) -> Self {
        let mut query = Self::base(Form::Over, data);
        if rng.chance(0.7) {
            let (expression, alias) = *rng.pick(KEY_CHOICES);
            query.keys.push((expression.to_string(), alias.to_string()));
        }
        let first_partition = if query.keys.is_empty() {
            String::new()
        } else {
            format!("PARTITION BY {} ", query.keys[0].0)
        };
        query.items.push(plain_item("id"));
        if rng.chance(0.5) {
            query.items.push(plain_item("k"));
        }
        let count = 1 + rng.below(3) as usize;
        for index in 0..count {
            let n = 1 + rng.below(3);
            // Most functions share the first PARTITION BY; some have their own.
            let partition = if rng.chance(0.7) {
                first_partition.clone()
            } else if rng.chance(0.3) {
                String::new()
            } else {
                format!("PARTITION BY {} ", rng.pick(KEY_CHOICES).0)
            };
            // Functions Freshet leaves to DataFusion's operators on bounded streams; their
            // order among equal times is DataFusion's, so only over distinct times.
            let fallback = !data.ties && rng.chance(0.15);
            // (function, frame for both sides, batch orders ties by id)
            let choice = if fallback {
                12 + rng.below(3)
            } else {
                rng.below(12)
            };
            let (function, frame, by_id): (String, String, bool) = match choice {
                12 => ("NTILE(2)".into(), String::new(), false),
                13 => ("CUME_DIST()".into(), String::new(), false),
                14 => (
                    "LAST_VALUE(i)".into(),
                    " ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING".into(),
                    false,
                ),
                0 => ("ROW_NUMBER()".into(), String::new(), true),
                1 => ("RANK()".into(), String::new(), false),
                2 => ("DENSE_RANK()".into(), String::new(), false),
                3 => (format!("LAG(i, {n})"), String::new(), true),
                4 => ("LAG(i, 1, -1)".into(), String::new(), true),
                5 => (format!("LEAD(i, {n})"), String::new(), true),
                6 => (
                    "FIRST_VALUE(i)".into(),
                    " ROWS UNBOUNDED PRECEDING".into(),
                    true,
                ),
                7 => (
                    "LAST_VALUE(i)".into(),
                    format!(" ROWS BETWEEN {n} PRECEDING AND CURRENT ROW"),
                    true,
                ),
                8 => (
                    rng.pick(&["SUM(i)", "COUNT(*)", "MIN(i)", "MAX(i)", "COUNT(v)"])
                        .to_string(),
                    String::new(),
                    false,
                ),
                // DataFusion's sliding float sums subtract what leaves the frame, so a NaN
                // stays in them for good: SUM(v) over a sliding frame only without NaN.
                9 => (
                    rng.pick(if data.nan {
                        &["SUM(i)", "AVG(i)", "MIN(i)", "MAX(i)", "COUNT(v)"][..]
                    } else {
                        &["SUM(i)", "AVG(i)", "MIN(i)", "MAX(i)", "COUNT(v)", "SUM(v)"][..]
                    })
                    .to_string(),
                    format!(" ROWS BETWEEN {n} PRECEDING AND CURRENT ROW"),
                    true,
                ),
                10 => (
                    rng.pick(&["SUM(i)", "AVG(i)", "MAX(i)", "COUNT(*)"])
                        .to_string(),
                    format!(" ROWS BETWEEN {n} PRECEDING AND 1 FOLLOWING"),
                    true,
                ),
                _ => (
                    rng.pick(&["SUM(i)", "MIN(i)", "COUNT(*)"]).to_string(),
                    " ROWS UNBOUNDED PRECEDING".into(),
                    true,
                ),
            };
            // RANGE frames reaching a fixed time back, drawn apart so that an old seed's case
            // is otherwise the one it was.
            let mut range_rng = TestRng::from_state(rng.clone().next_u64() ^ RANGE_SALT);
            // (DataFusion 55's physical planner panics on a RANGE frame with an offset beside
            // another window over the same PARTITION BY expression, `g % 2`: plain columns only.)
            let range = matches!(choice, 8 | 9) && !partition.contains('%');
            let (function, frame, by_id) = if range && range_rng.chance(0.3) {
                let ms = *range_rng.pick(&[0, 5, 150, 1_000, 60_000]);
                let offset = match data.time_type {
                    TimeType::Timestamp => format!("INTERVAL '{ms} milliseconds'"),
                    TimeType::EpochMillis => ms.to_string(),
                };
                let functions: &[&str] = if data.nan {
                    &[
                        "SUM(i)", "AVG(i)", "MIN(i)", "MAX(i)", "COUNT(*)", "COUNT(v)",
                    ]
                } else {
                    &["SUM(i)", "AVG(i)", "MIN(i)", "MAX(i)", "COUNT(*)", "SUM(v)"]
                };
                (
                    range_rng.pick(functions).to_string(),
                    format!(" RANGE BETWEEN {offset} PRECEDING AND CURRENT ROW"),
                    false,
                )
            } else {
                (function, frame, by_id)
            };
            let alias = format!("w{index}");
            let streaming_frame = match frame.strip_prefix(" ROWS BETWEEN ") {
                Some(rest) if rest.ends_with("PRECEDING AND CURRENT ROW") && rng.chance(0.3) => {
                    let rows: i64 = rest
                        .split(' ')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(1);
                    format!(" ROWS WINDOW BUFFER {} ROWS", rows + 1)
                }
                _ => frame.clone(),
            };
            let streaming = if streaming_frame.starts_with(" ROWS WINDOW BUFFER") {
                format!(
                    "{function} OVER ({} {partition}ORDER BY ts) AS {alias}",
                    streaming_frame.trim()
                )
            } else {
                format!("{function} OVER ({partition}ORDER BY ts{streaming_frame}) AS {alias}")
            };
            let order = if by_id { "ts, id" } else { "ts" };
            query.items.push(Item {
                streaming,
                batch: format!("{function} OVER ({partition}ORDER BY {order}{frame}) AS {alias}"),
                running: None,
                changelog_key: false,
                aggregate: false,
            });
        }
        if rng.chance(0.4) {
            query.filter = Some(predicate(rng, data));
        }
        if rng.chance(0.15) {
            let strategy = *rng.pick(&["hash", "sticky", "fan_in"]);
            query
                .settings
                .push(("freshet.partitioning_strategy".into(), strategy.into()));
        }
        query
    }

    /// Whether a window-function query orders rows with equal event times in stored order:
    /// every function streamed by one window operator (one PARTITION BY, no LEAD or FOLLOWING
    /// frame next to a RANGE frame). A second window over another partitioning reads the
    /// first one's streams as they come, and DataFusion's operators (where Freshet falls
    /// back) sort ties their own way.
    pub fn orders_ties_as_stored(&self) -> bool {
        let windows: Vec<&str> = self
            .items
            .iter()
            .filter_map(|item| item.streaming.split_once(" OVER ("))
            .map(|(_, window)| window)
            .collect();
        let partition = |window: &str| {
            window
                .split_once("PARTITION BY ")
                .map(|(_, rest)| rest.split(" ORDER BY").next().unwrap_or("").to_string())
        };
        let one_partitioning = windows
            .iter()
            .all(|w| partition(w) == windows.first().and_then(|f| partition(f)));
        let reads_ahead = self
            .items
            .iter()
            .any(|i| i.streaming.starts_with("LEAD(") || i.streaming.contains("FOLLOWING"));
        let range_frame = self.items.iter().any(|i| {
            i.streaming.contains(" OVER (")
                && !i.streaming.contains("ROWS")
                && !["ROW_NUMBER(", "LAG(", "LEAD("]
                    .iter()
                    .any(|f| i.streaming.starts_with(f))
        });
        one_partitioning && !(reads_ahead && range_frame)
    }

    /// Whether the query is an aggregation with a changelog output.
    /// The output columns that key the query's changelog: the items marked so, or none
    /// when the changelog is counted by an aggregation without keys.
    pub fn changelog_key_columns(&self) -> Vec<usize> {
        if self.wrap == Wrap::Counted {
            return Vec::new();
        }
        (0..self.items.len())
            .filter(|&i| self.items[i].changelog_key)
            .collect()
    }

    pub fn is_changelog(&self) -> bool {
        self.emit() != Emit::Final
    }

    /// Smaller variants of the query, for shrinking: one item, the filter or the HAVING
    /// clause removed.
    pub fn simpler(&self) -> Vec<FuzzQuery> {
        let mut variants = Vec::new();
        if self.filter.is_some() {
            variants.push(Self {
                filter: None,
                ..self.clone()
            });
        }
        if self.having.is_some() {
            variants.push(Self {
                having: None,
                ..self.clone()
            });
        }
        for (index, item) in self.items.iter().enumerate() {
            let same_kind = self
                .items
                .iter()
                .filter(|other| other.aggregate == item.aggregate)
                .count();
            // Keep a changelog's keys and at least one aggregate.
            if item.changelog_key || (item.aggregate && same_kind == 1) || self.items.len() == 1 {
                continue;
            }
            let mut items = self.items.clone();
            items.remove(index);
            variants.push(Self {
                items,
                ..self.clone()
            });
        }
        if self.wrap != Wrap::None {
            variants.push(Self {
                wrap: Wrap::None,
                ..self.clone()
            });
        }
        if self.limit.is_some() {
            variants.push(Self {
                limit: None,
                ..self.clone()
            });
        }
        for index in 0..self.settings.len() {
            let mut settings = self.settings.clone();
            settings.remove(index);
            variants.push(Self {
                settings,
                ..self.clone()
            });
        }
        variants
    }
}

/// An item that is the same text on both sides.
fn plain_item(text: &str) -> Item {
    Item {
        streaming: text.to_string(),
        batch: text.to_string(),
        running: Some(text.to_string()),
        changelog_key: false,
        aggregate: false,
    }
}

/// An aggregate's running form (`SUM(i)` → `SUM(i) OVER running`), for the aggregates
/// Freshet's changelog gives per record; `None` for the others (DISTINCT, FILTER, stddev,
/// expressions).
fn running_text(aggregate: &str) -> Option<String> {
    const PER_RECORD: &[&str] = &["COUNT(", "SUM(", "AVG(", "MIN(", "MAX("];
    let simple = PER_RECORD.iter().any(|p| aggregate.starts_with(p))
        && !aggregate.contains("DISTINCT")
        && !aggregate.contains("FILTER")
        && aggregate.matches('(').count() == 1
        && aggregate.ends_with(')');
    simple.then(|| format!("{aggregate} OVER running"))
}
