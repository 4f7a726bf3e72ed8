//! Tests of the tag matcher: targeted cases, and a randomized comparison against a linear
//! reference matcher that is obviously correct.

use super::*;

const FULL: TagMask = TAG_MASK_FULL;
const S0: SenderId = SenderId(0);
const S1: SenderId = SenderId(1);

type M = TagMatcher<u64, u64>;

fn info(tag: Tag, length: usize, sender: SenderId) -> TagInfo {
    TagInfo {
        sender_tag: tag,
        length,
        sender,
    }
}

fn queued(r: PostResult<u64, u64>) -> RecvHandle {
    match r {
        PostResult::Queued(h) => h,
        PostResult::Matched(m) => panic!("expected queued, got {m:?}"),
    }
}

fn matched_post(r: PostResult<u64, u64>) -> Match<u64, u64> {
    match r {
        PostResult::Matched(m) => m,
        PostResult::Queued(h) => panic!("expected a match, got queued {h:?}"),
    }
}

fn unexpected<T: std::fmt::Debug, R: std::fmt::Debug>(r: ArriveResult<T, R>) {
    assert!(
        matches!(r, ArriveResult::Unexpected),
        "expected unexpected, got {r:?}"
    );
}

fn matched_arrive(r: ArriveResult<u64, u64>) -> Match<u64, u64> {
    match r {
        ArriveResult::Matched(m) => m,
        ArriveResult::Unexpected => panic!("expected a match, got unexpected"),
    }
}

// ---------------------------------------------------------------------------------------
// Targeted tests
// ---------------------------------------------------------------------------------------

#[test]
fn tag_matches_and_masks() {
    assert!(tag_matches(5, 5, FULL));
    assert!(!tag_matches(5, 4, FULL));
    assert!(tag_matches(5, 4, 0));
    assert!(tag_matches(0xAB_05, 0xCD_05, 0xFF));
    assert!(!tag_matches(0xAB_05, 0xCD_05, 0xFF00));
}

#[test]
fn check_length_truncation() {
    assert_eq!(check_length(10, 10), Ok(()));
    assert_eq!(check_length(0, 10), Ok(()));
    assert_eq!(check_length(11, 10), Err(ucs::Status::MessageTruncated));
}

#[test]
fn exact_match_expected_and_unexpected() {
    let mut m = M::new();
    queued(m.post_recv(7, FULL, 100));
    assert_eq!(m.arrive(S0, 8, 1, 1), ArriveResult::Unexpected);
    let x = matched_arrive(m.arrive(S1, 7, 3, 2));
    assert_eq!(
        x,
        Match {
            info: info(7, 3, S1),
            msg: 2,
            user: 100
        }
    );
    let y = matched_post(m.post_recv(8, FULL, 101));
    assert_eq!(
        y,
        Match {
            info: info(8, 1, S0),
            msg: 1,
            user: 101
        }
    );
    assert_eq!((m.expected_len(), m.unexpected_len()), (0, 0));
    m.check_invariants();
}

#[test]
fn older_wildcard_beats_newer_exact() {
    let mut m = M::new();
    queued(m.post_recv(0, 0, 1)); // wildcard, posted first
    queued(m.post_recv(5, FULL, 2)); // exact, posted second
    assert_eq!(matched_arrive(m.arrive(S0, 5, 0, 10)).user, 1);
    assert_eq!(matched_arrive(m.arrive(S0, 5, 0, 11)).user, 2);
    m.check_invariants();
}

#[test]
fn a_burst_of_unexpected_messages_gives_its_memory_back() {
    let mut m = M::new();
    for i in 0..20_000u64 {
        unexpected(m.arrive(S0, i % 7, 0, i));
    }
    let burst = m.capacities();
    assert!(burst[2] >= 20_000 && burst[3] >= 7, "{burst:?}");
    for i in 0..20_000u64 {
        assert_eq!(matched_post(m.post_recv(i % 7, FULL, i)).msg, i);
        m.check_invariants();
    }
    let after = m.capacities();
    assert!(
        after[2] <= matcher::UNEXP_KEEP && after[3] <= matcher::UNEXP_KEEP,
        "unexpected storage kept after the burst: {after:?}"
    );
    // And it works as before.
    unexpected(m.arrive(S1, 3, 0, 1));
    assert_eq!(matched_post(m.post_recv(3, FULL, 9)).msg, 1);
}

#[test]
fn older_exact_beats_newer_wildcard() {
    let mut m = M::new();
    queued(m.post_recv(5, FULL, 1));
    queued(m.post_recv(0, 0, 2));
    assert_eq!(matched_arrive(m.arrive(S0, 5, 0, 10)).user, 1);
    assert_eq!(matched_arrive(m.arrive(S0, 5, 0, 11)).user, 2);
}

