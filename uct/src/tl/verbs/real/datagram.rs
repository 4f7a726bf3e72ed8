//! Connection-manager messages made reliable over unreliable datagrams.
//!
//! The real provider carries [`CmMsg`]s between devices as UD datagrams (a UD QP per
//! device, as IB's own connection manager uses QP1). UD may drop or duplicate; what the
//! provider interface promises (the model's mailbox keeps it by construction) is that a
//! message sent is delivered once. This module is that promise as pure logic, with no
//! verbs in it, so that it is tested here with a lossy channel:
//!
//! * every datagram carries its sender's identity (a number drawn when the device opened,
//!   so a restarted peer is a new sender), a sequence number and the sender's device
//!   address (where the acknowledgement goes);
//! * the receiver acknowledges every data datagram, duplicates included, and delivers each
//!   (sender, sequence) once (a window of the last [`SEEN`] sequences per sender);
//! * the sender retransmits every [`RETRY_NS`] until acknowledged and gives up after
//!   [`TRIES`] sends. A connection request given up on comes back to the transport as a
//!   rejection from its destination carrying the request's own private bytes, which is
//!   what an unreachable peer looks like through `rdma_cm` as well (`Provider::cm_send`).

use std::collections::{BTreeSet, HashMap, VecDeque};

use ucs::wire::{Reader, Writer};

use crate::tl::verbs::{CmKind, CmMsg, QpAddr, CM_PRIVATE};

const MAGIC: u32 = u32::from_le_bytes(*b"RCM1");
const DATA: u8 = 0;
const ACK: u8 = 1;
/// Between two sends of an unacknowledged datagram.
pub const RETRY_NS: u64 = 50_000_000;
/// Sends of one datagram before it is given up (about 5 s).
pub const TRIES: u32 = 100;
/// Sequences remembered per sender for duplicate suppression.
pub const SEEN: usize = 4096;
/// Longest device address carried.
pub const MAX_ADDR: usize = 64;
/// Most bytes of one datagram this layer builds (the UD MTU is at least 256 bytes).
pub const MAX_DATAGRAM: usize =
    4 + 1 + 8 + 4 + 1 + MAX_ADDR + 4 + 1 + MAX_ADDR + 4 + 1 + CM_PRIVATE;

/// Encodes a connection-manager message.
pub fn encode_msg(m: &CmMsg) -> Option<Vec<u8>> {
    if m.from.device.len() > MAX_ADDR || m.private.len() > CM_PRIVATE {
        return None;
    }
    Some(
        Writer::default()
            .u32(m.kind as u32)
            .u8(m.from.device.len() as u8)
            .bytes(&m.from.device)
            .u32(m.from.qpn)
            .u8(m.private.len() as u8)
            .bytes(&m.private)
            .buf,
    )
}

/// Decodes what [`encode_msg`] made; `None` for anything malformed.
pub fn decode_msg(b: &[u8]) -> Option<CmMsg> {
    let mut r = Reader::new(b);
    let kind = CmKind::from_u32(r.u32()?)?;
    let n = r.u8()? as usize;
    let device = r.bytes(n)?.to_vec();
    let qpn = r.u32()?;
    let n = r.u8()? as usize;
    if n > CM_PRIVATE {
        return None;
    }
    let private = r.bytes(n)?.to_vec();
    r.is_empty().then_some(CmMsg {
        kind,
        from: QpAddr { device, qpn },
        private,
    })
}

/// A datagram to put on the wire, to the device at `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Out {
    pub to: Vec<u8>,
    pub bytes: Vec<u8>,
}

#[derive(Debug)]
struct Unacked {
    to: Vec<u8>,
    seq: u32,
    bytes: Vec<u8>,
    msg: CmMsg,
    next_at: u64,
    sent: u32,
}

/// What one device's datagrams need remembered.
#[derive(Debug)]
pub struct Reliable {
    me: u64,
    my_addr: Vec<u8>,
    next_seq: u32,
    unacked: VecDeque<Unacked>,
    seen: HashMap<u64, BTreeSet<u32>>,
}

