//! Protocol selection: a pure function of (operation, memory type, datatype class, size)
//! and an endpoint's lane configuration, computed once per endpoint (STYLE.md §5).
//!
//! The size ranges come from the lanes' limits and performance estimates:
//!
//! * **eager short** while the data fits the AM lane's `max_short` (contiguous host data);
//! * **eager bcopy** while header + data fit one `max_bcopy` buffer;
//! * **eager zcopy** from `UCX_ZCOPY_THRESH` while header + data fit one `max_zcopy`
//!   message, on lanes with AM zero-copy (tcp), for contiguous and iov data;
//! * **eager multi-fragment bcopy** above that, up to the rendezvous threshold;
//! * **rendezvous** from `UCX_RNDV_THRESH`: *get zcopy* when the endpoint has an RMA lane
//!   (CMA on the same host) and the sender's data has addresses (contiguous or iov) —
//!   *put zcopy* instead with `UCX_RNDV_SCHEME=put_zcopy` —, else
//!   the *AM pipeline* (the receiver answers RTR and the sender streams fragments).
//!
//! `auto` thresholds are where the estimated times cross (see `auto_rndv`), capped at
//! `MAX_AUTO_RNDV`. On shared memory the pipelined eager copies (sender copies in while
//! the receiver copies out) move bytes as fast as one cma read, so eager serves up to the
//! cap: measured on the project machine, 128 KB ping-pong 2.7 µs eager against 10.3 µs
//! by cma rendezvous, 2 MB 54 µs against 198 µs (docs/ucp.md).

use std::fmt;

use ucs::config::{AutoSize, RndvScheme};
use uct::{IfaceAttr, IfaceFlags, MemoryType};

use super::wire::{EAGER_FIRST_HDR, EAGER_HDR, EAGER_SYNC_HDR};
use crate::datatype::DtClass;

/// Bandwidth of one memory copy, bytes/s, for the eager-versus-rendezvous estimate.
pub const COPY_BW: f64 = 10e9;

/// Auto zero-copy threshold for eager messages.
pub const AUTO_ZCOPY_THRESH: usize = 16 * 1024;

/// What is being done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    TagSend,
    TagSendSync,
}

/// A selected protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    EagerShort,
    EagerBcopy,
    EagerZcopy,
    EagerMulti,
    RndvGet,
    RndvPut,
    RndvAm,
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Proto::EagerShort => "eager short",
            Proto::EagerBcopy => "eager bcopy",
            Proto::EagerZcopy => "eager zcopy",
            Proto::EagerMulti => "eager multi-fragment bcopy",
            Proto::RndvGet => "rendezvous get zcopy",
            Proto::RndvPut => "rendezvous put zcopy",
            Proto::RndvAm => "rendezvous am pipeline",
        })
    }
}

/// The rendezvous threshold of sends posted before an endpoint's lanes are known
/// (`Thresholds::before_connect`).
pub const BEFORE_CONNECT_RNDV: usize = 64 * 1024;

/// The size ranges of one endpoint configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Largest data for eager short (0 = none).
    pub max_short: Option<usize>,
    /// Largest data for single-fragment eager bcopy (and sync eager).
    pub max_bcopy: usize,
    pub max_bcopy_sync: usize,
    /// Eager zcopy from this size up to `max_zcopy` (None: the lane has no AM zcopy).
    pub zcopy: Option<(usize, usize)>,
    /// Rendezvous from this size (`usize::MAX`: never).
    pub rndv: usize,
    /// Whether the endpoint has an RMA lane for zero-copy rendezvous.
    pub rma: bool,
    /// Whether it has a memory lane for device memory (the peer maps our device memory).
    pub rma_dev: bool,
    /// Largest contiguous device message sent eager even where there is a memory lane for
    /// device memory (0: none): where the CPU reads and writes device memory through
    /// gdrcopy's mappings, a small message costs two CPU copies instead of one device
    /// copy queued and waited for.
    pub dev_eager: usize,
    /// Zero-copy rendezvous writes (put) instead of reading (get).
    pub put: bool,
}

