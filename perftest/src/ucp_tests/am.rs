//! UCP active-message tests: `ucp_am_lat` (ping-pong, answered from the handler) and
//! `ucp_am_bw` (streaming to a handler that counts). Eager data arrives with the message;
//! rendezvous data is received with `am_recv_data` into the receiver's buffer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ucp::{RecvParams, ReqId, Worker};
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
    let count = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    // Rendezvous receives started by the handler, counted when they complete (and how
    // many there are, so the wait loop takes the lock only when there is something).
    let pending: Arc<Mutex<Vec<ReqId>>> = Arc::default();
    let npending = Arc::new(AtomicU64::new(0));
    let server = role == Role::Server;
    {
        let (count, failed, pending, npending) = (
            Arc::clone(&count),
            Arc::clone(&failed),
            Arc::clone(&pending),
            Arc::clone(&npending),
        );
        let (ep, reply, into) = (s.ep, txd.clone(), rxd.clone());
        s.worker.am_set_handler(
            0,
            Some(Box::new(move |w: &mut Worker, ev: ucp::AmEvent| {
                match ev.data {
                    ucp::AmData::Eager(v) => {
                        w.am_recycle(v);
                        // The answer goes out from inside the handler, as UCX's does.
                        if server && w.am_send(ep, 0, &[], &reply, Default::default()).is_err() {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        // Only this thread writes the counter: a plain store, not a locked
                        // add (which would wait for the answer's store to reach the peer).
                        count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                    }
                    ucp::AmData::Rndv(r) => match w.am_recv_data(r, &into, RecvParams::default()) {
                        Ok(id) => {
                            pending.lock().expect("not poisoned").push(id);
                            npending.fetch_add(1, Ordering::Release);
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                }
            })),
        );
    }
    let warmup = args.warmup;
    let total = warmup + args.iters();
    let wait_for = |s: &mut Side, n: u64, oob: &Oob| -> Result<(), Error> {
        while count.load(Ordering::Relaxed) < n {
            if failed.load(Ordering::Relaxed) > 0 {
                return Err(Error::Peer(
                    "an active-message receive or answer failed".into(),
                ));
            }
            s.progress(oob)?;
            if npending.load(Ordering::Acquire) == 0 {
                continue;
            }
            let done: Vec<ReqId> = {
                let mut p = pending.lock().expect("not poisoned");
                let (d, rest): (Vec<ReqId>, Vec<ReqId>) = p
                    .iter()
                    .partition(|&&id| s.worker.request_status(id) != Status::InProgress);
                *p = rest;
                npending.fetch_sub(d.len() as u64, Ordering::Release);
                d
            };
            for id in done {
                s.finish_req(id)?;
                if server {
                    if let Some(r) = s
                        .worker
                        .am_send(s.ep, 0, &[], rxd, Default::default())
                        .map_err(|e| Error::Peer(format!("am send failed: {e}")))?
                    {
                        s.wait(r, oob)?;
                    }
                }
                count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
        }
        Ok(())
    };
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
            wait_for(s, i + 1, oob)?;
            clock.tick(i, warmup);
        }
        clock.rep.finish();
    } else {
        wait_for(s, total, oob)?;
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
        for id in inflight.iter_mut().filter_map(Option::take) {
            s.wait(id, oob)?;
        }
        s.recv_ack(oob)?;
        clock.finish();
        return Ok(());
    }
    let count = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let pending: Arc<Mutex<Vec<ReqId>>> = Arc::default();
    {
        let (count, failed, pending) = (
            Arc::clone(&count),
            Arc::clone(&failed),
            Arc::clone(&pending),
        );
        let into = rx.slot(0).0.clone();
        s.worker.am_set_handler(
            0,
            Some(Box::new(move |w: &mut Worker, ev: ucp::AmEvent| {
                match ev.data {
                    ucp::AmData::Eager(v) => {
                        w.am_recycle(v);
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    ucp::AmData::Rndv(r) => match w.am_recv_data(r, &into, RecvParams::default()) {
                        Ok(id) => pending.lock().expect("not poisoned").push(id),
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                }
            })),
        );
    }
    while count.load(Ordering::Relaxed) < total {
        if failed.load(Ordering::Relaxed) > 0 {
            return Err(Error::Peer("an active-message receive failed".into()));
        }
        s.progress(oob)?;
        let done: Vec<ReqId> = {
            let mut p = pending.lock().expect("not poisoned");
            if p.is_empty() {
                continue;
            }
            let (d, rest): (Vec<ReqId>, Vec<ReqId>) = p
                .iter()
                .partition(|&&id| s.worker.request_status(id) != Status::InProgress);
            *p = rest;
            d
        };
        for id in done {
            s.finish_req(id)?;
            count.fetch_add(1, Ordering::Relaxed);
        }
    }
    s.worker.am_set_handler(0, None);
    s.send_ack(oob)
}
