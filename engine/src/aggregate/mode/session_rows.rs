//! [`SessionRows`]: session windows with EMIT FINAL. A session's extent is known only once
//! no record can extend it, so the rows of open sessions are buffered ([`SessionBuffer`])
//! until the watermark passes a session's last event time plus the gap (and the allowed
//! lateness); then the closed sessions' rows are aggregated in one pass, keyed by (session
//! start, GROUP BY keys), and emitted.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::logical_expr::EmitTo;

use super::context::ModeContext;
use crate::aggregate::assignment::Assignment;
use crate::aggregate::inputs::AggregateInputs;
use crate::aggregate::session_buffer::SessionBuffer;
use crate::aggregate::spec::AggregateSpec;
use crate::kernels::GroupTable;

/// See the module documentation.
pub(crate) struct SessionRows {
    inputs: AggregateInputs,
    /// Aggregates the sessions that close, then is emitted whole.
    table: GroupTable,
    buffer: SessionBuffer,
    pub(super) context: ModeContext,
}

impl SessionRows {
    pub fn try_new(
        spec: &AggregateSpec,
        input_schema: SchemaRef,
        context: ModeContext,
    ) -> Result<Self> {
        let table_schema = Arc::new(Schema::new(spec.table_fields()));
        Ok(Self {
            inputs: AggregateInputs::new(spec.key_exprs(), &spec.aggregates, &spec.filters),
            table: GroupTable::try_new(&table_schema, &spec.aggregates)?,
            buffer: SessionBuffer::new(input_schema),
            context,
        })
    }

    pub fn process(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        self.context.count_records(batch.num_rows());
        if let Some(rows) = self.context.open_session_rows(batch)? {
            self.buffer.push(rows);
        }
        self.report_state()?;
        Ok(None)
    }

    /// Aggregates and emits the sessions the watermark has closed.
    pub fn advance(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        self.context.raise_watermark(watermark);
        let Some(window) = &self.context.window else {
            return Ok(None);
        };
        let gap = window.spec.size();
        let (watermark, lateness) = (self.context.watermark, self.context.allowed_lateness);
        let closed = self
            .buffer
            .take_closed(&window.time, &self.inputs.keys, gap, |last| {
                watermark == i64::MAX
                    || last.saturating_add(gap).saturating_add(lateness) <= watermark
            })?;
        let Some(closed) = closed else {
            self.report_state()?;
            return Ok(None);
        };
        let rows = closed.rows.num_rows();
        let columns = self.inputs.evaluate(&closed.rows)?;
        let (keys, arguments, filters) = columns.pick(&Assignment::whole_batch())?;
        let mut table_keys = vec![self.context.window_column(&closed.starts)?];
        table_keys.extend(keys);
        self.table.update(&table_keys, &arguments, &filters, rows)?;
        let groups = self.table.len();
        let (keys, values) = self.table.emit(EmitTo::All)?;
        self.context.metrics.windows_emitted.add(groups);
        self.context.metrics.windows_opened.add(groups);
        let output = self.context.output_batch(keys, values, groups)?;
        self.report_state()?;
        self.context.combine(vec![output])
    }

    fn report_state(&mut self) -> Result<()> {
        let bytes = self.table.size() + self.buffer.size();
        self.context.account(bytes, self.table.len())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{batch, mode, rows, spec, watermark};
    use crate::aggregate::spec::AggregateEmit;
    use crate::window::WindowSpec;

    #[test]
    fn a_session_closes_when_the_watermark_passes_its_last_record_plus_the_gap() {
        let gap = WindowSpec::Session { gap: 1_000 };
        let mut mode = mode(&spec(Some(gap), AggregateEmit::Final), None);
        // a: 0 and 800 share a session (800 < gap), 3 000 starts another; b: one session.
        let input = rows(&[("a", 0, 1), ("a", 800, 2), ("b", 500, 4), ("a", 3_000, 8)]);
        assert!(batch(&mut mode, &input).is_empty());
        assert!(watermark(&mut mode, 1_499).is_empty());
        assert_eq!(watermark(&mut mode, 1_800), ["0,a,2,3", "500,b,1,4"]);
        assert_eq!(watermark(&mut mode, i64::MAX), ["3000,a,1,8"]);
    }
}
