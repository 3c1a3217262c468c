//! The token-level rewrite of Freshet's streaming clauses; see the module above for why.
//!
//! Accepted forms, all rewritten to a window key in GROUP BY:
//! - `GROUP BY k WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)` → `GROUP BY tumble(ts, …), k`,
//!   also `TUMBLING (1m)` / `TUMBLING (INTERVAL '30' SECOND)` on the stream's event time,
//!   `WINDOW SLIDING|HOPPING (ts, size, advance)` → `hop(ts, advance, size)`, and
//!   `WINDOW SESSION (ts, gap)` → `session(ts, gap)`;
//! - `FROM TUMBLE(TABLE t, DESCRIPTOR(ts), size)` and `HOP(TABLE t, DESCRIPTOR(ts), slide,
//!   size)` → `FROM t` with the window key;
//! - `GROUP BY tumble(ts, size), k` (and `hop`, `session`) as written.
//!
//! `window_start` / `window_end` (and `_WINDOW_START` / `_WINDOW_END`) then stand for the key
//! and `key + size`. A query-level `EMIT CHANGES` / `EMIT FINAL` is taken out as a flag.
//! Each query block is rewritten on its own: subqueries and CTE bodies first, then the block
//! that holds them, so a window may key the GROUP BY of any block.

use datafusion::common::{Result, internal_err, plan_err};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use super::over::rewrite_over_clauses;
use super::tokens::{
    depths, is_word, matching_paren, next_solid, position, previous_solid, query_depths,
    split_arguments, text, tokenize, trimmed_text,
};

/// When a streaming aggregation emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmitMode {
    /// Not said: windows emit when they close, plain GROUP BY at the end of bounded input.
    #[default]
    Default,
    /// `EMIT FINAL`.
    Final,
    /// `EMIT CHANGES`: an upsert changelog.
    Changes,
}

/// The kind of event-time window a query groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    Tumble,
    Hop,
    Session,
}

/// A rewritten query.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamingSql {
    /// SQL DataFusion can parse.
    pub sql: String,
    pub emit: EmitMode,
    /// The window the query groups by, if any.
    pub window: Option<WindowKind>,
    /// Query options from a trailing `WITH ('key' = 'value', …)`.
    pub options: Vec<(String, String)>,
    /// `EXPIRE AFTER … INACTIVITY` of the query's OVER windows.
    pub expire_after: Option<std::time::Duration>,
}

/// A window key call, e.g. `tumble(trade_time, INTERVAL '1' MINUTE)`.
#[derive(Debug, Clone)]
struct WindowCall {
    kind: WindowKind,
    call: String,
    /// What `window_end` stands for: the window start plus its length, or for a session its
    /// last event time plus the gap (`max(ts) + gap`, an aggregate of the session's rows).
    end: String,
}

impl WindowCall {
    fn new(kind: WindowKind, call: String, size_or_gap: &str, time_column: &str) -> Self {
        let end = match kind {
            WindowKind::Session => format!("session_end(max({time_column}), {size_or_gap})"),
            _ => format!("({call} + {size_or_gap})"),
        };
        Self { kind, call, end }
    }
}

/// Rewrites `sql`; `event_time_of(table)` gives a stream's declared event-time column for the
/// shorthand forms that do not name one.
pub fn rewrite(sql: &str, event_time_of: &dyn Fn(&str) -> Option<String>) -> Result<StreamingSql> {
    let (sql, options) = take_options(sql)?;
    let (sql, emit) = take_emit(&sql)?;
    let (sql, expire_after) = rewrite_over_clauses(&sql)?;
    let (sql, window) = rewrite_block(&sql, event_time_of)?;
    Ok(StreamingSql {
        sql,
        emit,
        window: window.map(|w| w.kind),
        options,
        expire_after,
    })
}

