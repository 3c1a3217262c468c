//! [`OperatorState`]: what one partition of an operator keeps, as a checkpoint stores it.
//!
//! A state is a set of named Arrow arrays of any lengths and types (keys, accumulator
//! states, running vectors) and named integers (a watermark, a count). It is stored as one
//! Arrow IPC file holding a one-row batch: each array as the single list of a list column,
//! each integer as the schema's metadata. Its size follows the state, not the input read.

use std::collections::HashMap;
use std::io::{Cursor, Write};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::arrow::ipc::reader::FileReader;
use datafusion::arrow::ipc::writer::FileWriter;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::{Result, internal_err, plan_err};

/// See the module documentation.
#[derive(Debug, Default, Clone)]
pub struct OperatorState {
    arrays: Vec<(String, ArrayRef)>,
    values: Vec<(String, i64)>,
}

impl OperatorState {
    pub fn put_array(&mut self, name: impl Into<String>, array: ArrayRef) {
        self.arrays.push((name.into(), array));
    }

    pub fn put_value(&mut self, name: impl Into<String>, value: i64) {
        self.values.push((name.into(), value));
    }

    pub fn array(&self, name: &str) -> Result<&ArrayRef> {
        match self.arrays.iter().find(|(n, _)| n == name) {
            Some((_, array)) => Ok(array),
            None => internal_err!("checkpoint state has no array '{name}'"),
        }
    }

    /// The arrays whose names start with `prefix`, in the order they were put.
    pub fn arrays_with_prefix(&self, prefix: &str) -> Vec<ArrayRef> {
        self.arrays
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(_, a)| Arc::clone(a))
            .collect()
    }

    /// Puts each aggregate's partial state columns (`states[aggregate]`) under `prefix`.
    pub fn put_aggregate_states(&mut self, prefix: &str, states: Vec<Vec<ArrayRef>>) {
        self.put_value(format!("{prefix}_aggregates"), states.len() as i64);
        for (aggregate, columns) in states.into_iter().enumerate() {
            self.put_value(
                format!("{prefix}_width_{aggregate:03}"),
                columns.len() as i64,
            );
            for (index, column) in columns.into_iter().enumerate() {
                self.put_array(format!("{prefix}_{aggregate:03}_{index:03}"), column);
            }
        }
    }

    /// The aggregates' partial state columns [`Self::put_aggregate_states`] put under
    /// `prefix`.
    pub fn aggregate_states(&self, prefix: &str) -> Result<Vec<Vec<ArrayRef>>> {
        let aggregates = self.value(&format!("{prefix}_aggregates"))?;
        (0..aggregates)
            .map(|aggregate| {
                let width = self.value(&format!("{prefix}_width_{aggregate:03}"))?;
                (0..width)
                    .map(|index| {
                        self.array(&format!("{prefix}_{aggregate:03}_{index:03}"))
                            .cloned()
                    })
                    .collect()
            })
            .collect()
    }

    pub fn value(&self, name: &str) -> Result<i64> {
        match self.values.iter().find(|(n, _)| n == name) {
            Some((_, value)) => Ok(*value),
            None => internal_err!("checkpoint state has no value '{name}'"),
        }
    }

    /// The state as the bytes of an Arrow IPC file.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.write_to(&mut bytes)?;
        Ok(bytes)
    }

    /// Writes the state to `out` as an Arrow IPC file.
    pub fn write_to(&self, out: &mut impl Write) -> Result<()> {
        let mut fields = Vec::with_capacity(self.arrays.len());
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.arrays.len());
        for (name, array) in &self.arrays {
            let item = Arc::new(Field::new("item", array.data_type().clone(), true));
            let list = ListArray::try_new(
                Arc::clone(&item),
                OffsetBuffer::from_lengths([array.len()]),
                Arc::clone(array),
                None,
            )?;
            fields.push(Field::new(name, list.data_type().clone(), false));
            columns.push(Arc::new(list));
        }
        let metadata: HashMap<String, String> = self
            .values
            .iter()
            .map(|(name, value)| (name.clone(), value.to_string()))
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
        let batch = RecordBatch::try_new_with_options(
            Arc::clone(&schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let mut writer = FileWriter::try_new(out, &schema)?;
        writer.write(&batch)?;
        writer.finish()?;
        Ok(())
    }

    /// The state stored in `bytes` (an Arrow IPC file written by [`Self::encode`]).
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut reader = FileReader::try_new(Cursor::new(bytes), None)?;
        let schema = reader.schema();
        let Some(batch) = reader.next().transpose()? else {
            return plan_err!("checkpoint state file holds no batch");
        };
        let mut state = Self::default();
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            let list = column.as_list::<i32>();
            state.put_array(field.name(), list.value(0));
        }
        for (name, value) in schema.metadata() {
            match value.parse() {
                Ok(value) => state.put_value(name, value),
                Err(_) => return plan_err!("checkpoint state value '{name}' is not an integer"),
            }
        }
        Ok(state)
    }
}

