//! UCP one-sided tests: `ucp_put_lat`, `ucp_put_bw`, `ucp_get` and the atomics (`ucp_add`,
//! `ucp_fadd`, `ucp_swap`, `ucp_cswap`). Each side maps a region with the worker
//! (`mem_map(None, ..)`: shared memory a same-host peer maps, so a put is a store) and the
//! two swap remote keys over the out-of-band channel.

use ucp::{AtomicOp, MemHandle, ReqId, Rkey, SendParams};

use super::{OpKind, Plan, Side};
use crate::args::Args;
use crate::bootstrap::Oob;
use crate::mem::Region;
use crate::report::Kind;
use crate::report::{LatClock, StreamClock};
use crate::{Error, Role};

/// Iterations between checks that the peer is alive (`ALIVE_EVERY + 1` is a power of
/// two): a put or get on a same-host peer's mapped region is a copy that never progresses
/// the worker, so nothing else would notice a dead peer.
const ALIVE_EVERY: u64 = (1 << 16) - 1;

/// Maps `len` bytes, swaps remote keys with the peer, and returns the local handle and the
/// peer's key.
fn map_and_swap(
    s: &mut Side,
    len: usize,
    (mem, dev): crate::mem::MemSpec,
    oob: &mut Oob,
) -> Result<(MemHandle, Rkey), Error> {
    let h = s
        .worker
        .mem_map_alloc(len, mem, dev)
        .map_err(|e| Error::Setup(format!("mem_map: {e}")))?;
    let blob = s
        .worker
        .rkey_pack(h)
        .map_err(|e| Error::Setup(format!("rkey_pack: {e}")))?;
    oob.send(&blob).map_err(Error::Oob)?;
    let peer = oob.recv().map_err(Error::Oob)?;
    let rk = s
        .worker
        .rkey_unpack(s.ep, &peer)
        .map_err(|e| Error::Setup(format!("rkey_unpack: {e}")))?;
    Ok((h, rk))
}

/// Both sides are done with the other's region before either unmaps it.
fn unmap(s: &mut Side, h: MemHandle, oob: &mut Oob) -> Result<(), Error> {
    s.barrier(oob)?;
    s.worker
        .mem_unmap(h)
        .map_err(|e| Error::Peer(format!("mem_unmap: {e}")))
}

/// `ucp_put_lat`, as ucx_perftest runs it: the client puts the message with counter
/// `i+1` in its last 8 bytes into the server's region and waits for the same counter to
/// appear in its own; the server waits for it in its region and puts it back.
pub(super) fn put_lat(
    args: &Args,
    plan: &Plan,
    role: Role,
    s: &mut Side,
    oob: &mut Oob,
) -> Result<(), Error> {
    let size = s.size;
    let (h, rk) = map_and_swap(s, size, plan.recv_mem, oob)?;
    let remote = rk.bounds().0;
    let src = Region::new_in(size, plan.send_mem).map_err(Error::Setup)?;
    let data = src.data(None);
    let counter_at = size - 8;
    let put = |s: &mut Side, i: u64, oob: &Oob| -> Result<(), Error> {
        src.set_u64(counter_at, i + 1);
        let r = s
            .worker
            .put(s.ep, &data, remote, &rk, SendParams::default())
            .map_err(|e| Error::Peer(format!("put failed: {e}")))?;
        if let Some(id) = r {
            s.wait(id, oob)?;
        }
        Ok(())
    };
    let await_counter = |s: &mut Side, i: u64, oob: &Oob| -> Result<(), Error> {
        let mut b = [0u8; 8];
        loop {
            s.worker
                .mem_read(h, counter_at, &mut b)
                .map_err(|e| Error::Peer(format!("mem_read: {e}")))?;
            if u64::from_ne_bytes(b) == i + 1 {
                return Ok(());
            }
            s.progress(oob)?;
        }
    };
    let warmup = args.warmup;
    let total = warmup + args.iters();
    if role == Role::Client {
        let mut clock = LatClock::new(args, Kind::Latency, size);
        for i in 0..total {
            put(s, i, oob)?;
            await_counter(s, i, oob)?;
            clock.tick(i, warmup);
        }
        clock.rep.finish();
    } else {
        for i in 0..total {
            await_counter(s, i, oob)?;
            put(s, i, oob)?;
        }
    }
    unmap(s, h, oob)
}

/// `ucp_put_bw`: the client keeps up to `-O` puts of the message in flight into the
/// server's mapped region, then flushes the endpoint; bandwidth is counted up to the flush.
/// The server only progresses (a same-host peer's region is written with stores, a remote
/// one through messages the server executes).
pub(super) fn put_bw(
    args: &Args,
    plan: &Plan,
    role: Role,
    s: &mut Side,
    oob: &mut Oob,
) -> Result<(), Error> {
    let size = s.size;
    let (h, rk) = map_and_swap(s, size, plan.recv_mem, oob)?;
    if role == Role::Client {
        let remote = rk.bounds().0;
        let src = Region::new_in(size, plan.send_mem).map_err(Error::Setup)?;
        let data = src.data(None);
        let mut clock = StreamClock::new(args, size);
        let mut inflight: Vec<Option<ReqId>> = vec![None; plan.window];
        let warmup = args.warmup;
        let total = warmup + args.iters();
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
                .put(s.ep, &data, remote, &rk, SendParams::default())
                .map_err(|e| Error::Peer(format!("put failed: {e}")))?;
            if i & ALIVE_EVERY == 0 {
                s.check_alive(oob)?;
            }
            clock.tick(i, warmup);
        }
        s.wait_all(&mut inflight, oob)?;
        flush(s, oob)?;
        clock.finish();
    }
    // The server serves the puts (message path) until the client is done.
    unmap(s, h, oob)
}

