//! Channels (the Channel API of the Charm++ GPU paper): two endpoints joined under an id
//! both sides choose. Each send and each receive takes the next counter of the channel and
//! derives its tag from (message type, channel id, counter) with a [`TagScheme`]; sends go
//! in order and receives match them in the same order, on host or device memory (any
//! datatype), with no metadata message.
//!
//! [`TagScheme`]: crate::tag::scheme::TagScheme
//!
//! **Wrap safety.** A counter of `k` bits comes round after `2^k` messages. Reusing a tag
//! is safe once the receiver has posted the receive of its previous use (receives of a
//! channel are posted in order, and one endpoint delivers in order). So the counter space
//! is cut in two halves, and the first send of each half goes synchronously (it completes
//! when the receiver matched it): entering a half again requires the marker that opened
//! the other half to have completed — every earlier use of this half's tags came before
//! that marker, so its receive is posted. One acknowledged message per `2^(k-1)`. When the
//! marker has not completed, the channel's [`WrapPolicy`] says: `Busy`, or progress until
//! it has (`Wait`).
//!
//! **Failure.** Receives are bound to the channel's endpoint (`Worker::bind_recv`): when it
//! fails, pending receives end with its error; sends end with it as every send does.
//! Closing a channel cancels its receives that have not matched (`Canceled`); its sends go
//! on to complete as they would.

//!
//! The channel API is written against the worker's own: channels are kept by the worker
//! (`channel/state.rs`), and everything else here goes through the calls an application
//! makes (tag send and receive, progress, request status, binding a receive to an
//! endpoint).

use ucs::{Status, UcsResult};

pub(crate) mod state;

pub use state::{ChannelHandle, ChannelOpts, NextSend};

use crate::datatype::Data;
use crate::request::{EpHandle, ReqId};
use crate::tag::scheme::{Match, WrapPolicy};
use crate::worker::op::{RecvParams, SendParams};
use crate::worker::state::Worker;
use state::Channel;

impl Worker {
    /// Opens channel `id` on `ep`; the peer opens the same id on its endpoint to us.
    /// `InvalidParam` when the id or type does not fit the scheme, or the channel is open
    /// already on this endpoint.
    pub fn channel_open(
        &mut self,
        ep: EpHandle,
        id: u64,
        opts: ChannelOpts,
    ) -> UcsResult<ChannelHandle> {
        opts.scheme.encode(opts.msg_type, id, 0)?;
        if !self.ep_exists(ep) {
            return Err(Status::InvalidParam);
        }
        if self
            .channels
            .iter()
            .any(|(_, c)| c.ep == ep && c.id == id && c.opts.msg_type == opts.msg_type)
        {
            return Err(Status::InvalidParam);
        }
        self.channel_gen = self.channel_gen.wrapping_add(1);
        let gen = self.channel_gen;
        let idx = self.channels.insert(Channel {
            gen,
            ep,
            id,
            opts,
            sends: 0,
            recvs: 0,
            markers: [None, None],
            pending: Vec::new(),
        });
        Ok(ChannelHandle {
            idx: idx as u32,
            gen,
        })
    }

    fn channel(&mut self, ch: ChannelHandle) -> UcsResult<&mut Channel> {
        match self.channels.get_mut(ch.idx as usize) {
            Some(c) if c.gen == ch.gen => Ok(c),
            _ => Err(Status::InvalidParam),
        }
    }

    /// The tag of the channel's next send, taking its counter. At the start of a half of
    /// the counter space it waits for (or, with `WrapPolicy::Error`, refuses with `Busy`)
    /// the marker that opened the other half, and says the send must be synchronous.
    pub fn channel_next_send(&mut self, ch: ChannelHandle) -> UcsResult<NextSend> {
        let (ep, starts_half, wait_for, policy) = {
            let c = self.channel(ch)?;
            let pos = u128::from(c.sends) % c.opts.scheme.counter_period();
            let half = (pos / c.half_len()) as usize & 1;
            let starts = pos % c.half_len() == 0 && c.opts.scheme.counter_period() > 1;
            // Only a half whose tags were used before (a full period ago) needs the check.
            let reused = u128::from(c.sends) >= c.opts.scheme.counter_period();
            let other = c.markers[half ^ 1];
            (
                c.ep,
                starts,
                other.filter(|_| starts && reused),
                c.opts.wrap,
            )
        };
        if let Some(m) = wait_for {
            while !self.request_finished(m) {
                if let Some(s) = self.ep_failed(ep) {
                    return Err(s);
                }
                if policy == WrapPolicy::Error {
                    return Err(Status::Busy);
                }
                if self.progress() == 0 {
                    std::hint::spin_loop();
                }
            }
        }
        let c = self.channel(ch)?;
        let tag = c.tag(c.sends)?;
        c.sends += 1;
        Ok(NextSend {
            tag,
            sync: starts_half,
        })
    }