#[test]
fn partial_mask_wildcards_skip_non_matching() {
    let mut m = M::new();
    // Low byte must be 0x01; then an exact receive for 0x0102; then a low-byte-0x02 one.
    queued(m.post_recv(0x01, 0xFF, 1));
    queued(m.post_recv(0x0102, FULL, 2));
    queued(m.post_recv(0x02, 0xFF, 3));
    // 0x0102 has low byte 0x02: the first wildcard does not match, the exact one is older
    // than the third receive, so it wins.
    assert_eq!(matched_arrive(m.arrive(S0, 0x0102, 0, 10)).user, 2);
    assert_eq!(matched_arrive(m.arrive(S0, 0x0102, 0, 11)).user, 3);
    assert_eq!(matched_arrive(m.arrive(S0, 0x0301, 0, 12)).user, 1);
    assert_eq!(m.arrive(S0, 0x0301, 0, 13), ArriveResult::Unexpected);
    m.check_invariants();
}

#[test]
fn masked_receive_takes_oldest_unexpected() {
    let mut m = M::new();
    unexpected(m.arrive(S0, 0x10, 0, 1));
    unexpected(m.arrive(S1, 0x21, 0, 2));
    unexpected(m.arrive(S0, 0x31, 0, 3));
    // Low nibble 1: the oldest such message is the second one.
    assert_eq!(matched_post(m.post_recv(0x01, 0x0F, 9)).msg, 2);
    assert_eq!(matched_post(m.post_recv(0, 0, 9)).msg, 1);
    assert_eq!(matched_post(m.post_recv(0x31, FULL, 9)).msg, 3);
    m.check_invariants();
}

#[test]
fn probe_without_remove_leaves_message() {
    let mut m = M::new();
    assert_eq!(m.probe(0, 0, false), None);
    unexpected(m.arrive(S1, 42, 128, 7));
    for _ in 0..3 {
        let p = m.probe(42, FULL, false).unwrap();
        assert_eq!(
            p,
            ProbeResult {
                info: info(42, 128, S1),
                message: None
            }
        );
    }
    assert_eq!(m.unexpected_len(), 1);
    assert_eq!(matched_post(m.post_recv(0, 0, 5)).msg, 7);
    assert_eq!(m.probe(0, 0, false), None);
}

#[test]
fn probe_remove_then_msg_recv() {
    let mut m = M::new();
    unexpected(m.arrive(S0, 1, 10, 100));
    unexpected(m.arrive(S1, 1, 20, 101));
    let p = m.probe(0, 0, true).unwrap();
    assert_eq!(p.info, info(1, 10, S0));
    let h = p.message.unwrap();
    assert_eq!((m.unexpected_len(), m.probed_len()), (1, 1));
    // The removed message is no longer visible to receives or probes.
    assert_eq!(m.probe(1, FULL, false).unwrap().info, info(1, 20, S1));
    assert_eq!(matched_post(m.post_recv(1, FULL, 5)).msg, 101);
    // A receive posted now does not see the probed message either.
    queued(m.post_recv(1, FULL, 6));
    let got = m.msg_recv(h, 9).unwrap();
    assert_eq!(
        got,
        Match {
            info: info(1, 10, S0),
            msg: 100,
            user: 9
        }
    );
    // A consumed handle is refused and the user data given back.
    assert_eq!(m.msg_recv(h, 10), Err(10));
    assert_eq!(m.probed_len(), 0);
    m.check_invariants();
}

#[test]
fn stale_message_handle_after_slot_reuse() {
    let mut m = M::new();
    unexpected(m.arrive(S0, 1, 0, 1));
    let h1 = m.probe(1, FULL, true).unwrap().message.unwrap();
    m.msg_recv(h1, 0).unwrap();
    unexpected(m.arrive(S0, 2, 0, 2));
    let h2 = m.probe(2, FULL, true).unwrap().message.unwrap();
    assert_eq!(m.msg_recv(h1, 0), Err(0));
    assert_eq!(m.msg_recv(h2, 0).unwrap().msg, 2);
}

#[test]
fn cancel_posted_receive() {
    let mut m = M::new();
    let a = queued(m.post_recv(3, FULL, 1));
    let b = queued(m.post_recv(3, FULL, 2));
    let c = queued(m.post_recv(3, FULL, 3));
    let w = queued(m.post_recv(0, 0, 4));
    // Cancel from the middle of a bucket and the wildcard list.
    assert_eq!(m.cancel(b), Some(2));
    assert_eq!(m.cancel(b), None);
    assert_eq!(m.cancel(w), Some(4));
    m.check_invariants();
    assert_eq!(matched_arrive(m.arrive(S0, 3, 0, 10)).user, 1);
    // A receive that already matched cannot be cancelled.
    assert_eq!(m.cancel(a), None);
    assert_eq!(matched_arrive(m.arrive(S0, 3, 0, 11)).user, 3);
    assert_eq!(m.cancel(c), None);
    // Cancelled receives no longer match.
    assert_eq!(m.arrive(S0, 3, 0, 12), ArriveResult::Unexpected);
    m.check_invariants();
}

