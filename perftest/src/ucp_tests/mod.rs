//! UCP-level tests, as `ucx_perftest` runs them. The transports are the context's
//! (`UCX_TLS`, `UCX_NET_DEVICES`); the two workers swap addresses over the out-of-band
//! channel and each creates an endpoint to the other, which wire-up pairs.
//!
//! * Ping-pong (`tag_lat`, `tag_sync_lat`, `ucp_put_lat`, `ucp_am_lat`, `stream_lat`): the
//!   client sends, the server receives and sends back; one iteration is a round trip and
//!   the reported latency half of it.
//! * Streaming (`tag_bw`, `tag_sync_bw`, `ucp_put_bw`, `ucp_am_bw`, `stream_bw`,
//!   `ucp_add`): the client keeps up to `-O` operations in flight, the server receives (or
//!   only progresses, for one-sided operations); the run ends when the server's
//!   acknowledgement of the last message arrives (or a flush completes).
//! * Operations (`ucp_get`, `ucp_fadd`, `ucp_swap`, `ucp_cswap`): the client keeps up to
//!   `-O` (1) operations on the server's mapped memory in flight and reports each one's
//!   time, not halved (`ucx_perftest`'s "latency" of these tests).
//!
//! The sync variants send with `SendParams { sync: true }`. Options with `ucx_perftest`'s
//! meaning: `-D contig|iov[,contig|iov]` (and, for the tag tests, a named application
//! layout), `-C` (wildcard receive), `-U` (probe for the message, then receive it: the
//! unexpected path). `--validate` sends a pattern and checks every message received.
//!
//! The timed loops allocate nothing of their own: message memory, the request window and
//! the operation descriptions are made before the run, and requests are freed as they
//! complete so their slots are reused.

mod am;
mod rma;
mod stream;

use std::time::{Duration, Instant};

use ucp::tag::TagInfo;
use ucp::{AtomicOp, Context, Data, EpHandle, RecvParams, ReqId, SendParams, Worker};
use ucs::Status;

use crate::args::{Args, Dt};
use crate::bootstrap::Oob;
use crate::mem::{MemSpec, Region};
use crate::report::{Kind, LatClock, StreamClock};
use crate::{Error, Role};
use ucs::memtype::MemoryType;

/// The UCP tests, by name.
pub const TESTS: &[&str] = &[
    "tag_lat",
    "tag_bw",
    "tag_sync_lat",
    "tag_sync_bw",
    "ucp_put_lat",
    "ucp_put_bw",
    "ucp_get",
    "ucp_add",
    "ucp_fadd",
    "ucp_swap",
    "ucp_cswap",
    "stream_lat",
    "stream_bw",
    "ucp_am_lat",
    "ucp_am_bw",
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
/// Default window of the bandwidth tests that have one (ucx_perftest's).
const BW_WINDOW: usize = 32;

/// What a UCP test does, from the command line.
#[derive(Clone, Debug, PartialEq)]
struct Plan {
    op: OpKind,
    /// A ping-pong test.
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
    /// Memory type and GPU of the send and of the receive buffers (`-m`, `-a`).
    send_mem: MemSpec,
    recv_mem: MemSpec,
}

/// Which API a test measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Tag,
    Put,
    Get,
    /// An atomic operation; `true`: it fetches the old value.
    Atomic(AtomicOp, bool),
    Stream,
    Am,
}

