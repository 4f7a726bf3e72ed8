//! [`TagTable`]: a map from tag to queue ([`List`]) for the matcher's per-tag buckets.
//!
//! Open addressing with linear probing and backward-shift deletion, so removing a bucket
//! leaves no tombstone behind: the table's size depends only on the largest number of
//! distinct tags live at once (it doubles when more than half full and never shrinks).
//! Once it has seen the working set it never allocates again, however many distinct tags
//! come and go — which a general-purpose map with tombstones does not promise. The home
//! slot is multiply-shift hashing with a random odd multiplier per table (the top bits of
//! `tag * a`, a universal family): one multiplication, structured tag schemes
//! (`type | rank | counter`) spread evenly, and a peer cannot precompute collisions.
//!
//! A slot is occupied exactly when its list is non-empty. That holds because the table
//! itself does the list operations: [`TagTable::push_back`] inserts a bucket and fills it
//! in one call, and [`TagTable::unlink`] deletes the bucket in the same call that empties
//! it.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use slab::Slab;

use super::list::{Links, List, NIL};
use super::types::Tag;

const MIN_SLOTS: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Slot {
    tag: Tag,
    list: List,
}

const EMPTY: Slot = Slot {
    tag: 0,
    list: List::EMPTY,
};

impl Slot {
    fn is_empty(&self) -> bool {
        self.list.head == NIL
    }
}

#[derive(Debug)]
pub(crate) struct TagTable {
    /// Power-of-two length (or zero before the first insertion).
    slots: Vec<Slot>,
    len: usize,
    /// The hash multiplier (random, odd) and `64 - log2(slots.len())`.
    mul: u64,
    shift: u32,
    /// Tests force clustering (home slot = low tag bits) to exercise probing and
    /// wrap-around.
    #[cfg(test)]
    weak_hash: bool,
}

impl TagTable {
    /// A table that holds `capacity` tags before it grows.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let slots = if capacity == 0 {
            Vec::new()
        } else {
            vec![EMPTY; slots_for(capacity)]
        };
        let shift = shift_for(slots.len());
        TagTable {
            slots,
            len: 0,
            mul: RandomState::new().hash_one(0x7a67_u64) | 1,
            shift,
            #[cfg(test)]
            weak_hash: false,
        }
    }

    /// Number of tags present.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Number of tags the table holds before it grows.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len() / 2
    }

    /// The home slot of `tag` (the table has slots).
    #[inline]
    fn home(&self, tag: Tag) -> usize {
        #[cfg(test)]
        if self.weak_hash {
            return (tag as usize) & (self.slots.len() - 1);
        }
        (tag.wrapping_mul(self.mul) >> self.shift) as usize
    }

    /// The slot holding `tag`, if present.
    #[inline]
    fn find(&self, tag: Tag) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(tag);
        // The table is at most half full, so an empty slot ends every probe sequence.
        loop {
            let s = &self.slots[i];
            if s.is_empty() {
                return None;
            }
            if s.tag == tag {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    pub(crate) fn get(&self, tag: Tag) -> Option<&List> {
        self.find(tag).map(|i| &self.slots[i].list)
    }

    /// Appends slab entry `key` to the list of `tag`, creating the bucket if absent.
    pub(crate) fn push_back<E>(
        &mut self,
        tag: Tag,
        slab: &mut Slab<E>,
        key: usize,
        links: fn(&mut E) -> &mut Links,
    ) {
        self.get_or_insert(tag).push_back(slab, key, links);
    }

    /// The slot of `tag`'s bucket, for [`pop_front_at`](Self::pop_front_at) (valid until
    /// the table is next changed).
    #[inline]
    pub(crate) fn slot_of(&self, tag: Tag) -> Option<usize> {
        self.find(tag)
    }

    /// Takes the oldest entry off the bucket at slot `i` (from `slot_of`, with no change to
    /// the table since) and returns its key; deletes the bucket if that emptied it. The
    /// entry's own links are left as they were: the caller removes it from the slab.
    #[inline]
    pub(crate) fn pop_front_at<E>(
        &mut self,
        i: usize,
        slab: &mut Slab<E>,
        links: fn(&mut E) -> &mut Links,
    ) -> usize {
        let key = self.slots[i].list.head;
        let next = links(&mut slab[key]).next;
        if next == NIL {
            self.delete_at(i);
        } else {
            self.slots[i].list.head = next;
            links(&mut slab[next]).prev = NIL;
        }
        key
    }

    /// Takes slab entry `key` (which must be on it) off the list of `tag`, and deletes the
    /// bucket if that emptied it.
    pub(crate) fn unlink<E>(
        &mut self,
        tag: Tag,
        slab: &mut Slab<E>,
        key: usize,
        links: fn(&mut E) -> &mut Links,
    ) {
        let Some(i) = self.find(tag) else {
            debug_assert!(false, "unlink from absent bucket {tag:#x}");
            return;
        };
        self.slots[i].list.unlink(slab, key, links);
        if self.slots[i].list.is_empty() {
            self.delete_at(i);
        }
    }

    /// The list for `tag`, inserted empty if absent. The caller must make it non-empty
    /// before the next call on this table.
    fn get_or_insert(&mut self, tag: Tag) -> &mut List {
        if let Some(i) = self.find(tag) {
            return &mut self.slots[i].list;
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(tag);
        while !self.slots[i].is_empty() {
            i = (i + 1) & mask;
        }
        self.len += 1;
        self.slots[i] = Slot {
            tag,
            list: List::EMPTY,
        };
        &mut self.slots[i].list
    }

    /// Removes `tag` if present.
    #[cfg(test)]
    fn remove(&mut self, tag: Tag) {
        if let Some(i) = self.find(tag) {
            self.delete_at(i);
        }
    }

    /// Empties slot `hole` and closes the gap in its probe run.
    #[inline]
    fn delete_at(&mut self, mut hole: usize) {
        let mask = self.slots.len() - 1;
        // Backward shift: pull later members of the probe run into the hole when their
        // home slot is not after the hole, so no lookup ever crosses an empty slot that
        // it should not have.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if self.slots[j].is_empty() {
                break;
            }
            let home = self.home(self.slots[j].tag);
            if j.wrapping_sub(home) & mask >= j.wrapping_sub(hole) & mask {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let new_len = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; new_len]);
        self.shift = shift_for(new_len);
        let mask = new_len - 1;
        for s in old.into_iter().filter(|s| !s.is_empty()) {
            let mut i = self.home(s.tag);
            while !self.slots[i].is_empty() {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }

    /// Every (tag, list) present, in slot order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Tag, &List)> {
        self.slots
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| (s.tag, &s.list))
    }

    #[cfg(test)]
    pub(crate) fn set_weak_hash(&mut self) {
        assert_eq!(self.len, 0);
        self.weak_hash = true;
    }
}

