//! [`StatefulMetrics`]: the counters every stateful streaming operator keeps per output
//! partition, beside its own.

use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, Gauge, MetricBuilder,
};

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
