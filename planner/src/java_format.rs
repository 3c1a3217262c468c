//! Java date patterns (`yyyy-MM-dd HH:mm:ss`, as Flink's and Spark's `DATE_FORMAT` take
//! them) as chrono's `strftime` formats, which `to_char` / `date_format` take.
//!
//! A format without a single `%` names no chrono field: chrono prints it unchanged on every
//! row, so `date_format(ts, 'yyyy-MM-dd')` would silently give the text `yyyy-MM-dd`. Such a
//! format is read as a Java pattern instead: a run of one letter is a field, its length the
//! field's width or form (`M` 7, `MM` 07, `MMM` Jul); text between single quotes is literal
//! (`''` is a quote); other characters stand for themselves. A letter with no
//! chrono equivalent here (`Y` week year, `D` day of year, `u`, `w`, `z`, …; also
//! PostgreSQL's `YYYY-MM-DD`) is refused rather than guessed.

use datafusion::common::{Result, plan_err};

/// chrono's format for `pattern`, a format without `%` (see the module documentation).
pub fn chrono_format_of_java_pattern(pattern: &str) -> Result<String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut format = String::with_capacity(pattern.len() * 2);
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if c == '\'' {
            // Quoted text; `''` inside or outside quotes is one quote.
            at += 1;
            if chars.get(at) == Some(&'\'') {
                format.push('\'');
                at += 1;
                continue;
            }
            loop {
                match chars.get(at) {
                    None => {
                        return plan_err!("date format '{pattern}': a quoted text is not closed");
                    }
                    Some('\'') if chars.get(at + 1) == Some(&'\'') => {
                        format.push('\'');
                        at += 2;
                    }
                    Some('\'') => {
                        at += 1;
                        break;
                    }
                    Some(literal) => {
                        push_literal(&mut format, *literal);
                        at += 1;
                    }
                }
            }
            continue;
        }
        if !c.is_ascii_alphabetic() {
            push_literal(&mut format, c);
            at += 1;
            continue;
        }
        let run = chars[at..].iter().take_while(|&&other| other == c).count();
        let field = match (c, run) {
            ('y', 2) => "%y",
            ('y', _) => "%Y",
            ('M', 1) => "%-m",
            ('M', 2) => "%m",
            ('M', 3) => "%b",
            ('M', _) => "%B",
            ('d', 1) => "%-d",
            ('d', 2) => "%d",
            ('H', 1) => "%-H",
            ('H', 2) => "%H",
            ('h', 1) => "%-I",
            ('h', 2) => "%I",
            ('m', 1) => "%-M",
            ('m', 2) => "%M",
            ('s', 1) => "%-S",
            ('s', 2) => "%S",
            ('S', 3) => "%3f",
            ('S', 6) => "%6f",
            ('S', 9) => "%9f",
            ('a', 1) => "%p",
            ('E', 1..=3) => "%a",
            ('E', _) => "%A",
            _ => {
                let field: String = std::iter::repeat_n(c, run).collect();
                return plan_err!(
                    "date format '{pattern}' names no chrono field (such as %Y-%m-%d), and \
                     '{field}' is not a Java pattern field Freshet reads (y, M, d, H, h, m, \
                     s, SSS, a, E): write the format with chrono's % fields"
                );
            }
        };
        format.push_str(field);
        at += run;
    }
    Ok(format)
}

fn push_literal(format: &mut String, c: char) {
    if c == '%' {
        format.push_str("%%");
    } else {
        format.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_patterns_become_chrono_formats() {
        for (java, chrono) in [
            ("yyyy-MM-dd", "%Y-%m-%d"),
            ("HH:mm", "%H:%M"),
            ("yyyy-MM-dd HH:mm:ss.SSS", "%Y-%m-%d %H:%M:%S.%3f"),
            ("yy/M/d h:m:s a", "%y/%-m/%-d %-I:%-M:%-S %p"),
            ("EEE, d MMM yyyy", "%a, %-d %b %Y"),
            ("EEEE MMMM", "%A %B"),
            ("yyyy'T'HH 'o''clock' 100%", "%YT%H o'clock 100%%"),
            ("''yyyy''", "'%Y'"),
        ] {
            assert_eq!(
                chrono_format_of_java_pattern(java).unwrap(),
                chrono,
                "{java}"
            );
        }
    }

    #[test]
    fn letters_without_a_chrono_field_are_refused() {
        for pattern in [
            "YYYY-MM-DD",
            "yyyy-DDD",
            "HH24:MI:SS",
            "yyyy-MM-dd z",
            "'open",
        ] {
            let error = chrono_format_of_java_pattern(pattern).unwrap_err();
            assert!(error.to_string().contains(pattern), "{pattern}: {error}");
        }
    }
}