/// The lanes' attributes that selection reads.
#[derive(Clone, Copy, Debug)]
pub struct LaneAttrs<'a> {
    pub am: &'a IfaceAttr,
    pub rma: Option<&'a IfaceAttr>,
    pub rma_dev: Option<&'a IfaceAttr>,
    /// The AM lane sends from and receives into bounce buffers of a network device
    /// (rc_verbs): an eager byte is copied at both ends, where a rendezvous reads it once.
    pub am_bounce: bool,
    /// The memory lane moves data by messages on the AM lane's own connection (tcp): a
    /// put is data the target places as it arrives, a get a round trip of messages. Its
    /// rendezvous is a put, unless `UCX_RNDV_SCHEME=get_zcopy` asks otherwise.
    pub rma_by_messages: bool,
    /// Largest device message the CPU can copy out of device memory cheaply
    /// (`ucs::cuda::gdr::eager_max`; 0 without gdrcopy).
    pub dev_eager: usize,
}

impl Thresholds {
    /// Computes the ranges of an endpoint from its lanes and the configuration.
    /// For an endpoint whose lanes are not known yet (a socket-address client before the
    /// server's address came): eager sends in one buffer up to `am_max_bcopy` (the
    /// smallest of the worker's interfaces, so that any lane takes them), in fragments
    /// (sized by the lane when they go) up to `BEFORE_CONNECT_RNDV`, and by
    /// active-message rendezvous beyond, which every lane carries too. A small send thus
    /// completes without the receiver, as it will once connected.
    pub fn before_connect(am_max_bcopy: usize) -> Thresholds {
        Thresholds {
            max_short: None,
            max_bcopy: am_max_bcopy.saturating_sub(EAGER_HDR),
            max_bcopy_sync: am_max_bcopy.saturating_sub(EAGER_SYNC_HDR),
            zcopy: None,
            rndv: BEFORE_CONNECT_RNDV,
            rma: false,
            rma_dev: false,
            dev_eager: 0,
            put: false,
        }
    }

    pub fn new(
        l: LaneAttrs,
        rndv_cfg: AutoSize,
        zcopy_cfg: AutoSize,
        scheme: RndvScheme,
    ) -> Thresholds {
        let am = l.am;
        let short = am
            .flags
            .contains(IfaceFlags::AM_SHORT)
            .then_some(am.am.max_short);
        let max_bcopy = am.am.max_bcopy.saturating_sub(EAGER_HDR);
        let zcopy = am.flags.contains(IfaceFlags::AM_ZCOPY).then(|| {
            let from = match zcopy_cfg {
                AutoSize::Auto => AUTO_ZCOPY_THRESH,
                AutoSize::Bytes(n) => n,
            };
            (from, am.am.max_zcopy.saturating_sub(EAGER_HDR))
        });
        let rndv = match rndv_cfg {
            AutoSize::Bytes(n) => n,
            AutoSize::Auto => auto_rndv(l),
        };
        Thresholds {
            max_short: short,
            max_bcopy,
            max_bcopy_sync: am.am.max_bcopy.saturating_sub(EAGER_SYNC_HDR),
            zcopy,
            rndv,
            rma: l.rma.is_some(),
            rma_dev: l.rma_dev.is_some(),
            // Never above a rendezvous threshold the user set.
            dev_eager: l.dev_eager.min(rndv.saturating_sub(1)),
            put: scheme == RndvScheme::PutZcopy
                || (l.rma_by_messages && scheme == RndvScheme::Auto),
        }
    }

    /// Whether `size` bytes of contiguous host data go as eager short (what `select`
    /// answers for a plain tag send, without the rest of the decision).
    #[inline]
    pub fn short_fits(&self, size: usize) -> bool {
        size < self.rndv && self.max_short.is_some_and(|m| size <= m)
    }