/// Rewrites the window syntax of one query block: first of each subquery and CTE in it
/// (each a block of its own), then of the block itself.
fn rewrite_block(
    sql: &str,
    event_time_of: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Option<WindowCall>)> {
    let sql = rewrite_subqueries(sql, event_time_of)?;
    let (sql, window) = rewrite_table_functions(&sql)?;
    let (sql, window) = match window {
        Some(window) => (sql, Some(window)),
        None => rewrite_window_clause(&sql, event_time_of)?,
    };
    let window = match window {
        Some(window) => Some(window),
        None => find_window_key(&sql)?,
    };
    let sql = match &window {
        Some(call) => replace_window_bounds(&sql, call)?,
        None => sql,
    };
    Ok((sql, window))
}

/// Rewrites each outermost subquery (`(SELECT …)`, `(WITH …)`, a CTE's body) of `sql` as a
/// query block of its own.
fn rewrite_subqueries(sql: &str, event_time_of: &dyn Fn(&str) -> Option<String>) -> Result<String> {
    let tokens = tokenize(sql)?;
    let query_depth = query_depths(&tokens);
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    while i < tokens.len() {
        let opens_subquery = tokens[i].token == Token::LParen
            && query_depth[i] == 0
            && next_solid(&tokens, i + 1).is_some_and(|n| {
                ["SELECT", "WITH", "VALUES"]
                    .iter()
                    .any(|word| is_word(&tokens[n].token, word))
            });
        if !opens_subquery {
            out.push_str(&tokens[i].token.to_string());
            i += 1;
            continue;
        }
        let close = matching_paren(&tokens, i)?;
        let (inner, _) = rewrite_block(&text(&tokens[i + 1..close]), event_time_of)?;
        out.push('(');
        out.push_str(&inner);
        out.push(')');
        i = close + 1;
    }
    Ok(out)
}

/// Takes a trailing `WITH ('key' = 'value', …)` (the predecessor's query options) out of the
/// query. A `WITH name AS (…)` common table expression is left alone.
fn take_options(sql: &str) -> Result<(String, Vec<(String, String)>)> {
    let tokens = tokenize(sql)?;
    let depth = depths(&tokens);
    let clause = (0..tokens.len()).rev().find(|&i| {
        depth[i] == 0
            && is_word(&tokens[i].token, "WITH")
            && next_solid(&tokens, i + 1).is_some_and(|o| tokens[o].token == Token::LParen)
            && previous_solid(&tokens, i).is_some()
    });
    let Some(with) = clause else {
        return Ok((sql.to_string(), Vec::new()));
    };
    let Some(open) = next_solid(&tokens, with + 1) else {
        return Ok((sql.to_string(), Vec::new()));
    };
    let close = matching_paren(&tokens, open)?;
    let mut options = Vec::new();
    for (start, end) in split_arguments(&tokens, open, close) {
        let parts: Vec<&Token> = tokens[start..end]
            .iter()
            .map(|t| &t.token)
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect();
        match parts.as_slice() {
            [
                Token::SingleQuotedString(key),
                Token::Eq,
                Token::SingleQuotedString(value),
            ] => options.push((key.clone(), value.clone())),
            _ => {
                return plan_err!(
                    "malformed query option at {}: expected WITH ('key' = 'value', …)",
                    position(&tokens[start.min(tokens.len() - 1)])
                );
            }
        }
    }
    Ok((
        format!("{}{}", text(&tokens[..with]), text(&tokens[close + 1..])),
        options,
    ))
}

