//! Intrusive doubly-linked lists threaded through the entries of a [`Slab`].
//!
//! An entry carries one [`Links`] per list it can be on; a [`List`] is just a head and a
//! tail key. Push-back and unlink are O(1) and allocate nothing, so a matcher queue costs
//! one slab slot per element and nothing else. Keys are slab keys that the matcher itself
//! created: they never come from a peer or from the application, so indexing the slab with
//! them is an internal invariant, not input validation.

use slab::Slab;

/// "No entry": the end of a list, or an entry that is on no list.
pub(crate) const NIL: usize = usize::MAX;

/// The neighbours of one entry on one list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Links {
    pub(crate) prev: usize,
    pub(crate) next: usize,
}

impl Links {
    pub(crate) const UNLINKED: Links = Links {
        prev: NIL,
        next: NIL,
    };
}

/// A FIFO of slab keys: push at the tail, unlink anywhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct List {
    pub(crate) head: usize,
    pub(crate) tail: usize,
}

impl List {
    pub(crate) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };

    pub(crate) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Appends `key` (which must be on no list of this kind) at the tail.
    pub(crate) fn push_back<E>(
        &mut self,
        slab: &mut Slab<E>,
        key: usize,
        links: fn(&mut E) -> &mut Links,
    ) {
        let tail = self.tail;
        *links(&mut slab[key]) = Links {
            prev: tail,
            next: NIL,
        };
        if tail == NIL {
            self.head = key;
        } else {
            links(&mut slab[tail]).next = key;
        }
        self.tail = key;
    }

    /// Takes `key` (which must be on this list) out of the list.
    pub(crate) fn unlink<E>(
        &mut self,
        slab: &mut Slab<E>,
        key: usize,
        links: fn(&mut E) -> &mut Links,
    ) {
        let Links { prev, next } = *links(&mut slab[key]);
        if prev == NIL {
            self.head = next;
        } else {
            links(&mut slab[prev]).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            links(&mut slab[next]).prev = prev;
        }
        *links(&mut slab[key]) = Links::UNLINKED;
    }
}

/// Moves `head`, the index of the oldest element of a queue kept in `v`, past an element
/// just taken: the vector is emptied when every element is taken, and its taken prefix
/// dropped once that is at least 64 elements and half of it, so a queue that never
/// empties does not grow by an element per use.
#[inline(always)]
pub(crate) fn advance_head<T>(v: &mut Vec<T>, head: &mut usize) {
    *head += 1;
    if *head == v.len() {
        v.clear();
        *head = 0;
    } else if *head >= 64 && *head * 2 >= v.len() {
        v.drain(..*head);
        *head = 0;
    }
}
