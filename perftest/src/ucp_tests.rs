//! UCP-level tag tests, as `ucx_perftest -t tag_lat/tag_bw/tag_sync_lat/tag_sync_bw` runs
//! them. The transports are the context's (`UCX_TLS`, `UCX_NET_DEVICES`); the two workers
//! swap addresses over the out-of-band channel and each creates an endpoint to the other,
//! which wire-up pairs.
//!
//! * Latency (ping-pong): the client sends, the server receives and sends back; one
//!   iteration is a round trip and the reported latency half of it.
//! * Bandwidth (streaming): the client keeps up to `-O` sends in flight, the server as many
//!   receives; the run ends when the server's acknowledgement of the last message arrives.
//!
//! The sync variants send with `SendParams { sync: true }`. Options with `ucx_perftest`'s
//! meaning: `-D contig|iov[,contig|iov]`, `-C` (wildcard receive), `-U` (probe for the
//! message, then receive it: the unexpected path). `--validate` sends a pattern and checks
//! every message received.
//!
//! The timed loops allocate nothing of their own: message memory, the request window and
//! the operation descriptions are made before the run, and requests are freed as they
//! complete so their slots are reused.

use std::time::{Duration, Instant};

use ucp::tag::TagInfo;
use ucp::{Context, Data, EpHandle, RecvParams, ReqId, SendParams, Worker};
use ucs::Status;

use crate::args::{Args, Dt};
use crate::bootstrap::Oob;
use crate::mem::Region;
use crate::report::{Kind, Reporter};
use crate::{Error, Role};

/// The UCP tests, by name.
pub const TESTS: &[&str] = &[
    "tag_lat",
    "tag_bw",
    "tag_sync_lat",
    "tag_sync_bw",
    "ucp_put_lat",
    "ucp_put_bw",
    "ucp_am_lat",
];

/// The data messages' tag (ucx_perftest's).
const TAG: u64 = 0x1337_a880;
/// The receiver's "all received" message at the end of a bandwidth run.
const ACK_TAG: u64 = TAG + 1;
/// The message each side sends once to check that wire-up completed.
const HELLO_TAG: u64 = TAG + 2;
/// Empty polls between checks that the peer is still there.
const CHECK_EVERY: u32 = 1 << 16;
/// A wait that sees no completion for this long fails (a lost message would hang).
const STALL: Duration = Duration::from_secs(30);
/// Default window of the bandwidth tests (ucx_perftest's).
const BW_WINDOW: usize = 32;

/// What a UCP test does, from the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Plan {
    /// `ucp_put_lat` / `ucp_am_lat` instead of a tag test.
    op: OpKind,
    latency: bool,
    sync: bool,
    /// Total message size and its iov entries.
    size: usize,
    parts: Vec<usize>,
    send_dt: Dt,
    recv_dt: Dt,
    window: usize,
    wildcard: bool,
    unexpected: bool,
    validate: bool,
    /// Bytes between iov entries (`-i`).
    gap: usize,
}

/// Which API a test measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Tag,
    Put,
    Am,
}

/// Checks a UCP test's options (both sides run it; the client before starting a server).
fn plan(args: &Args) -> Result<Plan, String> {
    let (op, latency, sync) = match args.test() {
        "tag_lat" => (OpKind::Tag, true, false),
        "tag_bw" => (OpKind::Tag, false, false),
        "tag_sync_lat" => (OpKind::Tag, true, true),
        "tag_sync_bw" => (OpKind::Tag, false, true),
        "ucp_put_lat" => (OpKind::Put, true, false),
        "ucp_put_bw" => (OpKind::Put, false, false),
        "ucp_am_lat" => (OpKind::Am, true, false),
        t => return Err(format!("unknown UCP test '{t}' ({})", TESTS.join(", "))),
    };
    let parts = args.msg_sizes()?;
    let size = args.msg_size()?;
    if size == 0 {
        return Err("message size must be at least 1 byte".into());
    }
    let (send_dt, recv_dt) = args.ucp_layouts()?;
    let window = match (args.outstanding, latency) {
        (0, false) => BW_WINDOW,
        (0, true) => 1,
        (n, _) => n as usize,
    };
    if args.iov_gap > 0 && args.validate {
        return Err("--validate checks contiguous patterns: leave out -i".into());
    }
    if op == OpKind::Put && size < 8 {
        return Err("ucp_put_lat needs messages of at least 8 bytes (the counter)".into());
    }
    Ok(Plan {
        op,
        latency,
        sync,
        size,
        parts,
        send_dt,
        recv_dt,
        window,
        wildcard: args.wildcard,
        unexpected: args.unexpected,
        validate: args.validate,
        gap: args.iov_gap,
    })
}