/// Takes `EMIT CHANGES` / `EMIT FINAL` out of the query; it ends the query or the subquery
/// that aggregates.
fn take_emit(sql: &str) -> Result<(String, EmitMode)> {
    let tokens = tokenize(sql)?;
    // EMIT followed by CHANGES or FINAL is the clause; another EMIT is a name (`AS emit`),
    // unless it ends the query, where it can only be a clause missing its mode.
    let mode_after = |i: usize| match next_solid(&tokens, i + 1).map(|m| &tokens[m].token) {
        Some(token) if is_word(token, "CHANGES") => Some(EmitMode::Changes),
        Some(token) if is_word(token, "FINAL") => Some(EmitMode::Final),
        _ => None,
    };
    let emits: Vec<usize> = (0..tokens.len())
        .filter(|&i| is_word(&tokens[i].token, "EMIT"))
        .collect();
    let clause = emits.iter().copied().find(|&i| mode_after(i).is_some());
    let ends_query = |at: Option<usize>| {
        at.is_none_or(|n| matches!(tokens[n].token, Token::SemiColon | Token::RParen))
    };
    let Some(emit) = clause else {
        // `EMIT` or `EMIT <word>` closing the query is a clause with a wrong mode.
        if let Some(&last) = emits.iter().find(|&&i| {
            let next = next_solid(&tokens, i + 1);
            ends_query(next) || ends_query(next_solid(&tokens, next.unwrap_or(i) + 1))
        }) {
            return plan_err!(
                "malformed EMIT clause at {}: expected EMIT CHANGES or EMIT FINAL",
                position(&tokens[last])
            );
        }
        return Ok((sql.to_string(), EmitMode::Default));
    };
    let mode_at = next_solid(&tokens, emit + 1);
    let Some(mode) = mode_after(emit) else {
        return internal_err!("EMIT clause without its mode");
    };
    let end = mode_at.unwrap_or(emit) + 1;
    if let Some(rest) = next_solid(&tokens, end)
        && !matches!(tokens[rest].token, Token::SemiColon | Token::RParen)
    {
        return plan_err!(
            "EMIT {} must end the query, but {} follows at {}",
            if mode == EmitMode::Changes {
                "CHANGES"
            } else {
                "FINAL"
            },
            tokens[rest].token,
            position(&tokens[rest])
        );
    }
    if (end..tokens.len()).any(|i| is_word(&tokens[i].token, "EMIT") && mode_after(i).is_some()) {
        return plan_err!(
            "a query takes one EMIT clause; another follows the one at {}",
            position(&tokens[emit])
        );
    }
    Ok((
        format!("{}{}", text(&tokens[..emit]), text(&tokens[end..])),
        mode,
    ))
}

/// `FROM TUMBLE(TABLE t, DESCRIPTOR(ts), size)` / `FROM HOP(TABLE t, DESCRIPTOR(ts), slide, size)`.
fn rewrite_table_functions(sql: &str) -> Result<(String, Option<WindowCall>)> {
    let tokens = tokenize(sql)?;
    let depth = depths(&tokens);
    for from in (0..tokens.len()).filter(|&i| depth[i] == 0 && is_word(&tokens[i].token, "FROM")) {
        let Some(function) = next_solid(&tokens, from + 1) else {
            continue;
        };
        let kind = match &tokens[function].token {
            t if is_word(t, "TUMBLE") => WindowKind::Tumble,
            t if is_word(t, "HOP") => WindowKind::Hop,
            _ => continue,
        };
        let Some(open) =
            next_solid(&tokens, function + 1).filter(|&i| tokens[i].token == Token::LParen)
        else {
            continue;
        };
        let close = matching_paren(&tokens, open)?;
        let arguments = split_arguments(&tokens, open, close);
        let malformed = || {
            plan_err!(
                "malformed window table function at {}: expected {}(TABLE t, DESCRIPTOR(ts), {})",
                position(&tokens[function]),
                if kind == WindowKind::Tumble {
                    "TUMBLE"
                } else {
                    "HOP"
                },
                if kind == WindowKind::Tumble {
                    "size"
                } else {
                    "slide, size"
                }
            )
        };
        let expected = if kind == WindowKind::Tumble { 3 } else { 4 };
        if arguments.len() != expected {
            return malformed();
        }
        let table = &tokens[arguments[0].0..arguments[0].1];
        let Some(table_word) = next_solid(table, 0).filter(|&i| is_word(&table[i].token, "TABLE"))
        else {
            return malformed();
        };
        let table_name = trimmed_text(&table[table_word + 1..]);
        let descriptor = &tokens[arguments[1].0..arguments[1].1];
        let Some(open_d) = next_solid(descriptor, 0)
            .filter(|&i| is_word(&descriptor[i].token, "DESCRIPTOR"))
            .and_then(|i| next_solid(descriptor, i + 1))
            .filter(|&i| descriptor[i].token == Token::LParen)
        else {
            return malformed();
        };
        let close_d = matching_paren(descriptor, open_d)?;
        let time_column = trimmed_text(&descriptor[open_d + 1..close_d]);
        let argument = |n: usize| trimmed_text(&tokens[arguments[n].0..arguments[n].1]);
        let call = match kind {
            WindowKind::Tumble => WindowCall::new(
                kind,
                format!("tumble({time_column}, {})", argument(2)),
                &argument(2),
                &time_column,
            ),
            _ => WindowCall::new(
                kind,
                format!("hop({time_column}, {}, {})", argument(2), argument(3)),
                &argument(3),
                &time_column,
            ),
        };
        let sql = format!(
            "{} {table_name}{}",
            text(&tokens[..function]),
            text(&tokens[close + 1..])
        );
        return Ok((sql, Some(call)));
    }
    Ok((sql.to_string(), None))
}

