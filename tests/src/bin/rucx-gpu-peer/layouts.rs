//! `layouts:<A-MEM>:<B-MEM>:<A-GPU>:<B-GPU>`: noncontiguous data between the two
//! processes, a different layout on each side. For every pair of [`pairs`], `a` sends its
//! buffer described by the first layout and `b` receives it into a buffer of its own
//! described by the second (filled with a sentinel first); `b` checks that each packed byte
//! landed at its place in its layout and that no byte outside the layout changed, then sends
//! the data back the same way, and `a` checks the same. The list runs twice, with buffers
//! freed and allocated again in between: the second pass re-sends memoized layouts over
//! fresh allocations (the IPC mappings of the first are stale by then).
//!
//! Pairs: vectors (one 2D box, same and different strides), iov lists (regular, irregular),
//! 3D faces in each orientation and face to face, irregular indexed layouts (the generic
//! kernel), the named application layouts (MILC, NAS MG, SPECFEM3D), blocks of 3 and 12
//! bytes (narrow words), and random layouts from a seeded generator.

use ucp::datatype::{DtLayout, LayoutBuf};
use ucp::dt::{apps, Layout, Order};
use ucp::{Buf, Data, RecvParams, SendParams};
use ucs::memtype::MemoryType;

use super::{parse_mem, Mem, Peer};
use std::time::Duration;

pub(super) const SENTINEL: u8 = 0xEE;

/// How a side hands its data to `ucp`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum As {
    Layout,
    /// An iov list of the layout's segments.
    Iov,
}

struct Pair {
    name: String,
    send: (Layout, As),
    recv: (Layout, As),
    /// What `b` sends back with, when its receive layout is larger than the message (a
    /// partial receive): a layout over the first bytes of `recv`'s, as many as `send` has.
    back: Option<(Layout, As)>,
}

pub(super) fn bytes(n: u64) -> Layout {
    Layout::bytes(n)
}

pub(super) fn contig(n: u64) -> Layout {
    Layout::contiguous(n, &bytes(1)).expect("contiguous")
}

/// A seeded random hindexed layout of `blocks` blocks (lengths 1..=300, gaps 0..=100)
/// holding exactly `total` bytes when given (the last block adjusted).
pub(super) fn random(seed: u64, blocks: usize, total: Option<u64>) -> Layout {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut lens = Vec::with_capacity(blocks);
    let mut displs = Vec::with_capacity(blocks);
    let mut at = 0i64;
    for _ in 0..blocks {
        let l = 1 + next(300);
        at += next(101) as i64;
        displs.push(at);
        lens.push(l);
        at += l as i64;
    }
    if let Some(t) = total {
        let have: u64 = lens.iter().sum();
        let last = lens.len() - 1;
        lens[last] = (lens[last] as i64 + t as i64 - have as i64).max(1) as u64;
        // Shorten earlier blocks if the last one cannot absorb the difference.
        let mut over = lens.iter().sum::<u64>() as i64 - t as i64;
        let mut i = 0;
        while over > 0 {
            let cut = (lens[i] as i64 - 1).min(over);
            lens[i] -= cut as u64;
            over -= cut;
            i += 1;
        }
    }
    Layout::hindexed(&lens, &displs, &bytes(1)).expect("random layout")
}

pub(super) fn named(spec: &str) -> Layout {
    apps::named(spec).expect("named layout").layout
}

