//! `freshet shell`: an interactive session, the way datafusion-cli and DuckDB's shell work.
//!
//! Lines are read from standard input (a prompt is shown when it is a terminal) and gathered
//! into statements that end with `;`. A line that starts with `\` is a command of the shell
//! and needs no `;`. Every statement runs on one session, so `SET` and `CREATE VIEW` hold for
//! the statements after them:
//! - a query (`SELECT`, `WITH`, `VALUES`) runs as a streaming query into the terminal table;
//!   an endless one runs until Ctrl-C, which stops its streams (open windows are flushed) and
//!   returns to the prompt;
//! - `EXPLAIN <query>` prints Freshet's plan of the query;
//! - `DESCRIBE NAME` shows a stream's columns and options, as `\d NAME` does;
//! - any other statement (`SET`, `CREATE VIEW`, `DROP VIEW`, …) runs on DataFusion's session.
//!
//! An error is printed on one line and the session goes on; the end of the input (Ctrl-D) or
//! `\q` ends it.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, Result, plan_err};
use freshet_engine::{FileReads, Pacing, StreamTable};
use freshet_planner::StreamingContext;
use tokio::sync::mpsc;

use super::SessionArgs;
use super::commands::{first_keyword, run_query, session, split_statements};
use super::tables::{TableSpec, register_table};

/// The shell's commands, as `\?` lists them.
const HELP: &str = "\
statements end with ';': a query (SELECT, WITH, VALUES) streams its rows (Ctrl-C stops it),
EXPLAIN <query> prints its plan, DESCRIBE NAME shows a stream, SET / CREATE VIEW … act on
the session.
  \\d                 list the streams
  \\d NAME            the columns and options of one stream
  \\table NAME=SOURCE[,KEY=VALUE...]
                     register a stream, as --table does
  \\?                 this help
  \\q                 quit (or Ctrl-D)";

/// Runs the shell on `args`' session until the input ends or `\q`.
pub async fn shell(args: SessionArgs) -> Result<()> {
    let ctx = session(&args).await?;
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        println!("freshet shell: statements end with ';', \\? lists the commands, \\q quits");
    }
    let mut lines = read_lines();
    let mut pending = String::new();
    loop {
        if interactive {
            print!(
                "{}",
                if pending.is_empty() {
                    "freshet> "
                } else {
                    "      -> "
                }
            );
            std::io::stdout().flush()?;
        }
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = tokio::signal::ctrl_c() => {
                // As in other shells: Ctrl-C at the prompt drops the statement being typed.
                pending.clear();
                println!();
                continue;
            }
        };
        let Some(line) = line else {
            break;
        };
        let trimmed = line.trim();
        if pending.is_empty() && trimmed.starts_with('\\') {
            match command(&ctx, trimmed).await {
                Ok(Flow::Quit) => break,
                Ok(Flow::Continue) => {}
                Err(e) => report(e),
            }
            continue;
        }
        pending.push_str(&line);
        pending.push('\n');
        if !ends_statement(&pending) {
            continue;
        }
        let script = std::mem::take(&mut pending);
        for statement in split_statements(&script) {
            if let Err(e) = run_statement(&ctx, statement).await {
                report(e);
            }
        }
    }
    if !pending.trim().is_empty() {
        for statement in split_statements(&pending) {
            if let Err(e) = run_statement(&ctx, statement).await {
                report(e);
            }
        }
    }
    Ok(())
}

/// Whether `script` ends with a `;` outside quotes and comments.
fn ends_statement(script: &str) -> bool {
    let trimmed = script.trim_end();
    trimmed.ends_with(';') && {
        // A `;` inside an open quote or comment does not end it: the last statement the
        // splitter sees must be complete.
        let mut in_quote: Option<char> = None;
        let mut chars = trimmed.chars().peekable();
        let mut in_line_comment = false;
        let mut in_block_comment = false;
        let mut previous = ' ';
        while let Some(c) = chars.next() {
            if in_line_comment {
                in_line_comment = c != '\n';
            } else if in_block_comment {
                in_block_comment = !(previous == '*' && c == '/');
            } else if let Some(quote) = in_quote {
                if c == quote {
                    in_quote = None;
                }
            } else if c == '\'' || c == '"' {
                in_quote = Some(c);
            } else if c == '-' && chars.peek() == Some(&'-') {
                in_line_comment = true;
            } else if c == '/' && chars.peek() == Some(&'*') {
                in_block_comment = true;
                chars.next();
                previous = ' ';
                continue;
            }
            previous = c;
        }
        in_quote.is_none() && !in_line_comment && !in_block_comment
    }
}