    /// The protocol for `size` bytes of `mem` memory (the sender's buffer).
    pub fn select(&self, op: Op, mem: MemoryType, dt: DtClass, size: usize) -> Proto {
        if !mem.host_accessible() {
            return self.select_device(op, dt, size);
        }
        if size >= self.rndv {
            return if self.rma && dt != DtClass::Generic {
                if self.put {
                    Proto::RndvPut
                } else {
                    Proto::RndvGet
                }
            } else {
                Proto::RndvAm
            };
        }
        let sync = op == Op::TagSendSync;
        if !sync && dt == DtClass::Contig && self.max_short.is_some_and(|m| size <= m) {
            return Proto::EagerShort;
        }
        if let Some((from, to)) = self.zcopy {
            if !sync && matches!(dt, DtClass::Contig | DtClass::Iov) && size >= from && size <= to {
                return Proto::EagerZcopy;
            }
        }
        let single = if sync {
            self.max_bcopy_sync
        } else {
            self.max_bcopy
        };
        if size <= single {
            Proto::EagerBcopy
        } else {
            Proto::EagerMulti
        }
    }

    /// Device memory. Contiguous data of up to `dev_eager` bytes (gdrcopy present) goes
    /// eager: the CPU copies it out and in through mappings, with no device copy to wait
    /// for. Otherwise, with a memory lane for it (the peer maps our device memory), every
    /// size is a get rendezvous: the receiver's one device copy is the floor, and an eager
    /// message would cost two staging copies by the driver. Without one, the data is staged
    /// through host buffers by the driver: eager while it fits one buffer, the AM pipeline
    /// above. Never eager short or zero-copy, which hand the buffer to a host transport.
    fn select_device(&self, op: Op, dt: DtClass, size: usize) -> Proto {
        let single = if op == Op::TagSendSync {
            self.max_bcopy_sync
        } else {
            self.max_bcopy
        };
        if dt == DtClass::Contig && self.dev_eager > 0 && size <= self.dev_eager.min(single) {
            return Proto::EagerBcopy;
        }
        // A layout goes by its description: the receiver (or the sender, asked to push)
        // moves it with one kernel between the two layouts.
        if self.rma_dev && matches!(dt, DtClass::Contig | DtClass::Layout) {
            return Proto::RndvGet;
        }
        if size <= single {
            Proto::EagerBcopy
        } else {
            Proto::RndvAm
        }
    }

    /// The size ranges of each protocol for one (op, mem, dt), in order, like
    /// `UCX_PROTO_INFO=y`.
    pub fn ranges(&self, op: Op, mem: MemoryType, dt: DtClass) -> Vec<(usize, usize, Proto)> {
        let mut points: Vec<usize> = vec![0];
        for v in [
            self.max_short.map(|m| m + 1),
            Some(self.max_bcopy + 1),
            Some(self.max_bcopy_sync + 1),
            self.zcopy.map(|z| z.0),
            self.zcopy.map(|z| z.1 + 1),
            Some(self.rndv),
            (self.dev_eager > 0).then_some(self.dev_eager + 1),
        ]
        .into_iter()
        .flatten()
        {
            if v != usize::MAX {
                points.push(v);
            }
        }
        points.sort_unstable();
        points.dedup();
        let mut out: Vec<(usize, usize, Proto)> = Vec::new();
        for (i, &p) in points.iter().enumerate() {
            let end = points.get(i + 1).map_or(usize::MAX, |n| n - 1);
            let proto = self.select(op, mem, dt, p);
            match out.last_mut() {
                Some(last) if last.2 == proto => last.1 = end,
                _ => out.push((p, end, proto)),
            }
        }
        out
    }
}

/// Largest `auto` rendezvous threshold: above it rendezvous is used even where the
/// estimates say eager is as fast, so that no receiver buffers an unexpected eager message
/// of unbounded size.
pub const MAX_AUTO_RNDV: usize = 4 << 20;

