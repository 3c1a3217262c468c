//! SVG charts of benchmark results, written by `freshet bench --svg PATH`: records/s per
//! scenario and stream count for Freshet and DataFusion batch (log scale, since the
//! scenarios span three orders of magnitude), and the scaling run's throughput and peak
//! memory per input size.

use std::fmt::Write;

use crate::runner::ScenarioResult;
use crate::scaling::ScalingResult;

const FRESHET: &str = "#1f77b4";
const DATAFUSION: &str = "#ff7f0e";
const BAR: f64 = 14.0;
const LABEL_WIDTH: f64 = 150.0;
const PLOT_WIDTH: f64 = 520.0;

/// Horizontal bars, two per result (Freshet, DataFusion), on a log10 axis of records/s.
pub fn throughput_svg(results: &[ScenarioResult]) -> String {
    let rows: Vec<(String, f64, f64)> = results
        .iter()
        .map(|r| {
            (
                format!(
                    "{} · {} stream{}",
                    r.scenario,
                    r.partitions,
                    plural(r.partitions)
                ),
                r.freshet_records_per_second(),
                r.datafusion_records_per_second(),
            )
        })
        .collect();
    let values = rows.iter().flat_map(|(_, f, d)| [*f, *d]);
    let (low, high) = decades(values);
    let height = 60.0 + rows.len() as f64 * (2.0 * BAR + 10.0);
    let x = |rate: f64| LABEL_WIDTH + PLOT_WIDTH * (rate.max(1.0).log10() - low) / (high - low);
    let mut svg = header(
        height,
        "Records/s per scenario: Freshet vs DataFusion batch (log scale)",
    );
    axis(&mut svg, low, high, height, &x);
    for (i, (label, freshet, datafusion)) in rows.iter().enumerate() {
        let top = 40.0 + i as f64 * (2.0 * BAR + 10.0);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{label}</text>"#,
            LABEL_WIDTH - 6.0,
            top + BAR + 4.0
        );
        for (j, (rate, colour)) in [(freshet, FRESHET), (datafusion, DATAFUSION)]
            .iter()
            .enumerate()
        {
            let y = top + j as f64 * BAR;
            let _ = writeln!(
                svg,
                r#"<rect x="{LABEL_WIDTH}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{colour}"/><text x="{:.1}" y="{:.1}" font-size="10">{:.1} M</text>"#,
                (x(**rate) - LABEL_WIDTH).max(1.0),
                BAR - 2.0,
                x(**rate) + 4.0,
                y + BAR - 4.0,
                **rate / 1e6
            );
        }
    }
    legend(
        &mut svg,
        &[("Freshet", FRESHET), ("DataFusion batch", DATAFUSION)],
    );
    svg.push_str("</svg>\n");
    svg
}

/// Two bars per input size: throughput (M records/s) and peak memory (MiB), each on its own
/// linear scale.
pub fn scaling_svg(results: &[ScalingResult]) -> String {
    let max_rate = results
        .iter()
        .map(ScalingResult::records_per_second)
        .fold(1.0, f64::max);
    let max_memory = results
        .iter()
        .filter_map(|r| r.peak_rss_bytes)
        .fold(1, u64::max) as f64;
    let height = 60.0 + results.len() as f64 * (2.0 * BAR + 10.0);
    let mut svg = header(
        height,
        "Scaling: throughput and peak memory per case and input size",
    );
    for (i, result) in results.iter().enumerate() {
        let top = 40.0 + i as f64 * (2.0 * BAR + 10.0);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{} {} M</text>"#,
            LABEL_WIDTH - 6.0,
            top + BAR + 4.0,
            result.case,
            result.records as f64 / 1e6
        );
        let rate = result.records_per_second();
        let memory = result.peak_rss_bytes.unwrap_or(0) as f64;
        for (j, (share, colour, text)) in [
            (
                rate / max_rate,
                FRESHET,
                format!("{:.1} M rec/s", rate / 1e6),
            ),
            (
                memory / max_memory,
                DATAFUSION,
                format!("{:.0} MiB peak", memory / 1048576.0),
            ),
        ]
        .iter()
        .enumerate()
        {
            let y = top + j as f64 * BAR;
            let width = (PLOT_WIDTH * share).max(1.0);
            let _ = writeln!(
                svg,
                r#"<rect x="{LABEL_WIDTH}" y="{y:.1}" width="{width:.1}" height="{:.1}" fill="{colour}"/><text x="{:.1}" y="{:.1}" font-size="10">{text}</text>"#,
                BAR - 2.0,
                LABEL_WIDTH + width + 4.0,
                y + BAR - 4.0,
            );
        }
    }
    legend(
        &mut svg,
        &[("throughput", FRESHET), ("peak memory", DATAFUSION)],
    );
    svg.push_str("</svg>\n");
    svg
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The whole decades around `values`, as log10 bounds.
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (low, high) = values
        .filter(|v| *v > 0.0)
        .fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(v), h.max(v)));
    if low > high {
        return (0.0, 1.0);
    }
    let low = low.log10().floor();
    let high = high.log10().ceil().max(low + 1.0);
    (low, high)
}

