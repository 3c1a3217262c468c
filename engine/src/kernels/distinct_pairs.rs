//! [`SeenPairs`]: the (group, value) pairs a group table's `COUNT(DISTINCT x)` aggregates
//! have seen, each with a byte of bits, one per aggregate that counted it.
//!
//! The values counted are mostly ids (bidders, auctions), which lie in a range that grows
//! with the stream, and a few groups hold most pairs (Nexmark q15: a day; q16: a hot channel
//! and a day). So a group keeps a byte per value of its range, `members[value - base]`: a
//! row costs one access to an array the size of the group's range, where a hash table of
//! the pairs costs a cache miss per row and, as it grows, writes and zeroes fresh memory
//! several times over. A value below a group's base moves its base down, leaving room for
//! more.
//!
//! A range is worth its memory only while dense with pairs. Ranges grow freely while they
//! take at most [`DENSE_MIN_SLOTS`] bytes together; past that, a group's range grows only
//! while it holds at least a pair per [`SLOTS_PER_PAIR`] bytes. A group whose range may not
//! grow moves its pairs to a hash table shared by such groups (q16's 10 000 rare channels,
//! a few hundred bidders each spread over all the people), which keeps them from then on.

use std::mem::size_of;

use datafusion::common::HashMap;
use datafusion::common::hash_utils::RandomState;

/// Bytes the groups' ranges may take together, however sparse.
const DENSE_MIN_SLOTS: usize = 4 << 20;

/// Bytes of a group's range allowed per pair past [`DENSE_MIN_SLOTS`]: a hash table entry
/// takes about as many.
const SLOTS_PER_PAIR: usize = 16;

/// A (group, value) pair as the hash table keeps it: packed into 12 bytes, so that an entry
/// with its members' bits takes 13 (24 as an aligned tuple), as fresh table memory is zeroed
/// when it grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, packed)]
struct Pair {
    value: i64,
    group: u32,
}

/// Where a group's pairs are.
#[derive(Debug, Default)]
enum GroupPairs {
    /// The members of `base + i` at `members[i]`, and how many are not 0.
    #[default]
    Empty,
    Range {
        base: i64,
        members: Vec<u8>,
        pairs: usize,
    },
    /// In the shared hash table.
    Hashed,
}

/// The pairs seen; see the module documentation.
#[derive(Debug, Default)]
pub(super) struct SeenPairs {
    groups: Vec<GroupPairs>,
    /// The ranges' lengths together.
    slots: usize,
    /// The pairs of the groups that are `Hashed`.
    hashed: HashMap<Pair, u8, RandomState>,
}

impl SeenPairs {
    /// Adds `members` to the pair (`group`, `value`), returning the bits it did not have.
    #[inline]
    pub fn add(&mut self, group: usize, value: i64, members: u8) -> u8 {
        if members == 0 {
            return 0;
        }
        if group >= self.groups.len() {
            self.groups.resize_with(group + 1, GroupPairs::default);
        }
        if let GroupPairs::Range {
            base,
            members: counted,
            pairs,
        } = &mut self.groups[group]
        {
            let offset = usize::try_from(value.wrapping_sub(*base) as u64);
            if let Some(counted) = offset.ok().and_then(|offset| counted.get_mut(offset)) {
                let new = members & !*counted;
                *pairs += usize::from(*counted == 0);
                *counted |= members;
                return new;
            }
        }
        if self.grow(group, value) {
            return self.add(group, value, members);
        }
        let pair = Pair {
            value,
            group: group as u32, // ok: the table bounds groups to u32
        };
        let counted = self.hashed.entry(pair).or_insert(0);
        let new = members & !*counted;
        *counted |= members;
        new
    }

    /// Extends `group`'s range to `value` (down, with room for as many values again below
    /// it as the range holds), where affordable: else its pairs move to the hash table.
    /// Whether the range now holds `value`.
    fn grow(&mut self, group: usize, value: i64) -> bool {
        let (base, length, pairs) = match &self.groups[group] {
            GroupPairs::Hashed => return false,
            GroupPairs::Empty => (value, 0, 0),
            GroupPairs::Range {
                base,
                members,
                pairs,
            } => (*base, members.len(), *pairs),
        };
        let Some((new_base, new_length)) = widened(base, length, value) else {
            self.hash_group(group);
            return false;
        };
        let slots = self.slots + new_length - length;
        let affordable = slots <= DENSE_MIN_SLOTS
            || new_length <= pairs.saturating_add(1).saturating_mul(SLOTS_PER_PAIR);
        if !affordable {
            self.hash_group(group);
            return false;
        }
        self.slots = slots;
        let range = &mut self.groups[group];
        match range {
            GroupPairs::Range { base, members, .. } => {
                if new_base < *base {
                    let below = (*base - new_base) as usize; // ok: the new base is lower
                    members.splice(0..0, std::iter::repeat_n(0, below));
                    *base = new_base;
                } else {
                    members.resize(new_length, 0);
                }
            }
            _ => {
                *range = GroupPairs::Range {
                    base: new_base,
                    members: vec![0; new_length],
                    pairs: 0,
                }
            }
        }
        true
    }

