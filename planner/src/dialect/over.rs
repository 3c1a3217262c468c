//! The rewrite of OVER clauses, before DataFusion parses them:
//!
//! - the predecessor's `OVER (ROWS WINDOW BUFFER n ROWS PARTITION BY k ORDER BY t)` becomes
//!   `OVER (PARTITION BY k ORDER BY t ROWS BETWEEN n-1 PRECEDING AND CURRENT ROW)`: a frame
//!   of the last `n` rows;
//! - `EXPIRE AFTER INTERVAL '1' MINUTE INACTIVITY` inside OVER is taken out and returned: the
//!   idle time after which a PARTITION BY key's state is forgotten;
//! - a named window extended in place, `OVER (w ROWS BETWEEN 3 PRECEDING AND CURRENT ROW)`
//!   with `WINDOW w AS (PARTITION BY k ORDER BY t)`, gets `w`'s definition written out:
//!   DataFusion would otherwise drop `w`'s PARTITION BY and ORDER BY.

use std::collections::HashMap;
use std::time::Duration;

use datafusion::common::{Result, plan_err};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use freshet_engine::parse_duration;

use super::tokens::{
    generated, is_word, matching_paren, next_solid, position, text, tokenize, trimmed_text,
};

/// Rewrites the OVER clauses of `tokens` in place; returns the `EXPIRE AFTER` idle time if one
/// is given.
pub(super) fn rewrite_over_clauses(tokens: &mut Vec<TokenWithSpan>) -> Result<Option<Duration>> {
    if !tokens.iter().any(|t| is_word(&t.token, "OVER")) {
        return Ok(None);
    }
    let named = named_windows(tokens)?;
    let mut out = Vec::with_capacity(tokens.len());
    let mut expire_after: Option<Duration> = None;
    let mut i = 0;
    while i < tokens.len() {
        let open = next_solid(tokens, i + 1);
        if is_word(&tokens[i].token, "OVER")
            && let Some(open) = open
            && tokens[open].token == Token::LParen
        {
            let close = matching_paren(tokens, open)?;
            let (inner, expire) = rewrite_over(&tokens[open + 1..close], &named)?;
            if let Some(expire) = expire {
                if expire_after.is_some_and(|e| e != expire) {
                    return plan_err!(
                        "EXPIRE AFTER at {}: a query takes one idle time for all its windows",
                        position(&tokens[i])
                    );
                }
                expire_after = Some(expire);
            }
            match inner {
                Some(inner) => out.extend(generated(&format!("OVER ({inner})"), tokens[i].span)?),
                None => out.extend_from_slice(&tokens[i..=close]),
            }
            i = close + 1;
        } else {
            out.push(tokens[i].clone());
            i += 1;
        }
    }
    *tokens = out;
    Ok(expire_after)
}

/// The definitions of `WINDOW name AS (…)[, name AS (…)]` clauses, by name.
fn named_windows(tokens: &[TokenWithSpan]) -> Result<HashMap<String, String>> {
    let mut named = HashMap::new();
    for window in (0..tokens.len()).filter(|&i| is_word(&tokens[i].token, "WINDOW")) {
        let mut at = next_solid(tokens, window + 1);
        while let Some(name) = at {
            let Token::Word(word) = &tokens[name].token else {
                break;
            };
            let Some(as_at) =
                next_solid(tokens, name + 1).filter(|&a| is_word(&tokens[a].token, "AS"))
            else {
                break;
            };
            let Some(open) =
                next_solid(tokens, as_at + 1).filter(|&o| tokens[o].token == Token::LParen)
            else {
                break;
            };
            let close = matching_paren(tokens, open)?;
            named.insert(
                word.value.to_ascii_lowercase(),
                trimmed_text(&tokens[open + 1..close]),
            );
            at = next_solid(tokens, close + 1)
                .filter(|&c| tokens[c].token == Token::Comma)
                .and_then(|c| next_solid(tokens, c + 1));
        }
    }
    Ok(named)
}

