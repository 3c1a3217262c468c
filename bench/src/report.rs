//! Printing benchmark results: a text table for people and JSON for tools.

use std::fmt::Write;

use crate::runner::ScenarioResult;

fn millions(rate: f64) -> String {
    format!("{:.1} M", rate / 1e6)
}

/// Nanoseconds to a tenth below 10, so that a query that costs one or two nanoseconds a
/// record still shows which engine spent less.
fn nanoseconds(ns: f64) -> String {
    if ns < 10.0 {
        format!("{ns:.1}")
    } else {
        format!("{ns:.0}")
    }
}

/// The results as an aligned text table.
pub fn table(results: &[ScenarioResult]) -> String {
    let header = [
        "scenario",
        "source",
        "records",
        "streams",
        "Freshet rec/s",
        "per stream",
        "DataFusion rec/s",
        "ratio",
        "Freshet CPU ns/rec",
        "DataFusion CPU ns/rec",
        "output rows",
        "peak RSS",
    ];
    let rows: Vec<[String; 12]> = results
        .iter()
        .map(|r| {
            [
                r.scenario.clone(),
                r.source.to_string(),
                r.records.to_string(),
                r.partitions.to_string(),
                millions(r.freshet_records_per_second()),
                millions(r.freshet_records_per_second() / r.partitions.max(1) as f64),
                millions(r.datafusion_records_per_second()),
                format!("{:.2}x", r.ratio()),
                nanoseconds(r.freshet_cpu_ns_per_record()),
                nanoseconds(r.datafusion_cpu_ns_per_record()),
                r.output_rows.to_string(),
                r.peak_rss_bytes
                    .map(|b| format!("{} MiB", b >> 20))
                    .unwrap_or_else(|| "-".to_string()),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |cells: &[&str], out: &mut String| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:>width$}"))
            .collect();
        let _ = writeln!(out, "| {} |", padded.join(" | "));
    };
    line(&header, &mut out);
    let _ = writeln!(
        out,
        "|{}|",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in &rows {
        line(
            &row.iter().map(String::as_str).collect::<Vec<_>>(),
            &mut out,
        );
    }
    out.push_str(&cpu_scaling(results));
    out
}

/// Per scenario and source, Freshet's CPU time at each stream count over its CPU time at one
/// stream (1.00x: an added stream costs no CPU; 2.00x: the work doubled), when one stream
/// was run.
fn cpu_scaling(results: &[ScenarioResult]) -> String {
    let mut out = String::new();
    for one in results.iter().filter(|r| r.partitions == 1) {
        let more: Vec<String> = results
            .iter()
            .filter(|r| r.scenario == one.scenario && r.source == one.source && r.partitions > 1)
            .map(|r| {
                format!(
                    "{} streams {:.2}x",
                    r.partitions,
                    r.freshet_cpu.as_secs_f64() / one.freshet_cpu.as_secs_f64().max(1e-9)
                )
            })
            .collect();
        if !more.is_empty() {
            if out.is_empty() {
                out.push_str("\nFreshet's CPU time over its CPU time at one stream:\n");
            }
            let _ = writeln!(
                out,
                "- {} from {}: {}",
                one.scenario,
                one.source,
                more.join(", ")
            );
        }
    }
    out
}

/// The results as a JSON array.
pub fn json(results: &[ScenarioResult]) -> String {
    let items: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "  {{\"scenario\": \"{}\", \"source\": \"{}\", \"records\": {}, \"streams\": {}, \"freshet_records_per_second\": {:.0}, \"datafusion_records_per_second\": {:.0}, \"ratio\": {:.4}, \"freshet_cpu_seconds\": {:.4}, \"datafusion_cpu_seconds\": {:.4}, \"output_rows\": {}, \"peak_rss_bytes\": {}}}",
                r.scenario,
                r.source,
                r.records,
                r.partitions,
                r.freshet_records_per_second(),
                r.datafusion_records_per_second(),
                r.ratio(),
                r.freshet_cpu.as_secs_f64(),
                r.datafusion_cpu.as_secs_f64(),
                r.output_rows,
                r.peak_rss_bytes.map(|b| b.to_string()).unwrap_or_else(|| "null".to_string())
            )
        })
        .collect();
    format!("[\n{}\n]\n", items.join(",\n"))
}
