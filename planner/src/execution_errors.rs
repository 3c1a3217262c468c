//! Errors put in the user's terms.
//!
//! Planning errors: DataFusion wraps an error raised inside one of its optimizer rules as
//! "Optimizer rule '…' failed caused by …", naming a rule the user never wrote; the cause is
//! what the user needs. Interval literals print as `IntervalMonthDayNano("IntervalMonthDayNano
//! { months: 0, days: 0, nanoseconds: 60000000000 }")`; they are written back as SQL
//! (`INTERVAL '1' MINUTE`).
//!
//! Arrow reports a timestamp plus or minus an interval that leaves the range of its type as
//! "Timestamp out of range" (and plus or minus a duration, as which a fixed interval is added,
//! as an "Arithmetic overflow"), naming nothing. The plan knows which expressions add intervals to
//! timestamps: the error is rewritten to name them, by the output column they compute where
//! there is one (`later`, `window_end`), with the range of the timestamp's unit and how to
//! widen it.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema, TimeUnit};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;
use freshet_engine::window::duration_text;

/// A planning `error` in the user's terms (see the module documentation).
pub fn explain_planning_error(error: DataFusionError) -> DataFusionError {
    let mut error = error;
    while let DataFusionError::Context(context, inner) = error {
        if !context.starts_with("Optimizer rule") {
            error = DataFusionError::Context(context, inner);
            break;
        }
        error = *inner;
    }
    let message = error.to_string();
    let windowed = ["tumble(", "hop(", "session("]
        .iter()
        .any(|call| message.contains(call));
    let hint = if message.contains("While expanding wildcard") && windowed {
        ". Under a window a query selects its GROUP BY keys, window_start, window_end and \
         aggregates: list them rather than *"
    } else {
        ""
    };
    if !message.contains("IntervalMonthDayNano") && hint.is_empty() {
        return error;
    }
    let readable = readable_intervals(&message) + hint;
    // The message as the user reads it: its kind's prefix is part of it already.
    DataFusionError::Plan(
        readable
            .strip_prefix("Error during planning: ")
            .unwrap_or(&readable)
            .to_string(),
    )
}

/// `message` with each debug-printed interval written as SQL.
fn readable_intervals(message: &str) -> String {
    const OPEN: &str = "IntervalMonthDayNano(\"IntervalMonthDayNano { ";
    const CLOSE: &str = " }\")";
    let mut text = message.to_string();
    while let Some(start) = text.find(OPEN) {
        let Some(length) = text[start..].find(CLOSE) else {
            break;
        };
        let fields = &text[start + OPEN.len()..start + length];
        let number = |name: &str| -> Option<i64> {
            let at = fields.find(&format!("{name}: "))? + name.len() + 2;
            let digits: String = fields[at..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            digits.parse().ok()
        };
        let sql = match (number("months"), number("days"), number("nanoseconds")) {
            (Some(months), Some(days), Some(nanoseconds)) => {
                duration_text(&ScalarValue::IntervalMonthDayNano(Some(
                    datafusion::arrow::datatypes::IntervalMonthDayNano::new(
                        months as i32,
                        days as i32,
                        nanoseconds,
                    ),
                )))
            }
            _ => break,
        };
        text.replace_range(start..start + length + CLOSE.len(), &sql);
    }
    text
}

/// `error` with a "Timestamp out of range" from arrow explained in terms of `plan`'s
/// expressions; any other error as it is.
pub fn explain_execution_error(
    plan: &Arc<dyn ExecutionPlan>,
    error: DataFusionError,
) -> DataFusionError {
    let message = error.to_string().to_ascii_lowercase();
    // A fixed interval is added as a duration (see `interval_rule.rs`), which overflows as
    // integer arithmetic does.
    let out_of_range = message.contains("timestamp out of range");
    if !out_of_range && !message.contains("arithmetic overflow") {
        return error;
    }
    let mut sums = Vec::new();
    let _ = plan.apply(|node| {
        let input_schema = match node.children().as_slice() {
            [input] => Some(input.schema()),
            _ => None,
        };
        if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
            for output in projection.expr() {
                for sum in interval_sums(&output.expr, input_schema.as_deref()) {
                    // A name DataFusion made up from the expression says nothing more.
                    if output.alias.contains('(') {
                        sums.push(sum);
                    } else {
                        sums.push(format!("column {} = {sum}", output.alias));
                    }
                }
            }
        } else {
            let _ = node.apply_expressions(&mut |expr| {
                sums.extend(interval_sums(expr, input_schema.as_deref()));
                Ok(TreeNodeRecursion::Continue)
            });
        }
        Ok(TreeNodeRecursion::Continue)
    });
    // An integer overflow where no time is computed is the user's arithmetic.
    if !out_of_range && sums.is_empty() {
        return error;
    }
    let place = if sums.is_empty() {
        "a time the query computes".to_string()
    } else {
        sums.join("; ")
    };
    DataFusionError::Execution(format!(
        "timestamp out of range in {place}: the result is outside what its timestamp type holds (nanoseconds: 1677-09-21 to 2262-04-11; microseconds and milliseconds: hundreds of thousands of years and more); use a smaller interval, or a coarser unit (arrow_cast(column, 'Timestamp(Millisecond, None)'), or event_time_unit=ms for an integer event time)"
    ))
}