/// The pairs, each with the same number of bytes on both sides.
fn pairs() -> Vec<Pair> {
    let dbl = bytes(8);
    let l = |x: Layout| (x, As::Layout);
    let mut v = Vec::new();
    let mut add = |name: &str, s: (Layout, As), r: (Layout, As)| {
        assert_eq!(s.0.size(), r.0.size(), "{name}");
        v.push(Pair {
            name: name.to_string(),
            send: s,
            recv: r,
            back: None,
        });
    };
    let vec128 = Layout::hvector(128, 1, 2048, &bytes(1024)).expect("vector");
    add(
        "vector 128x1KiB -> contig",
        l(vec128.clone()),
        l(contig(128 << 10)),
    );
    add(
        "vector 128x1KiB -> same vector",
        l(vec128.clone()),
        l(vec128.clone()),
    );
    add(
        "iov 128x1KiB -> iov 128x1KiB",
        (vec128.clone(), As::Iov),
        (vec128.clone(), As::Iov),
    );
    add(
        "vector 1024x128B -> vector of another stride",
        l(Layout::hvector(1024, 1, 256, &bytes(128)).expect("vector")),
        l(Layout::hvector(1024, 1, 384, &bytes(128)).expect("vector")),
    );
    let irregular_iov = Layout::hindexed(
        &[100, 3000, 17, 4096, 5],
        &[0, 200, 4000, 5000, 9200],
        &bytes(1),
    )
    .expect("hindexed");
    add(
        "irregular iov -> contig",
        (irregular_iov.clone(), As::Iov),
        l(contig(irregular_iov.size())),
    );
    for axis in ["x", "y", "z"] {
        add(
            &format!("face {axis} of 64^3 doubles -> contig"),
            l(named(&format!("stencil3d_face:64,{axis}"))),
            l(contig(64 * 64 * 8)),
        );
    }
    add(
        "face x -> face y",
        l(named("stencil3d_face:64,x")),
        l(named("stencil3d_face:64,y")),
    );
    add(
        "subarray (Fortran) -> vector",
        l(
            Layout::subarray(&[40, 30, 20], &[8, 6, 4], &[3, 2, 1], Order::Fortran, &dbl)
                .expect("subarray"),
        ),
        l(Layout::vector(48, 4, 9, &dbl).expect("vector")),
    );
    let ix = Layout::indexed(&[3, 1, 7, 2, 5, 4], &[0, 10, 12, 40, 50, 90], &dbl).expect("indexed");
    add("indexed -> contig", l(ix.clone()), l(contig(ix.size())));
    add(
        "indexed -> vector",
        l(ix.clone()),
        l(Layout::vector(11, 2, 3, &dbl).expect("vector")),
    );
    for spec in [
        "milc_su3_zd:8",
        "nas_mg_x:32",
        "nas_mg_y:32",
        "specfem3d_cm",
    ] {
        let s = named(spec);
        add(
            &format!("{spec} -> contig"),
            l(s.clone()),
            l(contig(s.size())),
        );
    }
    let n = named("nas_mg_z:32");
    add("nas_mg_z -> nas_mg_z", l(n.clone()), l(n));
    add(
        "3-byte blocks -> contig",
        l(Layout::hvector(1000, 1, 7, &bytes(3)).expect("vector")),
        l(contig(3000)),
    );
    add(
        "12-byte blocks -> 4-byte blocks",
        l(Layout::hvector(500, 1, 20, &bytes(12)).expect("vector")),
        l(Layout::hvector(1500, 1, 6, &bytes(4)).expect("vector")),
    );
    for seed in 1..=3u64 {
        let a = random(seed, 200, None);
        let t = a.size();
        add(
            &format!("random {seed} -> contig"),
            l(a.clone()),
            l(contig(t)),
        );
        add(
            &format!("random {seed} -> random"),
            l(a),
            l(random(seed + 100, 150, Some(t))),
        );
    }
    // Partial receives: the message fills the first packed bytes of a larger layout, and
    // the rest of it must keep the sentinel. One eager-sized, one rendezvous-sized.
    let partial = |name: &str, s: Layout, r: Layout, back: Layout| {
        assert!(s.size() < r.size() && back.size() == s.size(), "{name}");
        Pair {
            name: name.to_string(),
            send: (s, As::Layout),
            recv: (r, As::Layout),
            back: Some((back, As::Layout)),
        }
    };
    let blk12 = |n| Layout::hvector(n, 1, 20, &bytes(12)).expect("vector");
    v.push(partial(
        "partial: 100x12B into 500x12B",
        Layout::hvector(100, 1, 16, &bytes(12)).expect("vector"),
        blk12(500),
        blk12(100),
    ));
    let kib = |n| Layout::hvector(n, 1, 2048, &bytes(1024)).expect("vector");
    v.push(partial(
        "partial: contig 64KiB into vector 128x1KiB",
        contig(64 << 10),
        kib(128),
        kib(64),
    ));
    v
}