/// The hash shift for a table of `slots` slots (a power of two; any value for none).
fn shift_for(slots: usize) -> u32 {
    64 - slots.max(2).trailing_zeros()
}

fn slots_for(capacity: usize) -> usize {
    capacity
        .saturating_mul(2)
        .next_power_of_two()
        .max(MIN_SLOTS)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A non-empty list whose head encodes `v`, to tell entries apart.
    fn list(v: usize) -> List {
        List { head: v, tail: v }
    }

    fn check(t: &TagTable, model: &HashMap<Tag, usize>) {
        assert_eq!(t.len(), model.len());
        assert_eq!(t.iter().count(), model.len());
        for (&tag, &v) in model {
            assert_eq!(t.get(tag), Some(&list(v)), "tag {tag:#x}");
        }
    }

    fn random_ops(weak: bool, key_space: u64, seed: u64) {
        let mut t = TagTable::with_capacity(0);
        if weak {
            t.set_weak_hash();
        }
        let mut model = HashMap::new();
        let mut x = seed | 1;
        for step in 0..20_000usize {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Keys near the top of the slot range exercise wrap-around with the weak hash.
            let tag = (x >> 8) % key_space + if x & 1 == 0 { 0 } else { 0xF0 };
            if x & 0x30 == 0 {
                t.remove(tag);
                model.remove(&tag);
                assert_eq!(t.get(tag), None);
            } else {
                *t.get_or_insert(tag) = list(step);
                model.insert(tag, step);
            }
            if step % 64 == 0 {
                check(&t, &model);
            }
            assert!(t.len() <= t.capacity());
        }
        check(&t, &model);
        for tag in model.keys() {
            t.remove(*tag);
        }
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn table_against_std_hashmap() {
        for (weak, space) in [
            (false, 8),
            (false, 1000),
            (true, 8),
            (true, 40),
            (true, 1000),
        ] {
            random_ops(weak, space, 0x1234_5678 + space);
        }
    }

    #[test]
    fn table_size_follows_live_tags_only() {
        let mut t = TagTable::with_capacity(0);
        for round in 0..1000u64 {
            for i in 0..100 {
                *t.get_or_insert(round << 32 | i) = list(1);
            }
            for i in 0..100 {
                t.remove(round << 32 | i);
            }
        }
        assert_eq!(t.len(), 0);
        assert_eq!(t.capacity(), 128);
    }
}