impl Reliable {
    /// `me` identifies this device's sender for its lifetime; `my_addr` is where peers
    /// send acknowledgements (at most [`MAX_ADDR`] bytes).
    pub fn new(me: u64, my_addr: Vec<u8>) -> Reliable {
        assert!(
            my_addr.len() <= MAX_ADDR,
            "device address of {} bytes",
            my_addr.len()
        );
        Reliable {
            me,
            my_addr,
            next_seq: 1,
            unacked: VecDeque::new(),
            seen: HashMap::new(),
        }
    }

    fn header(&self, kind: u8, seq: u32) -> Writer {
        Writer::with_capacity(MAX_DATAGRAM)
            .u32(MAGIC)
            .u8(kind)
            .u64(self.me)
            .u32(seq)
            .u8(self.my_addr.len() as u8)
            .bytes(&self.my_addr)
    }

    /// The datagram that sends `msg` to `to` now; it is kept until acknowledged. `None`
    /// when the message or address is too long to carry.
    pub fn send(&mut self, to: &[u8], msg: &CmMsg, now: u64) -> Option<Out> {
        let body = encode_msg(msg)?;
        if to.len() > MAX_ADDR {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        let bytes = self.header(DATA, seq).bytes(&body).buf;
        self.unacked.push_back(Unacked {
            to: to.to_vec(),
            seq,
            bytes: bytes.clone(),
            msg: msg.clone(),
            next_at: now + RETRY_NS,
            sent: 1,
        });
        Some(Out {
            to: to.to_vec(),
            bytes,
        })
    }

    /// Takes a datagram that arrived: the message to deliver (once per sender and
    /// sequence), and the acknowledgement to send back. Malformed bytes give neither.
    pub fn receive(&mut self, b: &[u8]) -> (Option<CmMsg>, Option<Out>) {
        let mut r = Reader::new(b);
        let parsed = (|| {
            if r.u32()? != MAGIC {
                return None;
            }
            let kind = r.u8()?;
            let sender = r.u64()?;
            let seq = r.u32()?;
            let n = r.u8()? as usize;
            let from = r.bytes(n)?.to_vec();
            Some((kind, sender, seq, from))
        })();
        let Some((kind, sender, seq, from)) = parsed else {
            return (None, None);
        };
        match kind {
            ACK => {
                // An acknowledgement for us: `sender` is the peer, `seq` ours.
                self.unacked.retain(|u| !(u.seq == seq && u.to == from));
                (None, None)
            }
            DATA => {
                let Some(msg) = decode_msg(r.rest()) else {
                    return (None, None);
                };
                let ack = Out {
                    to: from,
                    bytes: self.header(ACK, seq).buf,
                };
                let seen = self.seen.entry(sender).or_default();
                if !seen.insert(seq) {
                    return (None, Some(ack));
                }
                while seen.len() > SEEN {
                    seen.pop_first();
                }
                (Some(msg), Some(ack))
            }
            _ => (None, None),
        }
    }

    /// Retransmissions due at `now`, and the messages given up on (for each, what the
    /// transport is told instead: a connection request comes back as a rejection from its
    /// destination with the request's private bytes; other messages are dropped).
    pub fn due(&mut self, now: u64) -> (Vec<Out>, Vec<CmMsg>) {
        let (mut resend, mut lost) = (Vec::new(), Vec::new());
        self.unacked.retain_mut(|u| {
            if u.next_at > now {
                return true;
            }
            if u.sent >= TRIES {
                if u.msg.kind == CmKind::Request {
                    lost.push(CmMsg {
                        kind: CmKind::Reject,
                        from: QpAddr {
                            device: u.to.clone(),
                            qpn: 0,
                        },
                        private: u.msg.private.clone(),
                    });
                }
                return false;
            }
            u.sent += 1;
            u.next_at = now + RETRY_NS;
            resend.push(Out {
                to: u.to.clone(),
                bytes: u.bytes.clone(),
            });
            true
        });
        (resend, lost)
    }

    /// Datagrams not acknowledged yet.
    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: CmKind, qpn: u32, private: &[u8]) -> CmMsg {
        CmMsg {
            kind,
            from: QpAddr {
                device: b"dev-a".to_vec(),
                qpn,
            },
            private: private.to_vec(),
        }
    }