#[test]
fn lone_receive_is_matched_moved_and_cancelled() {
    let mut m = M::new();
    // Posted alone: matched (also with a mask) and cancelled in place.
    let a = queued(m.post_recv(7, !1, 1));
    assert_eq!(m.expected_len(), 1);
    assert_eq!(m.arrive(S0, 9, 0, 10), ArriveResult::Unexpected);
    assert_eq!(matched_arrive(m.arrive(S0, 6, 0, 11)).user, 1);
    assert_eq!(m.cancel(a), None, "matched already");
    assert_eq!(matched_post(m.post_recv(9, FULL, 0)).msg, 10);
    let b = queued(m.post_recv(5, FULL, 2));
    assert_eq!(m.cancel(b), Some(2));
    assert_eq!(m.cancel(b), None);
    assert_eq!(m.expected_len(), 0);
    m.check_invariants();
    // A second receive moves the lone one into the queues, ahead of it; its handle still
    // cancels it there.
    let c = queued(m.post_recv(4, FULL, 3));
    let d = queued(m.post_recv(4, FULL, 4));
    let e = queued(m.post_recv(0, 0, 5));
    m.check_invariants();
    assert_eq!(m.cancel(c), Some(3));
    assert_eq!(m.cancel(c), None);
    assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 12)).user, 4);
    assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 13)).user, 5);
    assert_eq!((m.cancel(d), m.cancel(e)), (None, None));
    // Moved and matched: a stale handle, even once its slab slot holds a newer receive.
    let f = queued(m.post_recv(8, FULL, 6));
    let g = queued(m.post_recv(8, FULL, 7));
    assert_eq!(matched_arrive(m.arrive(S0, 8, 0, 14)).user, 6);
    let h = queued(m.post_recv(8, FULL, 8));
    assert_eq!(m.cancel(f), None);
    assert_eq!((m.cancel(g), m.cancel(h)), (Some(7), Some(8)));
    assert_eq!(m.expected_len(), 0);
    // The older lone wildcard beats a newer exact receive once moved.
    queued(m.post_recv(0, 0, 9));
    queued(m.post_recv(1, FULL, 10));
    assert_eq!(matched_arrive(m.arrive(S0, 1, 0, 15)).user, 9);
    assert_eq!(matched_arrive(m.arrive(S0, 1, 0, 16)).user, 10);
    m.check_invariants();
}

#[test]
fn an_unexpected_run_of_one_tag_keeps_arrival_order_and_moves_for_another_tag() {
    let mut m = M::new();
    // One tag's stream running ahead of its receives stays out of the slab.
    for i in 0..4 {
        unexpected(m.arrive(S0, 5, 8, i));
    }
    m.check_invariants();
    assert_eq!(m.capacities()[2], 0, "the run took no slab slot");
    assert_eq!(m.unexpected_len(), 4);
    assert!(!m.no_unexpected());
    // Taken oldest first, by an exact or a masked receive; a receive of another tag finds
    // nothing and is queued.
    assert_eq!(matched_post(m.post_recv(5, FULL, 0)).msg, 0);
    assert_eq!(m.take_matching(4, !1).map(|(_, x)| x), Some(1));
    queued(m.post_recv(6, FULL, 7));
    assert_eq!(m.peek(5, FULL), Some(&2));
    assert_eq!(m.probe(5, FULL, false).map(|p| p.info.length), Some(8));
    m.check_invariants();
    // Another tag arrives (and matches the receive queued for it): nothing moves.
    assert_eq!(matched_arrive(m.arrive(S1, 6, 0, 50)).user, 7);
    // Unmatched, it moves the run into the slab first, behind which it is stored.
    unexpected(m.arrive(S1, 9, 0, 51));
    m.check_invariants();
    assert!(m.capacities()[2] > 0);
    assert_eq!(m.unexpected_len(), 3);
    // A wildcard still takes the oldest: the run's, then the newcomer.
    assert_eq!(matched_post(m.post_recv(0, 0, 1)).msg, 2);
    let h = m.probe(0, 0, true).unwrap().message.unwrap();
    assert_eq!(m.msg_recv(h, 2).unwrap().msg, 3);
    assert_eq!(matched_post(m.post_recv(9, FULL, 3)).msg, 51);
    assert!(m.no_unexpected());
    // A run drained for a failed sender keeps the other's messages in order.
    for i in 0..3 {
        unexpected(m.arrive(SenderId(i % 2), 5, 0, 60 + i));
    }
    let mut gone = Vec::new();
    m.drain_sender(S1, |_, x| gone.push(x));
    assert_eq!(gone, vec![61]);
    m.check_invariants();
    assert_eq!(matched_post(m.post_recv(5, FULL, 4)).msg, 60);
    assert_eq!(matched_post(m.post_recv(5, FULL, 5)).msg, 62);
    assert!(m.no_unexpected());
    m.check_invariants();
}

