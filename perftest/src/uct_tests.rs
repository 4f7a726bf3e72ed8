//! UCT-level tests (`-x TL -d DEV`) between two interfaces, as `ucx_perftest` measures
//! them:
//!
//! * `am_lat`, `am_bw`: active-message ping-pong and streaming (`-D short|bcopy`).
//! * `put_lat`: each side registers a receive region; the client puts its message, with
//!   counter `i+1` in the last 8 bytes, into the server's region and waits for the counter
//!   to appear in its own; the server waits for it and puts it back. Half the round trip.
//! * `put_bw`: the client keeps up to `-O` (1) puts in flight into the server's region,
//!   then flushes.
//! * `get`: the client reads the server's region, up to `-O` (1) gets in flight; each get's
//!   time is its latency (not halved).
//!
//! Put and get are zero-copy (`-D zcopy`, the default for them; Rucx's transports have no
//! put/get short or bcopy). A transport without the operation (`-x posix -t put_lat`) or
//! one that cannot reach another process (`self`) is a one-line error before anything
//! starts.

use ucs::{Config, Status};
use uct::{Done, EpId, Handler, Iface, IfaceFlags, RemoteKey};

use crate::args::{Args, UCT_TESTS};
use crate::bootstrap::Oob;
use crate::mem::Region;
use crate::report::{Kind, LatClock, StreamClock};
use crate::{Error, Role};

const AM_ID: u8 = 1;
/// Spins between checks that the peer is still there.
const CHECK_EVERY: u32 = 1 << 16;

#[derive(Default)]
struct Counter {
    /// Active messages received.
    n: u64,
    /// Zero-copy operations and flushes completed later (`Done::Later`).
    comps: u64,
    failed: Option<Status>,
}

impl Handler for Counter {
    #[inline]
    fn am(&mut self, _id: u8, _data: &[u8]) {
        self.n += 1;
    }
    fn completion(&mut self, _comp: uct::Comp, status: Status) {
        self.comps += 1;
        if status != Status::Ok && self.failed.is_none() {
            self.failed = Some(status);
        }
    }
    fn ep_error(&mut self, _ep: EpId, status: Status) {
        self.failed = Some(status);
    }
}

/// How a message is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Short,
    Bcopy,
    Zcopy,
}

/// Which operation a test uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Am,
    Put,
    Get,
}

/// A test's operation and layout, checked against the transport.
#[derive(Clone, Copy, Debug)]
struct Plan {
    op: Op,
    layout: Layout,
    size: usize,
    window: u64,
}

/// Opens the interface and checks the test against what it can do.
fn open(args: &Args, cfg: &Config) -> Result<(Box<dyn Iface>, Plan), Error> {
    let test = args.test();
    let tl = args
        .tl
        .as_deref()
        .ok_or_else(|| Error::Usage(format!("{test} is a UCT test: give -x TRANSPORT")))?;
    if tl == "self" {
        return Err(Error::Usage(
            "-x self reaches only its own process: use posix, cma or tcp between two processes"
                .into(),
        ));
    }
    let op = match test {
        "am_lat" | "am_bw" => Op::Am,
        "put_lat" | "put_bw" => Op::Put,
        "get" => Op::Get,
        t => {
            return Err(Error::Usage(format!(
                "unknown UCT test '{t}' ({})",
                UCT_TESTS.join(", ")
            )))
        }
    };
    let default = if op == Op::Am { "short" } else { "zcopy" };
    let layout = match (args.layout.as_deref().unwrap_or(default), op) {
        ("short", Op::Am) => Layout::Short,
        ("bcopy", Op::Am) => Layout::Bcopy,
        ("zcopy", Op::Put | Op::Get) => Layout::Zcopy,
        (other, Op::Am) => {
            return Err(Error::Usage(format!(
                "{test}: layout '{other}' is not supported (short, bcopy)"
            )))
        }
        (other, _) => {
            return Err(Error::Usage(format!(
                "{test}: layout '{other}' is not supported (put and get are zcopy only)"
            )))
        }
    };
    let size = args.msg_size().map_err(Error::Usage)?;
    if args.msg_sizes().map_err(Error::Usage)?.len() > 1 {
        return Err(Error::Usage(format!(
            "{test}: UCT tests send one buffer (give -s one size)"
        )));
    }
    let iface = uct::component::open_by_name(tl, args.device.as_deref(), cfg)
        .map_err(|e| Error::Setup(e.to_string()))?;
    let attr = iface.attr();
    let (flag, limit, min) = match (op, layout) {
        (Op::Am, Layout::Short) => (IfaceFlags::AM_SHORT, attr.am.max_short + 8, 8),
        (Op::Am, _) => (IfaceFlags::AM_BCOPY, attr.am.max_bcopy, 8),
        (Op::Put, _) => (
            IfaceFlags::PUT_ZCOPY,
            attr.put.max_zcopy,
            if test == "put_lat" { 8 } else { 1 },
        ),
        (Op::Get, _) => (IfaceFlags::GET_ZCOPY, attr.get.max_zcopy, 1),
    };
    if !attr.flags.contains(flag) {
        return Err(Error::Usage(format!(
            "{test}: transport {tl} has no {} (it offers {:?})",
            match op {
                Op::Am if layout == Layout::Short => "am_short",
                Op::Am => "am_bcopy",
                Op::Put => "put_zcopy",
                Op::Get => "get_zcopy",
            },
            attr.flags
        )));
    }
    if size < min || size > limit {
        return Err(Error::Usage(format!(
            "{test}: {tl}: message size {size} outside {min}..={limit} for {layout:?}"
        )));
    }
    let window = match args.outstanding {
        0 => 1,
        n => n as u64,
    };
    Ok((
        iface,
        Plan {
            op,
            layout,
            size,
            window,
        },
    ))
}