/// The size where rendezvous becomes cheaper than eager (see the module documentation).
///
/// With a memory lane (same host), the eager fragments are copied in by the sender and out
/// by the receiver on two cores at once, so eager moves bytes at the slower of the two
/// copies, not their sum; rendezvous moves them once at the memory lane's bandwidth after
/// a round trip. Without one (tcp), the pipeline saves the receiver's copy of an
/// unexpected message.
fn auto_rndv(l: LaneAttrs) -> usize {
    let am = l.am.perf;
    let (fixed, per_byte_rndv, per_byte_eager) = match l.rma {
        Some(rma) => (
            rma.perf.overhead_ns + 2.0 * am.latency_ns + am.overhead_ns,
            1e9 / rma.perf.bandwidth,
            1e9 / am.bandwidth.min(COPY_BW) + if l.am_bounce { 1e9 / COPY_BW } else { 0.0 },
        ),
        None => (
            2.0 * (am.latency_ns + am.overhead_ns),
            1e9 / am.bandwidth,
            1e9 / am.bandwidth + 1e9 / COPY_BW,
        ),
    };
    let gain = per_byte_eager - per_byte_rndv;
    if gain <= 0.0 {
        return MAX_AUTO_RNDV;
    }
    // At least one full eager fragment: a rendezvous never replaces a single bcopy.
    let min = l.am.am.max_bcopy.saturating_sub(EAGER_FIRST_HDR) + 1;
    ((fixed / gain) as usize).clamp(min, MAX_AUTO_RNDV.max(min))
}