/// The checksum of a checkpoint's files: FNV-1a over 64-bit little-endian words (the last
/// bytes zero-padded), then the length, so that reading back a gigabyte is not slowed by a
/// byte-at-a-time hash.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut sum = Checksum::default();
    sum.update(bytes);
    sum.finish()
}

/// [`checksum`] over bytes given in pieces.
#[derive(Debug, Clone)]
pub struct Checksum {
    hash: u64,
    /// Bytes of a word not complete yet.
    tail: [u8; 8],
    tail_len: usize,
    bytes: u64,
}

impl Default for Checksum {
    fn default() -> Self {
        Self {
            hash: 0xcbf2_9ce4_8422_2325,
            tail: [0; 8],
            tail_len: 0,
            bytes: 0,
        }
    }
}

impl Checksum {
    fn mix(&mut self, word: u64) {
        self.hash = (self.hash ^ word).wrapping_mul(0x0100_0000_01b3);
    }

    pub fn update(&mut self, mut bytes: &[u8]) {
        self.bytes += bytes.len() as u64;
        if self.tail_len > 0 {
            let taken = (8 - self.tail_len).min(bytes.len());
            self.tail[self.tail_len..self.tail_len + taken].copy_from_slice(&bytes[..taken]);
            self.tail_len += taken;
            bytes = &bytes[taken..];
            if self.tail_len < 8 {
                return;
            }
            let word = u64::from_le_bytes(self.tail);
            self.mix(word);
            self.tail_len = 0;
        }
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut array = [0; 8];
            array.copy_from_slice(word);
            self.mix(u64::from_le_bytes(array));
        }
        let rest = words.remainder();
        self.tail[..rest.len()].copy_from_slice(rest);
        self.tail_len = rest.len();
    }

    pub fn finish(mut self) -> u64 {
        if self.tail_len > 0 {
            self.tail[self.tail_len..].fill(0);
            let word = u64::from_le_bytes(self.tail);
            self.mix(word);
        }
        let bytes = self.bytes;
        self.mix(bytes);
        self.hash
    }

    /// Bytes summed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A writer that sums what it writes.
pub struct SummingWriter<W> {
    pub inner: W,
    pub sum: Checksum,
}

impl<W: Write> Write for SummingWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(bytes)?;
        self.sum.update(&bytes[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Float64Array, Int64Array, StringArray};

    use super::*;

    #[test]
    fn a_state_of_arrays_of_any_length_round_trips() {
        let mut state = OperatorState::default();
        state.put_array("keys", Arc::new(StringArray::from(vec!["a", "b", "c"])));
        state.put_array("sums", Arc::new(Float64Array::from(vec![1.5])));
        state.put_array("empty", Arc::new(Int64Array::from(Vec::<i64>::new())));
        state.put_value("watermark", -42);
        let decoded = OperatorState::decode(&state.encode().unwrap()).unwrap();
        assert_eq!(decoded.array("keys").unwrap().len(), 3);
        assert_eq!(decoded.array("sums").unwrap().len(), 1);
        assert_eq!(decoded.array("empty").unwrap().len(), 0);
        assert_eq!(decoded.value("watermark").unwrap(), -42);
        assert_eq!(
            decoded.array("keys").unwrap().as_string::<i32>().value(2),
            "c"
        );
    }

    #[test]
    fn the_checksum_sees_one_flipped_bit_and_does_not_see_how_bytes_were_cut() {
        assert_ne!(checksum(b"abc"), checksum(b"abd"));
        assert_ne!(checksum(b"abc"), checksum(b"abc\0"), "the length counts");
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut pieces = Checksum::default();
        for piece in bytes.chunks(13) {
            pieces.update(piece);
        }
        assert_eq!(pieces.finish(), checksum(&bytes));
    }
}
