//! [`Ring`]: the last `capacity` values of one key, in a buffer that grows up to the capacity
//! and then wraps — a frame of 10 000 rows costs a key nothing until it has that many rows.

use datafusion::common::Result;

use crate::checkpoint::{Persist, StateReader, StateWriter};

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct Ring<T> {
    buffer: Vec<T>,
    /// Where the oldest value is, once the buffer is full.
    head: usize,
}

impl<T: Copy> Ring<T> {
    /// Adds `value`; returns the value it pushes out when `capacity` values are held.
    #[inline]
    pub fn push(&mut self, value: T, capacity: usize) -> Option<T> {
        if self.buffer.len() < capacity {
            self.buffer.push(value);
            return None;
        }
        let leaving = std::mem::replace(&mut self.buffer[self.head], value);
        self.head += 1;
        if self.head == self.buffer.len() {
            self.head = 0;
        }
        Some(leaving)
    }

    /// [`Self::push`] when `capacity` values are held already: the value pushed out;
    /// `None`, with nothing done, otherwise.
    #[inline]
    pub fn push_full(&mut self, value: T, capacity: usize) -> Option<T> {
        if self.buffer.len() != capacity {
            return None;
        }
        let head = self.head;
        let slot = self.buffer.get_mut(head)?;
        let leaving = std::mem::replace(slot, value);
        self.head = if head + 1 == capacity { 0 } else { head + 1 };
        Some(leaving)
    }

    /// The value the next push pushes out, when `capacity` values are held.
    #[inline]
    pub fn oldest_when_full(&self, capacity: usize) -> Option<&T> {
        if self.buffer.len() != capacity {
            return None;
        }
        self.buffer.get(self.head)
    }

    /// Values held.
    #[inline]
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// The value pushed `back` pushes ago (0: the latest), if still held.
    #[inline]
    pub fn back(&self, back: usize) -> Option<T> {
        let len = self.buffer.len();
        if back >= len {
            return None;
        }
        // The latest value sits just before the head.
        let latest = if self.head == 0 {
            len - 1
        } else {
            self.head - 1
        };
        let index = if back <= latest {
            latest - back
        } else {
            len + latest - back
        };
        Some(self.buffer[index])
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.buffer.capacity() * std::mem::size_of::<T>()
    }
}

impl<T: Persist> Persist for Ring<T> {
    fn persist(&self, out: &mut StateWriter) {
        out.put(&self.buffer);
        out.put(&self.head);
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        Ok(Self {
            buffer: input.get()?,
            head: input.get()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_values_and_returns_the_leaving_one() {
        let mut ring = Ring::default();
        assert_eq!(ring.push(1, 3), None);
        assert_eq!(ring.push(2, 3), None);
        assert_eq!(ring.back(0), Some(2));
        assert_eq!(ring.back(1), Some(1));
        assert_eq!(ring.back(2), None);
        assert_eq!(ring.push(3, 3), None);
        assert_eq!(ring.push(4, 3), Some(1));
        assert_eq!(ring.push(5, 3), Some(2));
        assert_eq!(
            (ring.back(0), ring.back(1), ring.back(2)),
            (Some(5), Some(4), Some(3))
        );
        assert_eq!(ring.back(3), None);
    }

    #[test]
    fn a_push_when_full_moves_the_ring_like_a_push() {
        let mut ring = Ring::default();
        assert_eq!(ring.push_full(1, 2), None);
        assert_eq!(ring.oldest_when_full(2), None);
        ring.push(1, 2);
        ring.push(2, 2);
        assert_eq!(ring.oldest_when_full(2), Some(&1));
        assert_eq!(ring.push_full(3, 2), Some(1));
        assert_eq!(ring.push_full(4, 2), Some(2));
        assert_eq!(ring.push(5, 2), Some(3));
        assert_eq!((ring.back(0), ring.back(1)), (Some(5), Some(4)));
    }
}