    /// Records the request of a send made with [`channel_next_send`]'s tag: a marker
    /// (`sync`) is remembered for the wrap check. `None` (the send completed at once) for
    /// a marker means it was matched already.
    ///
    /// [`channel_next_send`]: Self::channel_next_send
    pub fn channel_sent(&mut self, ch: ChannelHandle, next: NextSend, req: Option<ReqId>) {
        if let Ok(c) = self.channel(ch) {
            if next.sync {
                let half = {
                    let pos = u128::from(c.sends - 1) % c.opts.scheme.counter_period();
                    (pos / c.half_len()) as usize & 1
                };
                c.markers[half] = req;
            }
        }
    }

    /// The tag and mask of the channel's next receive, taking its counter.
    pub fn channel_next_recv(&mut self, ch: ChannelHandle) -> UcsResult<(u64, u64)> {
        let c = self.channel(ch)?;
        let tag = c.tag(c.recvs)?;
        c.recvs += 1;
        Ok((tag, c.opts.scheme.mask(Match::All)))
    }

    /// Records a receive posted with [`channel_next_recv`]'s tag: it is bound to the
    /// channel's endpoint and cancelled if the channel closes first.
    ///
    /// [`channel_next_recv`]: Self::channel_next_recv
    pub fn channel_received(&mut self, ch: ChannelHandle, req: ReqId) {
        let Ok(ep) = self.channel(ch).map(|c| c.ep) else {
            return;
        };
        self.bind_recv(ep, req);
        let finished: Vec<ReqId> = match self.channels.get(ch.idx as usize) {
            Some(c) => c
                .pending
                .iter()
                .copied()
                .filter(|&r| self.request_finished(r))
                .collect(),
            None => Vec::new(),
        };
        if let Ok(c) = self.channel(ch) {
            c.pending.retain(|r| !finished.contains(r));
            c.pending.push(req);
        }
    }

    /// Sends `data` on the channel, in order after its earlier sends.
    pub fn channel_send(
        &mut self,
        ch: ChannelHandle,
        data: &Data,
        mut p: SendParams,
    ) -> UcsResult<Option<ReqId>> {
        let ep = self.channel(ch)?.ep;
        let next = self.channel_next_send(ch)?;
        p.sync |= next.sync;
        let r = self.tag_send(ep, data, next.tag, p)?;
        self.channel_sent(ch, next, r);
        Ok(r)
    }

    /// Receives the channel's next message into `data`.
    pub fn channel_recv(
        &mut self,
        ch: ChannelHandle,
        data: &Data,
        p: RecvParams,
    ) -> UcsResult<ReqId> {
        let ep = self.channel(ch)?.ep;
        if let Some(s) = self.ep_failed(ep) {
            return Err(s);
        }
        let (tag, mask) = self.channel_next_recv(ch)?;
        let id = self.tag_recv(data, tag, mask, p)?;
        self.channel_received(ch, id);
        Ok(id)
    }