/// Checks a UCP test's options (both sides run it; the client before starting a server).
fn plan(args: &Args) -> Result<Plan, String> {
    let test = args.test();
    let (op, latency, sync, default_window) = match test {
        "tag_lat" => (OpKind::Tag, true, false, 1),
        "tag_bw" => (OpKind::Tag, false, false, BW_WINDOW),
        "tag_sync_lat" => (OpKind::Tag, true, true, 1),
        "tag_sync_bw" => (OpKind::Tag, false, true, BW_WINDOW),
        "ucp_put_lat" => (OpKind::Put, true, false, 1),
        "ucp_put_bw" => (OpKind::Put, false, false, BW_WINDOW),
        "ucp_get" => (OpKind::Get, false, false, 1),
        "ucp_add" => (OpKind::Atomic(AtomicOp::Add, false), false, false, 1),
        "ucp_fadd" => (OpKind::Atomic(AtomicOp::Add, true), false, false, 1),
        "ucp_swap" => (OpKind::Atomic(AtomicOp::Swap, true), false, false, 1),
        "ucp_cswap" => (OpKind::Atomic(AtomicOp::Cswap, true), false, false, 1),
        "stream_lat" => (OpKind::Stream, true, false, 1),
        "stream_bw" => (OpKind::Stream, false, false, 1),
        "ucp_am_lat" => (OpKind::Am, true, false, 1),
        "ucp_am_bw" => (OpKind::Am, false, false, BW_WINDOW),
        t => return Err(format!("unknown UCP test '{t}' ({})", TESTS.join(", "))),
    };
    let (send_dt, recv_dt) = args.ucp_layouts()?;
    let named = match (&send_dt, &recv_dt) {
        (Dt::Named(a), Dt::Named(b)) if a.size != b.size => {
            return Err(format!(
                "-D: the send layout has {} bytes and the receive layout {}",
                a.size, b.size
            ))
        }
        (Dt::Named(n), _) | (_, Dt::Named(n)) => Some(n.size),
        _ => None,
    };
    if named.is_some() && args.size.is_some() {
        return Err(
            "with a named layout the message size comes from the layout: leave out -s".into(),
        );
    }
    if named.is_some() && op != OpKind::Tag {
        return Err(format!("{test}: named layouts are for the tag tests"));
    }
    let parts = args.msg_sizes()?;
    let size = match named {
        Some(n) => n,
        None => args.msg_size()?,
    };
    if size == 0 {
        return Err("message size must be at least 1 byte".into());
    }
    let rma = matches!(op, OpKind::Put | OpKind::Get | OpKind::Atomic(..));
    if rma && (send_dt != Dt::Contig || recv_dt != Dt::Contig) {
        return Err(format!("{test}: only -D contig is supported"));
    }
    let window = match args.outstanding {
        0 if latency => 1,
        0 => default_window,
        n => n as usize,
    };
    if args.iov_gap > 0 && args.validate {
        return Err("--validate checks contiguous patterns: leave out -i".into());
    }
    if args.validate && op != OpKind::Tag {
        return Err(format!("{test}: --validate is supported by the tag tests"));
    }
    if op == OpKind::Put && size < 8 {
        return Err(format!(
            "{test} needs messages of at least 8 bytes (the counter)"
        ));
    }
    if matches!(op, OpKind::Atomic(..)) && size != 4 && size != 8 {
        return Err(format!(
            "{test}: atomic operands are 4 or 8 bytes (-s 4 or -s 8)"
        ));
    }
    if (args.wildcard || args.unexpected) && op != OpKind::Tag {
        return Err(format!("{test}: -C and -U are for the tag tests"));
    }
    let (send_mem, recv_mem) = args.mem_spec()?;
    let gpu = send_mem.0 != MemoryType::Host || recv_mem.0 != MemoryType::Host;
    if gpu
        && (matches!(send_dt, Dt::Named(_)) || matches!(recv_dt, Dt::Named(_)))
        && op != OpKind::Tag
    {
        return Err(format!(
            "{test}: named layouts on GPU memory are for the tag tests"
        ));
    }
    if gpu && matches!(op, OpKind::Atomic(..)) {
        return Err(format!("{test}: atomics on GPU memory are not supported"));
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
        send_mem,
        recv_mem,
    })
}

/// Checks what can be checked before a server is started.
pub fn check_args(args: &Args) -> Result<(), Error> {
    let p = plan(args).map_err(Error::Usage)?;
    for (mem, _) in [p.send_mem, p.recv_mem] {
        if mem != MemoryType::Host {
            if let Some(why) = crate::mem::gpu_unavailable(mem) {
                return Err(Error::Usage(why));
            }
        }
    }
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
    dt: Dt,
    regions: Vec<Region>,
    data: Vec<Data>,
}