/// Byte offsets (from the origin) of the layout's packed bytes, in order.
pub(super) fn positions(l: &Layout) -> Vec<i64> {
    let c = l.canonical().expect("canonical");
    c.segments(1 << 22)
        .expect("segments")
        .iter()
        .flat_map(|g| g.offset..g.end())
        .collect()
}

/// A buffer holding one side's layout.
pub(super) struct Side {
    pub(super) mem: Mem,
    /// Offset of the buffer's first byte from the layout's origin.
    pub(super) lo: i64,
    pub(super) span: usize,
    pub(super) pos: Vec<i64>,
    pub(super) layout: Layout,
    how: As,
}

impl Side {
    pub(super) fn new(mem: MemoryType, dev: i32, layout: &Layout, how: As) -> Result<Side, String> {
        let (lo, hi) = layout.true_bounds().ok_or("empty layout")?;
        let span = (hi - lo) as usize;
        Ok(Side {
            mem: Mem::new(mem, dev, span)?,
            lo,
            span,
            pos: positions(layout),
            layout: layout.clone(),
            how,
        })
    }

    fn origin(&mut self) -> *mut u8 {
        self.mem.ptr().wrapping_offset(-self.lo as isize)
    }

    pub(super) fn data(&mut self) -> Result<Data, String> {
        let origin = self.origin();
        Ok(match self.how {
            As::Layout => {
                let dt = DtLayout::new(&self.layout).map_err(|e| format!("{e}"))?;
                // SAFETY: the buffer covers the layout's true bounds and outlives the
                // operation (each step waits for its request).
                Data::Layout(unsafe { LayoutBuf::new(origin, dt) })
            }
            As::Iov => {
                let c = self.layout.canonical().map_err(|e| format!("{e}"))?;
                let segs = c.segments(1 << 20).map_err(|e| format!("{e}"))?;
                Data::Iov(
                    segs.iter()
                        // SAFETY: as above; each segment lies inside the buffer.
                        .map(|g| unsafe {
                            Buf::from_raw(origin.wrapping_offset(g.offset as isize), g.len as usize)
                        })
                        .collect(),
                )
            }
        })
    }

    /// The byte the sender's data holds at packed position `k` of message `seq`.
    fn expected(seq: u64, sender: &[i64], sender_lo: i64, k: usize) -> u8 {
        super::byte(seq, (sender[k] - sender_lo) as usize)
    }

    /// Checks that packed byte `k` sits at this layout's `k`-th position with the
    /// sender's value, for every byte the sender sent, and that every other byte of the
    /// buffer is the sentinel.
    pub(super) fn check(
        &mut self,
        what: &str,
        seq: u64,
        sender: &[i64],
        sender_lo: i64,
    ) -> Result<(), String> {
        let got = self.mem.read(self.span);
        let mut inside = vec![false; self.span];
        // A partial receive fills the first `sender.len()` positions; the rest must keep
        // the sentinel like the gaps.
        let mut wrong = Vec::new();
        for (k, &p) in self.pos.iter().take(sender.len()).enumerate() {
            let at = (p - self.lo) as usize;
            inside[at] = true;
            if got[at] != Side::expected(seq, sender, sender_lo, k) {
                wrong.push(k);
            }
        }
        if let (Some(&k), Some(&last)) = (wrong.first(), wrong.last()) {
            let p = self.pos[k];
            return Err(format!(
                "{what}: {} of {} packed bytes wrong, {k}..={last}; byte {k} (offset {p}) is {:#x}, expected {:#x}",
                wrong.len(),
                sender.len().min(self.pos.len()),
                got[(p - self.lo) as usize],
                Side::expected(seq, sender, sender_lo, k)
            ));
        }
        if let Some(i) = (0..self.span).find(|&i| !inside[i] && got[i] != SENTINEL) {
            return Err(format!(
                "{what}: byte {i} of the buffer is outside the layout but was written ({:#x})",
                got[i]
            ));
        }
        Ok(())
    }
}