/// Formats a size as UCX's protocol table does (`8K`, `inf`).
pub fn fmt_size(n: usize) -> String {
    if n == usize::MAX {
        "inf".into()
    } else if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}K", n >> 10)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uct::{OpLimits, PerfEstimate};

    fn attr(
        flags: IfaceFlags,
        short: usize,
        bcopy: usize,
        zcopy: usize,
        perf: (f64, f64, f64),
    ) -> IfaceAttr {
        IfaceAttr {
            flags,
            am: OpLimits {
                max_short: short,
                max_bcopy: bcopy,
                max_zcopy: zcopy,
                ..Default::default()
            },
            put: OpLimits::default(),
            get: OpLimits::default(),
            perf: PerfEstimate {
                overhead_ns: perf.0,
                latency_ns: perf.1,
                bandwidth: perf.2,
            },
            mem: uct::iface::MemCaps::HOST,
            device_addr_len: 0,
            iface_addr_len: 0,
        }
    }

    /// A shared-memory AM lane's attributes, as posix reports them.
    fn posix_like() -> IfaceAttr {
        attr(
            IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY,
            8232,
            8240,
            0,
            (15.0, 80.0, 12e9),
        )
    }

    /// A device memory lane's attributes, as `cuda_ipc` reports them.
    fn ipc_like() -> IfaceAttr {
        attr(
            IfaceFlags::GET_ZCOPY | IfaceFlags::PUT_ZCOPY,
            0,
            0,
            0,
            (1000.0, 5000.0, 300e9),
        )
    }

    #[test]
    fn shm_ranges_are_contiguous_and_ordered() {
        let posix = posix_like();
        let cma = attr(IfaceFlags::GET_ZCOPY, 0, 0, 0, (600.0, 80.0, 8e9));
        let t = Thresholds::new(
            LaneAttrs {
                am: &posix,
                rma: Some(&cma),
                rma_dev: None,
                am_bounce: false,
                rma_by_messages: false,
                dev_eager: 0,
            },
            AutoSize::Auto,
            AutoSize::Auto,
            RndvScheme::Auto,
        );
        // The pipelined eager copies are as fast as one cma read here: rendezvous only
        // from the cap.
        assert_eq!(t.rndv, MAX_AUTO_RNDV);
        let r = t.ranges(Op::TagSend, MemoryType::Host, DtClass::Contig);
        assert_eq!(r[0], (0, 8232, Proto::EagerShort));
        assert_eq!(r.last().unwrap().2, Proto::RndvGet);
        assert_eq!(r.last().unwrap().1, usize::MAX);
        for w in r.windows(2) {
            assert_eq!(w[0].1 + 1, w[1].0);
        }
        // Generic data cannot be read remotely: the pipeline serves it.
        assert_eq!(
            t.select(Op::TagSend, MemoryType::Host, DtClass::Generic, 8 << 20),
            Proto::RndvAm
        );
        // A memory lane of messages on the AM connection (tcp): put, unless get is asked.
        for (scheme, want) in [
            (RndvScheme::Auto, Proto::RndvPut),
            (RndvScheme::GetZcopy, Proto::RndvGet),
            (RndvScheme::PutZcopy, Proto::RndvPut),
        ] {
            let t = Thresholds::new(
                LaneAttrs {
                    am: &posix,
                    rma: Some(&posix),
                    rma_dev: None,
                    am_bounce: true,
                    rma_by_messages: true,
                    dev_eager: 0,
                },
                AutoSize::Bytes(100_000),
                AutoSize::Auto,
                scheme,
            );
            assert_eq!(
                t.select(Op::TagSend, MemoryType::Host, DtClass::Contig, 100_000),
                want,
                "{scheme}"
            );
        }
        // Synchronous sends never use eager short (the ack needs the sender's request id).
        assert_eq!(
            t.select(Op::TagSendSync, MemoryType::Host, DtClass::Contig, 8),
            Proto::EagerBcopy
        );
        short_fits_agrees_with_select(&t);
        // A rendezvous threshold below max_short wins over eager short.
        let low = Thresholds { rndv: 4, ..t };
        assert!(!low.short_fits(8) && low.short_fits(3));
        short_fits_agrees_with_select(&low);
    }

    #[test]
    fn device_memory_selection() {
        let posix = posix_like();
        let cma = attr(IfaceFlags::GET_ZCOPY, 0, 0, 0, (600.0, 80.0, 8e9));
        let ipc = ipc_like();
        let with = |dev: bool| {
            Thresholds::new(
                LaneAttrs {
                    am: &posix,
                    rma: Some(&cma),
                    rma_dev: dev.then_some(&ipc),
                    am_bounce: false,
                    rma_by_messages: false,
                    dev_eager: 0,
                },
                AutoSize::Auto,
                AutoSize::Auto,
                RndvScheme::Auto,
            )
        };
        let lane = with(true);
        for n in [0, 8, 8240, 1 << 20, 64 << 20] {
            for op in [Op::TagSend, Op::TagSendSync] {
                // One device copy by the receiver, at every size.
                assert_eq!(
                    lane.select(op, MemoryType::Cuda, DtClass::Contig, n),
                    Proto::RndvGet
                );
                // Managed memory is host-accessible: the host protocols serve it.
                assert_eq!(
                    lane.select(op, MemoryType::CudaManaged, DtClass::Contig, n),
                    lane.select(op, MemoryType::Host, DtClass::Contig, n)
                );
            }
        }
        let staged = with(false);
        let r = staged.ranges(Op::TagSend, MemoryType::Cuda, DtClass::Contig);
        assert_eq!(r[0], (0, staged.max_bcopy, Proto::EagerBcopy));
        assert_eq!(r[1], (staged.max_bcopy + 1, usize::MAX, Proto::RndvAm));
        // Never a protocol that hands device memory to a host transport.
        for dt in [DtClass::Contig, DtClass::Iov] {
            for n in [0, 1, 8, 100, 20_000, 1 << 22] {
                let p = staged.select(Op::TagSend, MemoryType::Cuda, dt, n);
                assert!(matches!(p, Proto::EagerBcopy | Proto::RndvAm), "{n}: {p}");
            }
        }
    }

    #[test]
    fn small_device_messages_go_eager_where_gdrcopy_reads_them() {
        let posix = posix_like();
        let ipc = ipc_like();
        let with = |dev_eager: usize, rndv: AutoSize| {
            Thresholds::new(
                LaneAttrs {
                    am: &posix,
                    rma: None,
                    rma_dev: Some(&ipc),
                    am_bounce: false,
                    rma_by_messages: false,
                    dev_eager,
                },
                rndv,
                AutoSize::Auto,
                RndvScheme::Auto,
            )
        };
        let gdr = with(1024, AutoSize::Auto);
        for op in [Op::TagSend, Op::TagSendSync] {
            assert_eq!(
                gdr.ranges(op, MemoryType::Cuda, DtClass::Contig),
                [
                    (0, 1024, Proto::EagerBcopy),
                    (1025, usize::MAX, Proto::RndvGet)
                ]
            );
            // A layout still goes by its description, to be moved by one kernel.
            assert_eq!(
                gdr.select(op, MemoryType::Cuda, DtClass::Layout, 8),
                Proto::RndvGet
            );
        }
        // A rendezvous threshold the user set bounds it.
        let low = with(1024, AutoSize::Bytes(100));
        assert_eq!(low.dev_eager, 99);
        assert_eq!(
            low.select(Op::TagSend, MemoryType::Cuda, DtClass::Contig, 100),
            Proto::RndvGet
        );
        assert_eq!(with(1024, AutoSize::Bytes(0)).dev_eager, 0);
        // Without gdrcopy, every size is a rendezvous.
        assert_eq!(
            with(0, AutoSize::Auto).ranges(Op::TagSend, MemoryType::Cuda, DtClass::Contig),
            [(0, usize::MAX, Proto::RndvGet)]
        );
    }

    /// The send fast path's shortcut answers as `select` does.
    fn short_fits_agrees_with_select(t: &Thresholds) {
        let edges = [t.max_short.unwrap_or(0), t.rndv.min(1 << 20), t.max_bcopy];
        for e in edges {
            for n in e.saturating_sub(2)..e + 2 {
                let short = t.select(Op::TagSend, MemoryType::Host, DtClass::Contig, n)
                    == Proto::EagerShort;
                assert_eq!(t.short_fits(n), short, "size {n}");
            }
        }
    }

    #[test]
    fn config_overrides_and_tcp_zcopy() {
        let tcp = attr(
            IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY | IfaceFlags::AM_ZCOPY,
            8184,
            65536,
            65536,
            (2000.0, 5000.0, 3e9),
        );
        let l = LaneAttrs {
            am: &tcp,
            rma: None,
            rma_dev: None,
            am_bounce: false,
            rma_by_messages: false,
            dev_eager: 0,
        };
        let t = Thresholds::new(
            l,
            AutoSize::Bytes(1000),
            AutoSize::Bytes(100),
            RndvScheme::Auto,
        );
        assert_eq!(t.rndv, 1000);
        assert_eq!(
            t.select(Op::TagSend, MemoryType::Host, DtClass::Contig, 999),
            Proto::EagerShort
        );
        assert_eq!(
            t.select(Op::TagSend, MemoryType::Host, DtClass::Iov, 500),
            Proto::EagerZcopy
        );
        assert_eq!(
            t.select(Op::TagSend, MemoryType::Host, DtClass::Contig, 1000),
            Proto::RndvAm
        );
        let never = Thresholds::new(
            l,
            AutoSize::Bytes(usize::MAX),
            AutoSize::Auto,
            RndvScheme::Auto,
        );
        assert_eq!(
            never.select(Op::TagSend, MemoryType::Host, DtClass::Contig, 1 << 30),
            Proto::EagerMulti
        );
        let auto = Thresholds::new(l, AutoSize::Auto, AutoSize::Auto, RndvScheme::Auto);
        assert!(auto.rndv > 65536 - EAGER_FIRST_HDR);
    }

    #[test]
    fn sizes_format_like_ucx() {
        assert_eq!(fmt_size(8192), "8K");
        assert_eq!(fmt_size(1 << 20), "1M");
        assert_eq!(fmt_size(8193), "8193");
        assert_eq!(fmt_size(usize::MAX), "inf");
    }
}