impl Msgs {
    /// Memory for `slots` messages in flight (0: this side does not use it), mapped
    /// through `worker` (heap memory without one).
    fn new(
        plan: &Plan,
        dt: &Dt,
        mem: MemSpec,
        slots: usize,
        mut worker: Option<&mut Worker>,
    ) -> Result<Msgs, Error> {
        let n = if plan.validate { slots } else { slots.min(1) };
        let mut regions = Vec::with_capacity(n);
        let mut data = Vec::with_capacity(n);
        let mut alloc = |len: usize| match worker.as_deref_mut() {
            Some(w) => Region::mapped_in(w, len, mem),
            None => Region::new_in(len, mem),
        };
        for _ in 0..n {
            let (r, d) = match dt {
                Dt::Contig | Dt::Iov => {
                    let parts = (*dt == Dt::Iov).then_some(&plan.parts[..]);
                    let gaps = parts.map_or(0, |p| plan.gap * p.len().saturating_sub(1));
                    let r = alloc(plan.size + gaps).map_err(Error::Setup)?;
                    (r, r.data_with_gap(parts, plan.gap))
                }
                Dt::Named(n) => {
                    let r = alloc(n.buf_len).map_err(Error::Setup)?;
                    (r, r.layout_data(&n.dt).map_err(Error::Setup)?)
                }
            };
            data.push(d);
            regions.push(r);
        }
        Ok(Msgs {
            dt: dt.clone(),
            regions,
            data,
        })
    }

    /// The data and region of window slot `slot`.
    #[inline(always)]
    fn slot(&self, slot: usize) -> (&Data, Region) {
        let i = if self.data.len() == 1 { 0 } else { slot };
        (&self.data[i], self.regions[i])
    }

    /// Writes the pattern for `seed` as the message of slot `slot` (the layout's packed
    /// bytes, for a named layout). Only with no operation on the slot in flight.
    fn fill(&self, slot: usize, seed: u64) -> Result<(), Error> {
        let r = self.slot(slot).1;
        match &self.dt {
            Dt::Named(n) => r.fill_layout(&n.layout, seed).map_err(Error::Setup),
            _ => {
                r.fill(seed);
                Ok(())
            }
        }
    }

    /// Whether slot `slot` holds the `size`-byte message for `seed`; the offset of the
    /// first wrong byte of the message otherwise.
    fn check(&self, slot: usize, size: usize, seed: u64) -> Result<(), usize> {
        let r = self.slot(slot).1;
        match &self.dt {
            Dt::Named(n) => r.check_layout(&n.layout, seed),
            _ => r.check(size, seed),
        }
    }

    /// Clears slot `slot` (before a receive, when validating).
    fn clear(&self, slot: usize) {
        self.slot(slot).1.clear(0);
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
        self.progress_n(oob).map(|_| ())
    }

    /// [`progress`](Self::progress), returning the number of events handled.
    #[inline(always)]
    fn progress_n(&mut self, oob: &Oob) -> Result<usize, Error> {
        let n = self.worker.progress();
        if n == 0 {
            // No `pause` between empty polls: one costs ~65 cycles on the AMD machine, and
            // with a polling loop of a few dozen instructions spinning flat out measured
            // ~5 ns faster one-way (docs/perftest.md). The posix transport
            // pauses by itself once a wait grows long (UCX_POSIX_POLL_BACKOFF, docs/uct.md).
            self.spins = self.spins.wrapping_add(1);
            if self.spins.is_multiple_of(CHECK_EVERY) {
                self.check_peer(oob)?;
            }
        }
        Ok(n)
    }

