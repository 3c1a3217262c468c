//! The streaming clauses sqlparser cannot parse, turned into parseable tokens before the
//! statement is parsed: a trailing `WITH ('key' = 'value', …)` and `EMIT CHANGES` /
//! `EMIT FINAL` are taken out; `WINDOW TUMBLING|SLIDING|HOPPING|SESSION (…)` after a GROUP BY
//! becomes a window key in that GROUP BY; `TABLE t` inside `FROM TUMBLE(…)` / `HOP(…)` /
//! `SESSION(…)` (also wrapped in Flink's `TABLE(…)`) becomes `t`, so that the call parses as
//! a table function (the query block stage turns it into a window key). Tokens Freshet
//! writes carry the span of the clause they replace.

use datafusion::common::{Result, internal_err, plan_err};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use super::tokens::{
    depths, generated, is_word, matching_paren, next_solid, position, previous_solid,
    split_arguments, trimmed_text,
};
use super::vocabulary::EmitMode;

/// Takes a trailing `WITH ('key' = 'value', …)` (the predecessor's query options) out of
/// `tokens`. A `WITH name AS (…)` common table expression is left alone.
pub(super) fn take_options(tokens: &mut Vec<TokenWithSpan>) -> Result<Vec<(String, String)>> {
    let depth = depths(tokens);
    let clause = (0..tokens.len()).rev().find(|&i| {
        depth[i] == 0
            && is_word(&tokens[i].token, "WITH")
            && next_solid(tokens, i + 1).is_some_and(|o| tokens[o].token == Token::LParen)
            && previous_solid(tokens, i).is_some()
    });
    let Some(with) = clause else {
        return Ok(Vec::new());
    };
    let Some(open) = next_solid(tokens, with + 1) else {
        return Ok(Vec::new());
    };
    let close = matching_paren(tokens, open)?;
    let mut options = Vec::new();
    for (start, end) in split_arguments(tokens, open, close) {
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
    tokens.drain(with..=close);
    Ok(options)
}

/// Takes `EMIT CHANGES` / `EMIT FINAL` out of `tokens`; it ends the query or the subquery
/// that aggregates.
pub(super) fn take_emit(tokens: &mut Vec<TokenWithSpan>) -> Result<EmitMode> {
    // EMIT followed by CHANGES or FINAL is the clause; another EMIT is a name (`AS emit`),
    // unless it ends the query, where it can only be a clause missing its mode.
    let mode_after = |i: usize| match next_solid(tokens, i + 1).map(|m| &tokens[m].token) {
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
            let next = next_solid(tokens, i + 1);
            ends_query(next) || ends_query(next_solid(tokens, next.unwrap_or(i) + 1))
        }) {
            return plan_err!(
                "malformed EMIT clause at {}: expected EMIT CHANGES or EMIT FINAL",
                position(&tokens[last])
            );
        }
        return Ok(EmitMode::Default);
    };
    let mode_at = next_solid(tokens, emit + 1);
    let Some(mode) = mode_after(emit) else {
        return internal_err!("EMIT clause without its mode");
    };
    let end = mode_at.unwrap_or(emit) + 1;
    if let Some(rest) = next_solid(tokens, end)
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
    tokens.drain(emit..end);
    Ok(mode)
}

/// Turns every `WINDOW TUMBLING|SLIDING|HOPPING|SESSION (…)` clause into a window key at the
/// head of its query block's GROUP BY (a GROUP BY of the key alone where there is none):
/// `TUMBLING ([ts,] size)` → `tumble(ts, size)`, `SLIDING|HOPPING ([ts,] size, advance)` →
/// `hop(ts, advance, size)`, `SESSION ([ts,] gap)` → `session(ts, gap)`. Without a time
/// column, the block's first stream's declared event time (`event_time_of`). Returns whether
/// any clause was found.
pub(super) fn rewrite_window_clauses(
    tokens: &mut Vec<TokenWithSpan>,
    event_time_of: &dyn Fn(&str) -> Option<String>,
) -> Result<bool> {
    let mut found = false;
    while let Some(window) = next_window_clause(tokens) {
        rewrite_window_clause(tokens, window, event_time_of)?;
        found = true;
    }
    Ok(found)
}

