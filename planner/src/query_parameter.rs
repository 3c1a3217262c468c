//! [`QueryParameter`]: `regexp_extract`'s patterns `(S|^)NAME([^S]*)` and `(^|S)NAME([^S]*)`,
//! which take one item's value out of a list of items separated by `S` — a parameter of a
//! URL's query, `(&|^)channel_id=([^&]*)` in Nexmark q21 — found by a literal search for
//! `NAME` instead of the regex engine's three passes a row.
//!
//! The answer is the regex's. A match starts where `NAME` begins the text, or one byte
//! before a `NAME` that follows `S`; the start of a match grows with the position of its
//! `NAME`, so the leftmost match is that of the first such occurrence. Its value, group 2,
//! runs to the next `S` or the end (`[^S]*` is greedy); group 1 is the `S`, or empty at the
//! start of the text; group 0 both. `NAME` never starts with `S`, so at most one
//! alternative of `(S|^)` can begin a match at any one place, in either order. Only names
//! and separators of characters that stand for themselves in a regex (in and out of a
//! class) take this path; any other pattern goes to the regex.

use memchr::memchr;
use memchr::memmem::Finder;

/// Separators that are literal both in `(S|^)` and in `[^S]`.
const SEPARATORS: &[u8] = b"&;,/:@!%";

/// A recognized query-parameter pattern; see the module documentation.
#[derive(Debug)]
pub(crate) struct QueryParameter {
    separator: u8,
    name: Finder<'static>,
}

impl QueryParameter {
    /// The pattern as a query parameter, if it is exactly of one of the two forms.
    pub(crate) fn recognize(pattern: &str) -> Option<Self> {
        let rest = pattern.strip_prefix('(')?;
        let separator = match rest.as_bytes() {
            [separator, b'|', b'^', b')', ..] | [b'^', b'|', separator, b')', ..] => *separator,
            _ => return None,
        };
        if !SEPARATORS.contains(&separator) {
            return None;
        }
        let value = format!("([^{}]*)", separator as char);
        let name = rest.get(4..)?.strip_suffix(value.as_str())?;
        let literal = |byte: &u8| byte.is_ascii_alphanumeric() || b"_=-".contains(byte);
        if name.is_empty() || !name.as_bytes().iter().all(literal) {
            return None;
        }
        Some(Self {
            separator,
            name: Finder::new(name.as_bytes()).into_owned(),
        })
    }

    /// The byte spans of groups 0, 1 and 2 of the leftmost match in `text`, if any.
    pub(crate) fn find(&self, text: &[u8]) -> Option<[(usize, usize); 3]> {
        let mut from = 0;
        while let Some(found) = self.name.find(&text[from..]) {
            let at = from + found;
            if at == 0 || text[at - 1] == self.separator {
                let value_start = at + self.name.needle().len();
                let value_end = memchr(self.separator, &text[value_start..])
                    .map_or(text.len(), |length| value_start + length);
                let start = at.saturating_sub(1);
                return Some([(start, value_end), (start, at), (value_start, value_end)]);
            }
            from = at + 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use regex::Regex;

    use super::*;
    use freshet_engine::splitmix64;

    #[test]
    fn recognizes_only_the_two_forms_with_literal_characters() {
        for pattern in [
            "(&|^)channel_id=([^&]*)",
            "(^|&)channel_id=([^&]*)",
            "(;|^)a([^;]*)",
            "(/|^)user-id([^/]*)",
        ] {
            assert!(QueryParameter::recognize(pattern).is_some(), "{pattern}");
        }
        for pattern in [
            "(&|^)channel.id=([^&]*)",
            "(&|^)channel_id=([^;]*)",
            "(&|^)([^&]*)",
            "(&|^)channel_id=([^&]+)",
            "(&|$)channel_id=([^&]*)",
            "(.|^)channel_id=([^.]*)",
            "(&|^)&id=([^&]*)",
            "(&|^)channel_id=([^&]*)x",
            "(?i)(&|^)channel_id=([^&]*)",
        ] {
            assert!(QueryParameter::recognize(pattern).is_none(), "{pattern}");
        }
    }

    /// Random texts made of the name's pieces, separators and other characters (some of
    /// several bytes): every group of every text as the regex finds it.
    #[test]
    fn finds_what_the_regex_finds() {
        let pieces = [
            "&", ";", "id=", "i", "d", "=", "x", "é", "&id", "id=&", "==",
        ];
        for pattern in ["(&|^)id=([^&]*)", "(^|&)id=([^&]*)", "(;|^)id=([^;]*)"] {
            let regex = Regex::new(pattern).unwrap();
            let parameter = QueryParameter::recognize(pattern).unwrap();
            let mut locations = regex.capture_locations();
            for seed in 0..20_000u64 {
                let length = splitmix64(seed) % 9;
                let text: String = (0..length)
                    .map(|i| pieces[(splitmix64(seed * 31 + i) % pieces.len() as u64) as usize])
                    .collect();
                let expected = regex
                    .captures_read(&mut locations, &text)
                    .map(|_| [0, 1, 2].map(|group| locations.get(group).unwrap()));
                assert_eq!(
                    parameter.find(text.as_bytes()),
                    expected,
                    "{pattern} on {text:?}"
                );
            }
        }
    }
}
