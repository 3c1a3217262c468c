//! [`SeenPairs`]: the (group, value) pairs a group table's `COUNT(DISTINCT x)` aggregates
//! have seen, each with a byte of bits, one per aggregate that counted it.
//!
//! The values counted are mostly ids (bidders, auctions), which lie in a range that grows
//! with the stream, and the groups few (Nexmark q15 and q16: a day, or a channel and a day).
//! So each group keeps a byte per value of its range, `members[value - base]`: a row costs
//! one access to an array the size of the group's range, where a hash table of the pairs
//! costs a cache miss per row and, as it grows, writes and zeroes fresh memory several
//! times over. A value below a group's base moves its base down, leaving room for more.
//!
//! The bytes are worth their memory only while the ranges are dense with pairs: once the
//! groups' ranges together hold more than [`SLOTS_PER_PAIR`] bytes per pair seen (and more
//! than [`DENSE_MIN_SLOTS`]), as for many groups of values spread far apart, the pairs move to
//! a hash table, which keeps them from then on (until every group has left).

use std::mem::size_of;

use datafusion::common::HashMap;
use datafusion::common::hash_utils::RandomState;

/// Bytes the dense ranges may always take, whatever their share of pairs.
const DENSE_MIN_SLOTS: usize = 4 << 20;

/// Bytes of dense ranges allowed per pair seen: a hash table entry takes about as many.
const SLOTS_PER_PAIR: usize = 16;

/// A (group, value) pair as the hash table keeps it: packed into 12 bytes, so that an entry
/// with its members' bits takes 13 (24 as an aligned tuple), as fresh table memory is zeroed
/// when it grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, packed)]
pub(super) struct Pair {
    value: i64,
    group: u32,
}

/// One group's range of values: the members of `base + i` at `members[i]`.
#[derive(Debug, Default)]
struct GroupRange {
    base: i64,
    members: Vec<u8>,
}

/// Every group's range, and the pairs they hold.
#[derive(Debug, Default)]
pub(super) struct DensePairs {
    groups: Vec<GroupRange>,
    /// The ranges' lengths together.
    slots: usize,
    /// Pairs with at least one member bit.
    pairs: usize,
}

/// The pairs seen, by group range or hashed; see the module documentation.
#[derive(Debug)]
pub(super) enum SeenPairs {
    Dense(DensePairs),
    Hashed(HashMap<Pair, u8, RandomState>),
}

impl Default for SeenPairs {
    fn default() -> Self {
        SeenPairs::Dense(DensePairs::default())
    }
}

impl DensePairs {
    /// Whether the ranges may hold `slots` bytes in all.
    fn affords(&self, slots: usize) -> bool {
        slots <= DENSE_MIN_SLOTS || slots <= self.pairs.saturating_mul(SLOTS_PER_PAIR)
    }

    /// The byte of `value` in `group`'s range, the range grown to it; `None` when that
    /// would take more memory than the pairs are worth.
    #[inline]
    fn slot(&mut self, group: usize, value: i64) -> Option<&mut u8> {
        if group >= self.groups.len() {
            self.groups.resize_with(group + 1, GroupRange::default);
        }
        let range = &mut self.groups[group];
        let offset = value.wrapping_sub(range.base) as u64;
        if offset < range.members.len() as u64 {
            return Some(&mut self.groups[group].members[offset as usize]);
        }
        self.grow(group, value)
    }

    /// Extends `group`'s range to `value` (down, with room for as many values again below
    /// it as the range holds), or `None` when not affordable.
    fn grow(&mut self, group: usize, value: i64) -> Option<&mut u8> {
        let range = &self.groups[group];
        let length = range.members.len();
        if length == 0 {
            let range = &mut self.groups[group];
            range.base = value;
            range.members.push(0);
            self.slots += 1;
            return range.members.first_mut();
        }
        let high = range.base.checked_add(length as i64 - 1)?;
        let (base, new_length) = if value < range.base {
            let room = i64::try_from(length / 2).ok()?;
            let base = value.checked_sub(room).unwrap_or(value);
            (
                base,
                usize::try_from(high.checked_sub(base)?)
                    .ok()?
                    .checked_add(1)?,
            )
        } else {
            (
                range.base,
                usize::try_from(value.checked_sub(range.base)?)
                    .ok()?
                    .checked_add(1)?,
            )
        };
        let slots = self.slots.checked_add(new_length - length)?;
        if !self.affords(slots) {
            return None;
        }
        self.slots = slots;
        let range = &mut self.groups[group];
        if base < range.base {
            let below = (range.base - base) as usize; // ok: base is lower
            range.members.splice(0..0, std::iter::repeat_n(0, below));
            range.base = base;
        } else {
            range.members.resize(new_length, 0);
        }
        let offset = (value - range.base) as usize; // ok: within the grown range
        range.members.get_mut(offset)
    }

    /// Every pair, as (group, value, members).
    fn pairs(&self) -> impl Iterator<Item = (usize, i64, u8)> + '_ {
        self.groups.iter().enumerate().flat_map(|(group, range)| {
            range
                .members
                .iter()
                .enumerate()
                .filter_map(move |(offset, &members)| {
                    (members != 0).then_some((group, range.base + offset as i64, members))
                })
        })
    }
}

impl SeenPairs {
    /// Adds `members` to the pair (`group`, `value`), returning the bits it did not have.
    #[inline]
    pub fn add(&mut self, group: usize, value: i64, members: u8) -> u8 {
        if members == 0 {
            return 0;
        }
        if let SeenPairs::Dense(dense) = self {
            let added = dense.slot(group, value).map(|counted| {
                let new = members & !*counted;
                let first = *counted == 0 && new != 0;
                *counted |= members;
                (new, first)
            });
            match added {
                Some((new, first)) => {
                    dense.pairs += usize::from(first);
                    return new;
                }
                None => self.to_hashed(),
            }
        }
        let SeenPairs::Hashed(seen) = self else {
            unreachable!("the pairs were just hashed")
        };
        let pair = Pair {
            value,
            group: group as u32, // ok: the table bounds groups to u32
        };
        let counted = seen.entry(pair).or_insert(0);
        let new = members & !*counted;
        *counted |= members;
        new
    }