/// The inside of one OVER (…), rewritten (`None`: as written), and its EXPIRE AFTER idle
/// time.
fn rewrite_over(
    inner: &[TokenWithSpan],
    named: &HashMap<String, String>,
) -> Result<(Option<String>, Option<Duration>)> {
    let solid: Vec<usize> = (0..inner.len())
        .filter(|&i| next_solid(inner, i) == Some(i))
        .collect();
    let word_at = |k: usize, word: &str| {
        solid
            .get(k)
            .is_some_and(|&i| is_word(&inner[i].token, word))
    };
    let mut kept: Vec<bool> = vec![true; inner.len()];
    let mut frame = None;
    let mut expire = None;
    let mut k = 0;
    while k < solid.len() {
        if word_at(k, "ROWS") && word_at(k + 1, "WINDOW") && word_at(k + 2, "BUFFER") {
            let at = position(&inner[solid[k]]);
            let rows = solid.get(k + 3).map(|&i| inner[i].token.to_string());
            let rows = match rows.as_deref().map(str::parse::<u64>) {
                Some(Ok(rows)) if rows >= 1 && word_at(k + 4, "ROWS") => rows,
                _ => {
                    return plan_err!(
                        "ROWS WINDOW BUFFER at {at}: expected ROWS WINDOW BUFFER <n> ROWS with n ≥ 1, e.g. ROWS WINDOW BUFFER 100 ROWS"
                    );
                }
            };
            for &i in &solid[k..k + 5] {
                kept[i] = false;
            }
            frame = Some(format!(
                "ROWS BETWEEN {} PRECEDING AND CURRENT ROW",
                rows - 1
            ));
            k += 5;
        } else if word_at(k, "EXPIRE") && word_at(k + 1, "AFTER") {
            let at = position(&inner[solid[k]]);
            let Some(end) = (k + 2..solid.len()).find(|&e| word_at(e, "INACTIVITY")) else {
                return plan_err!(
                    "EXPIRE AFTER at {at}: expected EXPIRE AFTER <duration> INACTIVITY, e.g. EXPIRE AFTER INTERVAL '1' MINUTE INACTIVITY"
                );
            };
            let duration = (k + 2..end)
                .map(|s| match &inner[solid[s]].token {
                    Token::SingleQuotedString(value) => value.clone(),
                    other => other.to_string(),
                })
                .filter(|part| !part.eq_ignore_ascii_case("INTERVAL"))
                .collect::<Vec<_>>()
                .join(" ");
            expire = match parse_duration(&duration) {
                Ok(duration) if !duration.is_zero() => Some(duration),
                _ => {
                    return plan_err!(
                        "EXPIRE AFTER at {at}: '{duration}' is not a positive duration (e.g. INTERVAL '1' MINUTE or 30s)"
                    );
                }
            };
            for &i in &solid[k..=end] {
                kept[i] = false;
            }
            k = end + 1;
        } else {
            k += 1;
        }
    }
    let extended_named = solid.len() > 1
        && matches!(&inner[solid[0]].token, Token::Word(w) if named.contains_key(&w.value.to_ascii_lowercase()));
    if frame.is_none() && expire.is_none() && !extended_named {
        return Ok((None, None));
    }
    let mut rewritten: String = inner
        .iter()
        .zip(&kept)
        .filter(|(_, keep)| **keep)
        .map(|(t, _)| t.token.to_string())
        .collect();
    // A named window with more after it: write the definition out.
    let tokens = tokenize(&rewritten)?;
    if let Some(first) = next_solid(&tokens, 0)
        && let Token::Word(word) = &tokens[first].token
        && let Some(definition) = named.get(&word.value.to_ascii_lowercase())
        && next_solid(&tokens, first + 1).is_some()
    {
        rewritten = format!("{definition} {}", text(&tokens[first + 1..]));
    }
    let mut rewritten = rewritten.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(frame) = frame {
        rewritten = format!("{rewritten} {frame}").trim().to_string();
    }
    Ok((Some(rewritten), expire))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql` with its OVER clauses rewritten, and the idle time.
    fn rewrite_over_clauses(sql: &str) -> Result<(String, Option<Duration>)> {
        let mut tokens = tokenize(sql)?;
        let expire = super::rewrite_over_clauses(&mut tokens)?;
        Ok((text(&tokens), expire))
    }

    #[test]
    fn predecessor_buffer_becomes_a_rows_frame() {
        let (sql, expire) = rewrite_over_clauses(
            "SELECT AVG(price) OVER (ROWS WINDOW BUFFER 100 ROWS PARTITION BY symbol ORDER BY trade_time) FROM t",
        )
        .unwrap();
        assert_eq!(
            sql,
            "SELECT AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) FROM t"
        );
        assert_eq!(expire, None);
    }

    #[test]
    fn expire_after_is_taken_out() {
        let (sql, expire) = rewrite_over_clauses(
            "SELECT LAG(x) OVER (PARTITION BY k ORDER BY t EXPIRE AFTER INTERVAL '1' MINUTE INACTIVITY) FROM t",
        )
        .unwrap();
        assert_eq!(sql, "SELECT LAG(x) OVER (PARTITION BY k ORDER BY t) FROM t");
        assert_eq!(expire, Some(Duration::from_secs(60)));
        let (_, expire) = rewrite_over_clauses(
            "SELECT LAG(x) OVER (PARTITION BY k ORDER BY t EXPIRE AFTER 30s INACTIVITY) FROM t",
        )
        .unwrap();
        assert_eq!(expire, Some(Duration::from_secs(30)));
    }

    #[test]
    fn extended_named_windows_are_written_out() {
        let (sql, _) = rewrite_over_clauses(
            "SELECT SUM(q) OVER (w ROWS BETWEEN 3 PRECEDING AND CURRENT ROW), ROW_NUMBER() OVER w, COUNT(*) OVER (w) FROM t WINDOW w AS (PARTITION BY k ORDER BY ts), v AS (ORDER BY ts)",
        )
        .unwrap();
        assert_eq!(
            sql,
            "SELECT SUM(q) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW), ROW_NUMBER() OVER w, COUNT(*) OVER (w) FROM t WINDOW w AS (PARTITION BY k ORDER BY ts), v AS (ORDER BY ts)"
        );
    }

    #[test]
    fn malformed_clauses_say_where() {
        let error = rewrite_over_clauses(
            "SELECT AVG(x) OVER (ROWS WINDOW BUFFER 0 ROWS ORDER BY t) FROM t",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("line 1, column 21"), "{error}");
        let error = rewrite_over_clauses(
            "SELECT AVG(x) OVER (ORDER BY t EXPIRE AFTER soon INACTIVITY) FROM t",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("not a positive duration"), "{error}");
    }
}