/// The timestamp ± interval sums in `expr`, each as the user would write it, with the unit
/// of the timestamp when `schema` tells it.
fn interval_sums(expr: &Arc<dyn PhysicalExpr>, schema: Option<&Schema>) -> Vec<String> {
    let mut sums = Vec::new();
    let _ = expr.apply(|node| {
        let Some(binary) = node.downcast_ref::<BinaryExpr>() else {
            return Ok(TreeNodeRecursion::Continue);
        };
        let op = match binary.op() {
            Operator::Plus => "+",
            Operator::Minus => "-",
            _ => return Ok(TreeNodeRecursion::Continue),
        };
        let (time, interval) = match (interval(binary.left()), interval(binary.right())) {
            (None, Some(interval)) => (binary.left(), interval),
            (Some(interval), None) => (binary.right(), interval),
            _ => return Ok(TreeNodeRecursion::Continue),
        };
        let unit = schema
            .and_then(|schema| time.data_type(schema).ok())
            .and_then(|data_type| match data_type {
                DataType::Timestamp(unit, _) => Some(unit_name(unit)),
                _ => None,
            })
            .map(|unit| format!(" (a timestamp in {unit})"))
            .unwrap_or_default();
        sums.push(format!("`{} {op} {interval}`{unit}", user_text(time)));
        Ok(TreeNodeRecursion::Jump)
    });
    sums
}

/// An interval or duration literal as the user would write it.
fn interval(expr: &Arc<dyn PhysicalExpr>) -> Option<String> {
    let value = expr.downcast_ref::<Literal>()?.value();
    matches!(
        value,
        ScalarValue::IntervalMonthDayNano(_)
            | ScalarValue::IntervalDayTime(_)
            | ScalarValue::IntervalYearMonth(_)
            | ScalarValue::DurationSecond(_)
            | ScalarValue::DurationMillisecond(_)
            | ScalarValue::DurationMicrosecond(_)
            | ScalarValue::DurationNanosecond(_)
    )
    .then(|| duration_text(value))
}

/// An expression as the user wrote it: columns by name (a window's grouping column as
/// `window_start`), not by their position in the plan.
fn user_text(expr: &Arc<dyn PhysicalExpr>) -> String {
    let Some(column) = expr.downcast_ref::<Column>() else {
        return without_positions(&expr.to_string());
    };
    let name = column.name();
    if ["tumble(", "hop(", "session("]
        .iter()
        .any(|window| name.starts_with(window))
    {
        "window_start".to_string()
    } else {
        name.rsplit('.').next().unwrap_or(name).to_string()
    }
}

/// `text` without the plan's column positions (`ts@1` as `ts`).
fn without_positions(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '@' && chars.peek().is_some_and(char::is_ascii_digit) {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn unit_name(unit: TimeUnit) -> &'static str {
    match unit {
        TimeUnit::Second => "seconds",
        TimeUnit::Millisecond => "milliseconds",
        TimeUnit::Microsecond => "microseconds",
        TimeUnit::Nanosecond => "nanoseconds",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_positions_are_left_out() {
        assert_eq!(
            without_positions("CAST(ts@1 AS Timestamp(ns)) + a@12"),
            "CAST(ts AS Timestamp(ns)) + a"
        );
        assert_eq!(without_positions("x@y"), "x@y");
    }

    #[test]
    fn a_planning_error_names_its_cause_and_writes_intervals_as_sql() {
        let inner = DataFusionError::Plan("LIMIT must be >= 0, '-1' was provided".into());
        let wrapped = DataFusionError::Context(
            "Optimizer rule 'eliminate_limit' failed".into(),
            Box::new(inner),
        );
        assert_eq!(
            explain_planning_error(wrapped).to_string(),
            "Error during planning: LIMIT must be >= 0, '-1' was provided"
        );
        let interval = DataFusionError::Plan(
            "only \"tumble(ev.ts,IntervalMonthDayNano(\"IntervalMonthDayNano { months: 0, days: 0, nanoseconds: 60000000000 }\"))\" appears".into(),
        );
        assert_eq!(
            explain_planning_error(interval).to_string(),
            "Error during planning: only \"tumble(ev.ts,INTERVAL '1' MINUTE)\" appears"
        );
    }
}