/// Checks what can be checked before a server is started.
pub fn check_args(args: &Args) -> Result<(), Error> {
    plan(args).map(drop).map_err(Error::Usage)?;
    for (opt, v) in [("-x", &args.tl), ("-d", &args.device)] {
        if let Some(v) = v {
            eprintln!(
                "rucx-perftest: {opt} '{v}' ignored for UCP tests (set UCX_TLS / UCX_NET_DEVICES)"
            );
        }
    }
    Ok(())
}

/// Message memory: one region per slot of the window when validating (so every message
/// in flight has bytes of its own), one shared region otherwise (as ucx_perftest).
struct Msgs {
    regions: Vec<Region>,
    data: Vec<Data>,
}

impl Msgs {
    /// Memory for `slots` messages in flight (0: this side does not use it).
    fn new(plan: &Plan, dt: Dt, slots: usize) -> Result<Msgs, Error> {
        let n = if plan.validate { slots } else { slots.min(1) };
        let parts = (dt == Dt::Iov).then_some(&plan.parts[..]);
        let mut regions = Vec::with_capacity(n);
        let mut data = Vec::with_capacity(n);
        let gaps = parts.map_or(0, |p| plan.gap * p.len().saturating_sub(1));
        for _ in 0..n {
            let r = Region::new(plan.size + gaps).map_err(Error::Setup)?;
            data.push(r.data_with_gap(parts, plan.gap));
            regions.push(r);
        }
        Ok(Msgs { regions, data })
    }

    /// The data and region of window slot `slot`.
    #[inline(always)]
    fn slot(&self, slot: usize) -> (&Data, Region) {
        let i = if self.data.len() == 1 { 0 } else { slot };
        (&self.data[i], self.regions[i])
    }
}

/// One side: a worker with an endpoint to the peer.
struct Side {
    worker: Worker,
    ep: EpHandle,
    send_params: SendParams,
    tag_mask: u64,
    unexpected: bool,
    validate: bool,
    size: usize,
    spins: u32,
    /// When the current wait's first peer check found nothing done.
    idle_since: Option<Instant>,
}

