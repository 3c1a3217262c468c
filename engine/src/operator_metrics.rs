//! [`StatefulMetrics`]: the counters every stateful streaming operator keeps per output
//! partition, beside its own.

use datafusion::common::Result;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, Gauge, MetricBuilder,
};

use crate::checkpoint::OperatorState;

/// See the module documentation.
pub(crate) struct StatefulMetrics {
    pub baseline: BaselineMetrics,
    pub records_in: Count,
    pub late_dropped: Count,
    pub null_time_dropped: Count,
    pub state_bytes: Gauge,
}

impl StatefulMetrics {
    pub fn new(metrics: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        Self {
            baseline: BaselineMetrics::new(metrics, partition),
            records_in: counter(metrics, "records_in", partition),
            late_dropped: counter(metrics, "late_records_dropped", partition),
            null_time_dropped: counter(metrics, "null_event_time_dropped", partition),
            state_bytes: gauge(metrics, "state_bytes", partition),
        }
    }
}

impl StatefulMetrics {
    /// Puts the records this partition dropped (late, or without an event time) into a
    /// checkpoint's `state`: a resumed run counts on from them.
    pub fn snapshot_into(&self, state: &mut OperatorState) {
        state.put_value("late_records_dropped", self.late_dropped.value() as i64);
        state.put_value(
            "null_event_time_dropped",
            self.null_time_dropped.value() as i64,
        );
    }

    /// Adds back the counts [`Self::snapshot_into`] kept.
    pub fn restore_from(&self, state: &OperatorState) -> Result<()> {
        self.late_dropped
            .add(state.value("late_records_dropped")? as usize);
        self.null_time_dropped
            .add(state.value("null_event_time_dropped")? as usize);
        Ok(())
    }
}

/// The counter `name` of `partition`.
pub(crate) fn counter(
    metrics: &ExecutionPlanMetricsSet,
    name: &'static str,
    partition: usize,
) -> Count {
    MetricBuilder::new(metrics).counter(name, partition)
}

/// The gauge `name` of `partition`.
pub(crate) fn gauge(
    metrics: &ExecutionPlanMetricsSet,
    name: &'static str,
    partition: usize,
) -> Gauge {
    MetricBuilder::new(metrics).gauge(name, partition)
}
