//! UCT-level tests (`-x TL -d DEV`): active-message latency and bandwidth between two
//! interfaces, as `ucx_perftest -t am_lat/am_bw` measures them.

use ucs::{Config, Status};
use uct::{EpId, Handler, Iface};

use crate::bootstrap::Oob;
use crate::report::{Kind, Reporter};
use crate::{Error, Role};

const AM_ID: u8 = 1;
/// Spins between checks that the peer is still there.
const CHECK_EVERY: u32 = 1 << 16;

#[derive(Default)]
struct Counter {
    n: u64,
    failed: Option<Status>,
}

impl Handler for Counter {
    #[inline]
    fn am(&mut self, _id: u8, _data: &[u8]) {
        self.n += 1;
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
}

struct Side {
    iface: Box<dyn Iface>,
    ep: EpId,
    rx: Counter,
    layout: Layout,
    payload: Vec<u8>,
    spins: u32,
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
        match self.layout {
            Layout::Short => self.iface.am_short(self.ep, AM_ID, 0, &self.payload[8..]),
            Layout::Bcopy => {
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

    /// Progresses until `n` messages have arrived in total.
    #[inline(always)]
    fn wait_for(&mut self, n: u64, oob: &Oob) -> Result<(), Error> {
        while self.rx.n < n {
            if self.iface.progress(&mut self.rx) == 0 {
                // A `pause` between empty polls: spinning flat out on the line the peer is
                // about to write slows the peer's store (see docs/benchmarks.md).
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
            // write slows the peer's store (see docs/benchmarks.md).
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
}

fn setup(
    args: &crate::args::Args,
    cfg: &Config,
    oob: &mut Oob,
    size: usize,
) -> Result<Side, Error> {
    let tl = args
        .tl
        .as_deref()
        .ok_or_else(|| Error::Usage("UCT tests need -x TRANSPORT".into()))?;
    let iface = uct::component::open_by_name(tl, args.device.as_deref(), cfg)
        .map_err(|e| Error::Setup(e.to_string()))?;
    let layout = match args.layout.as_deref().unwrap_or("short") {
        "short" => Layout::Short,
        "bcopy" => Layout::Bcopy,
        other => {
            return Err(Error::Usage(format!(
                "layout '{other}' is not supported by UCT tests (short, bcopy)"
            )))
        }
    };
    let attr = iface.attr();
    let limit = match layout {
        Layout::Short => attr.am.max_short + 8,
        Layout::Bcopy => attr.am.max_bcopy,
    };
    if size < 8 || size > limit {
        return Err(Error::Usage(format!(
            "{tl}: message size {size} outside 8..={limit} for {layout:?}"
        )));
    }
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
    let mut payload = vec![0u8; size];
    for (i, b) in payload.iter_mut().enumerate() {
        *b = i as u8;
    }
    oob.barrier().map_err(Error::Oob)?;
    Ok(Side {
        iface,
        ep,
        rx: Counter::default(),
        layout,
        payload,
        spins: 0,
    })
}

/// Runs `am_lat` or `am_bw` on one side.
pub fn run(args: &crate::args::Args, role: Role, oob: &mut Oob) -> Result<(), Error> {
    let cfg = Config::from_env().map_err(|e| Error::Usage(e.to_string()))?;
    let size = args.msg_size().map_err(Error::Usage)?;
    let mut s = setup(args, &cfg, oob, size)?;
    let total = args.warmup + args.iters();
    let rate = ucs::time::cycles_per_ns();
    let report_every = (1e9 * rate) as u64;
    match (args.test(), role) {
        ("am_lat", Role::Server) => {
            for i in 1..=total {
                s.wait_for(i, oob)?;
                s.send(oob)?;
            }
        }
        ("am_lat", Role::Client) => {
            let mut rep = Reporter::new(Kind::Latency, size, args.rank, args.final_only, args.csv);
            rep.header();
            for i in 1..=args.warmup {
                s.send(oob)?;
                s.wait_for(i, oob)?;
            }
            let mut last = ucs::time::cycles();
            let mut next_report = last + report_every;
            for i in args.warmup + 1..=total {
                s.send(oob)?;
                s.wait_for(i, oob)?;
                let now = ucs::time::cycles();
                rep.sample_cycles(now.wrapping_sub(last));
                if now >= next_report {
                    rep.interval();
                    next_report = now + report_every;
                }
                last = now;
            }
            rep.finish();
        }
        ("am_bw", Role::Server) => {
            s.wait_for(total, oob)?;
            s.send(oob)?;
        }
        ("am_bw", Role::Client) => {
            let mut rep =
                Reporter::new(Kind::Bandwidth, size, args.rank, args.final_only, args.csv);
            rep.header();
            for _ in 0..args.warmup {
                s.send(oob)?;
            }
            let start = ucs::time::cycles();
            let mut mark = start;
            let mut since = 0u64;
            for _ in 0..args.iters() {
                s.send(oob)?;
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
            // The run ends when the receiver has everything.
            s.wait_for(1, oob)?;
            let now = ucs::time::cycles();
            rep.batch(since, ((now - mark) as f64 / rate) as u64);
            rep.finish();
        }
        (t, _) => {
            return Err(Error::Usage(format!(
                "unknown UCT test '{t}' (am_lat, am_bw)"
            )))
        }
    }
    oob.barrier().map_err(Error::Oob)?;
    Ok(())
}