fn flush(s: &mut Side, oob: &Oob) -> Result<(), Error> {
    let f = s
        .worker
        .flush(Some(s.ep))
        .map_err(|e| Error::Peer(format!("flush failed: {e}")))?;
    s.wait(f, oob).map(drop)
}

/// The operand of atomic iteration `i` (add 1; swap in `i`; compare-and-swap 0 for 0).
fn operand(op: AtomicOp, i: u64) -> (u64, u64) {
    match op {
        AtomicOp::Swap => (i, 0),
        AtomicOp::Cswap => (0, 0),
        _ => (1, 0),
    }
}

/// The word's value after `total` iterations of `op`, for the server's check.
fn expected(op: AtomicOp, total: u64, size: usize) -> u64 {
    let v = match op {
        AtomicOp::Add => total,
        AtomicOp::Swap => total.saturating_sub(1),
        _ => 0,
    };
    if size == 4 {
        v & 0xffff_ffff
    } else {
        v
    }
}

/// `ucp_get` and the atomics: the client keeps up to `-O` (1) operations on the server's
/// region in flight. `ucp_get` and the fetching atomics report each operation's time as
/// its latency (not halved); `ucp_add` reports it as the overhead of a streaming test,
/// ended by a flush. The server only progresses (its part of tcp gets and of every
/// atomic), then checks what the atomics left in its word.
pub(super) fn ops(
    args: &Args,
    plan: &Plan,
    role: Role,
    s: &mut Side,
    oob: &mut Oob,
) -> Result<(), Error> {
    let size = s.size;
    // ucp_get reads the peer's (send) memory into its own (receive) memory.
    let (h, rk) = map_and_swap(s, size, plan.send_mem, oob)?;
    let warmup = args.warmup;
    let total = warmup + args.iters();
    if role == Role::Server {
        // The client's operations run in this side's progress, inside the barrier (the
        // client's in `unmap`).
        s.barrier(oob)?;
        if let OpKind::Atomic(op, _) = plan.op {
            let mut b = [0u8; 8];
            s.worker
                .mem_read(h, 0, &mut b[..size])
                .map_err(|e| Error::Peer(format!("mem_read: {e}")))?;
            let got = u64::from_ne_bytes(b);
            let want = expected(op, total, size);
            if got != want {
                return Err(Error::Peer(format!(
                    "{}: the target word holds {got} after {total} operations, expected {want}",
                    args.test()
                )));
            }
        }
        // The barrier above was the client's `unmap`: it no longer uses this region.
        return s
            .worker
            .mem_unmap(h)
            .map_err(|e| Error::Peer(format!("mem_unmap: {e}")));
    }
    let remote = rk.bounds().0;
    let dst = Region::new_in(size, plan.recv_mem).map_err(Error::Setup)?;
    let data = dst.data(None);
    let reply = Region::new(8).map_err(Error::Setup)?;
    let mut inflight: Vec<Option<ReqId>> = vec![None; plan.window];
    let post = |s: &mut Side, i: u64| -> Result<Option<ReqId>, Error> {
        match plan.op {
            OpKind::Get => s
                .worker
                .get(s.ep, &data, remote, &rk, SendParams::default())
                .map_err(|e| Error::Peer(format!("get failed: {e}"))),
            OpKind::Atomic(op, fetch) => {
                let (value, compare) = operand(op, i);
                s.worker
                    .atomic(
                        s.ep,
                        op,
                        size,
                        value,
                        compare,
                        remote,
                        &rk,
                        fetch.then(|| reply.buf()),
                        SendParams::default(),
                    )
                    .map(Some)
                    .map_err(|e| Error::Peer(format!("atomic failed: {e}")))
            }
            _ => Err(Error::Usage(format!(
                "{} is not a one-sided test",
                args.test()
            ))),
        }
    };
    let window = plan.window as u64;
    match crate::results::kind_of(args.test()) {
        Kind::Bandwidth => {
            let mut clock = StreamClock::new(args, size);
            for i in 0..total {
                if i == warmup && warmup > 0 {
                    s.wait_all(&mut inflight, oob)?;
                    clock.restart();
                }
                let slot = (i % window) as usize;
                if let Some(id) = inflight[slot].take() {
                    s.wait(id, oob)?;
                }
                inflight[slot] = post(s, i)?;
                if i & ALIVE_EVERY == 0 {
                    s.check_alive(oob)?;
                }
                clock.tick(i, warmup);
            }
            s.wait_all(&mut inflight, oob)?;
            flush(s, oob)?;
            clock.finish();
        }
        kind => {
            let mut clock = LatClock::new(args, kind, size);
            for i in 0..total {
                let slot = (i % window) as usize;
                if let Some(id) = inflight[slot].take() {
                    s.wait(id, oob)?;
                }
                inflight[slot] = post(s, i)?;
                if window == 1 {
                    if let Some(id) = inflight[slot].take() {
                        s.wait(id, oob)?;
                    }
                }
                if i & ALIVE_EVERY == 0 {
                    s.check_alive(oob)?;
                }
                clock.tick(i, warmup);
            }
            s.wait_all(&mut inflight, oob)?;
            clock.rep.finish();
        }
    }
    unmap(s, h, oob)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_results() {
        assert_eq!(expected(AtomicOp::Add, 10, 8), 10);
        assert_eq!(expected(AtomicOp::Add, (1 << 32) + 3, 4), 3);
        assert_eq!(expected(AtomicOp::Swap, 10, 8), 9);
        assert_eq!(expected(AtomicOp::Cswap, 10, 8), 0);
        assert_eq!(operand(AtomicOp::Swap, 7), (7, 0));
    }
}