#[test]
fn a_run_of_one_tag_keeps_its_order_through_cancels_and_moves() {
    let mut m = M::new();
    // A window for one tag stays in the run, matched in post order.
    let hs: Vec<_> = (0..8).map(|i| queued(m.post_recv(4, FULL, i))).collect();
    m.check_invariants();
    assert_eq!(m.capacities()[0], 0, "the run took no slab slot");
    assert_eq!(m.arrive(S0, 5, 0, 100), ArriveResult::Unexpected);
    assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 101)).user, 0);
    assert_eq!(matched_post(m.post_recv(5, FULL, 99)).msg, 100);
    // Cancelled in the middle and at the end of the run.
    assert_eq!(m.cancel(hs[3]), Some(3));
    assert_eq!(m.cancel(hs[7]), Some(7));
    assert_eq!(m.cancel(hs[3]), None);
    assert_eq!(m.cancel(hs[0]), None, "matched already");
    m.check_invariants();
    assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 102)).user, 1);
    // A receive of another tag moves the run into the queues; the older run receives
    // still match first, and their handles still cancel them there.
    let other = queued(m.post_recv(9, FULL, 50));
    m.check_invariants();
    assert_eq!(m.cancel(hs[4]), Some(4));
    assert_eq!(m.cancel(hs[4]), None);
    assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 103)).user, 2);
    assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 104)).user, 5);
    assert_eq!(matched_arrive(m.arrive(S0, 9, 0, 105)).user, 50);
    assert_eq!(m.cancel(other), None);
    assert_eq!(m.cancel(hs[6]), Some(6));
    assert_eq!(m.expected_len(), 0);
    m.check_invariants();
    // A wildcard first: nothing joins it, and an exact receive behind it keeps its place.
    queued(m.post_recv(0, 0, 60));
    queued(m.post_recv(4, FULL, 61));
    assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 106)).user, 60);
    assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 107)).user, 61);
    // An exact run, then a wildcard: the run's receives are older and win.
    queued(m.post_recv(4, FULL, 70));
    queued(m.post_recv(4, FULL, 71));
    queued(m.post_recv(0, 0, 72));
    for want in [70, 71, 72] {
        assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 108)).user, want);
    }
    assert_eq!(m.expected_len(), 0);
    m.check_invariants();
}

/// Receives of one tag under one partial mask (MPICH's: its error bits left out) form a
/// run as full-mask ones do: out of the slab, matched in post order by any tag the mask
/// lets through, and moved into the queues, still first, by a receive of another mask.
#[test]
fn a_run_of_one_partial_mask_matches_through_its_mask() {
    const MASK: TagMask = !0xF0;
    let mut m = M::new();
    for i in 0..8 {
        queued(m.post_recv(4, MASK, i));
    }
    m.check_invariants();
    assert_eq!(m.capacities()[0], 0, "the run took no slab slot");
    // Bits outside the mask may differ; a bit inside it may not.
    assert_eq!(matched_arrive(m.arrive(S0, 4 | 0x30, 0, 100)).user, 0);
    assert_eq!(m.arrive(S0, 5, 0, 101), ArriveResult::Unexpected);
    assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 102)).user, 1);
    // The same tag under another mask does not join: the run moves into the queues.
    queued(m.post_recv(4, FULL, 50));
    m.check_invariants();
    for want in 2..8 {
        assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 103)).user, want);
    }
    assert_eq!(matched_arrive(m.arrive(S0, 4, 0, 104)).user, 50);
    assert_eq!(m.expected_len(), 0);
    m.check_invariants();
}

#[test]
fn a_run_that_never_empties_stays_small() {
    let mut m = M::new();
    // A window of 64 kept full: each match is followed by a new receive of the same tag.
    for i in 0..64 {
        queued(m.post_recv(4, FULL, i));
    }
    for i in 0..100_000u64 {
        assert_eq!(matched_arrive(m.arrive(S0, 4, 0, i)).user, i);
        queued(m.post_recv(4, FULL, i + 64));
        assert!(m.run_capacity() <= 512, "{} after {i}", m.run_capacity());
    }
    assert_eq!(m.expected_len(), 64);
    assert_eq!(m.capacities()[0], 0, "the slab was never used");
    m.check_invariants();
}