pub(super) fn run(p: &mut Peer, a: bool, spec: &[&str]) -> Result<String, String> {
    let [am, bm, ad, bd] = spec else {
        return Err("layouts:<a-mem>:<b-mem>:<a-gpu>:<b-gpu>".into());
    };
    let (mem, dev) = if a { (am, ad) } else { (bm, bd) };
    let mem = parse_mem(mem)?;
    let dev: i32 = dev.parse().map_err(|_| format!("bad GPU {dev}"))?;
    // RUCX_LAYOUT_PAIRS=<text>: only the pairs whose name holds it (for debugging).
    let only = std::env::var("RUCX_LAYOUT_PAIRS").unwrap_or_default();
    let list: Vec<Pair> = pairs()
        .into_iter()
        .filter(|p| p.name.contains(only.as_str()))
        .collect();
    let t0 = std::time::Instant::now();
    let mut moved = 0u64;
    for pass in 0..2u64 {
        for (k, pair) in list.iter().enumerate() {
            let seq = (pass * 1000 + k as u64) * 2;
            let what = format!("pass {pass} '{}'", pair.name);
            let (mine, theirs) = if a {
                (&pair.send, &pair.recv)
            } else {
                (&pair.recv, &pair.send)
            };
            // The layout b's data goes back in: its own (a prefix of it when partial).
            let back = pair.back.as_ref().unwrap_or(&pair.recv);
            let mut side = Side::new(mem, dev, &mine.0, mine.1)?;
            let their_pos = positions(&theirs.0);
            let their_lo = theirs.0.true_bounds().map_or(0, |b| b.0);
            let n = side.pos.len();
            if a {
                side.mem.fill(seq, side.span);
                let d = side.data()?;
                let id =
                    p.w.tag_send(p.ep, &d, seq, SendParams::default())
                        .map_err(|e| format!("{what}: send: {e}"))?;
                p.wait(id, &format!("{what}: send"), Duration::from_secs(60))?;
                side.mem.write(&vec![SENTINEL; side.span]);
                let d = side.data()?;
                let id =
                    p.w.tag_recv(&d, seq + 1, u64::MAX, RecvParams::default())
                        .map_err(|e| format!("{what}: recv: {e}"))?;
                let len = p.wait_len(id, &format!("{what}: receive back"))?;
                if len != Some(n) {
                    return Err(format!("{what}: received back {len:?} bytes, sent {n}"));
                }
                // Back from b: b's layout held our bytes in packed order; we get them
                // back in ours.
                let own = side.pos.clone();
                let lo = side.lo;
                side.check(&format!("{what} (back)"), seq, &own, lo)?;
            } else {
                side.mem.write(&vec![SENTINEL; side.span]);
                let d = side.data()?;
                let id =
                    p.w.tag_recv(&d, seq, u64::MAX, RecvParams::default())
                        .map_err(|e| format!("{what}: recv: {e}"))?;
                let len = p.wait_len(id, &format!("{what}: receive"))?;
                if len != Some(their_pos.len()) {
                    return Err(format!(
                        "{what}: received {len:?} bytes, the sender sent {}",
                        their_pos.len()
                    ));
                }
                side.check(&what, seq, &their_pos, their_lo)?;
                if !std::ptr::eq(back, &pair.recv) {
                    // Partial: send back the received prefix only.
                    side.layout = back.0.clone();
                }
                let d = side.data()?;
                let id =
                    p.w.tag_send(p.ep, &d, seq + 1, SendParams::default())
                        .map_err(|e| format!("{what}: send back: {e}"))?;
                p.wait(id, &format!("{what}: send back"), Duration::from_secs(60))?;
            }
            moved += 2 * n.min(their_pos.len()) as u64;
        }
    }
    let st = p.w.stats();
    let compiled = ucp::dt::gpu::launch::kernels_compiled();
    Ok(format!(
        "{} layout pairs x 2 passes, {moved} bytes, {:.2} s; rndv_device {}, rndv_device_direct {}, eager_bcopy {}, rndv_am {}; kernels compiled {compiled}; {:?}",
        list.len(),
        t0.elapsed().as_secs_f64(),
        st.rndv_device,
        st.rndv_device_direct,
        st.eager_bcopy,
        st.rndv_am,
        p.w.transport_counters()
    ))
}
