//! ROW_NUMBER, RANK and DENSE_RANK per key, from each row's position in its key and its
//! ORDER BY value. Rows arrive per key in ORDER BY order, ties in arrival order: ROW_NUMBER is
//! the position plus one; RANK and DENSE_RANK advance when the ORDER BY value changes.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::common::Result;

use crate::checkpoint::{StateReader, StateWriter};

/// Which ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankingKind {
    RowNumber,
    Rank,
    DenseRank,
}

/// One key's last ORDER BY value and its rank.
#[derive(Debug, Default, Clone, Copy)]
struct KeyRank {
    time: i64,
    rank: u64,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Ranking {
    kind: RankingKind,
    keys: Vec<KeyRank>,
}

impl Ranking {
    pub fn new(kind: RankingKind) -> Self {
        Self {
            kind,
            keys: Vec::new(),
        }
    }

    /// The ranking of each row (row `r`: key `groups[r]`, position `positions[r]`, ORDER BY
    /// value `times[r]`), as `UInt64`.
    pub fn evaluate(&mut self, groups: &[usize], positions: &[u64], times: &[i64]) -> ArrayRef {
        if self.kind == RankingKind::RowNumber {
            let numbers: Vec<u64> = positions.iter().map(|p| p + 1).collect();
            return Arc::new(UInt64Array::from(numbers));
        }
        let dense = self.kind == RankingKind::DenseRank;
        let mut ranks = Vec::with_capacity(groups.len());
        for ((&group, &position), &time) in groups.iter().zip(positions).zip(times) {
            if group >= self.keys.len() {
                self.keys.resize(group + 1, KeyRank::default());
            }
            let key = &mut self.keys[group];
            if position == 0 || key.time != time {
                key.time = time;
                key.rank = if dense { key.rank + 1 } else { position + 1 };
                if position == 0 {
                    key.rank = 1;
                }
            }
            ranks.push(key.rank);
        }
        Arc::new(UInt64Array::from(ranks))
    }

    /// Writes every key's last ORDER BY value and rank, for a checkpoint.
    pub fn persist_keys(&self, out: &mut StateWriter) {
        let keys: Vec<(i64, u64)> = self.keys.iter().map(|k| (k.time, k.rank)).collect();
        out.put(&keys);
    }

    /// Takes back what [`Self::persist_keys`] wrote.
    pub fn restore_keys(&mut self, input: &mut StateReader) -> Result<()> {
        let keys: Vec<(i64, u64)> = input.get()?;
        self.keys = keys
            .into_iter()
            .map(|(time, rank)| KeyRank { time, rank })
            .collect();
        Ok(())
    }

    /// Forgets the keys `expired` marks, renumbering the others in order.
    pub fn retain_keys(&mut self, expired: &[bool]) {
        let mut keep = expired.iter().map(|e| !e);
        self.keys.retain(|_| keep.next().unwrap_or(true));
    }

    pub fn size(&self) -> usize {
        self.keys.capacity() * std::mem::size_of::<KeyRank>()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::UInt64Type;

    use super::*;

    fn ranks(kind: RankingKind) -> Vec<u64> {
        let mut ranking = Ranking::new(kind);
        // Key 0 has times 10, 10, 20, 30, 30 (split over two calls); key 1 has 5, 5.
        let first = ranking.evaluate(&[0, 1, 0, 0], &[0, 0, 1, 2], &[10, 5, 10, 20]);
        let second = ranking.evaluate(&[0, 1, 0], &[3, 1, 4], &[30, 5, 30]);
        first
            .as_primitive::<UInt64Type>()
            .values()
            .iter()
            .chain(second.as_primitive::<UInt64Type>().values())
            .copied()
            .collect()
    }

    #[test]
    fn rankings_follow_sql_on_ties() {
        assert_eq!(ranks(RankingKind::RowNumber), vec![1, 1, 2, 3, 4, 2, 5]);
        assert_eq!(ranks(RankingKind::Rank), vec![1, 1, 1, 3, 4, 1, 4]);
        assert_eq!(ranks(RankingKind::DenseRank), vec![1, 1, 1, 2, 3, 1, 3]);
    }
}