/// The `WINDOW` of the first window clause left in `tokens`.
fn next_window_clause(tokens: &[TokenWithSpan]) -> Option<usize> {
    (0..tokens.len()).find(|&i| {
        is_word(&tokens[i].token, "WINDOW")
            && next_solid(tokens, i + 1).is_some_and(|k| {
                ["TUMBLING", "SLIDING", "HOPPING", "SESSION"]
                    .iter()
                    .any(|w| is_word(&tokens[k].token, w))
            })
    })
}

fn rewrite_window_clause(
    tokens: &mut Vec<TokenWithSpan>,
    window: usize,
    event_time_of: &dyn Fn(&str) -> Option<String>,
) -> Result<()> {
    let depth = depths(tokens);
    let level = depth[window];
    // The clause's query block starts at the last SELECT of its level before it.
    let block = (0..window)
        .rev()
        .find(|&i| depth[i] == level && is_word(&tokens[i].token, "SELECT"))
        .unwrap_or(0);
    let keyword_at = next_solid(tokens, window + 1).unwrap_or(window);
    let keyword = tokens[keyword_at].token.to_string().to_ascii_uppercase();
    let Some(open) =
        next_solid(tokens, keyword_at + 1).filter(|&i| tokens[i].token == Token::LParen)
    else {
        return plan_err!(
            "malformed WINDOW {keyword} clause at {}: expected WINDOW {keyword} (…)",
            position(&tokens[window])
        );
    };
    let close = matching_paren(tokens, open)?;
    let arguments: Vec<String> = split_arguments(tokens, open, close)
        .into_iter()
        .map(|(start, end)| trimmed_text(&tokens[start..end]))
        .collect();
    let (name, durations) = match keyword.as_str() {
        "TUMBLING" => ("tumble", 1),
        "SESSION" => ("session", 1),
        _ => ("hop", 2),
    };
    let usage = match name {
        "tumble" => "TUMBLING ([ts_col,] size)",
        "hop" => "SLIDING ([ts_col,] size, advance)",
        _ => "SESSION ([ts_col,] gap)",
    };
    if let Some(negative) = arguments
        .iter()
        .find(|a| is_negative_duration(a) || is_zero_duration(a))
    {
        return plan_err!(
            "WINDOW {keyword} at {}: a window's length must be positive, got {negative}",
            position(&tokens[window])
        );
    }
    let (time_column, durations) = if arguments.len() == durations + 1 {
        if arguments[0].contains('(') {
            return plan_err!(
                "WINDOW {keyword} at {}: the window's time must be a column of the stream (its event time), got {}",
                position(&tokens[window]),
                arguments[0]
            );
        }
        (arguments[0].clone(), arguments[1..].to_vec())
    } else if arguments.len() == durations && arguments.iter().all(|a| looks_like_duration(a)) {
        let table = first_table(tokens, block, window, level);
        match table.as_deref().and_then(event_time_of) {
            Some(column) => (quoted_identifier(&column), arguments.clone()),
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
    let call = match name {
        "hop" => format!("hop({time_column}, {}, {})", durations[1], durations[0]),
        _ => format!("{name}({time_column}, {})", durations[0]),
    };
    let at = tokens[window].span;
    let group_by = (block..window).find(|&i| {
        depth[i] == level
            && is_word(&tokens[i].token, "GROUP")
            && next_solid(tokens, i + 1).is_some_and(|b| is_word(&tokens[b].token, "BY"))
    });
    match group_by.and_then(|g| next_solid(tokens, g + 1)) {
        Some(by) => {
            // `GROUP BY WINDOW …` (no other key) takes the window key alone.
            let only_key = next_solid(tokens, by + 1) == Some(window);
            tokens.drain(window..=close);
            let separator = if only_key { "" } else { "," };
            let key = generated(&format!(" {call}{separator}"), at)?;
            tokens.splice(by + 1..by + 1, key);
        }
        None => {
            let key = generated(&format!("GROUP BY {call}"), at)?;
            tokens.splice(window..=close, key);
        }
    }
    Ok(())
}

/// The first table name after the FROM of the query block between `block` and `end`, at
/// paren depth `level`.
fn first_table(tokens: &[TokenWithSpan], block: usize, end: usize, level: usize) -> Option<String> {
    let depth = depths(tokens);
    let from = (block..end).find(|&i| depth[i] == level && is_word(&tokens[i].token, "FROM"))?;
    let name = next_solid(tokens, from + 1)?;
    match &tokens[name].token {
        Token::Word(word) => Some(word.value.clone()),
        _ => None,
    }
}

/// Whether a window argument is a negative duration (`-1m`, `INTERVAL '-1' MINUTE`).
fn is_negative_duration(argument: &str) -> bool {
    let compact: String = argument.chars().filter(|c| !c.is_whitespace()).collect();
    let upper = compact.to_ascii_uppercase();
    compact.starts_with('-') || upper.starts_with("INTERVAL'-") || upper.starts_with("-INTERVAL")
}

/// Whether a window argument is a duration of zero (`INTERVAL '0' SECOND`, `0s`): a number
/// that is zero, with no other digit after it.
fn is_zero_duration(argument: &str) -> bool {
    let upper = argument.trim().to_ascii_uppercase();
    let value = match upper.strip_prefix("INTERVAL") {
        Some(rest) => rest.trim_start().trim_start_matches('\''),
        None => upper.as_str(),
    };
    let number: String = value
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let rest = &value[number.len()..];
    !number.is_empty()
        && number.parse::<f64>().is_ok_and(|n| n == 0.0)
        && !rest.chars().any(|c| c.is_ascii_digit())
}

/// A declared column name as SQL: as it is when the parser keeps it so (lower case letters,
/// digits and `_`), else double-quoted (`"EventTime"`).
fn quoted_identifier(name: &str) -> String {
    let plain = name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
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

/// Refuses Flink's temporal join, `JOIN t FOR SYSTEM_TIME AS OF p.proc_time`, which
/// sqlparser cannot parse (its error would name other keywords): Freshet has no processing
/// time, and a bounded table joined as written is looked up already.
pub(super) fn refuse_temporal_joins(tokens: &[TokenWithSpan]) -> Result<()> {
    let temporal = (0..tokens.len()).find(|&f| {
        is_word(&tokens[f].token, "FOR")
            && next_solid(tokens, f + 1).is_some_and(|s| is_word(&tokens[s].token, "SYSTEM_TIME"))
    });
    match temporal {
        Some(at) => plan_err!(
            "FOR SYSTEM_TIME AS OF at {} is not supported: Freshet has no processing time; \
             join the table without it (a bounded table is looked up as the stream's records \
             arrive)",
            position(&tokens[at])
        ),
        None => Ok(()),
    }
}

/// The window table functions Flink writes in FROM.
const WINDOW_TABLE_FUNCTIONS: [&str; 4] = ["TUMBLE", "HOP", "SESSION", "CUMULATE"];

/// Window table functions in FROM, as the block stage reads them (`FROM W(t, …)`, W one of
/// [`WINDOW_TABLE_FUNCTIONS`]): Flink's `FROM TABLE(W(…))` loses its `TABLE(…)`; the
/// `TABLE` keyword before the table, which sqlparser does not take as a function argument,
/// is dropped; and a session's `PARTITION BY k, …` after its table (`SESSION(TABLE t
/// PARTITION BY k, DESCRIPTOR(ts), gap)`) becomes a last argument `DESCRIPTOR(k, …)`.
/// Returns whether anything changed.
pub(super) fn unwrap_window_tables(tokens: &mut Vec<TokenWithSpan>) -> Result<bool> {
    let is_window_function = |tokens: &[TokenWithSpan], at: usize| {
        WINDOW_TABLE_FUNCTIONS
            .iter()
            .any(|name| is_word(&tokens[at].token, name))
            && next_solid(tokens, at + 1).is_some_and(|o| tokens[o].token == Token::LParen)
    };
    let mut changed = false;
    let mut i = 0;
    while i < tokens.len() {
        let Some(mut function) = Some(i)
            .filter(|&f| is_word(&tokens[f].token, "FROM"))
            .and_then(|f| next_solid(tokens, f + 1))
        else {
            i += 1;
            continue;
        };
        // Flink's `TABLE(W(…))`: the wrapper goes.
        let wrapper = Some(function)
            .filter(|&t| is_word(&tokens[t].token, "TABLE"))
            .and_then(|t| next_solid(tokens, t + 1))
            .filter(|&o| tokens[o].token == Token::LParen)
            .filter(|&o| next_solid(tokens, o + 1).is_some_and(|w| is_window_function(tokens, w)));
        if let Some(open) = wrapper {
            let close = matching_paren(tokens, open)?;
            tokens.remove(close);
            tokens.drain(function..=open);
            function = next_solid(tokens, function).unwrap_or(function);
            changed = true;
        }
        if !is_window_function(tokens, function) {
            i += 1;
            continue;
        }
        let open = next_solid(tokens, function + 1).unwrap_or(function);
        // The table argument: the first, or the one named `DATA => TABLE t`, anywhere.
        let mut first = next_solid(tokens, open + 1);
        if let Some(arrow) = named_argument(tokens, open, "DATA")? {
            first = next_solid(tokens, arrow + 1);
        }
        if let Some(table) = first.filter(|&t| is_word(&tokens[t].token, "TABLE")) {
            tokens.remove(table);
            changed = true;
        }
        // The table's name, where `TABLE` was.
        let name = first.and_then(|at| next_solid(tokens, at));
        if let Some(name) = name.filter(|_| is_word(&tokens[function].token, "SESSION")) {
            changed |= move_partition_keys(tokens, open, name)?;
        }
        i += 1;
    }
    Ok(changed)
}

/// The `=>` of the argument named `name` of the call opening at `open`, if it has one.
fn named_argument(tokens: &[TokenWithSpan], open: usize, name: &str) -> Result<Option<usize>> {
    let close = matching_paren(tokens, open)?;
    let depth = depths(tokens);
    Ok((open + 1..close)
        .filter(|&n| depth[n] == depth[open] + 1 && is_word(&tokens[n].token, name))
        .filter_map(|n| next_solid(tokens, n + 1))
        .find(|&arrow| tokens[arrow].token == Token::RArrow))
}

/// In `SESSION(t PARTITION BY k, …, DESCRIPTOR(ts), gap)` opening at `open`, the table's
/// name at `table` (or its named form, `DATA => t PARTITION BY k, TIMECOL => …`), the keys
/// become a last argument `DESCRIPTOR(k, …)`. Returns whether the call had them.
fn move_partition_keys(tokens: &mut Vec<TokenWithSpan>, open: usize, table: usize) -> Result<bool> {
    let close = matching_paren(tokens, open)?;
    // The table's name: words joined by dots.
    let mut after_name = table;
    while let Some(dot) =
        next_solid(tokens, after_name + 1).filter(|&d| tokens[d].token == Token::Period)
    {
        after_name = next_solid(tokens, dot + 1).unwrap_or(dot);
    }
    let Some(partition) =
        next_solid(tokens, after_name + 1).filter(|&p| is_word(&tokens[p].token, "PARTITION"))
    else {
        return Ok(false);
    };
    let by = next_solid(tokens, partition + 1).filter(|&b| is_word(&tokens[b].token, "BY"));
    // The keys run up to the comma before `DESCRIPTOR(ts)` (or before the next named
    // argument), at the call's own depth.
    let depth = depths(tokens);
    let next_argument = |d: usize| {
        is_word(&tokens[d].token, "DESCRIPTOR")
            || (matches!(tokens[d].token, Token::Word(_))
                && next_solid(tokens, d + 1).is_some_and(|a| tokens[a].token == Token::RArrow))
    };
    let Some(by) = by else {
        return plan_err!(
            "malformed SESSION window table function at {}: expected SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), gap)",
            position(&tokens[partition])
        );
    };
    // A named table may be the last argument: its keys then run to the call's end.
    let end = match (by + 1..close).find(|&d| depth[d] == depth[open] + 1 && next_argument(d)) {
        Some(argument) => {
            previous_solid(tokens, argument).filter(|&c| c > by && tokens[c].token == Token::Comma)
        }
        None => previous_solid(tokens, close)
            .filter(|&k| k > by)
            .map(|k| k + 1),
    };
    let Some(comma) = end else {
        return plan_err!(
            "malformed SESSION window table function at {}: PARTITION BY names no key",
            position(&tokens[partition])
        );
    };
    let at = tokens[partition].span;
    let mut keys = generated(", DESCRIPTOR(", at)?;
    keys.extend(tokens[by + 1..comma].iter().cloned());
    keys.extend(generated(")", at)?);
    tokens.splice(close..close, keys);
    tokens.drain(partition..comma);
    Ok(true)
}
