//! [`FixedIntervalsAsDurations`]: `ts ± INTERVAL '…'` with an interval of fixed length (no
//! months) over a timestamp without a time zone becomes `ts ± duration`.
//!
//! Arrow adds an interval to a timestamp row by row through calendar arithmetic (each value
//! converted to a date and time and back), which cost about a tenth of a windowed
//! aggregation that selects `window_end` (`window_start + INTERVAL '1' MINUTE`). A day has 24
//! hours in a timestamp without a time zone, so such an interval is a fixed duration, and
//! a duration is added as one integer per row. The values are the same; only months (whose
//! length varies) and time zones (whose days may not have 24 hours) keep the interval.

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use freshet_engine::window::duration_in_unit;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct FixedIntervalsAsDurations;

impl OptimizerRule for FixedIntervalsAsDurations {
    fn name(&self) -> &str {
        "freshet_fixed_intervals_as_durations"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        plan.transform_up(|node| {
            let inputs = node.inputs();
            // The expressions of a node read its one input (a projection, a filter, an
            // aggregation); others are left as they are.
            let [input] = inputs.as_slice() else {
                return Ok(Transformed::no(node));
            };
            let schema = input.schema().as_ref().clone();
            node.map_expressions(|expr| expr.transform_up(|e| as_duration(e, &schema)))
        })
    }
}

/// `expr` with a fixed interval added to or taken from a timezone-less timestamp as a
/// duration.
fn as_duration(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let (time, interval, interval_on_left) = match (left.as_ref(), right.as_ref()) {
        (time, Expr::Literal(interval, _)) if matches!(op, Operator::Plus | Operator::Minus) => {
            (time, interval, false)
        }
        (Expr::Literal(interval, _), time) if *op == Operator::Plus => (time, interval, true),
        _ => return Ok(Transformed::no(expr)),
    };
    let Ok(DataType::Timestamp(unit, None)) = time.get_type(schema) else {
        return Ok(Transformed::no(expr));
    };
    let Some(duration) = fixed_duration(interval, unit) else {
        return Ok(Transformed::no(expr));
    };
    let duration = Box::new(Expr::Literal(duration, None));
    let rewritten = match interval_on_left {
        true => BinaryExpr::new(duration, *op, Box::new(time.clone())),
        false => BinaryExpr::new(Box::new(time.clone()), *op, duration),
    };
    Ok(Transformed::yes(Expr::BinaryExpr(rewritten)))
}

/// `interval` as a duration in `unit`, if it has no months and is a whole number of units.
fn fixed_duration(interval: &ScalarValue, unit: TimeUnit) -> Option<ScalarValue> {
    if !matches!(
        interval,
        ScalarValue::IntervalMonthDayNano(Some(_)) | ScalarValue::IntervalDayTime(Some(_))
    ) {
        return None;
    }
    let value = duration_in_unit(interval, &DataType::Timestamp(unit, None)).ok()?;
    Some(match unit {
        TimeUnit::Second => ScalarValue::DurationSecond(Some(value)),
        TimeUnit::Millisecond => ScalarValue::DurationMillisecond(Some(value)),
        TimeUnit::Microsecond => ScalarValue::DurationMicrosecond(Some(value)),
        TimeUnit::Nanosecond => ScalarValue::DurationNanosecond(Some(value)),
    })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::IntervalMonthDayNano;

    use super::*;
    use crate::test_support::plan;

    #[test]
    fn window_end_adds_a_duration_and_a_month_stays_an_interval() {
        let windowed = plan(
            "SELECT symbol, window_start, window_end, COUNT(*) AS n FROM market_data GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)",
            1,
            1,
        )
        .unwrap();
        assert!(windowed.contains("+ 60000 as window_end"), "{windowed}");
        let monthly = plan(
            "SELECT trade_time + INTERVAL '1' MONTH AS later FROM market_data",
            1,
            1,
        )
        .unwrap();
        assert!(monthly.contains("IntervalMonthDayNano"), "{monthly}");
    }

    #[test]
    fn a_fixed_interval_is_a_duration_in_the_timestamps_unit() {
        let minute = ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(
            0,
            1,
            60_000_000_000,
        )));
        assert_eq!(
            fixed_duration(&minute, TimeUnit::Millisecond),
            Some(ScalarValue::DurationMillisecond(Some(86_460_000)))
        );
        let month = ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(1, 0, 0)));
        assert_eq!(fixed_duration(&month, TimeUnit::Millisecond), None);
        let half_a_milli =
            ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(0, 0, 500_000)));
        assert_eq!(fixed_duration(&half_a_milli, TimeUnit::Millisecond), None);
        assert_eq!(
            fixed_duration(&half_a_milli, TimeUnit::Nanosecond),
            Some(ScalarValue::DurationNanosecond(Some(500_000)))
        );
    }
}