    /// Closes the channel: its receives that have not matched end `Canceled`; its handle
    /// is refused from now on.
    pub fn channel_close(&mut self, ch: ChannelHandle) -> UcsResult<()> {
        self.channel(ch)?;
        let c = self.channels.remove(ch.idx as usize);
        for r in c.pending {
            self.request_cancel(r);
            self.unbind_recv(r);
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(unsafe_code)] // tests describe their buffers as user code does
mod tests {
    use std::sync::Arc;

    use ucs::Config;

    use super::*;
    use crate::buf::Buf;
    use crate::context::Context;
    use crate::tag::scheme::TagScheme;

    fn pair() -> (Worker, Worker, EpHandle, EpHandle) {
        let c = Arc::new(Context::new(
            Config::from_lookup(|k| match k {
                "TLS" => Some("posix,cma".into()),
                _ => None,
            })
            .unwrap(),
        ))
        .clone();
        let mut a = Worker::new(&c).unwrap();
        let mut b = Worker::new(&c).unwrap();
        let ab = a.ep_create(b.address()).unwrap();
        let ba = b.ep_create(a.address()).unwrap();
        (a, b, ab, ba)
    }

    fn pattern(n: usize, seed: u64) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u64 ^ seed.wrapping_mul(0x9e37)) as u8)
            .collect()
    }

    fn drive(a: &mut Worker, b: &mut Worker, mut done: impl FnMut(&mut Worker) -> bool) {
        let t = std::time::Instant::now();
        while !done(b) {
            a.progress();
            b.progress();
            assert!(t.elapsed().as_secs() < 10, "timed out");
        }
    }

    /// A 3-bit counter (period 8): the sender runs ahead of the receiver until a tag would
    /// come round while its earlier use is unmatched, is refused (`Busy`), and goes on once
    /// the receiver posted; every message, eager and rendezvous, lands in order.
    #[test]
    fn messages_arrive_in_order_and_a_wrap_waits_for_the_receiver() {
        let (mut a, mut b, ab, ba) = pair();
        let opts = ChannelOpts {
            scheme: TagScheme::new(4, 8, 3).unwrap(),
            msg_type: 2,
            wrap: WrapPolicy::Error,
        };
        let ca = a.channel_open(ab, 7, opts).unwrap();
        let cb = b.channel_open(ba, 7, opts).unwrap();
        assert_eq!(
            a.channel_open(ab, 7, opts),
            Err(Status::InvalidParam),
            "open twice"
        );
        let sizes = [8usize, 5000, 100, 300_000, 1, 64, 20_000];
        const N: usize = 40;
        let msgs: Vec<Vec<u8>> = (0..N)
            .map(|i| pattern(sizes[i % sizes.len()], i as u64))
            .collect();
        let mut outs: Vec<Vec<u8>> = (0..N).map(|i| vec![0u8; msgs[i].len()]).collect();
        let mut sends = Vec::new();
        let mut recvs: Vec<ReqId> = Vec::new();
        let (mut sent, mut posted, mut busy) = (0, 0, 0);
        while sent < N {
            // SAFETY: the buffers outlive the requests (all waited for below).
            let d = Data::Contig(unsafe { Buf::from_slice(&msgs[sent]) });
            match a.channel_send(ca, &d, SendParams::default()) {
                Ok(r) => {
                    sends.extend(r);
                    sent += 1;
                }
                Err(Status::Busy) => {
                    busy += 1;
                    // The receiver posts its next receive and the marker completes.
                    assert!(posted < sent, "refused with every receive posted");
                    // SAFETY: as above.
                    let d = Data::Contig(unsafe { Buf::from_mut_slice(&mut outs[posted]) });
                    recvs.push(b.channel_recv(cb, &d, RecvParams::default()).unwrap());
                    posted += 1;
                    a.progress();
                    b.progress();
                }
                Err(e) => panic!("send {sent}: {e}"),
            }
        }
        while posted < N {
            // SAFETY: as above.
            let d = Data::Contig(unsafe { Buf::from_mut_slice(&mut outs[posted]) });
            recvs.push(b.channel_recv(cb, &d, RecvParams::default()).unwrap());
            posted += 1;
        }
        for r in recvs {
            drive(&mut a, &mut b, |b| {
                b.request_test(r).is_some_and(|(s, _)| {
                    assert_eq!(s, Status::Ok);
                    true
                })
            });
        }
        for s in sends {
            drive(&mut b, &mut a, |a| a.request_test(s).is_some());
        }
        assert!(
            busy > 0,
            "the 3-bit counter never came round to an unmatched tag"
        );
        for i in 0..N {
            assert_eq!(outs[i], msgs[i], "message {i}");
        }
        a.channel_close(ca).unwrap();
        assert_eq!(a.channel_close(ca), Err(Status::InvalidParam));
    }

    /// Closing a channel cancels its pending receives; a peer that goes away ends them
    /// with the endpoint's error; a closed channel's handle is refused.
    #[test]
    fn close_and_peer_loss_end_pending_receives() {
        let (mut a, mut b, ab, ba) = pair();
        let ca = a.channel_open(ab, 1, ChannelOpts::default()).unwrap();
        let cb = b.channel_open(ba, 1, ChannelOpts::default()).unwrap();
        let mut out = vec![0u8; 64];
        // SAFETY: `out` outlives the receive (cancelled below).
        let d = Data::Contig(unsafe { Buf::from_mut_slice(&mut out) });
        let r = b.channel_recv(cb, &d, RecvParams::default()).unwrap();
        b.channel_close(cb).unwrap();
        assert_eq!(b.request_test(r).map(|x| x.0), Some(Status::Canceled));
        assert!(b.channel_recv(cb, &d, RecvParams::default()).is_err());
        // Peer loss: b waits on a channel whose peer closes its endpoint.
        let cb = b.channel_open(ba, 2, ChannelOpts::default()).unwrap();
        let r = b.channel_recv(cb, &d, RecvParams::default()).unwrap();
        let _ = a.channel_close(ca);
        let c = a.ep_close(ab).unwrap();
        drive(&mut b, &mut a, |a| a.request_test(c).is_some());
        drive(&mut a, &mut b, |b| {
            b.request_test(r).is_some_and(|(s, _)| {
                assert!(s != Status::Ok && s != Status::Canceled, "{s}");
                true
            })
        });
        // A receive posted after the failure fails at once.
        assert!(b.channel_recv(cb, &d, RecvParams::default()).is_err());
    }
}