impl Side {
    /// Progresses once; every `CHECK_EVERY` empty polls, checks the peer.
    #[inline(always)]
    fn progress(&mut self, oob: &Oob) -> Result<(), Error> {
        if self.worker.progress() == 0 {
            // A `pause` between empty polls: spinning flat out on the line the peer is
            // about to write slows the peer's store (see docs/benchmarks.md).
            std::hint::spin_loop();
            self.spins = self.spins.wrapping_add(1);
            if self.spins.is_multiple_of(CHECK_EVERY) {
                return self.check_peer(oob);
            }
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn check_peer(&mut self, oob: &Oob) -> Result<(), Error> {
        if let Some((_, st)) = self.worker.poll_ep_error() {
            return Err(Error::Peer(format!(
                "the endpoint to the peer failed: {st}"
            )));
        }
        if oob.peer_closed() {
            return Err(Error::Peer("the peer went away".into()));
        }
        let now = Instant::now();
        match self.idle_since {
            None => self.idle_since = Some(now),
            Some(t) if now.duration_since(t) > STALL => {
                return Err(Error::Peer(format!(
                    "no operation completed for {} s: a message was lost or the peer is stuck",
                    STALL.as_secs()
                )))
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// Progresses until request `id` completes, frees it, and returns the receive's
    /// information (None for sends).
    #[inline(always)]
    fn wait(&mut self, id: ReqId, oob: &Oob) -> Result<Option<TagInfo>, Error> {
        loop {
            if let Some((st, info)) = self.worker.request_test(id) {
                return self.finish(st, info);
            }
            self.progress(oob)?;
        }
    }

    #[inline(always)]
    fn finish(&mut self, st: Status, info: Option<TagInfo>) -> Result<Option<TagInfo>, Error> {
        self.idle_since = None;
        if st != Status::Ok {
            return Err(Error::Peer(format!("a tag operation failed: {st}")));
        }
        Ok(info)
    }

    /// Sends a data message; `Some` when it is still in flight.
    #[inline(always)]
    fn send(&mut self, data: &Data, tag: u64) -> Result<Option<ReqId>, Error> {
        self.worker
            .tag_send(self.ep, data, tag, self.send_params)
            .map_err(|s| Error::Peer(format!("tag send failed: {s}")))
    }

    /// Posts the receive of a data message. With `-U`, only once a probe has found the
    /// message among the unexpected ones.
    #[inline(always)]
    fn recv(&mut self, data: &Data, oob: &Oob) -> Result<ReqId, Error> {
        let r = if self.unexpected {
            loop {
                if let Some((_, Some(msg))) = self.worker.tag_probe(TAG, self.tag_mask, true) {
                    break self.worker.tag_msg_recv(data, msg, RecvParams::default());
                }
                self.progress(oob)?;
            }
        } else {
            self.worker
                .tag_recv(data, TAG, self.tag_mask, RecvParams::default())
        };
        r.map_err(|s| Error::Peer(format!("tag receive failed: {s}")))
    }

    /// With `--validate`: checks a completed receive of the message for `seed`.
    fn check_msg(&self, info: Option<TagInfo>, r: Region, seed: u64) -> Result<(), Error> {
        if !self.validate {
            return Ok(());
        }
        let len = info.map_or(0, |i| i.length);
        if len != self.size {
            return Err(Error::Peer(format!(
                "validation: message {seed} has {len} bytes, expected {}",
                self.size
            )));
        }
        r.check(self.size, seed).map_err(|at| {
            Error::Peer(format!(
                "validation: message {seed} differs from what was sent at byte {at}"
            ))
        })
    }

    /// A barrier that keeps the worker progressing while it waits, so that what the peer
    /// still needs from us (an acknowledgement queued for want of resources) goes out.
    /// Then a plain one: neither side leaves (and closes its endpoint, which the other's
    /// progress would report as a failure) while the other still progresses.
    fn barrier(&mut self, oob: &mut Oob) -> Result<(), Error> {
        oob.send(b"barrier").map_err(Error::Oob)?;
        while !oob.readable().map_err(Error::Oob)? {
            for _ in 0..256 {
                if self.worker.progress() == 0 {
                    std::hint::spin_loop();
                }
            }
        }
        match oob.recv().map_err(Error::Oob)?.as_slice() {
            b"barrier" => oob.barrier().map_err(Error::Oob),
            _ => Err(Error::Peer("out-of-band barrier mismatch".into())),
        }
    }
}

/// Creates the worker, swaps addresses, connects, and checks the connection both ways.
fn setup(plan: &Plan, oob: &mut Oob) -> Result<Side, Error> {
    let ctx = Context::from_env().map_err(|e| Error::Usage(e.to_string()))?;
    let mut worker = Worker::new(&ctx).map_err(|e| Error::Setup(e.to_string()))?;
    oob.send(worker.address()).map_err(Error::Oob)?;
    let peer = oob.recv().map_err(Error::Oob)?;
    let ep = worker.ep_create(&peer).map_err(|s| {
        Error::Setup(format!(
            "cannot reach the peer's worker ({s}) with transports {}",
            worker.transports().join(",")
        ))
    })?;
    let mut side = Side {
        worker,
        ep,
        send_params: SendParams {
            sync: plan.sync,
            ..SendParams::default()
        },
        tag_mask: if plan.wildcard { 0 } else { u64::MAX },
        unexpected: plan.unexpected,
        validate: plan.validate,
        size: plan.size,
        spins: 0,
        idle_since: None,
    };
    // One small message each way: both endpoints are wired up when both arrived.
    let tx = Region::new(8).map_err(Error::Setup)?.data(None);
    let rx = Region::new(8).map_err(Error::Setup)?.data(None);
    let r = side
        .worker
        .tag_recv(&rx, HELLO_TAG, u64::MAX, RecvParams::default())
        .map_err(|s| Error::Setup(format!("tag receive failed: {s}")))?;
    let s = side
        .worker
        .tag_send(side.ep, &tx, HELLO_TAG, SendParams::default())
        .map_err(|s| Error::Setup(format!("tag send failed: {s}")))?;
    if let Some(s) = s {
        side.wait(s, oob)?;
    }
    side.wait(r, oob)?;
    if let Some(info) = side.worker.ep_proto_info(side.ep) {
        log::debug!("rucx-perftest: {}", info.trim_end());
    }
    side.barrier(oob)?;
    Ok(side)
}

/// Runs a UCP test on one side.
pub fn run(args: &Args, role: Role, oob: &mut Oob) -> Result<(), Error> {
    let plan = plan(args).map_err(Error::Usage)?;
    // Ping-pong: one message each way at a time. Streaming: a window's worth, one way.
    let (tx_slots, rx_slots) = match (plan.latency, role) {
        (true, _) => (1, 1),
        (false, Role::Client) => (plan.window, 0),
        (false, Role::Server) => (0, plan.window),
    };
    let tx = Msgs::new(&plan, plan.send_dt, tx_slots)?;
    let rx = Msgs::new(&plan, plan.recv_dt, rx_slots)?;
    let mut s = setup(&plan, oob)?;
    match plan.op {
        OpKind::Put if plan.latency => {
            put_lat(args, role, &mut s, oob)?;
            return s.barrier(oob);
        }
        OpKind::Put => {
            put_bw(args, &plan, role, &mut s, oob)?;
            return s.barrier(oob);
        }
        OpKind::Am => {
            am_lat(args, role, &mut s, &tx, &rx, oob)?;
            return s.barrier(oob);
        }
        OpKind::Tag => {}
    }
    match (plan.latency, role) {
        (true, Role::Client) => lat_client(args, &mut s, &tx, &rx, oob)?,
        (true, Role::Server) => lat_server(args, &mut s, &tx, &rx, oob)?,
        (false, Role::Client) => bw_client(args, &plan, &mut s, &tx, oob)?,
        (false, Role::Server) => bw_server(args, &plan, &mut s, &rx, oob)?,
    }
    s.barrier(oob)
}

/// Reports one iteration of a latency loop on the client.
struct LatClock {
    rep: Reporter,
    last: u64,
    next_report: u64,
    report_every: u64,
}

impl LatClock {
    fn new(args: &Args, size: usize) -> LatClock {
        let rep = Reporter::new(Kind::Latency, size, args.rank, args.final_only, args.csv);
        rep.header();
        let report_every = (1e9 * ucs::time::cycles_per_ns()) as u64;
        let last = ucs::time::cycles();
        LatClock {
            rep,
            last,
            next_report: last + report_every,
            report_every,
        }
    }

    #[inline(always)]
    fn tick(&mut self, i: u64, warmup: u64) {
        let now = ucs::time::cycles();
        if i >= warmup {
            self.rep.sample_cycles(now.wrapping_sub(self.last));
            if now >= self.next_report {
                self.rep.interval();
                self.next_report = now + self.report_every;
            }
        } else if i + 1 == warmup {
            self.next_report = now + self.report_every;
        }
        self.last = now;
    }
}

/// `ucp_put_lat`, as ucx_perftest runs it: each side maps a region (worker-allocated, so a
/// same-host peer maps it and puts are stores); the client puts the message with counter
/// `i+1` in its last 8 bytes into the server's region and waits for the same counter to
/// appear in its own; the server waits for it in its region and puts it back.
fn put_lat(args: &Args, role: Role, s: &mut Side, oob: &mut Oob) -> Result<(), Error> {
    let size = s.size;
    let h = s
        .worker
        .mem_map(None, size)
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
    let remote = rk.bounds().0;
    let src = Region::new(size).map_err(Error::Setup)?;
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
        let mut clock = LatClock::new(args, size);
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
    // Both sides are done with the other's region before either unmaps.
    s.barrier(oob)?;
    s.worker
        .mem_unmap(h)
        .map_err(|e| Error::Peer(format!("mem_unmap: {e}")))
}

/// `ucp_put_bw`: the client keeps up to `-O` puts of the message in flight into the
/// server's mapped region, then flushes the endpoint; bandwidth is counted up to the flush.
/// The server only progresses (a same-host peer's region is written with stores, a remote
/// one through messages the server executes).
fn put_bw(args: &Args, plan: &Plan, role: Role, s: &mut Side, oob: &mut Oob) -> Result<(), Error> {
    let size = s.size;
    let h = s
        .worker
        .mem_map(None, size)
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
    if role == Role::Client {
        let remote = rk.bounds().0;
        let src = Region::new(size).map_err(Error::Setup)?;
        let data = src.data(None);
        let mut rep = Reporter::new(Kind::Bandwidth, size, args.rank, args.final_only, args.csv);
        rep.header();
        let mut inflight: Vec<Option<ReqId>> = vec![None; plan.window];
        let rate = ucs::time::cycles_per_ns();
        let report_every = (1e9 * rate) as u64;
        let warmup = args.warmup;
        let total = warmup + args.iters();
        let mut mark = ucs::time::cycles();
        let mut since = 0u64;
        for i in 0..total {
            let slot = (i % plan.window as u64) as usize;
            if let Some(id) = inflight[slot].take() {
                s.wait(id, oob)?;
            }
            inflight[slot] = s
                .worker
                .put(s.ep, &data, remote, &rk, SendParams::default())
                .map_err(|e| Error::Peer(format!("put failed: {e}")))?;
            if i < warmup {
                mark = ucs::time::cycles();
                continue;
            }
            since += 1;
            if since.is_multiple_of(1024) {
                let now = ucs::time::cycles();
                if now - mark >= report_every {
                    rep.batch(since, ((now - mark) as f64 / rate) as u64);
                    rep.interval();
                    mark = now;
                    since = 0;
                }
            }
        }
        for id in inflight.iter_mut().filter_map(Option::take) {
            s.wait(id, oob)?;
        }
        let f = s
            .worker
            .flush(Some(s.ep))
            .map_err(|e| Error::Peer(format!("flush failed: {e}")))?;
        s.wait(f, oob)?;
        let now = ucs::time::cycles();
        rep.batch(since, ((now - mark) as f64 / rate) as u64);
        rep.finish();
    }
    // The server serves the puts (message path) until the client is done.
    s.barrier(oob)?;
    s.worker
        .mem_unmap(h)
        .map_err(|e| Error::Peer(format!("mem_unmap: {e}")))
}

/// `ucp_am_lat`: the client sends an active message to handler 0; the server answers with
/// one of the same size, from inside the handler when the data came eagerly, or once
/// `am_recv_data` has received it when it came by rendezvous; the client counts answers.
fn am_lat(
    args: &Args,
    role: Role,
    s: &mut Side,
    tx: &Msgs,
    rx: &Msgs,
    oob: &Oob,
) -> Result<(), Error> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
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
                let (st, info) = s
                    .worker
                    .request_test(id)
                    .unwrap_or((Status::InProgress, None));
                s.finish(st, info)?;
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
        let mut clock = LatClock::new(args, s.size);
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

/// The seed of the server's answer to message `i`.
fn reply_seed(i: u64) -> u64 {
    i ^ (1 << 63)
}

fn lat_client(args: &Args, s: &mut Side, tx: &Msgs, rx: &Msgs, oob: &Oob) -> Result<(), Error> {
    let mut rep = Reporter::new(Kind::Latency, s.size, args.rank, args.final_only, args.csv);
    rep.header();
    let (txd, txr) = tx.slot(0);
    let (rxd, rxr) = rx.slot(0);
    let warmup = args.warmup;
    let total = warmup + args.iters();
    let report_every = (1e9 * ucs::time::cycles_per_ns()) as u64;
    let mut last = ucs::time::cycles();
    let mut next_report = last + report_every;
    for i in 0..total {
        if s.validate {
            txr.fill(i);
        }
        let sreq = s.send(txd, TAG)?;
        let r = s.recv(rxd, oob)?;
        let info = s.wait(r, oob)?;
        if let Some(id) = sreq {
            s.wait(id, oob)?;
        }
        s.check_msg(info, rxr, reply_seed(i))?;
        let now = ucs::time::cycles();
        if i >= warmup {
            rep.sample_cycles(now.wrapping_sub(last));
            if now >= next_report {
                rep.interval();
                next_report = now + report_every;
            }
        } else if i + 1 == warmup {
            next_report = now + report_every;
        }
        last = now;
    }
    rep.finish();
    Ok(())
}

fn lat_server(args: &Args, s: &mut Side, tx: &Msgs, rx: &Msgs, oob: &Oob) -> Result<(), Error> {
    let (txd, txr) = tx.slot(0);
    let (rxd, rxr) = rx.slot(0);
    let mut pending = None;
    for i in 0..args.warmup + args.iters() {
        let r = s.recv(rxd, oob)?;
        let info = s.wait(r, oob)?;
        // The previous answer, if still in flight (a sync send waits for the client's
        // match), completes before its buffer is reused; ucx_perftest waits here too.
        if let Some(id) = pending.take() {
            s.wait(id, oob)?;
        }
        s.check_msg(info, rxr, i)?;
        if s.validate {
            txr.fill(reply_seed(i));
        }
        pending = s.send(txd, TAG)?;
    }
    if let Some(id) = pending {
        s.wait(id, oob)?;
    }
    Ok(())
}

fn bw_client(args: &Args, plan: &Plan, s: &mut Side, tx: &Msgs, oob: &Oob) -> Result<(), Error> {
    let mut rep = Reporter::new(
        Kind::Bandwidth,
        s.size,
        args.rank,
        args.final_only,
        args.csv,
    );
    rep.header();
    let window = plan.window;
    let mut inflight: Vec<Option<ReqId>> = vec![None; window];
    let ack = Region::new(8).map_err(Error::Setup)?.data(None);
    let rate = ucs::time::cycles_per_ns();
    let report_every = (1e9 * rate) as u64;
    let warmup = args.warmup;
    let total = warmup + args.iters();
    let mut mark = ucs::time::cycles();
    let mut since = 0u64;
    for i in 0..total {
        let slot = (i % window as u64) as usize;
        if let Some(id) = inflight[slot].take() {
            s.wait(id, oob)?;
        }
        let (d, r) = tx.slot(slot);
        if s.validate {
            r.fill(i);
        }
        inflight[slot] = s.send(d, TAG)?;
        if i < warmup {
            mark = ucs::time::cycles();
            continue;
        }
        since += 1;
        if since.is_multiple_of(1024) {
            let now = ucs::time::cycles();
            if now - mark >= report_every {
                rep.batch(since, ((now - mark) as f64 / rate) as u64);
                rep.interval();
                mark = now;
                since = 0;
            }
        }
    }
    for id in inflight.iter_mut().filter_map(Option::take) {
        s.wait(id, oob)?;
    }
    // The run ends when the receiver has everything.
    let r = s
        .worker
        .tag_recv(&ack, ACK_TAG, u64::MAX, RecvParams::default())
        .map_err(|st| Error::Peer(format!("tag receive failed: {st}")))?;
    s.wait(r, oob)?;
    let now = ucs::time::cycles();
    rep.batch(since, ((now - mark) as f64 / rate) as u64);
    rep.finish();
    Ok(())
}

fn bw_server(args: &Args, plan: &Plan, s: &mut Side, rx: &Msgs, oob: &Oob) -> Result<(), Error> {
    let window = plan.window;
    // Per slot: the receive in flight and the message number it is for.
    let mut inflight: Vec<Option<(ReqId, u64)>> = vec![None; window];
    let total = args.warmup + args.iters();
    let complete = |s: &mut Side, slot: usize, id: ReqId, seq: u64| -> Result<(), Error> {
        let info = s.wait(id, oob)?;
        s.check_msg(info, rx.slot(slot).1, seq)
    };
    for i in 0..total {
        let slot = (i % window as u64) as usize;
        if let Some((id, seq)) = inflight[slot].take() {
            complete(s, slot, id, seq)?;
        }
        let (d, r) = rx.slot(slot);
        if s.validate {
            r.clear(0);
        }
        inflight[slot] = Some((s.recv(d, oob)?, i));
    }
    // The rest complete in posting order (slot of message `total`, `total + 1`, ...).
    for k in 0..window as u64 {
        let slot = ((total + k) % window as u64) as usize;
        if let Some((id, seq)) = inflight[slot].take() {
            complete(s, slot, id, seq)?;
        }
    }
    let ack = Region::new(8).map_err(Error::Setup)?.data(None);
    let id = s
        .worker
        .tag_send(s.ep, &ack, ACK_TAG, SendParams::default())
        .map_err(|st| Error::Peer(format!("tag send failed: {st}")))?;
    if let Some(id) = id {
        s.wait(id, oob)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan_of(argv: &[&str]) -> Result<Plan, String> {
        let mut v = vec!["p"];
        v.extend(argv);
        plan(&Args::try_parse_from(v).unwrap())
    }

    #[test]
    fn plans_follow_ucx_perftest_defaults() {
        let p = plan_of(&["-t", "tag_lat"]).unwrap();
        assert!(p.latency && !p.sync);
        assert_eq!((p.size, p.window, p.send_dt), (8, 1, Dt::Contig));
        let p = plan_of(&["-t", "tag_sync_bw", "-s", "1000,2000", "-D", "iov"]).unwrap();
        assert!(!p.latency && p.sync);
        assert_eq!(
            (p.size, &p.parts[..], p.window),
            (3000, &[1000, 2000][..], 32)
        );
        assert_eq!((p.send_dt, p.recv_dt), (Dt::Iov, Dt::Iov));
        let p = plan_of(&["-t", "tag_bw", "-O", "4", "-C", "-U"]).unwrap();
        assert_eq!(p.window, 4);
        assert!(p.wildcard && p.unexpected);
    }

    #[test]
    fn bad_plans_are_errors() {
        assert!(plan_of(&["-t", "tag_nope"])
            .unwrap_err()
            .contains("unknown"));
        assert!(plan_of(&["-t", "tag_lat", "-s", "0"])
            .unwrap_err()
            .contains("at least"));
        assert!(plan_of(&["-t", "tag_lat", "-s", "x"])
            .unwrap_err()
            .contains("bad size"));
        assert!(plan_of(&["-t", "tag_lat", "-D", "bcopy"]).is_err());
    }
}