    /// Moves the pairs to a hash table.
    fn to_hashed(&mut self) {
        if let SeenPairs::Dense(dense) = self {
            let mut seen = HashMap::with_capacity_and_hasher(dense.pairs, RandomState::default());
            for (group, value, members) in dense.pairs() {
                let group = group as u32; // ok: the table bounds groups to u32
                seen.insert(Pair { value, group }, members);
            }
            *self = SeenPairs::Hashed(seen);
        }
    }

    /// Calls `f` with every pair as (group, value, members), in no particular order.
    pub fn for_each(&self, mut f: impl FnMut(usize, i64, u8)) {
        match self {
            SeenPairs::Dense(dense) => dense
                .pairs()
                .for_each(|(group, value, members)| f(group, value, members)),
            SeenPairs::Hashed(seen) => seen
                .iter()
                .for_each(|(&Pair { value, group }, &members)| f(group as usize, value, members)),
        }
    }

    /// Drops the pairs of the first `n` of `groups` groups; the others' groups shift down.
    pub fn drop_first_groups(&mut self, n: usize, groups: usize) {
        if n >= groups {
            *self = SeenPairs::default();
            return;
        }
        match self {
            SeenPairs::Dense(dense) => {
                let n = n.min(dense.groups.len());
                for range in dense.groups.drain(..n) {
                    dense.slots -= range.members.len();
                    dense.pairs -= range.members.iter().filter(|&&m| m != 0).count();
                }
            }
            SeenPairs::Hashed(seen) => {
                *seen = std::mem::take(seen)
                    .into_iter()
                    .filter(|(pair, _)| pair.group as usize >= n)
                    .map(|(Pair { value, group }, members)| {
                        let group = group - n as u32; // ok: at least n
                        (Pair { value, group }, members)
                    })
                    .collect();
            }
        }
    }

    /// Whether no pair is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        match self {
            SeenPairs::Dense(dense) => dense.pairs == 0,
            SeenPairs::Hashed(seen) => seen.is_empty(),
        }
    }

    /// Whether the pairs are kept by group range (for tests).
    #[cfg(test)]
    pub fn is_dense(&self) -> bool {
        matches!(self, SeenPairs::Dense(_))
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        match self {
            SeenPairs::Dense(dense) => {
                dense.groups.capacity() * size_of::<GroupRange>()
                    + dense
                        .groups
                        .iter()
                        .map(|range| range.members.capacity())
                        .sum::<usize>()
            }
            SeenPairs::Hashed(seen) => seen.capacity() * (size_of::<(Pair, u8)>() + 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Adds `pairs` to a [`SeenPairs`] and to a map, checking the new bits of each, then that
    /// both hold the same pairs.
    fn agrees_with_a_map(pairs: &[(usize, i64, u8)]) -> SeenPairs {
        let mut seen = SeenPairs::default();
        let mut expected: BTreeMap<(usize, i64), u8> = BTreeMap::new();
        for &(group, value, members) in pairs {
            let counted = expected.entry((group, value)).or_insert(0);
            assert_eq!(seen.add(group, value, members), members & !*counted);
            *counted |= members;
        }
        let mut held = BTreeMap::new();
        seen.for_each(|group, value, members| {
            assert!(held.insert((group, value), members).is_none());
        });
        expected.retain(|_, members| *members != 0);
        assert_eq!(held, expected);
        seen
    }

    #[test]
    fn ids_in_a_range_stay_dense_and_values_below_a_base_move_it() {
        let pairs: Vec<_> = (0..20_000i64)
            .map(|i| {
                (
                    (i % 7) as usize,
                    5_000 - i + (i * 7919) % 3_000,
                    1 << (i % 3),
                )
            })
            .collect();
        assert!(agrees_with_a_map(&pairs).is_dense());
    }

    #[test]
    fn values_spread_far_apart_move_to_the_hash_table_and_keep_their_bits() {
        let mut pairs: Vec<_> = (0..3_000i64)
            .map(|i| ((i % 5) as usize, i % 400, 1 << (i % 4)))
            .collect();
        pairs.extend((0..3_000i64).map(|i| ((i % 5) as usize, (i % 400) << 40, 3)));
        pairs.extend([(0, i64::MIN, 1), (0, i64::MAX, 2), (9, 7, 0), (0, 0, 8)]);
        assert!(!agrees_with_a_map(&pairs).is_dense());
    }

    #[test]
    fn dropping_the_first_groups_shifts_the_others_down_in_either_form() {
        for spread in [1, 1 << 40] {
            let pairs: Vec<_> = (0..2_000i64)
                .map(|i| ((i % 6) as usize, (i % 300) * spread, 1))
                .collect();
            let mut seen = agrees_with_a_map(&pairs);
            seen.drop_first_groups(4, 6);
            let mut held = Vec::new();
            seen.for_each(|group, value, _| held.push((group, value)));
            held.sort();
            let mut expected: Vec<_> = pairs
                .iter()
                .filter(|(group, ..)| *group >= 4)
                .map(|&(group, value, _)| (group - 4, value))
                .collect();
            expected.sort();
            expected.dedup();
            assert_eq!(held, expected);
            seen.drop_first_groups(2, 2);
            assert!(seen.is_empty() && seen.is_dense());
        }
    }
}