fn header(height: f64, title: &str) -> String {
    let width = LABEL_WIDTH + PLOT_WIDTH + 90.0;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"20\" font-size=\"13\" font-weight=\"bold\">{title}</text>\n"
    )
}

fn axis(svg: &mut String, low: f64, high: f64, height: f64, x: &dyn Fn(f64) -> f64) {
    let mut decade = low;
    while decade <= high {
        let at = x(10f64.powf(decade));
        let label = match decade as i32 {
            3 => "1 K".to_string(),
            6 => "1 M".to_string(),
            9 => "1 G".to_string(),
            d if d > 6 => format!("{} M", 10f64.powi(d - 6)),
            d if d > 3 => format!("{} K", 10f64.powi(d - 3)),
            d => format!("{}", 10f64.powi(d)),
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{at:.1}" y1="30" x2="{at:.1}" y2="{:.1}" stroke="#ddd"/><text x="{at:.1}" y="{:.1}" font-size="10" text-anchor="middle">{label}</text>"##,
            height - 25.0,
            height - 12.0
        );
        decade += 1.0;
    }
}

fn legend(svg: &mut String, entries: &[(&str, &str)]) {
    for (i, (name, colour)) in entries.iter().enumerate() {
        let x = LABEL_WIDTH + PLOT_WIDTH - 160.0 + i as f64 * 110.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.1}" y="8" width="10" height="10" fill="{colour}"/><text x="{:.1}" y="17" font-size="11">{name}</text>"#,
            x + 14.0
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn charts_have_a_bar_per_engine_and_result() {
        let result = ScenarioResult {
            scenario: "S1".to_string(),
            source: crate::runner::BenchSource::Memory,
            records: 10_000_000,
            partitions: 1,
            freshet: Duration::from_millis(500),
            datafusion: Duration::from_secs(8),
            freshet_cpu: Duration::from_millis(900),
            datafusion_cpu: Duration::from_secs(15),
            output_rows: 10_000_000,
            peak_rss_bytes: Some(1 << 30),
            paired_ratio: 16.0,
        };
        let svg = throughput_svg(&[
            result.clone(),
            ScenarioResult {
                partitions: 2,
                ..result
            },
        ]);
        assert_eq!(svg.matches("<rect x=\"150\"").count(), 4, "{svg}");
        assert!(svg.contains("20.0 M") && svg.contains("1.2 M"), "{svg}");
        assert!(svg.contains("S1 · 2 streams") && svg.ends_with("</svg>\n"));
        let scaling = scaling_svg(&[ScalingResult {
            case: "S3a",
            records: 1_000_000,
            elapsed: Duration::from_millis(100),
            cpu: Duration::from_millis(100),
            rounds: Vec::new(),
            output_rows: 1,
            peak_rss_bytes: Some(100 << 20),
        }]);
        assert!(
            scaling.contains("10.0 M rec/s") && scaling.contains("100 MiB peak"),
            "{scaling}"
        );
    }
}
