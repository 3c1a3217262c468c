//! [`Persist`]: the in-memory state of kernels whose state is not columnar (per-key rings,
//! deques and running sums of the window functions) written as bytes, with any Arrow arrays
//! it holds kept apart as arrays.
//!
//! A [`StateWriter`] appends each value's little-endian bytes in a fixed order; a
//! [`StateReader`] reads them back in the same order. Arrays go into a list beside the
//! bytes, and the bytes hold their index. [`StateWriter::finish`] puts both into an
//! [`OperatorState`] under one name, so the state file stays one Arrow IPC file; a reader
//! that finds fewer bytes than it reads, or bytes left over, fails rather than guessing.

use std::collections::VecDeque;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryArray};
use datafusion::common::{Result, internal_err};

use super::OperatorState;

/// A value a checkpoint writes as bytes; see the module documentation.
pub trait Persist: Sized {
    fn persist(&self, out: &mut StateWriter);
    fn restore(input: &mut StateReader) -> Result<Self>;
}

/// Bytes and arrays being written.
#[derive(Default)]
pub struct StateWriter {
    bytes: Vec<u8>,
    arrays: Vec<ArrayRef>,
}

impl StateWriter {
    pub fn put<T: Persist>(&mut self, value: &T) {
        value.persist(self);
    }

    fn put_bytes(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    /// Puts what was written into `state` as `{name}_bytes` and `{name}_array_NNNNNN`.
    pub fn finish(self, state: &mut OperatorState, name: &str) {
        let bytes = BinaryArray::from_iter_values([self.bytes.as_slice()]);
        state.put_array(format!("{name}_bytes"), Arc::new(bytes));
        for (index, array) in self.arrays.into_iter().enumerate() {
            state.put_array(format!("{name}_array_{index:06}"), array);
        }
    }
}

/// Bytes and arrays being read back.
pub struct StateReader {
    bytes: Vec<u8>,
    at: usize,
    arrays: Vec<ArrayRef>,
}

impl StateReader {
    /// What [`StateWriter::finish`] put into `state` under `name`.
    pub fn of(state: &OperatorState, name: &str) -> Result<Self> {
        let bytes = state.array(&format!("{name}_bytes"))?.as_binary::<i32>();
        if bytes.len() != 1 {
            return internal_err!("checkpoint: '{name}' holds {} byte strings", bytes.len());
        }
        Ok(Self {
            bytes: bytes.value(0).to_vec(),
            at: 0,
            arrays: state.arrays_with_prefix(&format!("{name}_array_")),
        })
    }

    pub fn get<T: Persist>(&mut self) -> Result<T> {
        T::restore(self)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        let Some(Ok(bytes)) = self
            .bytes
            .get(self.at..self.at + N)
            .map(<[u8; N]>::try_from)
        else {
            return internal_err!("checkpoint: a kernel's state ends early");
        };
        self.at += N;
        Ok(bytes)
    }

    /// Fails unless every byte was read.
    pub fn finish(self) -> Result<()> {
        match self.at == self.bytes.len() {
            true => Ok(()),
            false => internal_err!(
                "checkpoint: {} bytes of a kernel's state were not read",
                self.bytes.len() - self.at
            ),
        }
    }
}

macro_rules! persist_number {
    ($($number:ty),*) => {$(
        impl Persist for $number {
            fn persist(&self, out: &mut StateWriter) {
                out.put_bytes(&self.to_le_bytes());
            }
            fn restore(input: &mut StateReader) -> Result<Self> {
                Ok(<$number>::from_le_bytes(input.take()?))
            }
        }
    )*};
}

persist_number!(u8, u32, u64, i64, f64);

impl Persist for usize {
    fn persist(&self, out: &mut StateWriter) {
        (*self as u64).persist(out);
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        Ok(u64::restore(input)? as usize)
    }
}

impl Persist for bool {
    fn persist(&self, out: &mut StateWriter) {
        u8::from(*self).persist(out);
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        Ok(u8::restore(input)? != 0)
    }
}

impl<T: Persist> Persist for Option<T> {
    fn persist(&self, out: &mut StateWriter) {
        self.is_some().persist(out);
        if let Some(value) = self {
            value.persist(out);
        }
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        Ok(match bool::restore(input)? {
            true => Some(T::restore(input)?),
            false => None,
        })
    }
}

impl<A: Persist, B: Persist> Persist for (A, B) {
    fn persist(&self, out: &mut StateWriter) {
        self.0.persist(out);
        self.1.persist(out);
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        Ok((A::restore(input)?, B::restore(input)?))
    }
}

impl<T: Persist> Persist for Vec<T> {
    fn persist(&self, out: &mut StateWriter) {
        self.len().persist(out);
        for value in self {
            value.persist(out);
        }
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        let len = usize::restore(input)?;
        // Each value takes at least a byte: a corrupt length cannot allocate beyond them.
        let mut values = Vec::with_capacity(len.min(input.bytes.len() - input.at));
        for _ in 0..len {
            values.push(T::restore(input)?);
        }
        Ok(values)
    }
}

impl<T: Persist> Persist for VecDeque<T> {
    fn persist(&self, out: &mut StateWriter) {
        self.len().persist(out);
        for value in self {
            value.persist(out);
        }
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        Ok(Vec::<T>::restore(input)?.into())
    }
}

impl Persist for ArrayRef {
    fn persist(&self, out: &mut StateWriter) {
        out.arrays.len().persist(out);
        out.arrays.push(Arc::clone(self));
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        let index = usize::restore(input)?;
        match input.arrays.get(index) {
            Some(array) => Ok(Arc::clone(array)),
            None => internal_err!("checkpoint: a kernel's state names array {index}, not kept"),
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;

    use super::*;

    #[test]
    fn values_and_arrays_read_back_as_written() {
        let array: ArrayRef = Arc::new(Int64Array::from(vec![4, 5]));
        let deque: VecDeque<(u64, f64)> = [(1, 0.5), (2, f64::NAN)].into();
        let mut writer = StateWriter::default();
        writer.put(&vec![Some(3_i64), None]);
        writer.put(&deque);
        writer.put(&array);
        writer.put(&true);
        let mut state = OperatorState::default();
        writer.finish(&mut state, "k");
        let mut reader = StateReader::of(&state, "k").unwrap();
        assert_eq!(
            reader.get::<Vec<Option<i64>>>().unwrap(),
            vec![Some(3), None]
        );
        let read: VecDeque<(u64, f64)> = reader.get().unwrap();
        assert_eq!(read[0], (1, 0.5));
        assert!(read[1].1.is_nan());
        assert_eq!(reader.get::<ArrayRef>().unwrap().as_ref(), array.as_ref());
        assert!(reader.get::<bool>().unwrap());
        reader.finish().unwrap();
    }

    #[test]
    fn a_state_read_past_its_end_or_short_of_it_is_an_error() {
        let mut writer = StateWriter::default();
        writer.put(&7_u64);
        let mut state = OperatorState::default();
        writer.finish(&mut state, "k");
        let mut reader = StateReader::of(&state, "k").unwrap();
        assert!(reader.get::<u32>().is_ok());
        assert!(reader.get::<u64>().is_err());
        let reader = StateReader::of(&state, "k").unwrap();
        assert!(reader.finish().is_err());
    }
}