    #[test]
    fn messages_encode_and_malformed_ones_are_refused() {
        let m = msg(CmKind::Request, 77, &[1, 2, 3]);
        let b = encode_msg(&m).unwrap();
        assert_eq!(decode_msg(&b), Some(m));
        for cut in 0..b.len() {
            assert_eq!(decode_msg(&b[..cut]), None, "cut at {cut}");
        }
        let mut bad = b.clone();
        bad[0] = 9;
        assert_eq!(decode_msg(&bad), None, "unknown kind");
        assert!(encode_msg(&msg(CmKind::Reply, 1, &[0; CM_PRIVATE + 1])).is_none());
        let mut long = b;
        long.push(0);
        assert_eq!(decode_msg(&long), None, "trailing bytes");
    }

    /// Two devices over a channel that drops every datagram whose number `drop` picks
    /// and duplicates every third: each message is delivered exactly once, in the end.
    #[test]
    fn a_lossy_duplicating_channel_delivers_each_message_once() {
        let mut a = Reliable::new(1, b"A".to_vec());
        let mut b = Reliable::new(2, b"B".to_vec());
        let mut wire: Vec<Out> = Vec::new();
        let mut got: Vec<CmMsg> = Vec::new();
        let mut now = 0;
        let sent: Vec<CmMsg> = (0..50)
            .map(|i| msg(CmKind::Request, i, &[i as u8; 8]))
            .collect();
        for m in &sent {
            wire.push(a.send(b"B", m, now).unwrap());
        }
        let mut n = 0u64;
        for _round in 0..40 {
            let mut next = Vec::new();
            for o in wire.drain(..) {
                n += 1;
                // Drop about half of everything, acknowledgements included.
                if (n * 2654435761) % 7 < 3 {
                    continue;
                }
                let copies = if n.is_multiple_of(3) { 2 } else { 1 };
                for _ in 0..copies {
                    let dst = if o.to == b"B" { &mut b } else { &mut a };
                    let (m, ack) = dst.receive(&o.bytes);
                    got.extend(m);
                    next.extend(ack);
                }
            }
            now += RETRY_NS;
            let (resend, lost) = a.due(now);
            assert!(lost.is_empty(), "nothing given up within the tries");
            next.extend(resend);
            wire = next;
        }
        assert_eq!(a.unacked(), 0, "every datagram acknowledged");
        got.sort_by_key(|m| m.from.qpn);
        assert_eq!(got, sent, "each message delivered once");
    }

    #[test]
    fn an_unreachable_request_comes_back_as_a_rejection() {
        let mut a = Reliable::new(1, b"A".to_vec());
        let req = msg(CmKind::Request, 5, b"ep-serial-nonce");
        a.send(b"nowhere", &req, 0).unwrap();
        a.send(b"nowhere", &msg(CmKind::Disconnect, 5, b""), 0)
            .unwrap();
        let mut now = 0;
        let mut lost = Vec::new();
        let mut resent = 0;
        for _ in 0..TRIES + 1 {
            now += RETRY_NS;
            let (r, l) = a.due(now);
            resent += r.len();
            lost.extend(l);
        }
        assert_eq!(
            resent,
            2 * (TRIES as usize - 1),
            "each sent TRIES times in all"
        );
        assert_eq!(a.unacked(), 0);
        assert_eq!(
            lost,
            vec![CmMsg {
                kind: CmKind::Reject,
                from: QpAddr {
                    device: b"nowhere".to_vec(),
                    qpn: 0
                },
                private: b"ep-serial-nonce".to_vec(),
            }],
            "the request is rejected; the disconnect is dropped"
        );
    }

    #[test]
    fn garbage_and_foreign_acks_change_nothing() {
        let mut a = Reliable::new(1, b"A".to_vec());
        a.send(b"B", &msg(CmKind::Reply, 1, b""), 0).unwrap();
        assert_eq!(a.receive(&[]), (None, None));
        assert_eq!(a.receive(&[0xff; 40]), (None, None));
        // An acknowledgement of our sequence, but from another device: not ours.
        let c = Reliable::new(3, b"C".to_vec());
        let ack = c.header(ACK, 1).buf;
        assert_eq!(a.receive(&ack), (None, None));
        assert_eq!(a.unacked(), 1);
        let b = Reliable::new(2, b"B".to_vec());
        a.receive(&b.header(ACK, 1).buf);
        assert_eq!(a.unacked(), 0);
    }
}