#[test]
fn cancelling_a_moved_run_is_not_quadratic() {
    let mut m = M::new();
    let n = 20_000;
    let hs: Vec<_> = (0..n).map(|i| queued(m.post_recv(4, FULL, i))).collect();
    queued(m.post_recv(5, FULL, n));
    let before = m.scan_steps;
    for (i, h) in hs.iter().enumerate().rev() {
        assert_eq!(m.cancel(*h), Some(i as u64));
    }
    assert_eq!(m.scan_steps, before);
    assert_eq!(m.expected_len(), 1);
    m.check_invariants();
}

#[test]
fn stale_recv_handle_after_slot_reuse() {
    let mut m = M::new();
    let a = queued(m.post_recv(1, FULL, 1));
    matched_arrive(m.arrive(S0, 1, 0, 0));
    let b = queued(m.post_recv(1, FULL, 2)); // very likely reuses a's slab slot
    assert_eq!(m.cancel(a), None);
    assert_eq!(m.expected_len(), 1);
    assert_eq!(m.cancel(b), Some(2));
}

#[test]
fn non_overtaking_one_sender() {
    // Unexpected side: messages from S0 with tags 1, 2, 1 and from S1 interleaved; receives
    // of several masks must see S0's messages in send order.
    let mut m = M::new();
    unexpected(m.arrive(S0, 1, 0, 1));
    unexpected(m.arrive(S1, 1, 0, 100));
    unexpected(m.arrive(S0, 2, 0, 2));
    unexpected(m.arrive(S0, 1, 0, 3));
    unexpected(m.arrive(S1, 2, 0, 101));
    assert_eq!(matched_post(m.post_recv(1, FULL, 0)).msg, 1);
    assert_eq!(matched_post(m.post_recv(0, 0, 0)).msg, 100);
    assert_eq!(matched_post(m.post_recv(0, 0, 0)).msg, 2);
    assert_eq!(matched_post(m.post_recv(1, FULL, 0)).msg, 3);
    assert_eq!(matched_post(m.post_recv(0, 0, 0)).msg, 101);

    // Expected side: receives that all match; S0's messages fill them in send order.
    let mut m = M::new();
    queued(m.post_recv(0, 0, 10));
    queued(m.post_recv(1, FULL, 11));
    queued(m.post_recv(1, 1, 12));
    let users: Vec<u64> = (1..=3)
        .map(|i| matched_arrive(m.arrive(S0, 1, 0, i)).user)
        .collect();
    assert_eq!(users, [10, 11, 12]);

    // A long run of one tag from one sender through an exact receive: strict FIFO.
    let mut m = M::new();
    for i in 0..1000 {
        unexpected(m.arrive(S0, 9, 0, i));
    }
    for i in 0..1000 {
        assert_eq!(matched_post(m.post_recv(9, FULL, 0)).msg, i);
    }
}

#[test]
fn drain_sender_removes_only_that_sender() {
    let mut m = M::new();
    unexpected(m.arrive(S0, 1, 0, 1));
    unexpected(m.arrive(S1, 1, 0, 2));
    unexpected(m.arrive(S0, 2, 0, 3));
    unexpected(m.arrive(S1, 3, 0, 4));
    let mut got = Vec::new();
    m.drain_sender(S0, |i, msg| got.push((i.sender_tag, msg)));
    assert_eq!(got, [(1, 1), (2, 3)]);
    m.check_invariants();
    assert_eq!(matched_post(m.post_recv(0, 0, 0)).msg, 2);
    assert_eq!(matched_post(m.post_recv(0, 0, 0)).msg, 4);
    assert_eq!(m.unexpected_len(), 0);
}

#[test]
fn generic_message_descriptors() {
    // Eager data and rendezvous requests are both just descriptors to the matcher.
    #[derive(Debug, PartialEq)]
    enum Desc {
        Eager(Vec<u8>),
        Rts { remote_addr: u64 },
    }
    let mut m: TagMatcher<Desc, &'static str> = TagMatcher::new();
    unexpected(m.arrive(S0, 1, 3, Desc::Eager(vec![1, 2, 3])));
    unexpected(m.arrive(
        S0,
        1,
        1 << 20,
        Desc::Rts {
            remote_addr: 0x1000,
        },
    ));
    let PostResult::Matched(a) = m.post_recv(1, FULL, "a") else {
        panic!()
    };
    assert_eq!(a.msg, Desc::Eager(vec![1, 2, 3]));
    assert_eq!(
        check_length(a.info.length, 2),
        Err(ucs::Status::MessageTruncated)
    );
    let PostResult::Matched(b) = m.post_recv(1, FULL, "b") else {
        panic!()
    };
    assert_eq!(
        b.msg,
        Desc::Rts {
            remote_addr: 0x1000
        }
    );
    assert_eq!(b.info.length, 1 << 20);
}