/// Checks a UCT test's options and the transport's abilities (the client, before a
/// server is started).
pub fn check_args(args: &Args) -> Result<(), Error> {
    let cfg = Config::from_env().map_err(|e| Error::Usage(e.to_string()))?;
    let (send, recv) = args.mem_spec().map_err(Error::Usage)?;
    if send.0 != uct::MemoryType::Host || recv.0 != uct::MemoryType::Host {
        return Err(Error::Usage(
            "-m: the UCT tests move host memory; GPU memory is for the UCP tests (-t tag_lat ...)"
                .into(),
        ));
    }
    if args.layout.as_deref().is_some_and(|l| l.contains(':')) {
        return Err(Error::Usage(
            "named layouts are for the UCP tag tests (-t tag_lat ...)".into(),
        ));
    }
    open(args, &cfg).map(drop)
}

struct Side {
    iface: Box<dyn Iface>,
    ep: EpId,
    rx: Counter,
    plan: Plan,
    payload: Vec<u8>,
    spins: u32,
    /// Operations that will complete through `Counter::completion`.
    later: u64,
}

impl Side {
    #[inline(always)]
    fn send(&mut self, oob: &Oob) -> Result<(), Error> {
        match self.try_send() {
            Ok(()) => Ok(()),
            Err(e) => self.send_retry(e, oob),
        }
    }