/// `… GROUP BY k WINDOW TUMBLING (…)` and friends.
fn rewrite_window_clause(
    sql: &str,
    event_time_of: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Option<WindowCall>)> {
    let tokens = tokenize(sql)?;
    let depth = depths(&tokens);
    let clause = (0..tokens.len()).find(|&i| {
        depth[i] == 0
            && is_word(&tokens[i].token, "WINDOW")
            && next_solid(&tokens, i + 1).is_some_and(|k| {
                ["TUMBLING", "SLIDING", "HOPPING", "SESSION"]
                    .iter()
                    .any(|w| is_word(&tokens[k].token, w))
            })
    });
    let Some(window) = clause else {
        return Ok((sql.to_string(), None));
    };
    let keyword_at = next_solid(&tokens, window + 1).unwrap_or(window);
    let keyword = tokens[keyword_at].token.to_string().to_ascii_uppercase();
    let Some(open) =
        next_solid(&tokens, keyword_at + 1).filter(|&i| tokens[i].token == Token::LParen)
    else {
        return plan_err!(
            "malformed WINDOW {keyword} clause at {}: expected WINDOW {keyword} (…)",
            position(&tokens[window])
        );
    };
    let close = matching_paren(&tokens, open)?;
    let arguments: Vec<String> = split_arguments(&tokens, open, close)
        .into_iter()
        .map(|(start, end)| trimmed_text(&tokens[start..end]))
        .collect();
    let (kind, durations) = match keyword.as_str() {
        "TUMBLING" => (WindowKind::Tumble, 1),
        "SESSION" => (WindowKind::Session, 1),
        _ => (WindowKind::Hop, 2),
    };
    let usage = match kind {
        WindowKind::Tumble => "TUMBLING ([ts_col,] size)",
        WindowKind::Hop => "SLIDING ([ts_col,] size, advance)",
        WindowKind::Session => "SESSION ([ts_col,] gap)",
    };
    let (time_column, durations) = if arguments.len() == durations + 1 {
        (arguments[0].clone(), arguments[1..].to_vec())
    } else if arguments.len() == durations && arguments.iter().all(|a| looks_like_duration(a)) {
        let table = first_table(&tokens);
        match table.as_deref().and_then(event_time_of) {
            Some(column) => (column, arguments.clone()),
            None => {
                return plan_err!(
                    "WINDOW {keyword} at {} names no time column and stream '{}' declares no event time: write WINDOW {usage} or register the stream with event_time=COLUMN",
                    position(&tokens[window]),
                    table.unwrap_or_default()
                );
            }
        }
    } else {
        return plan_err!(
            "malformed WINDOW {keyword} clause at {}: expected WINDOW {usage}, got {} arguments",
            position(&tokens[window]),
            arguments.len()
        );
    };
    let durations: Vec<String> = durations.iter().map(|d| interval_literal(d)).collect();
    let call = match kind {
        WindowKind::Tumble => format!("tumble({time_column}, {})", durations[0]),
        WindowKind::Hop => format!("hop({time_column}, {}, {})", durations[1], durations[0]),
        WindowKind::Session => format!("session({time_column}, {})", durations[0]),
    };
    let call = WindowCall::new(kind, call, &durations[0], &time_column);
    let before = &tokens[..window];
    let after = text(&tokens[close + 1..]);
    let group_by = (0..before.len()).find(|&i| {
        depth[i] == 0
            && is_word(&before[i].token, "GROUP")
            && next_solid(before, i + 1).is_some_and(|b| is_word(&before[b].token, "BY"))
    });
    let sql = match group_by.and_then(|g| next_solid(before, g + 1)) {
        Some(by) => format!(
            "{} {}, {}{after}",
            text(&before[..=by]),
            call.call,
            text(&before[by + 1..]).trim_start()
        ),
        None => format!("{} GROUP BY {}{after}", text(before).trim_end(), call.call),
    };
    Ok((sql, Some(call)))
}

