//! Tag generation schemes (after the Charm++ UCX machine layer and the paper's two APIs): a
//! 64-bit tag cut into three fields, from the top: a message type, an id (the source PE of
//! the GPU Messaging API, or the channel of the Channel API), and a counter in the low
//! bits. Widths are the caller's; masks for matching come with them.
//!
//! Charm++ keeps a 28-bit counter that wraps silently: after 2^28 messages a tag comes back
//! while its earlier use may still be unmatched, and the two messages can meet the wrong
//! receives. A [`TagGen`] never hands out a tag whose earlier use is still outstanding: the
//! caller releases each tag once its operation matched (a receive completed, a synchronous
//! send completed), and a counter that comes round to an outstanding value is reported
//! ([`WrapPolicy::Error`]: `Busy`) or waited for ([`WrapPolicy::Wait`]: `NoResource`,
//! retry after progress). Pure state: no I/O.

use std::collections::HashSet;

use ucs::{Status, UcsResult};

/// The widths of a tag's fields, from the top: type, id, counter. They add up to at most
/// 64; bits above them are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TagScheme {
    pub type_bits: u32,
    pub id_bits: u32,
    pub counter_bits: u32,
}

/// Which fields a receive matches on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    /// The type only (any source or channel, any counter).
    Type,
    /// Type and id (one source or channel, any counter).
    TypeId,
    /// The whole tag.
    All,
}

impl TagScheme {
    /// A scheme; `InvalidParam` when the widths add up to more than 64, or the counter
    /// has no bit (a generator needs one).
    pub fn new(type_bits: u32, id_bits: u32, counter_bits: u32) -> UcsResult<TagScheme> {
        if counter_bits == 0 || type_bits + id_bits + counter_bits > 64 {
            return Err(Status::InvalidParam);
        }
        Ok(TagScheme {
            type_bits,
            id_bits,
            counter_bits,
        })
    }

    /// The GPU Messaging API's layout in Charm++: 4 bits of message type, 32 of source PE,
    /// 28 of per-source counter.
    pub const CHARM_DEVICE: TagScheme = TagScheme {
        type_bits: 4,
        id_bits: 32,
        counter_bits: 28,
    };

    /// The Channel API's layout: 4 bits of type, 28 of channel id, 32 of per-channel
    /// counter.
    pub const CHANNEL: TagScheme = TagScheme {
        type_bits: 4,
        id_bits: 28,
        counter_bits: 32,
    };

    fn field(bits: u32) -> u64 {
        if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        }
    }

    fn counter_shift(&self) -> u32 {
        0
    }
    fn id_shift(&self) -> u32 {
        self.counter_bits
    }
    fn type_shift(&self) -> u32 {
        self.counter_bits + self.id_bits
    }

    /// Largest value of the counter field plus one (the counter's period).
    pub fn counter_period(&self) -> u128 {
        1u128 << self.counter_bits
    }

    /// The tag of `(ty, id, counter)`; `InvalidParam` when a value does not fit its field.
    pub fn encode(&self, ty: u64, id: u64, counter: u64) -> UcsResult<u64> {
        let fits = |v: u64, bits: u32| v <= Self::field(bits) || bits == 64;
        if !fits(ty, self.type_bits) || !fits(id, self.id_bits) || !fits(counter, self.counter_bits)
        {
            return Err(Status::InvalidParam);
        }
        let shl = |v: u64, s: u32| if s >= 64 { 0 } else { v << s };
        Ok(shl(ty, self.type_shift())
            | shl(id, self.id_shift())
            | shl(counter, self.counter_shift()))
    }

    /// The fields of `tag`: `(type, id, counter)`.
    pub fn decode(&self, tag: u64) -> (u64, u64, u64) {
        let shr = |s: u32| if s >= 64 { 0 } else { tag >> s };
        (
            shr(self.type_shift()) & Self::field(self.type_bits),
            shr(self.id_shift()) & Self::field(self.id_bits),
            tag & Self::field(self.counter_bits),
        )
    }

    /// The mask a receive posts to match on `m`'s fields (bits above the scheme are
    /// matched too: they are zero in every tag of the scheme).
    pub fn mask(&self, m: Match) -> u64 {
        let used = self.type_bits + self.id_bits + self.counter_bits;
        let above = if used >= 64 { 0 } else { !0u64 << used };
        let f = |bits: u32, shift: u32| {
            if bits == 0 {
                0
            } else {
                Self::field(bits) << shift
            }
        };
        let ty = f(self.type_bits, self.type_shift());
        let id = f(self.id_bits, self.id_shift());
        let ctr = f(self.counter_bits, 0);
        above
            | match m {
                Match::Type => ty,
                Match::TypeId => ty | id,
                Match::All => ty | id | ctr,
            }
    }
}

/// What a generator does when its counter comes round to a tag still outstanding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WrapPolicy {
    /// Refuse: `Busy`.
    #[default]
    Error,
    /// Ask the caller to wait: `NoResource` (retry after progress releases the tag).
    Wait,
}

/// Hands out the tags of one (type, id) in counter order, never one whose earlier use is
/// still outstanding.
#[derive(Clone, Debug)]
pub struct TagGen {
    scheme: TagScheme,
    ty: u64,
    id: u64,
    next: u64,
    policy: WrapPolicy,
    outstanding: HashSet<u64>,
    /// Times a counter came round to an outstanding tag.
    pub collisions: u64,
}

