//! UCP active-message tests: `ucp_am_lat` (ping-pong, answered from the handler) and
//! `ucp_am_bw` (streaming to a handler that counts). Eager data arrives with the message;
//! rendezvous data is received with `am_recv_data` into the receiver's buffer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ucp::{Data, RecvParams, ReqId, Worker};
use ucs::Status;

use super::{Msgs, Plan, Side};
use crate::args::Args;
use crate::bootstrap::Oob;
use crate::report::Kind;
use crate::report::{LatClock, StreamClock};
use crate::{Error, Role};

/// `ucp_am_lat`: the client sends an active message to handler 0; the server answers with
/// one of the same size, from inside the handler when the data came eagerly, or once
/// `am_recv_data` has received it when it came by rendezvous; the client counts answers.
pub(super) fn am_lat(
    args: &Args,
    role: Role,
    s: &mut Side,
    tx: &Msgs,
    rx: &Msgs,
    oob: &Oob,
) -> Result<(), Error> {
    let (txd, _) = tx.slot(0);
    let (rxd, _) = rx.slot(0);
    let server = role == Role::Server;
    let sink = AmSink::install(s, rxd.clone(), server.then(|| txd.clone()));
    let answer = server.then_some(rxd);
    let warmup = args.warmup;
    let total = warmup + args.iters();
    if role == Role::Client {
        let mut clock = LatClock::new(args, Kind::Latency, s.size);
        for i in 0..total {
            let r = s
                .worker
                .am_send(s.ep, 0, &[], txd, Default::default())
                .map_err(|e| Error::Peer(format!("am send failed: {e}")))?;
            if let Some(id) = r {
                s.wait(id, oob)?;
            }
            sink.wait_for(s, i + 1, oob, answer)?;
            clock.tick(i, warmup);
        }
        clock.rep.finish();
    } else {
        sink.wait_for(s, total, oob, answer)?;
    }
    s.worker.am_set_handler(0, None);
    Ok(())
}

/// `ucp_am_bw`: the client keeps up to `-O` (32) active messages in flight to handler 0;
/// the server's handler counts them (eager data as it arrives, rendezvous data once
/// received) and the server acknowledges the last.
pub(super) fn am_bw(
    args: &Args,
    plan: &Plan,
    role: Role,
    s: &mut Side,
    tx: &Msgs,
    rx: &Msgs,
    oob: &Oob,
) -> Result<(), Error> {
    let warmup = args.warmup;
    let total = warmup + args.iters();
    if role == Role::Client {
        let (txd, _) = tx.slot(0);
        let mut clock = StreamClock::new(args, s.size);
        let mut inflight: Vec<Option<ReqId>> = vec![None; plan.window];
        for i in 0..total {
            if i == warmup && warmup > 0 {
                s.wait_all(&mut inflight, oob)?;
                clock.restart();
            }
            let slot = (i % plan.window as u64) as usize;
            if let Some(id) = inflight[slot].take() {
                s.wait(id, oob)?;
            }
            inflight[slot] = s
                .worker
                .am_send(s.ep, 0, &[], txd, Default::default())
                .map_err(|e| Error::Peer(format!("am send failed: {e}")))?;
            clock.tick(i, warmup);
        }
        s.wait_all(&mut inflight, oob)?;
        s.recv_ack(oob)?;
        clock.finish();
        return Ok(());
    }
    let sink = AmSink::install(s, rx.slot(0).0.clone(), None);
    sink.wait_for(s, total, oob, None)?;
    s.worker.am_set_handler(0, None);
    s.send_ack(oob)
}

/// What handler 0 of the AM tests shares with the test loop: the messages counted, the
/// failures, and the rendezvous receives the handler started (with their number, so the
/// loop takes the lock only when there are some). One allocation, so the polling loop
/// reaches all of it through one pointer.
struct AmSink(Arc<Shared>);

#[derive(Default)]
struct Shared {
    count: AtomicU64,
    failed: AtomicU64,
    npending: AtomicU64,
    pending: Mutex<Vec<ReqId>>,
}

/// Adds one to a counter only the progressing thread writes: a plain store, not a locked
/// add (which would wait for the answer just sent to leave the store buffer).
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

impl AmSink {
    /// Installs handler 0: eager data is counted, after answering with `reply` from inside
    /// the handler (as UCX's perftest does) when given; rendezvous data is received into
    /// `into` and counted by `wait_for` once it has arrived.
    fn install(s: &mut Side, into: Data, reply: Option<Data>) -> AmSink {
        let sink = AmSink(Arc::default());
        let sh = Arc::clone(&sink.0);
        let ep = s.ep;
        s.worker.am_set_handler(
            0,
            Some(Box::new(move |w: &mut Worker, ev: ucp::AmEvent| {
                match ev.data {
                    ucp::AmData::Eager(_) => {
                        if let Some(reply) = &reply {
                            if w.am_send(ep, 0, &[], reply, Default::default()).is_err() {
                                sh.failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        bump(&sh.count);
                    }
                    ucp::AmData::Rndv(r) => match w.am_recv_data(r, &into, RecvParams::default()) {
                        Ok(id) => {
                            sh.pending.lock().expect("not poisoned").push(id);
                            sh.npending.fetch_add(1, Ordering::Release);
                        }
                        Err(_) => {
                            sh.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                }
            })),
        );
        sink
    }

    /// Progresses until `n` messages are counted. A rendezvous message counts once its
    /// data is in; `answer`, when given, is then sent back.
    ///
    /// The handler runs only inside `progress`, so failures are looked for only after a
    /// poll that handled something, and all the counters sit behind one pointer: the
    /// loop's turn is two loads beside an empty `progress`.
    fn wait_for(
        &self,
        s: &mut Side,
        n: u64,
        oob: &Oob,
        answer: Option<&Data>,
    ) -> Result<(), Error> {
        let sh = &*self.0;
        while sh.count.load(Ordering::Relaxed) < n {
            if s.progress_n(oob)? != 0 && sh.failed.load(Ordering::Relaxed) > 0 {
                return Err(Error::Peer(
                    "an active-message receive or answer failed".into(),
                ));
            }
            if sh.npending.load(Ordering::Acquire) == 0 {
                continue;
            }
            let done: Vec<ReqId> = {
                let mut p = sh.pending.lock().expect("not poisoned");
                let (d, rest): (Vec<ReqId>, Vec<ReqId>) = p
                    .iter()
                    .partition(|&&id| s.worker.request_status(id) != Status::InProgress);
                *p = rest;
                sh.npending.fetch_sub(d.len() as u64, Ordering::Release);
                d
            };
            for id in done {
                s.finish_req(id)?;
                if let Some(a) = answer {
                    if let Some(r) = s
                        .worker
                        .am_send(s.ep, 0, &[], a, Default::default())
                        .map_err(|e| Error::Peer(format!("am send failed: {e}")))?
                    {
                        s.wait(r, oob)?;
                    }
                }
                bump(&sh.count);
            }
        }
        Ok(())
    }
}