/// Standard input's lines, read on a thread of their own so that Ctrl-C can be awaited
/// beside them.
fn read_lines() -> mpsc::UnboundedReceiver<String> {
    let (sender, receiver) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else {
                break;
            };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

fn report(error: DataFusionError) {
    eprintln!("error: {}", super::error_line(error));
}

/// What the shell does after a command.
enum Flow {
    Continue,
    Quit,
}

/// Runs a `\` command.
async fn command(ctx: &StreamingContext, line: &str) -> Result<Flow> {
    let (name, argument) = match line.split_once(char::is_whitespace) {
        Some((name, argument)) => (name, argument.trim()),
        None => (line, ""),
    };
    match name {
        "\\q" | "\\quit" => return Ok(Flow::Quit),
        "\\?" | "\\h" | "\\help" => println!("{HELP}"),
        "\\d" if argument.is_empty() => println!("{}", list_streams(ctx).await?),
        "\\d" => println!(
            "{}",
            describe_stream(ctx, argument.trim_end_matches(';')).await?
        ),
        "\\table" => {
            let spec: TableSpec = argument.parse()?;
            let name = spec.name.clone();
            register_table(ctx, spec).await?;
            println!("stream '{name}' registered");
        }
        _ => return plan_err!("unknown command {name}: \\? lists the commands"),
    }
    Ok(Flow::Continue)
}

/// The streams of the session as a table: name, source, boundedness, event time, watermark.
async fn list_streams(ctx: &StreamingContext) -> Result<String> {
    let mut rows = vec![[
        "stream".to_string(),
        "source".to_string(),
        "bounded".to_string(),
        "event time".to_string(),
        "watermark".to_string(),
        "columns".to_string(),
    ]];
    for (name, provider) in streams(ctx).await? {
        let Some(table) = provider.downcast_ref::<StreamTable>() else {
            continue;
        };
        let options = table.options();
        rows.push([
            name,
            table.source_description(),
            table.is_bounded().to_string(),
            options.event_time.clone().unwrap_or_else(|| "-".into()),
            duration(options.out_of_orderness),
            provider
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    Ok(text_table(&rows))
}

/// One stream's columns with their types, and its options.
async fn describe_stream(ctx: &StreamingContext, name: &str) -> Result<String> {
    let streams = streams(ctx).await?;
    let Some((_, provider)) = streams.iter().find(|(stream, _)| stream == name) else {
        return plan_err!(
            "no stream named '{name}'; the streams are {}",
            streams
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let Some(table) = provider.downcast_ref::<StreamTable>() else {
        return plan_err!("'{name}' is not a stream");
    };
    let mut rows = vec![[
        "column".to_string(),
        "type".to_string(),
        "nullable".to_string(),
    ]];
    for field in provider.schema().fields() {
        rows.push([
            field.name().clone(),
            field.data_type().to_string(),
            field.is_nullable().to_string(),
        ]);
    }
    let options = table.options();
    let mut facts = vec![
        table.source_description(),
        if table.is_bounded() {
            "bounded"
        } else {
            "endless"
        }
        .to_string(),
    ];
    if let Some(column) = &options.event_time {
        facts.push(format!(
            "event time {column}, watermark {} behind",
            duration(options.out_of_orderness)
        ));
    }
    if let Some(partitions) = options.partitions {
        facts.push(format!("{partitions} source partitions"));
    }
    if !options.partitioned_by.is_empty() {
        facts.push(format!(
            "partitioned by {}",
            options.partitioned_by.join(", ")
        ));
    }
    if let Pacing::RecordsPerSecond(rate) = options.pacing {
        facts.push(format!("paced at {rate} records/s"));
    }
    if let Some(timeout) = options.idle_timeout {
        facts.push(format!("idle after {timeout:?}"));
    }
    if options.file_reads == FileReads::Copy {
        facts.push("files copied, not memory-mapped".to_string());
    }
    Ok(format!("{}{name}: {}", text_table(&rows), facts.join(", ")))
}

/// The session's streams by name, in name order.
async fn streams(ctx: &StreamingContext) -> Result<Vec<(String, Arc<dyn TableProvider>)>> {
    Ok(ctx
        .tables()
        .await?
        .into_iter()
        .filter(|(_, provider)| provider.downcast_ref::<StreamTable>().is_some())
        .collect())
}

/// A duration as `5s` or `250ms` (zero as `0s`).
fn duration(duration: std::time::Duration) -> String {
    if duration.is_zero() {
        "0s".to_string()
    } else {
        format!("{duration:?}")
    }
}

/// `rows` (the first one the header) as a plain text table.
fn text_table<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (index, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        out.push_str(cells.join(" | ").trim_end());
        out.push('\n');
        if index == 0 {
            let rule: Vec<String> = widths.iter().map(|width| "-".repeat(*width)).collect();
            out.push_str(&rule.join("-+-"));
            out.push('\n');
        }
    }
    out
}

/// Runs one statement of the session.
async fn run_statement(ctx: &StreamingContext, statement: &str) -> Result<()> {
    let first_word = first_keyword(statement);
    match first_word.as_str() {
        "SELECT" | "WITH" | "VALUES" => {
            let query = ctx.sql(statement).await?;
            let run = run_query(query, "table".parse()?, false, None).await?;
            eprintln!("{run}");
        }
        "EXPLAIN" => {
            let query_sql = statement.trim_start()["EXPLAIN".len()..].trim_start();
            let query = ctx.sql(query_sql).await?;
            println!("{}", query.explain());
        }
        "DESCRIBE" | "DESC" => {
            let name = statement.split_whitespace().nth(1).unwrap_or_default();
            println!("{}", describe_stream(ctx, name).await?);
        }
        // DataFusion runs session statements (SET, CREATE VIEW, DROP VIEW …) as it plans
        // them; their empty result is not run through the streaming rules.
        _ => super::commands::session_statement(ctx, statement).await?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_semicolon_in_quotes_or_comments_does_not_end_a_statement() {
        assert!(ends_statement("SELECT 1;"));
        assert!(ends_statement("SELECT ';' AS s;\n"));
        assert!(!ends_statement("SELECT 'a;"));
        assert!(!ends_statement("SELECT 1 -- ;"));
        assert!(!ends_statement("SELECT 1 /* ; */"));
        assert!(!ends_statement("SELECT 1"));
    }
}