impl TagGen {
    /// A generator of `scheme`'s tags for `(ty, id)`, counting from 0.
    pub fn new(scheme: TagScheme, ty: u64, id: u64, policy: WrapPolicy) -> UcsResult<TagGen> {
        scheme.encode(ty, id, 0)?;
        Ok(TagGen {
            scheme,
            ty,
            id,
            next: 0,
            policy,
            outstanding: HashSet::new(),
            collisions: 0,
        })
    }

    pub fn scheme(&self) -> TagScheme {
        self.scheme
    }

    /// The next tag, now outstanding until [`release`](Self::release). When the counter
    /// has come round to a tag still outstanding: `Busy` or `NoResource` per the policy
    /// (the counter does not move; the same tag is offered again on the next call).
    pub fn next_tag(&mut self) -> UcsResult<u64> {
        let tag = self.scheme.encode(self.ty, self.id, self.next)?;
        if self.outstanding.contains(&tag) {
            self.collisions += 1;
            return Err(match self.policy {
                WrapPolicy::Error => Status::Busy,
                WrapPolicy::Wait => Status::NoResource,
            });
        }
        self.outstanding.insert(tag);
        let period = self.scheme.counter_period();
        self.next = ((u128::from(self.next) + 1) % period) as u64;
        Ok(tag)
    }

    /// Marks `tag` matched: its counter value may be handed out again. False when it was
    /// not outstanding.
    pub fn release(&mut self, tag: u64) -> bool {
        self.outstanding.remove(&tag)
    }

    /// Tags handed out and not released.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn round_trips_and_masks_for_every_width() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for t in 0..=8u32 {
            for i in [0u32, 1, 7, 16, 28, 32] {
                for c in [1u32, 2, 5, 16, 28, 32] {
                    if t + i + c > 64 {
                        assert!(TagScheme::new(t, i, c).is_err());
                        continue;
                    }
                    let s = TagScheme::new(t, i, c).unwrap();
                    let lim = |b: u32| if b == 0 { 0 } else { (1u64 << b) - 1 };
                    for _ in 0..50 {
                        let (ty, id, ctr) = (
                            rng.gen::<u64>() & lim(t),
                            rng.gen::<u64>() & lim(i),
                            rng.gen::<u64>() & lim(c),
                        );
                        let tag = s.encode(ty, id, ctr).unwrap();
                        assert_eq!(s.decode(tag), (ty, id, ctr), "{s:?}");
                        // A receive for (type, id) matches every counter of it and no
                        // other id; one for the type matches any id.
                        let other = s.encode(ty, id, (ctr + 1) & lim(c)).unwrap();
                        assert_eq!(tag & s.mask(Match::TypeId), other & s.mask(Match::TypeId));
                        if i > 0 {
                            let other_id = s.encode(ty, (id + 1) & lim(i), ctr).unwrap();
                            assert_ne!(
                                tag & s.mask(Match::TypeId),
                                other_id & s.mask(Match::TypeId)
                            );
                            assert_eq!(tag & s.mask(Match::Type), other_id & s.mask(Match::Type));
                        }
                        assert_eq!(s.mask(Match::All), u64::MAX);
                    }
                    // Values that do not fit are refused.
                    if c < 64 {
                        assert_eq!(s.encode(0, 0, 1u64 << c), Err(Status::InvalidParam));
                    }
                    if i > 0 && i < 64 {
                        assert_eq!(s.encode(0, 1u64 << i, 0), Err(Status::InvalidParam));
                    }
                }
            }
        }
        assert!(TagScheme::new(4, 4, 0).is_err());
        let s = TagScheme::CHARM_DEVICE;
        assert_eq!(
            s.decode(s.encode(3, 0xdead_beef, (1 << 28) - 1).unwrap()),
            (3, 0xdead_beef, (1 << 28) - 1)
        );
    }

    #[test]
    fn a_wrapped_counter_never_reuses_an_outstanding_tag() {
        // A 3-bit counter wraps after 8 tags.
        let s = TagScheme::new(2, 4, 3).unwrap();
        let mut g = TagGen::new(s, 1, 5, WrapPolicy::Error).unwrap();
        let first: Vec<u64> = (0..8).map(|_| g.next_tag().unwrap()).collect();
        assert_eq!(first.len(), 8);
        assert_eq!(first.iter().collect::<HashSet<_>>().len(), 8);
        // Every counter value is outstanding: the ninth is refused, and stays refused.
        assert_eq!(g.next_tag(), Err(Status::Busy));
        assert_eq!(g.next_tag(), Err(Status::Busy));
        assert_eq!(g.collisions, 2);
        // Matched out of order: only the released values come back, in counter order.
        assert!(g.release(first[0]));
        assert!(!g.release(first[0]));
        assert_eq!(g.next_tag(), Ok(first[0]));
        assert_eq!(
            g.next_tag(),
            Err(Status::Busy),
            "counter 1 is still outstanding"
        );
        assert!(g.release(first[1]));
        assert!(g.release(first[2]));
        assert_eq!(g.next_tag(), Ok(first[1]));
        assert_eq!(g.next_tag(), Ok(first[2]));
        assert_eq!(g.outstanding(), 8);
        // The wait policy asks for progress instead.
        let mut w = TagGen::new(s, 1, 5, WrapPolicy::Wait).unwrap();
        for _ in 0..8 {
            w.next_tag().unwrap();
        }
        assert_eq!(w.next_tag(), Err(Status::NoResource));
        assert!(
            TagGen::new(s, 4, 0, WrapPolicy::Error).is_err(),
            "type does not fit"
        );
    }
}
