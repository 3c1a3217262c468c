//! [`PagedSlots`]: a sequence of `Copy` slots kept in fixed pages, for a dense index that
//! grows at the back and is cut at the front.
//!
//! A `Vec` grows by moving everything it holds to a block twice as large: a join's dense
//! index over the ids of a whole replay (q3's 200 000 people) copied megabytes as it grew,
//! and each sweep that dropped its freed leading slots moved the rest down. Here growing
//! adds pages and cutting drops whole pages: nothing that is kept moves. A slot is found by
//! its page (a short array of page pointers, which stays in the cache) and its place there.

use std::mem::size_of;

const PAGE_BITS: u32 = 12;
/// Slots a page.
const PAGE: usize = 1 << PAGE_BITS;

pub(super) struct PagedSlots<T> {
    pages: Vec<Box<[T]>>,
    /// Slots of the first page before the first slot (cut ones).
    head: usize,
    len: usize,
    /// The value of a slot not set yet: every slot past `len` holds it.
    empty: T,
}

impl<T: Copy> PagedSlots<T> {
    pub(super) fn new(empty: T) -> Self {
        Self {
            pages: Vec::new(),
            head: 0,
            len: 0,
            empty,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The slot at `index` (below [`Self::len`]).
    #[inline(always)]
    pub(super) fn get(&self, index: usize) -> T {
        let at = index + self.head;
        self.pages[at >> PAGE_BITS][at & (PAGE - 1)]
    }

    #[inline(always)]
    pub(super) fn set(&mut self, index: usize, value: T) {
        let at = index + self.head;
        self.pages[at >> PAGE_BITS][at & (PAGE - 1)] = value;
    }

    /// Extends the slots to `len`, the new ones empty.
    pub(super) fn grow_to(&mut self, len: usize) {
        if len <= self.len {
            return;
        }
        let pages = (self.head + len).div_ceil(PAGE);
        while self.pages.len() < pages {
            self.pages.push(vec![self.empty; PAGE].into_boxed_slice());
        }
        self.len = len;
    }

    /// Drops the first `count` slots (at most [`Self::len`]): the next slot becomes the
    /// first.
    pub(super) fn cut_front(&mut self, count: usize) {
        let count = count.min(self.len);
        self.head += count;
        self.len -= count;
        let whole_pages = self.head >> PAGE_BITS;
        self.pages.drain(..whole_pages);
        self.head &= PAGE - 1;
    }

    /// The slots in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.pages
            .iter()
            .flat_map(|page| page.iter().copied())
            .skip(self.head)
            .take(self.len)
    }

    /// The slots in order, to change.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.pages
            .iter_mut()
            .flat_map(|page| page.iter_mut())
            .skip(self.head)
            .take(self.len)
    }

    /// Bytes of the pages.
    pub(super) fn size(&self) -> usize {
        self.pages.len() * PAGE * size_of::<T>() + self.pages.capacity() * size_of::<Box<[T]>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_grow_and_cut_like_a_vec_across_pages() {
        let mut paged = PagedSlots::new(-1_i64);
        let mut plain: Vec<i64> = Vec::new();
        let mut next = 0;
        // Grow by one, by less than a page and by several pages; cut within a page, a whole
        // page and more; each time every slot agrees with a Vec's.
        for (grow, cut) in [
            (1, 0),
            (5000, 3),
            (1, 4093),
            (3 * PAGE + 7, PAGE),
            (10, 2 * PAGE + 11),
        ] {
            let len = plain.len() + grow;
            paged.grow_to(len);
            plain.resize(len, -1);
            for index in (0..len).step_by(7) {
                if plain[index] == -1 {
                    paged.set(index, next);
                    plain[index] = next;
                    next += 1;
                }
            }
            paged.cut_front(cut);
            plain.drain(..cut);
            assert_eq!(paged.len(), plain.len());
            assert_eq!(paged.iter().collect::<Vec<_>>(), plain);
            assert!((0..plain.len()).all(|i| paged.get(i) == plain[i]));
        }
        for slot in paged.iter_mut() {
            *slot += 1;
        }
        assert!(paged.iter().zip(&plain).all(|(a, b)| a == b + 1));
        // The pages held are the ones the slots span, not the ones cut.
        assert!(paged.size() < (plain.len() / PAGE + 2) * PAGE * size_of::<i64>() + 1024);
        paged.cut_front(paged.len());
        assert_eq!(paged.len(), 0);
        paged.grow_to(3);
        assert_eq!(paged.iter().collect::<Vec<_>>(), vec![-1; 3]);
    }
}