#[test]
fn unexpected_storm_uses_the_hash() {
    const N: u64 = 100_000;
    let mut m = M::new();
    // 100k messages over 1000 tags from 4 senders.
    for i in 0..N {
        assert_eq!(
            m.arrive(SenderId(i % 4), i % 1000, 8, i),
            ArriveResult::Unexpected
        );
    }
    // Exact receives, tags in reverse order: each is a hash lookup, no scan at all.
    for i in (0..N).rev() {
        let tag = i % 1000;
        let x = matched_post(m.post_recv(tag, FULL, i));
        assert_eq!(x.info.sender_tag, tag);
        // Per tag, messages come out in arrival order.
        assert_eq!(x.msg, tag + (N - 1 - i) / 1000 * 1000);
    }
    assert_eq!(m.scan_steps, 0);
    assert_eq!(m.unexpected_len(), 0);

    // 100k unique tags, then exact probes and receives in reverse order.
    for i in 0..N {
        unexpected(m.arrive(S0, i << 8, 0, i));
    }
    for i in (0..N).rev() {
        assert_eq!(
            m.probe(i << 8, FULL, false).map(|p| p.info.sender_tag),
            Some(i << 8)
        );
        assert_eq!(matched_post(m.post_recv(i << 8, FULL, 0)).msg, i);
    }
    assert_eq!(m.scan_steps, 0);
    m.check_invariants();
}

#[test]
fn expected_storm_uses_the_hash() {
    const N: u64 = 100_000;
    let mut m = M::new();
    for i in 0..N {
        queued(m.post_recv(i, FULL, i));
    }
    for i in (0..N).rev() {
        assert_eq!(matched_arrive(m.arrive(S0, i, 0, 0)).user, i);
    }
    assert_eq!(m.scan_steps, 0);
    // With wildcards posted after the exact receives, the wildcard scan stops at once
    // (the wildcards are younger than every bucket head).
    for i in 0..N {
        queued(m.post_recv(i, FULL, i));
    }
    for i in 0..100 {
        queued(m.post_recv(0, 0, N + i));
    }
    for i in 0..N {
        assert_eq!(matched_arrive(m.arrive(S0, i, 0, 0)).user, i);
    }
    assert_eq!(m.scan_steps, N);
    for i in 0..100 {
        assert_eq!(matched_arrive(m.arrive(S0, 7, 0, 0)).user, N + i);
    }
    m.check_invariants();
}

#[test]
fn warm_matcher_does_not_grow() {
    // Once the working set has been seen, repeating the workload (with new tag values each
    // round, so hash buckets come and go) must not grow any slab or tag table. This is a
    // proxy for "no allocation once warm": a counting global allocator would need unsafe
    // code, which this crate forbids. Capacities are sampled after every operation.
    fn observe(m: &M, max: &mut [usize; 6], warming: bool, round: u64) {
        for (i, c) in m.capacities().into_iter().enumerate() {
            if warming {
                max[i] = max[i].max(c);
            } else {
                assert!(
                    c <= max[i],
                    "round {round}: storage {i} grew from {} to {c}",
                    max[i]
                );
            }
        }
    }
    fn round(m: &mut M, base: u64, max: &mut [usize; 6], warming: bool) {
        let r = base >> 32;
        for i in 0..512 {
            unexpected(m.arrive(SenderId(i % 3), base + i % 64, 0, i));
            observe(m, max, warming, r);
        }
        for i in 0..256 {
            queued(m.post_recv(base + 1000 + i, FULL, i));
            queued(m.post_recv(base + 0x10000, !0xFFF, i));
            observe(m, max, warming, r);
        }
        for i in 0..16 {
            let h = m.probe(base + i, FULL, true).unwrap().message.unwrap();
            m.msg_recv(h, 0).unwrap();
            observe(m, max, warming, r);
        }
        for i in 16..512 {
            matched_post(m.post_recv(base + i % 64, FULL, i));
            observe(m, max, warming, r);
        }
        for i in 0..256 {
            matched_arrive(m.arrive(S0, base + 1000 + i, 0, i));
            matched_arrive(m.arrive(S0, base + 0x10000 + i, 0, i));
            observe(m, max, warming, r);
        }
        assert_eq!(
            (m.expected_len(), m.unexpected_len(), m.probed_len()),
            (0, 0, 0)
        );
    }
    let mut m = M::new();
    let mut max = [0; 6];
    round(&mut m, 0, &mut max, true);
    for r in 1..100 {
        round(&mut m, r << 32, &mut max, false);
    }
}