/// The first table name after the outermost FROM.
fn first_table(tokens: &[TokenWithSpan]) -> Option<String> {
    let depth = depths(tokens);
    let from = (0..tokens.len()).find(|&i| depth[i] == 0 && is_word(&tokens[i].token, "FROM"))?;
    let name = next_solid(tokens, from + 1)?;
    match &tokens[name].token {
        Token::Word(word) => Some(word.value.clone()),
        _ => None,
    }
}

/// Whether a window argument is a duration (`INTERVAL '…'`, `1m`, …) rather than a column.
fn looks_like_duration(argument: &str) -> bool {
    argument.to_ascii_uppercase().starts_with("INTERVAL")
        || argument.starts_with(|c: char| c.is_ascii_digit())
}

/// `1m`, `30s`, `250ms`, `2h`, `1d` as an interval literal; anything else as written.
fn interval_literal(duration: &str) -> String {
    let compact: String = duration.chars().filter(|c| !c.is_whitespace()).collect();
    let split = compact
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(compact.len());
    let (number, unit) = compact.split_at(split);
    let unit = match unit.to_ascii_lowercase().as_str() {
        "ms" => "milliseconds",
        "s" => "seconds",
        "m" | "min" => "minutes",
        "h" => "hours",
        "d" => "days",
        _ => return duration.to_string(),
    };
    if number.is_empty() {
        return duration.to_string();
    }
    format!("INTERVAL '{number} {unit}'")
}

/// Finds `tumble(…)`, `hop(…)` or `session(…)` written in the outermost GROUP BY.
fn find_window_key(sql: &str) -> Result<Option<WindowCall>> {
    let tokens = tokenize(sql)?;
    let depth = depths(&tokens);
    let Some(group) =
        (0..tokens.len()).find(|&i| depth[i] == 0 && is_word(&tokens[i].token, "GROUP"))
    else {
        return Ok(None);
    };
    for i in group..tokens.len() {
        if depth[i] != 0 {
            continue;
        }
        let kind = match &tokens[i].token {
            t if is_word(t, "tumble") => WindowKind::Tumble,
            t if is_word(t, "hop") => WindowKind::Hop,
            t if is_word(t, "session") => WindowKind::Session,
            t if ["HAVING", "ORDER", "LIMIT", "UNION", "WINDOW"]
                .iter()
                .any(|w| is_word(t, w)) =>
            {
                break;
            }
            _ => continue,
        };
        let Some(open) = next_solid(&tokens, i + 1).filter(|&o| tokens[o].token == Token::LParen)
        else {
            continue;
        };
        let close = matching_paren(&tokens, open)?;
        let arguments = split_arguments(&tokens, open, close);
        let argument = |n: usize| {
            arguments
                .get(n)
                .map(|(start, end)| trimmed_text(&tokens[*start..*end]))
        };
        let length = match kind {
            WindowKind::Tumble | WindowKind::Session => argument(1),
            WindowKind::Hop => argument(2),
        };
        let (Some(time_column), Some(length)) = (argument(0), length) else {
            return plan_err!(
                "malformed {}() window at {}: expected {}",
                tokens[i].token,
                position(&tokens[i]),
                match kind {
                    WindowKind::Tumble => "tumble(ts, size)",
                    WindowKind::Hop => "hop(ts, slide, size)",
                    WindowKind::Session => "session(ts, gap)",
                }
            );
        };
        return Ok(Some(WindowCall::new(
            kind,
            trimmed_text(&tokens[i..=close]),
            &length,
            &time_column,
        )));
    }
    Ok(None)
}

