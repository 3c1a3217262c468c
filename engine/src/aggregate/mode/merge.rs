//! [`MergePartials`]: the final step of two-phase aggregation. Its input is partial states
//! (see [`crate::aggregate::partial_states`]), which it merges per (window, keys) into a
//! [`WindowGroups`] with `merge_batch`; windows then close and emit as in single-phase
//! EMIT FINAL.
//!
//! The partial step judged lateness at this operator's watermark (the exchange serialises
//! the two), so no state of a closed window should arrive; if one does, its records are
//! dropped and counted rather than reopening the window. Over hopping windows the states are
//! panes' (one slide each): a pane whose latest window is closed is late; the others are
//! added to each of their windows still open.

use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;

use super::context::ModeContext;
use super::windows::WindowGroups;
use crate::aggregate::partial::PartialAggregate;
use crate::aggregate::partial_states::{PartialStateFormat, PartialStates};
use crate::aggregate::spec::AggregateSpec;

/// See the module documentation.
pub(crate) struct MergePartials {
    pub(super) groups: WindowGroups,
    format: PartialStateFormat,
    /// The slide and the slides a window spans, when the states are panes.
    panes: Option<(i64, i64)>,
}

impl MergePartials {
    pub fn try_new(
        spec: &AggregateSpec,
        partial: &Arc<PartialAggregate>,
        context: ModeContext,
    ) -> Result<Self> {
        let format = partial.format().clone();
        Ok(Self {
            groups: WindowGroups::try_new(spec, &format.schema(), context)?,
            format,
            panes: partial.panes(),
        })
    }

    pub fn process(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let states = self.format.split(batch)?;
        self.merge(states)?;
        self.groups.report_state()?;
        Ok(None)
    }

    pub fn advance(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        self.groups.advance(watermark)
    }