    /// Moves `group`'s pairs to the hash table.
    fn hash_group(&mut self, group: usize) {
        if let GroupPairs::Range { base, members, .. } =
            std::mem::replace(&mut self.groups[group], GroupPairs::Hashed)
        {
            self.slots -= members.len();
            let group = group as u32; // ok: the table bounds groups to u32
            for (offset, counted) in members.into_iter().enumerate() {
                if counted != 0 {
                    let value = base + offset as i64;
                    self.hashed.insert(Pair { value, group }, counted);
                }
            }
        }
    }

    /// Calls `f` with every pair as (group, value, members), in no particular order.
    pub fn for_each(&self, mut f: impl FnMut(usize, i64, u8)) {
        for (group, pairs) in self.groups.iter().enumerate() {
            if let GroupPairs::Range { base, members, .. } = pairs {
                for (offset, &counted) in members.iter().enumerate() {
                    if counted != 0 {
                        f(group, base + offset as i64, counted);
                    }
                }
            }
        }
        for (&Pair { value, group }, &counted) in &self.hashed {
            f(group as usize, value, counted);
        }
    }

    /// Drops the pairs of the first `n` of `groups` groups; the others' groups shift down.
    pub fn drop_first_groups(&mut self, n: usize, groups: usize) {
        if n >= groups {
            *self = SeenPairs::default();
            return;
        }
        let n_ranges = n.min(self.groups.len());
        for pairs in self.groups.drain(..n_ranges) {
            if let GroupPairs::Range { members, .. } = pairs {
                self.slots -= members.len();
            }
        }
        if !self.hashed.is_empty() {
            self.hashed = std::mem::take(&mut self.hashed)
                .into_iter()
                .filter(|(pair, _)| pair.group as usize >= n)
                .map(|(Pair { value, group }, members)| {
                    let group = group - n as u32; // ok: at least n
                    (Pair { value, group }, members)
                })
                .collect();
        }
    }

    /// Whether no pair is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        let mut empty = true;
        self.for_each(|_, _, _| empty = false);
        empty
    }

    /// How many groups keep their pairs in the hash table (for tests).
    #[cfg(test)]
    fn hashed_groups(&self) -> usize {
        self.groups
            .iter()
            .filter(|pairs| matches!(pairs, GroupPairs::Hashed))
            .count()
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.groups.capacity() * size_of::<GroupPairs>()
            + self
                .groups
                .iter()
                .map(|pairs| match pairs {
                    GroupPairs::Range { members, .. } => members.capacity(),
                    _ => 0,
                })
                .sum::<usize>()
            + self.hashed.capacity() * (size_of::<(Pair, u8)>() + 1)
    }
}

/// The range from `base`, `length` values long, widened to hold `value`, as its new base and
/// length (room left below a lowered base for as many values again as it held); `None`
/// past the integers.
fn widened(base: i64, length: usize, value: i64) -> Option<(i64, usize)> {
    if length == 0 {
        return Some((value, 1));
    }
    let high = base.checked_add(i64::try_from(length - 1).ok()?)?;
    let (new_base, high) = if value < base {
        let room = i64::try_from(length).ok()?;
        (value.checked_sub(room).unwrap_or(value), high)
    } else {
        (base, value.max(high))
    };
    let new_length = usize::try_from(high.checked_sub(new_base)?)
        .ok()?
        .checked_add(1)?;
    Some((new_base, new_length))
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
        assert_eq!(agrees_with_a_map(&pairs).hashed_groups(), 0);
    }

    #[test]
    fn values_spread_far_apart_move_to_the_hash_table_and_keep_their_bits() {
        let mut pairs: Vec<_> = (0..3_000i64)
            .map(|i| ((i % 5) as usize, i % 400, 1 << (i % 4)))
            .collect();
        pairs.extend((0..3_000i64).map(|i| ((i % 5) as usize, (i % 400) << 40, 3)));
        pairs.extend([(6, i64::MIN, 1), (6, i64::MAX, 2), (9, 7, 0), (6, 0, 8)]);
        pairs.extend((0..3_000i64).map(|i| ((i % 5) as usize, i % 500, 1 << (i % 5))));
        assert_eq!(agrees_with_a_map(&pairs).hashed_groups(), 6);
    }

    #[test]
    fn past_the_free_bytes_dense_groups_keep_their_ranges_and_sparse_ones_are_hashed() {
        // Two groups of consecutive ids past the free bytes between them, and a hundred
        // groups of a few ids spread over a billion, met in between.
        let dense_values = (DENSE_MIN_SLOTS / 2 + 1000) as i64;
        let mut pairs = Vec::new();
        for value in 0..dense_values {
            pairs.push(((value % 2) as usize, value / 2, 1));
            pairs.push(((value % 2) as usize, value / 2 + dense_values / 2, 2));
            if value % 1_000 == 0 {
                let sparse = (value / 1_000) % 100;
                pairs.push((2 + sparse as usize, (value * 7919) % (1 << 30), 4));
            }
        }
        let seen = agrees_with_a_map(&pairs);
        assert_eq!(seen.hashed_groups(), 100);
        assert!(seen.slots > DENSE_MIN_SLOTS);
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
            assert!(seen.is_empty() && seen.hashed_groups() == 0);
        }
    }
}