/// Replaces `window_start` / `window_end` in the outermost query, also inside expressions
/// (`CAST(window_start AS BIGINT)`, `(window_end > …)`), not in subqueries.
fn replace_window_bounds(sql: &str, window: &WindowCall) -> Result<String> {
    let tokens = tokenize(sql)?;
    let depth = depths(&tokens);
    let query_depth = query_depths(&tokens);
    #[derive(PartialEq)]
    enum Clause {
        Other,
        Select,
        GroupBy,
    }
    let mut clause = Clause::Other;
    let mut out: Vec<String> = Vec::with_capacity(tokens.len());
    let mut group_has_window = false;
    let mut skip_to: Option<usize> = None;
    for (i, token) in tokens.iter().enumerate() {
        if skip_to.is_some_and(|end| i <= end) {
            continue;
        }
        if depth[i] == 0 {
            let t = &token.token;
            if is_word(t, "SELECT") {
                clause = Clause::Select;
            } else if is_word(t, "FROM")
                || is_word(t, "HAVING")
                || is_word(t, "ORDER")
                || is_word(t, "LIMIT")
                || is_word(t, "WHERE")
            {
                clause = Clause::Other;
            } else if is_word(t, "GROUP") {
                clause = Clause::GroupBy;
            }
            if clause == Clause::GroupBy
                && matches!(t, Token::Word(w) if ["tumble", "hop", "session"].contains(&w.value.to_ascii_lowercase().as_str()))
            {
                group_has_window = true;
            }
        }
        let Token::Word(word) = &token.token else {
            out.push(token.token.to_string());
            continue;
        };
        let name = word.value.to_ascii_lowercase();
        let bound = match name.trim_start_matches('_') {
            "window_start" if word.quote_style.is_none() => Some(false),
            "window_end" if word.quote_style.is_none() => Some(true),
            _ => None,
        };
        let followed_by_paren =
            next_solid(&tokens, i + 1).is_some_and(|n| tokens[n].token == Token::LParen);
        // `t.window_start` is a column of t, `… AS window_start` an alias: leave both.
        let qualified = previous_solid(&tokens, i)
            .is_some_and(|p| tokens[p].token == Token::Period || is_word(&tokens[p].token, "AS"));
        let (Some(is_end), 0, false, false) = (bound, query_depth[i], followed_by_paren, qualified)
        else {
            out.push(token.token.to_string());
            continue;
        };
        match clause {
            Clause::GroupBy if depth[i] == 0 => {
                if group_has_window {
                    // Already grouped by the window: drop this item and the comma before it.
                    if let Some(comma) =
                        previous_solid(&tokens, i).filter(|&p| tokens[p].token == Token::Comma)
                    {
                        while out.len() > comma {
                            out.pop();
                        }
                    } else if let Some(comma) =
                        next_solid(&tokens, i + 1).filter(|&n| tokens[n].token == Token::Comma)
                    {
                        skip_to = Some(comma);
                    }
                    out.push(String::new());
                } else {
                    out.push(window.call.clone());
                    group_has_window = true;
                }
            }
            _ => {
                let expression = if is_end {
                    window.end.clone()
                } else {
                    window.call.clone()
                };
                let next = next_solid(&tokens, i + 1);
                let needs_alias = clause == Clause::Select
                    && depth[i] == 0
                    && next.is_none_or(|n| {
                        tokens[n].token == Token::Comma || is_word(&tokens[n].token, "FROM")
                    });
                if needs_alias {
                    out.push(format!("{expression} AS {}", word.value));
                } else {
                    out.push(expression);
                }
            }
        }
    }
    // `out` holds one entry per token, so the indexes used above stay aligned.
    Ok(out.concat())
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
        assert!(out.sql.trim_end().ends_with(';'));
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
}