    fn merge(&mut self, states: PartialStates) -> Result<()> {
        let context = &self.groups.context;
        if context.window.is_none() {
            // Without a window, every state is of the one endless window.
            context.count_records(states.record_count() as usize);
            let rows = states.starts.len();
            return self.groups.merge(None, &states.keys, &states.states, rows);
        }
        let closed_through = context.closed_through();
        let open: BooleanArray = states
            .starts
            .iter()
            .map(|s| Some(s.is_some_and(|s| s > closed_through)))
            .collect();
        let records = states.record_count();
        let states = if open.true_count() == open.len() {
            states
        } else {
            let closed = open.len() - open.true_count();
            let late: u64 = states
                .records
                .iter()
                .zip(open.iter())
                .filter(|(_, open)| *open == Some(false))
                .map(|(n, _)| n.unwrap_or(0))
                .sum();
            context.metrics.stateful.late_dropped.add(late as usize);
            if closed == open.len() {
                return Ok(());
            }
            states.filter(&open)?
        };
        context.count_records(records as usize);
        let pieces = match self.panes {
            Some((slide, count)) => states.into_windows(slide, count, closed_through)?,
            None => vec![states],
        };
        for states in pieces {
            let context = &self.groups.context;
            let rows = states.starts.len();
            let mut table_keys = vec![context.window_column(&states.starts)?];
            table_keys.extend(states.keys);
            self.groups
                .merge(Some(&states.starts), &table_keys, &states.states, rows)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::record_batch::RecordBatch;

    use super::super::test_support::{TUMBLE_1S, batch, context, mode, rows, spec, watermark};
    use crate::aggregate::partial::PartialAggregate;
    use crate::aggregate::spec::AggregateEmit;
    use crate::exchange::InputStepState;
    use crate::window::WindowSpec;

    #[test]
    fn merged_partial_states_give_the_single_phase_result() {
        let spec = spec(Some(TUMBLE_1S), AggregateEmit::Final);
        let partial = Arc::new(PartialAggregate::try_new(&spec).unwrap());
        let mut merge = mode(&spec, Some(&partial));
        // Two source partitions, each aggregated by its own partial step.
        for input in [
            rows(&[("a", 100, 1), ("b", 1_200, 2)]),
            rows(&[("a", 900, 3), ("b", 1_300, 4)]),
        ] {
            let mut step = partial.aggregator().unwrap();
            let states = step.process(&input, i64::MIN).unwrap().batch.unwrap();
            assert!(batch(&mut merge, &states).is_empty());
        }
        assert_eq!(watermark(&mut merge, 1_000), ["0,a,2,4"]);
        assert_eq!(watermark(&mut merge, i64::MAX), ["1000,b,2,6"]);
        assert_eq!(context(&merge).metrics.stateful.records_in.value(), 4);
    }

    const HOP_3S_EVERY_1S: WindowSpec = WindowSpec::Hop {
        size: 3_000,
        slide: 1_000,
    };

    /// The pane states of two source partitions' `inputs`, merged after `watermark`, and
    /// the windows emitted at the end.
    fn merged_panes(inputs: [RecordBatch; 2], watermark_first: i64) -> (Vec<String>, usize) {
        let spec = spec(Some(HOP_3S_EVERY_1S), AggregateEmit::Final);
        let partial = Arc::new(PartialAggregate::try_new(&spec).unwrap());
        let mut merge = mode(&spec, Some(&partial));
        watermark(&mut merge, watermark_first);
        for input in inputs {
            let mut step = partial.aggregator().unwrap();
            let states = step.process(&input, i64::MIN).unwrap().batch.unwrap();
            assert!(batch(&mut merge, &states).is_empty());
        }
        let mut windows = watermark(&mut merge, i64::MAX);
        windows.sort();
        let late = context(&merge).metrics.stateful.late_dropped.value();
        (windows, late)
    }

    #[test]
    fn pane_states_of_hopping_windows_give_each_window_its_records() {
        let (windows, late) = merged_panes(
            [
                rows(&[("a", 100, 1), ("a", 1_200, 2)]),
                rows(&[("a", 900, 3), ("b", 2_100, 4)]),
            ],
            i64::MIN,
        );
        // Each record is in the three windows starting in the 3 s up to it.
        assert_eq!(
            windows,
            [
                "-1000,a,3,6",
                "-2000,a,2,4",
                "0,a,3,6",
                "0,b,1,4",
                "1000,a,1,2",
                "1000,b,1,4",
                "2000,b,1,4"
            ]
        );
        assert_eq!(late, 0);
    }

    #[test]
    fn a_pane_whose_latest_window_closed_is_late_and_the_others_lose_their_closed_windows() {
        // At watermark 3 000 the windows starting at 0 and before are closed.
        let (windows, late) = merged_panes(
            [
                rows(&[("a", 100, 1), ("a", 1_200, 2)]),
                rows(&[("a", 900, 3), ("b", 2_100, 4)]),
            ],
            3_000,
        );
        assert_eq!(windows, ["1000,a,1,2", "1000,b,1,4", "2000,b,1,4"]);
        assert_eq!(late, 2);
    }

    #[test]
    fn states_of_a_window_closed_meanwhile_are_dropped_and_counted() {
        let spec = spec(Some(TUMBLE_1S), AggregateEmit::Final);
        let partial = Arc::new(PartialAggregate::try_new(&spec).unwrap());
        let mut merge = mode(&spec, Some(&partial));
        let mut step = partial.aggregator().unwrap();
        let states = step
            .process(&rows(&[("a", 100, 1), ("a", 1_100, 2)]), i64::MIN)
            .unwrap()
            .batch
            .unwrap();
        watermark(&mut merge, 1_000);
        batch(&mut merge, &states);
        assert_eq!(context(&merge).metrics.stateful.late_dropped.value(), 1);
        assert_eq!(watermark(&mut merge, i64::MAX), ["1000,a,1,2"]);
    }
}