// ---------------------------------------------------------------------------------------
// Reference matcher and randomized comparison
// ---------------------------------------------------------------------------------------

/// Linear lists, oldest first: obviously correct, O(n) everything.
#[derive(Default)]
struct RefMatcher {
    /// (handle id, tag, mask, user), in post order.
    exp: Vec<(u64, Tag, TagMask, u64)>,
    /// (info, msg), in arrival order.
    unexp: Vec<(TagInfo, u64)>,
    /// (handle id, info, msg).
    probed: Vec<(u64, TagInfo, u64)>,
    next_id: u64,
}

impl RefMatcher {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn post_recv(&mut self, tag: Tag, mask: TagMask, user: u64) -> Result<Match<u64, u64>, u64> {
        if let Some(i) = self
            .unexp
            .iter()
            .position(|(inf, _)| tag_matches(inf.sender_tag, tag, mask))
        {
            let (info, msg) = self.unexp.remove(i);
            return Ok(Match { info, msg, user });
        }
        let id = self.id();
        self.exp.push((id, tag, mask, user));
        Err(id)
    }

    fn arrive(
        &mut self,
        sender: SenderId,
        tag: Tag,
        len: usize,
        msg: u64,
    ) -> Option<Match<u64, u64>> {
        let info = info(tag, len, sender);
        if let Some(i) = self
            .exp
            .iter()
            .position(|&(_, t, m, _)| tag_matches(tag, t, m))
        {
            let (_, _, _, user) = self.exp.remove(i);
            return Some(Match { info, msg, user });
        }
        self.unexp.push((info, msg));
        None
    }

    fn probe(&mut self, tag: Tag, mask: TagMask, remove: bool) -> Option<(TagInfo, Option<u64>)> {
        let i = self
            .unexp
            .iter()
            .position(|(inf, _)| tag_matches(inf.sender_tag, tag, mask))?;
        if !remove {
            return Some((self.unexp[i].0, None));
        }
        let (info, msg) = self.unexp.remove(i);
        let id = self.id();
        self.probed.push((id, info, msg));
        Some((info, Some(id)))
    }

    fn msg_recv(&mut self, id: u64, user: u64) -> Result<Match<u64, u64>, u64> {
        match self.probed.iter().position(|p| p.0 == id) {
            Some(i) => {
                let (_, info, msg) = self.probed.remove(i);
                Ok(Match { info, msg, user })
            }
            None => Err(user),
        }
    }

    fn cancel(&mut self, id: u64) -> Option<u64> {
        let i = self.exp.iter().position(|e| e.0 == id)?;
        Some(self.exp.remove(i).3)
    }

    fn drain_sender(&mut self, sender: SenderId) -> Vec<(TagInfo, u64)> {
        let (out, keep) = self
            .unexp
            .drain(..)
            .partition(|(inf, _)| inf.sender == sender);
        self.unexp = keep;
        out
    }
}

