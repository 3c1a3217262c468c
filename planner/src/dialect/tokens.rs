//! A small cursor over sqlparser tokens for the dialect rewrite: matching keywords, skipping
//! whitespace, finding matching parentheses and splitting argument lists.

use datafusion::common::{Result, plan_err};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan, Tokenizer};

/// Tokens of `sql`, whitespace included, so that joining their texts gives `sql` back.
pub(super) fn tokenize(sql: &str) -> Result<Vec<TokenWithSpan>> {
    match Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location() {
        Ok(tokens) => Ok(tokens),
        Err(e) => plan_err!("cannot read the SQL: {e}"),
    }
}

/// Tokens of `text`, which Freshet writes in place of a clause of the user's, all placed at
/// `at` (the clause's span): an error about them points at what the user wrote.
pub(super) fn generated(text: &str, at: Span) -> Result<Vec<TokenWithSpan>> {
    Ok(tokenize(text)?
        .into_iter()
        .filter(|t| t.token != Token::EOF)
        .map(|t| TokenWithSpan::new(t.token, at))
        .collect())
}

/// The SQL text of `tokens`.
pub(super) fn text(tokens: &[TokenWithSpan]) -> String {
    tokens.iter().map(|t| t.token.to_string()).collect()
}

/// The text of `tokens` with leading and trailing whitespace trimmed.
pub(super) fn trimmed_text(tokens: &[TokenWithSpan]) -> String {
    text(tokens).trim().to_string()
}

/// Whether `token` is the unquoted word `word` (case-insensitive).
pub(super) fn is_word(token: &Token, word: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

pub(super) fn is_space(token: &Token) -> bool {
    matches!(token, Token::Whitespace(_))
}

/// Index of the first non-whitespace token at or after `from`.
pub(super) fn next_solid(tokens: &[TokenWithSpan], from: usize) -> Option<usize> {
    (from..tokens.len()).find(|&i| !is_space(&tokens[i].token) && tokens[i].token != Token::EOF)
}

/// Index of the last non-whitespace token before `before`.
pub(super) fn previous_solid(tokens: &[TokenWithSpan], before: usize) -> Option<usize> {
    (0..before).rev().find(|&i| !is_space(&tokens[i].token))
}

/// `line L, column C` of a token, for error messages.
pub(super) fn position(token: &TokenWithSpan) -> String {
    format!(
        "line {}, column {}",
        token.span.start.line, token.span.start.column
    )
}

/// Index of the `)` matching the `(` at `open`.
pub(super) fn matching_paren(tokens: &[TokenWithSpan], open: usize) -> Result<usize> {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        match token.token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    plan_err!("unbalanced parenthesis at {}", position(&tokens[open]))
}

/// The comma-separated arguments between `open` and its matching `close`, as token ranges.
pub(super) fn split_arguments(
    tokens: &[TokenWithSpan],
    open: usize,
    close: usize,
) -> Vec<(usize, usize)> {
    let mut arguments = Vec::new();
    let mut depth = 0usize;
    let mut start = open + 1;
    for (i, token) in tokens.iter().enumerate().take(close).skip(open + 1) {
        match token.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                arguments.push((start, i));
                start = i + 1;
            }
            _ => {}
        }
    }
    if next_solid(&tokens[..close], start).is_some() || !arguments.is_empty() {
        arguments.push((start, close));
    }
    arguments
}

/// Paren depth before each token.
pub(super) fn depths(tokens: &[TokenWithSpan]) -> Vec<usize> {
    let mut depth = 0usize;
    tokens
        .iter()
        .map(|t| {
            let before = depth;
            match t.token {
                Token::LParen => depth += 1,
                Token::RParen => depth = depth.saturating_sub(1),
                _ => {}
            }
            before
        })
        .collect()
}