    /// Checks that the peer is still there (its endpoint, the out-of-band connection),
    /// for loops whose operations may complete without progress (stores into a mapped
    /// region), which would never reach `check_peer`.
    #[cold]
    #[inline(never)]
    fn check_alive(&mut self, oob: &Oob) -> Result<(), Error> {
        if let Some((_, st)) = self.worker.poll_ep_error() {
            return Err(Error::Peer(format!(
                "the endpoint to the peer failed: {st}"
            )));
        }
        if oob.peer_closed() {
            return Err(Error::Peer("the peer went away".into()));
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
    /// Waits for every request of a window (emptying it).
    fn wait_all(&mut self, inflight: &mut [Option<ReqId>], oob: &Oob) -> Result<(), Error> {
        for id in inflight.iter_mut().filter_map(Option::take) {
            self.wait(id, oob)?;
        }
        Ok(())
    }

    fn wait(&mut self, id: ReqId, oob: &Oob) -> Result<Option<TagInfo>, Error> {
        loop {
            if let Some((st, info)) = self.worker.request_test(id) {
                return self.finish(st, info);
            }
            self.progress(oob)?;
        }
    }

    /// Frees finished request `id` and returns the receive's information, or its error.
    fn finish_req(&mut self, id: ReqId) -> Result<Option<TagInfo>, Error> {
        let (st, info) = self
            .worker
            .request_test(id)
            .unwrap_or((Status::InProgress, None));
        self.finish(st, info)
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

    /// With `--validate`: checks a completed receive into slot `slot` of `rx` of the
    /// message for `seed`.
    fn check_msg(
        &self,
        info: Option<TagInfo>,
        rx: &Msgs,
        slot: usize,
        seed: u64,
    ) -> Result<(), Error> {
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
        rx.check(slot, self.size, seed).map_err(|at| {
            Error::Peer(format!(
                "validation: message {seed} differs from what was sent at byte {at}"
            ))
        })
    }

    /// Sends the receiver's "all received" message (end of a streaming run).
    fn send_ack(&mut self, oob: &Oob) -> Result<(), Error> {
        let ack = Region::new(8).map_err(Error::Setup)?.data(None);
        let id = self
            .worker
            .tag_send(self.ep, &ack, ACK_TAG, SendParams::default())
            .map_err(|st| Error::Peer(format!("tag send failed: {st}")))?;
        if let Some(id) = id {
            self.wait(id, oob)?;
        }
        Ok(())
    }

    /// Waits for the receiver's "all received" message.
    fn recv_ack(&mut self, oob: &Oob) -> Result<(), Error> {
        let ack = Region::new(8).map_err(Error::Setup)?.data(None);
        let r = self
            .worker
            .tag_recv(&ack, ACK_TAG, u64::MAX, RecvParams::default())
            .map_err(|st| Error::Peer(format!("tag receive failed: {st}")))?;
        self.wait(r, oob).map(drop)
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
            // A latency test waits for each send before the next, as a blocking send.
            fast_cmpl: plan.latency,
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
    if let Some(l) = side.worker.ep_lanes(side.ep) {
        crate::results::set_lanes(l);
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
    let fmt = args.format();
    if role == Role::Client && !(fmt.final_only || fmt.csv || fmt.quiet) {
        for (side, dt) in [("send", &plan.send_dt), ("receive", &plan.recv_dt)] {
            if let Dt::Named(n) = dt {
                println!("# {side} layout {}: {}", n.spec, n.description);
                println!("# {side} layout {}: {}", n.spec, n.facts());
            }
        }
    }
    let mut s = setup(&plan, oob)?;
    if role == Role::Client && !(fmt.final_only || fmt.csv || fmt.quiet) {
        if let Some(l) = s.worker.ep_lanes(s.ep) {
            println!("# lanes: {l}");
        }
    }
    // Message memory comes from the worker, as ucx_perftest's from ucp_mem_map (the worker
    // outlives every operation on it: it is dropped when this function returns).
    let heap = args.heap_buffers;
    let tx = Msgs::new(
        &plan,
        &plan.send_dt,
        plan.send_mem,
        tx_slots,
        (!heap).then_some(&mut s.worker),
    )?;
    let rx = Msgs::new(
        &plan,
        &plan.recv_dt,
        plan.recv_mem,
        rx_slots,
        (!heap).then_some(&mut s.worker),
    )?;
    // Setup is done: the CPU share is counted from here (a server has no clock).
    crate::mark_measured();
    match (plan.op, plan.latency, role) {
        (OpKind::Put, true, _) => rma::put_lat(args, &plan, role, &mut s, oob)?,
        (OpKind::Put, false, _) => rma::put_bw(args, &plan, role, &mut s, oob)?,
        (OpKind::Get | OpKind::Atomic(..), _, _) => rma::ops(args, &plan, role, &mut s, oob)?,
        (OpKind::Am, true, _) => am::am_lat(args, role, &mut s, &tx, &rx, oob)?,
        (OpKind::Am, false, _) => am::am_bw(args, &plan, role, &mut s, &tx, &rx, oob)?,
        (OpKind::Stream, true, _) => stream::lat(args, role, &mut s, &tx, &rx, oob)?,
        (OpKind::Stream, false, _) => stream::bw(args, &plan, role, &mut s, &tx, &rx, oob)?,
        (OpKind::Tag, true, Role::Client) => lat_client(args, &mut s, &tx, &rx, oob)?,
        (OpKind::Tag, true, Role::Server) => lat_server(args, &mut s, &tx, &rx, oob)?,
        (OpKind::Tag, false, Role::Client) => bw_client(args, &plan, &mut s, &tx, oob)?,
        (OpKind::Tag, false, Role::Server) => bw_server(args, &plan, &mut s, &rx, oob)?,
    }
    // `RUCX_PERFTEST_STATS=1`: which protocols served the run, per side.
    if std::env::var_os("RUCX_PERFTEST_STATS").is_some_and(|v| v != "0") {
        let side = match role {
            Role::Client => "client",
            Role::Server => "server",
        };
        // Each line in one write, so that the two processes' lines never interleave.
        let mut lines = format!("rucx-perftest {side}: {}\n", s.worker.stats());
        for (tl, c) in s.worker.transport_counters() {
            let c: Vec<String> = c.iter().map(|(k, v)| format!("{k} {v}")).collect();
            lines += &format!("rucx-perftest {side}: {tl}: {}\n", c.join(", "));
        }
        {
            use std::io::Write as _;
            let _ = std::io::stderr().write_all(lines.as_bytes());
        }
        #[cfg(feature = "cuda")]
        {
            let (p, pns, u, uns) = ucp::dt::gpu::stage::step_times();
            let avg = |ns: u64, n: u64| ns as f64 / 1e3 / n.max(1) as f64;
            eprintln!(
                "rucx-perftest {side}: gpu layouts: {p} packs ({:.2} us each), {u} unpacks ({:.2} us each)",
                avg(pns, p),
                avg(uns, u)
            );
            let (n, cns, qns) = ucp::dt::gpu::stage::direct_times();
            eprintln!(
                "rucx-perftest {side}: gpu layouts: {n} direct ({:.2} us choosing, {:.2} us queueing each), {} plans built",
                avg(cns, n),
                avg(qns, n),
                ucp::dt::gpu::launch::plans_built()
            );
        }
    }
    s.barrier(oob)
}

/// The seed of the server's answer to message `i`.
fn reply_seed(i: u64) -> u64 {
    i ^ (1 << 63)
}

fn lat_client(args: &Args, s: &mut Side, tx: &Msgs, rx: &Msgs, oob: &Oob) -> Result<(), Error> {
    let mut clock = LatClock::new(args, Kind::Latency, s.size);
    let (txd, _) = tx.slot(0);
    let (rxd, _) = rx.slot(0);
    let warmup = args.warmup;
    let total = warmup + args.iters();
    for i in 0..total {
        if s.validate {
            tx.fill(0, i)?;
        }
        let sreq = s.send(txd, TAG)?;
        let r = s.recv(rxd, oob)?;
        let info = s.wait(r, oob)?;
        if let Some(id) = sreq {
            s.wait(id, oob)?;
        }
        s.check_msg(info, rx, 0, reply_seed(i))?;
        clock.tick(i, warmup);
    }
    clock.rep.finish();
    Ok(())
}

fn lat_server(args: &Args, s: &mut Side, tx: &Msgs, rx: &Msgs, oob: &Oob) -> Result<(), Error> {
    let (txd, _) = tx.slot(0);
    let (rxd, _) = rx.slot(0);
    let mut pending = None;
    for i in 0..args.warmup + args.iters() {
        let r = s.recv(rxd, oob)?;
        let info = s.wait(r, oob)?;
        // The previous answer, if still in flight (a sync send waits for the client's
        // match), completes before its buffer is reused; ucx_perftest waits here too.
        if let Some(id) = pending.take() {
            s.wait(id, oob)?;
        }
        s.check_msg(info, rx, 0, i)?;
        if s.validate {
            tx.fill(0, reply_seed(i))?;
        }
        pending = s.send(txd, TAG)?;
    }
    if let Some(id) = pending {
        s.wait(id, oob)?;
    }
    Ok(())
}

fn bw_client(args: &Args, plan: &Plan, s: &mut Side, tx: &Msgs, oob: &Oob) -> Result<(), Error> {
    let mut clock = StreamClock::new(args, s.size);
    let window = plan.window;
    let mut inflight: Vec<Option<ReqId>> = vec![None; window];
    let warmup = args.warmup;
    let total = warmup + args.iters();
    for i in 0..total {
        if i == warmup && warmup > 0 {
            s.wait_all(&mut inflight, oob)?;
            clock.restart();
        }
        let slot = (i % window as u64) as usize;
        if let Some(id) = inflight[slot].take() {
            s.wait(id, oob)?;
        }
        if s.validate {
            tx.fill(slot, i)?;
        }
        inflight[slot] = s.send(tx.slot(slot).0, TAG)?;
        clock.tick(i, warmup);
    }
    s.wait_all(&mut inflight, oob)?;
    // The run ends when the receiver has everything.
    s.recv_ack(oob)?;
    clock.finish();
    Ok(())
}

fn bw_server(args: &Args, plan: &Plan, s: &mut Side, rx: &Msgs, oob: &Oob) -> Result<(), Error> {
    let window = plan.window;
    // Per slot: the receive in flight and the message number it is for.
    let mut inflight: Vec<Option<(ReqId, u64)>> = vec![None; window];
    let total = args.warmup + args.iters();
    let complete = |s: &mut Side, slot: usize, id: ReqId, seq: u64| -> Result<(), Error> {
        let info = s.wait(id, oob)?;
        s.check_msg(info, rx, slot, seq)
    };
    for i in 0..total {
        let slot = (i % window as u64) as usize;
        if let Some((id, seq)) = inflight[slot].take() {
            complete(s, slot, id, seq)?;
        }
        if s.validate {
            rx.clear(slot);
        }
        inflight[slot] = Some((s.recv(rx.slot(slot).0, oob)?, i));
    }
    // The rest complete in posting order (slot of message `total`, `total + 1`, ...).
    for k in 0..window as u64 {
        let slot = ((total + k) % window as u64) as usize;
        if let Some((id, seq)) = inflight[slot].take() {
            complete(s, slot, id, seq)?;
        }
    }
    s.send_ack(oob)
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
    fn plans_of_the_other_tests() {
        let p = plan_of(&["-t", "ucp_get"]).unwrap();
        assert_eq!((p.op, p.latency, p.window), (OpKind::Get, false, 1));
        let p = plan_of(&["-t", "ucp_cswap", "-s", "4"]).unwrap();
        assert_eq!(p.op, OpKind::Atomic(AtomicOp::Cswap, true));
        assert_eq!(
            plan_of(&["-t", "ucp_add"]).unwrap().op,
            OpKind::Atomic(AtomicOp::Add, false)
        );
        assert_eq!(plan_of(&["-t", "ucp_am_bw"]).unwrap().window, 32);
        assert_eq!(plan_of(&["-t", "stream_bw"]).unwrap().window, 1);
        assert!(plan_of(&["-t", "stream_lat"]).unwrap().latency);
        // nas_mg:8 is an 18x10x10 grid: the x face is 8x8 single doubles, y and z 8 rows
        // of 16.
        let p = plan_of(&["-t", "tag_lat", "-D", "nas_mg_x:8"]).unwrap();
        assert_eq!(p.size, 8 * 8 * 8);
        let p = plan_of(&["-t", "tag_bw", "-D", "nas_mg_y:8,contig"]).unwrap();
        assert_eq!((p.size, p.recv_dt), (8 * 16 * 8, Dt::Contig));
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
        assert!(plan_of(&["-t", "ucp_fadd", "-s", "16"])
            .unwrap_err()
            .contains("4 or 8"));
        assert!(plan_of(&["-t", "ucp_get", "-D", "iov"]).is_err());
        assert!(plan_of(&["-t", "ucp_am_lat", "-D", "milc:4"])
            .unwrap_err()
            .contains("tag tests"));
        assert!(plan_of(&["-t", "tag_lat", "-D", "milc:4", "-s", "8"])
            .unwrap_err()
            .contains("leave out -s"));
        assert!(plan_of(&["-t", "tag_lat", "-D", "nas_mg_y:8,nas_mg_x:8"])
            .unwrap_err()
            .contains("bytes"));
        assert!(plan_of(&["-t", "stream_lat", "--validate"]).is_err());
        assert!(plan_of(&["-t", "ucp_put_bw", "-C"]).is_err());
    }
}