    #[inline(always)]
    fn try_send(&mut self) -> Result<(), Status> {
        match self.plan.layout {
            Layout::Short => self.iface.am_short(self.ep, AM_ID, 0, &self.payload[8..]),
            _ => {
                let p = &self.payload;
                self.iface
                    .am_bcopy(self.ep, AM_ID, &mut |b| {
                        b[..p.len()].copy_from_slice(p);
                        p.len()
                    })
                    .map(drop)
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn send_retry(&mut self, mut e: Status, oob: &Oob) -> Result<(), Error> {
        loop {
            if e != Status::NoResource {
                return Err(Error::Peer(format!("send failed: {e}")));
            }
            self.progress_checked(oob)?;
            match self.try_send() {
                Ok(()) => return Ok(()),
                Err(again) => e = again,
            }
        }
    }

    /// Posts a zero-copy operation, retrying while the transport is out of resources.
    fn zcopy(
        &mut self,
        oob: &Oob,
        mut post: impl FnMut(&mut dyn Iface, EpId, u64) -> ucs::UcsResult<Done>,
    ) -> Result<(), Error> {
        loop {
            let comp = self.later;
            match post(self.iface.as_mut(), self.ep, comp) {
                Ok(Done::Now) => return Ok(()),
                Ok(Done::Later) => {
                    self.later += 1;
                    return Ok(());
                }
                Err(Status::NoResource) => self.progress_checked(oob)?,
                Err(e) => return Err(Error::Peer(format!("zero-copy operation failed: {e}"))),
            }
        }
    }

    /// Progresses until at most `n` zero-copy operations are still in flight.
    fn wait_outstanding(&mut self, n: u64, oob: &Oob) -> Result<(), Error> {
        while self.later - self.rx.comps > n {
            self.progress_checked(oob)?;
        }
        if let Some(st) = self.rx.failed {
            return Err(Error::Peer(format!("an operation failed: {st}")));
        }
        Ok(())
    }

    /// Flushes the endpoint: every operation is complete at the target.
    fn flush(&mut self, oob: &Oob) -> Result<(), Error> {
        self.wait_outstanding(0, oob)?;
        let comp = self.later;
        match self.iface.flush(Some(self.ep), comp) {
            Ok(Done::Now) => Ok(()),
            Ok(Done::Later) => {
                self.later += 1;
                self.wait_outstanding(0, oob)
            }
            Err(e) => Err(Error::Peer(format!("flush failed: {e}"))),
        }
    }

    /// Progresses until `n` messages have arrived in total.
    #[inline(always)]
    fn wait_for(&mut self, n: u64, oob: &Oob) -> Result<(), Error> {
        while self.rx.n < n {
            if self.iface.progress(&mut self.rx) == 0 {
                // A `pause` between empty polls: spinning flat out on the line the peer is
                // about to write slows the peer's store (docs/uct.md, the spin-wait backoff).
                std::hint::spin_loop();
                self.spins = self.spins.wrapping_add(1);
                if self.spins.is_multiple_of(CHECK_EVERY) {
                    self.check_peer(oob)?;
                }
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn progress_checked(&mut self, oob: &Oob) -> Result<(), Error> {
        if self.iface.progress(&mut self.rx) == 0 {
            // A `pause` between polls: spinning flat out on the line the peer is about to
            // write slows the peer's store (docs/uct.md, the spin-wait backoff).
            std::hint::spin_loop();
        }
        self.spins = self.spins.wrapping_add(1);
        if self.spins.is_multiple_of(CHECK_EVERY) {
            return self.check_peer(oob);
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn check_peer(&mut self, oob: &Oob) -> Result<(), Error> {
        if let Some(st) = self.rx.failed {
            return Err(Error::Peer(format!("endpoint failed: {st}")));
        }
        if oob.peer_closed() {
            return Err(Error::Peer("the peer went away".into()));
        }
        Ok(())
    }

    /// A barrier that keeps the interface progressing while it waits (the peer may still
    /// need our part of its last operation: a tcp put's or get's answer).
    fn barrier(&mut self, oob: &mut Oob) -> Result<(), Error> {
        oob.send(b"barrier").map_err(Error::Oob)?;
        while !oob.readable().map_err(Error::Oob)? {
            for _ in 0..256 {
                if self.iface.progress(&mut self.rx) == 0 {
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

fn setup(args: &Args, cfg: &Config, oob: &mut Oob) -> Result<Side, Error> {
    let (iface, plan) = open(args, cfg)?;
    let tl = iface.tl_name().to_string();
    // Swap addresses.
    let mut me = Vec::new();
    me.extend_from_slice(&(iface.device_address().len() as u32).to_le_bytes());
    me.extend_from_slice(iface.device_address());
    me.extend_from_slice(iface.iface_address());
    oob.send(&me).map_err(Error::Oob)?;
    let peer = oob.recv().map_err(Error::Oob)?;
    let dlen = peer
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize)
        .unwrap_or(usize::MAX);
    let (dev, ifa) = match peer.get(4..).filter(|r| r.len() >= dlen) {
        Some(rest) => rest.split_at(dlen),
        None => return Err(Error::Peer("malformed address from the peer".into())),
    };
    let mut iface = iface;
    if !iface.is_reachable(dev, ifa) {
        return Err(Error::Setup(format!(
            "{tl}: the peer's interface is unreachable"
        )));
    }
    let ep = iface
        .ep_connect(dev, ifa)
        .map_err(|e| Error::Setup(format!("{tl}: ep_connect: {e}")))?;
    let mut payload = vec![0u8; plan.size];
    for (i, b) in payload.iter_mut().enumerate() {
        *b = i as u8;
    }
    oob.barrier().map_err(Error::Oob)?;
    Ok(Side {
        iface,
        ep,
        rx: Counter::default(),
        plan,
        payload,
        spins: 0,
        later: 0,
    })
}

/// Runs a UCT test on one side.
pub fn run(args: &Args, role: Role, oob: &mut Oob) -> Result<(), Error> {
    let cfg = Config::from_env().map_err(|e| Error::Usage(e.to_string()))?;
    let mut s = setup(args, &cfg, oob)?;
    match (s.plan.op, args.test()) {
        (Op::Am, "am_lat") => am_lat(args, role, &mut s, oob)?,
        (Op::Am, _) => am_bw(args, role, &mut s, oob)?,
        (Op::Put, "put_lat") => put_lat(args, role, &mut s, oob)?,
        (Op::Put, _) => put_bw(args, role, &mut s, oob)?,
        (Op::Get, _) => get(args, role, &mut s, oob)?,
    }
    s.barrier(oob)
}

fn am_lat(args: &Args, role: Role, s: &mut Side, oob: &mut Oob) -> Result<(), Error> {
    let total = args.warmup + args.iters();
    if role == Role::Server {
        for i in 1..=total {
            s.wait_for(i, oob)?;
            s.send(oob)?;
        }
        return Ok(());
    }
    let mut clock = LatClock::new(args, Kind::Latency, s.plan.size);
    for i in 0..total {
        s.send(oob)?;
        s.wait_for(i + 1, oob)?;
        clock.tick(i, args.warmup);
    }
    clock.rep.finish();
    Ok(())
}

fn am_bw(args: &Args, role: Role, s: &mut Side, oob: &mut Oob) -> Result<(), Error> {
    let total = args.warmup + args.iters();
    if role == Role::Server {
        s.wait_for(total, oob)?;
        return s.send(oob);
    }
    let mut clock = StreamClock::new(args, s.plan.size);
    for i in 0..total {
        s.send(oob)?;
        clock.tick(i, args.warmup);
    }
    // The run ends when the receiver has everything.
    s.wait_for(1, oob)?;
    clock.finish();
    Ok(())
}

/// Registers a receive region and swaps remote keys: returns the region and the peer's
/// key.
fn exchange(s: &mut Side, oob: &mut Oob) -> Result<(Region, RemoteKey), Error> {
    let rx = Region::new(s.plan.size).map_err(Error::Setup)?;
    let memh = rx
        .register(s.iface.as_ref())
        .map_err(|e| Error::Setup(format!("memory registration failed: {e}")))?;
    oob.send(&s.iface.md().mkey_pack(&memh))
        .map_err(Error::Oob)?;
    let blob = oob.recv().map_err(Error::Oob)?;
    let rk = s
        .iface
        .md()
        .rkey_unpack(&blob)
        .map_err(|e| Error::Peer(format!("the peer's remote key: {e}")))?;
    Ok((rx, rk))
}

fn put_lat(args: &Args, role: Role, s: &mut Side, oob: &mut Oob) -> Result<(), Error> {
    let (rx, rk) = exchange(s, oob)?;
    let tx = Region::new(s.plan.size).map_err(Error::Setup)?;
    let at = s.plan.size - 8;
    let total = args.warmup + args.iters();
    let put = |s: &mut Side, i: u64, oob: &Oob| -> Result<(), Error> {
        // The previous put of this buffer has completed (waited below), so it may change.
        tx.set_u64(at, i + 1);
        s.zcopy(oob, |iface, ep, comp| {
            tx.put_zcopy(iface, ep, rk.base, &rk, comp)
        })?;
        s.wait_outstanding(0, oob)
    };
    let await_counter = |s: &mut Side, i: u64, oob: &Oob| -> Result<(), Error> {
        while rx.read_u64_volatile(at) != i + 1 {
            s.progress_checked(oob)?;
        }
        Ok(())
    };
    if role == Role::Server {
        for i in 0..total {
            await_counter(s, i, oob)?;
            put(s, i, oob)?;
        }
        return Ok(());
    }
    let mut clock = LatClock::new(args, Kind::Latency, s.plan.size);
    for i in 0..total {
        put(s, i, oob)?;
        await_counter(s, i, oob)?;
        clock.tick(i, args.warmup);
    }
    clock.rep.finish();
    Ok(())
}

fn put_bw(args: &Args, role: Role, s: &mut Side, oob: &mut Oob) -> Result<(), Error> {
    let (_rx, rk) = exchange(s, oob)?;
    if role == Role::Server {
        // The client's puts land (over tcp: in this side's progress, inside the barrier).
        return Ok(());
    }
    let tx = Region::new(s.plan.size).map_err(Error::Setup)?;
    let total = args.warmup + args.iters();
    let window = s.plan.window;
    let mut clock = StreamClock::new(args, s.plan.size);
    for i in 0..total {
        if i == args.warmup && args.warmup > 0 {
            s.wait_outstanding(0, oob)?;
            clock.restart();
        }
        s.wait_outstanding(window - 1, oob)?;
        s.zcopy(oob, |iface, ep, comp| {
            tx.put_zcopy(iface, ep, rk.base, &rk, comp)
        })?;
        clock.tick(i, args.warmup);
    }
    s.flush(oob)?;
    clock.finish();
    Ok(())
}

fn get(args: &Args, role: Role, s: &mut Side, oob: &mut Oob) -> Result<(), Error> {
    let (_rx, rk) = exchange(s, oob)?;
    if role == Role::Server {
        // The client's gets are answered (over tcp: in this side's progress, inside the
        // barrier).
        return Ok(());
    }
    let dst = Region::new(s.plan.size).map_err(Error::Setup)?;
    let total = args.warmup + args.iters();
    let window = s.plan.window;
    let mut clock = LatClock::new(args, Kind::OpLatency, s.plan.size);
    for i in 0..total {
        s.zcopy(oob, |iface, ep, comp| {
            dst.get_zcopy(iface, ep, rk.base, &rk, comp)
        })?;
        s.wait_outstanding(window - 1, oob)?;
        clock.tick(i, args.warmup);
    }
    s.wait_outstanding(0, oob)?;
    clock.rep.finish();
    Ok(())
}