/// xorshift64*: small, deterministic, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<X: Copy>(&mut self, xs: &[X]) -> X {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Runs one random sequence of `ops` operations against both matchers, asserting equal
/// answers at every step. Returns how many matches happened (to check the test bites).
fn run_sequence(seed: u64, ops: usize) -> usize {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut real = M::new();
    let mut reference = RefMatcher::default();

    // A small tag space so that collisions happen; some tags differ only in a high bit.
    let tag_space = rng.pick(&[1u64, 2, 3, 5, 16]);
    let high_bits = rng.pick(&[false, true]);
    let masks: &[TagMask] = &[FULL, FULL, FULL, 0, 0x1, 0x2, 0xF, 1 << 40, !1, !(1 << 40)];
    let senders = rng.pick(&[1u64, 2, 3]);

    let tag = |rng: &mut Rng| {
        rng.below(tag_space)
            | if high_bits && rng.below(2) == 1 {
                1 << 40
            } else {
                0
            }
    };
    let mut recvs: Vec<(RecvHandle, u64)> = Vec::new();
    let mut msgs: Vec<(MessageHandle, u64)> = Vec::new();
    let mut matches = 0;
    let mut next_val = 0u64;

    for step in 0..ops {
        let ctx = || format!("seed {seed} step {step}");
        next_val += 1;
        let op = rng.below(100);
        match op {
            // post_recv
            0..=29 => {
                let (t, mask) = (tag(&mut rng), rng.pick(masks));
                let a = real.post_recv(t, mask, next_val);
                let b = reference.post_recv(t, mask, next_val);
                match (a, b) {
                    (PostResult::Matched(x), Ok(y)) => {
                        assert_eq!(x, y, "{}", ctx());
                        matches += 1;
                    }
                    (PostResult::Queued(h), Err(id)) => recvs.push((h, id)),
                    (a, b) => panic!(
                        "{}: post_recv({t:#x}, {mask:#x}) real {a:?} ref {b:?}",
                        ctx()
                    ),
                }
            }
            // arrive
            30..=59 => {
                let t = tag(&mut rng);
                let sender = SenderId(rng.below(senders));
                let len = rng.below(4096) as usize;
                let a = real.arrive(sender, t, len, next_val);
                let b = reference.arrive(sender, t, len, next_val);
                match (a, b) {
                    (ArriveResult::Matched(x), Some(y)) => {
                        assert_eq!(x, y, "{}", ctx());
                        matches += 1;
                    }
                    (ArriveResult::Unexpected, None) => {}
                    (a, b) => panic!("{}: arrive({t:#x}) real {a:?} ref {b:?}", ctx()),
                }
            }
            // probe, with and without remove
            60..=74 => {
                let (t, mask) = (tag(&mut rng), rng.pick(masks));
                let remove = rng.below(2) == 1;
                let a = real.probe(t, mask, remove);
                let b = reference.probe(t, mask, remove);
                match (a, b) {
                    (None, None) => {}
                    (Some(x), Some((info, id))) => {
                        assert_eq!(x.info, info, "{}", ctx());
                        assert_eq!(x.message.is_some(), remove, "{}", ctx());
                        assert_eq!(id.is_some(), remove, "{}", ctx());
                        if let (Some(h), Some(id)) = (x.message, id) {
                            msgs.push((h, id));
                        }
                    }
                    (a, b) => panic!(
                        "{}: probe({t:#x}, {mask:#x}, {remove}) real {a:?} ref {b:?}",
                        ctx()
                    ),
                }
            }
            // msg_recv on a probed handle (possibly one already consumed)
            75..=84 => {
                if msgs.is_empty() {
                    continue;
                }
                let i = rng.below(msgs.len() as u64) as usize;
                let (h, id) = msgs[i];
                let a = real.msg_recv(h, next_val);
                let b = reference.msg_recv(id, next_val);
                assert_eq!(a, b, "{}: msg_recv", ctx());
                if a.is_ok() {
                    matches += 1;
                }
                // Keep some consumed handles around to exercise stale-handle refusal.
                if rng.below(4) != 0 {
                    msgs.swap_remove(i);
                }
            }
            // cancel (possibly a receive that already matched or was cancelled)
            85..=97 => {
                if recvs.is_empty() {
                    continue;
                }
                let i = rng.below(recvs.len() as u64) as usize;
                let (h, id) = recvs[i];
                assert_eq!(real.cancel(h), reference.cancel(id), "{}: cancel", ctx());
                if rng.below(4) != 0 {
                    recvs.swap_remove(i);
                }
            }
            // drain one sender's unexpected messages
            _ => {
                let sender = SenderId(rng.below(senders));
                let mut a = Vec::new();
                real.drain_sender(sender, |i, m| a.push((i, m)));
                assert_eq!(a, reference.drain_sender(sender), "{}: drain_sender", ctx());
            }
        }
        real.check_invariants();
        assert_eq!(real.expected_len(), reference.exp.len(), "{}", ctx());
        assert_eq!(real.unexpected_len(), reference.unexp.len(), "{}", ctx());
        assert_eq!(real.probed_len(), reference.probed.len(), "{}", ctx());
        // Bound the handle lists (keep a mix of live and stale ones).
        if recvs.len() > 64 {
            recvs.drain(..32);
        }
        if msgs.len() > 64 {
            msgs.drain(..32);
        }
    }

    // Drain what is left in both: every posted receive and probed message must agree.
    for (h, id) in recvs {
        assert_eq!(
            real.cancel(h),
            reference.cancel(id),
            "seed {seed} final cancel"
        );
    }
    for (h, id) in msgs {
        assert_eq!(
            real.msg_recv(h, 0),
            reference.msg_recv(id, 0),
            "seed {seed} final msg_recv"
        );
    }
    loop {
        let a = real.probe(0, 0, true);
        let b = reference.probe(0, 0, true);
        assert_eq!(a.map(|p| p.info), b.map(|p| p.0), "seed {seed} final probe");
        if a.is_none() {
            break;
        }
    }
    real.check_invariants();
    matches
}

#[test]
fn randomized_against_reference() {
    let mut total_matches = 0;
    for seed in 0..3000 {
        total_matches += run_sequence(seed, 200);
    }
    // The sequences really did match things (the tag space is small on purpose).
    assert!(total_matches > 100_000, "only {total_matches} matches");
}

#[test]
fn randomized_long_sequences() {
    for seed in 10_000..10_020 {
        run_sequence(seed, 20_000);
    }
}
