//! Deterministic random layouts for the property tests.

use rand::rngs::StdRng;
use rand::Rng;

use super::{Layout, Order, Segment};

/// A random nested layout of depth at most `depth`, with small counts so that its type map
/// stays small. Strides are biased toward values that make folding and flattening apply.
pub(crate) fn random_layout(rng: &mut StdRng, depth: u32) -> Layout {
    loop {
        if let Some(l) = try_layout(rng, depth) {
            return l;
        }
    }
}

fn stride_for(rng: &mut StdRng, blocklen: u64) -> i64 {
    match rng.gen_range(0..4) {
        0 => blocklen as i64,                       // dense: folds
        1 => blocklen as i64 + rng.gen_range(1..4), // gaps
        2 => rng.gen_range(-4..0),                  // backwards
        _ => rng.gen_range(0..6),                   // anything, zero and overlaps included
    }
}

fn try_layout(rng: &mut StdRng, depth: u32) -> Option<Layout> {
    if depth == 0 || rng.gen_bool(0.2) {
        return Some(Layout::bytes(if rng.gen_bool(0.02) {
            0
        } else {
            rng.gen_range(1..=8)
        }));
    }
    let c = random_layout(rng, depth - 1);
    let e = c.extent();
    let count = |rng: &mut StdRng| {
        if rng.gen_bool(0.02) {
            0
        } else {
            rng.gen_range(1..4u64)
        }
    };
    let r = match rng.gen_range(0..11) {
        0 => Layout::contiguous(count(rng), &c),
        1 => {
            let bl = count(rng);
            let s = stride_for(rng, bl);
            Layout::vector(count(rng), bl, s, &c)
        }
        2 => {
            let bl = count(rng);
            let s = if rng.gen_bool(0.5) {
                stride_for(rng, bl) * e
            } else {
                rng.gen_range(-20..40)
            };
            Layout::hvector(count(rng), bl, s, &c)
        }
        3..=6 => {
            let n = if rng.gen_bool(0.03) {
                0
            } else {
                rng.gen_range(1..5)
            };
            let mut bls = Vec::new();
            let mut displs = Vec::new();
            let mut at = 0i64;
            for _ in 0..n {
                let b = count(rng);
                bls.push(b);
                displs.push(at);
                at += stride_for(rng, b);
            }
            let bytes: Vec<i64> = displs
                .iter()
                .map(|d| d * e + rng.gen_range(0..2) * rng.gen_range(-3..4))
                .collect();
            match rng.gen_range(0..4) {
                0 => Layout::indexed(&bls, &displs, &c),
                1 => Layout::hindexed(&bls, &bytes, &c),
                2 => Layout::indexed_block(bls.first().copied().unwrap_or(1), &displs, &c),
                _ => Layout::hindexed_block(bls.first().copied().unwrap_or(1), &bytes, &c),
            }
        }
        7 => {
            let nd = rng.gen_range(1..=3);
            let sizes: Vec<u64> = (0..nd).map(|_| rng.gen_range(1..5)).collect();
            let subsizes: Vec<u64> = sizes
                .iter()
                .map(|&s| {
                    if rng.gen_bool(0.02) {
                        0
                    } else {
                        rng.gen_range(1..=s)
                    }
                })
                .collect();
            let starts: Vec<u64> = sizes
                .iter()
                .zip(&subsizes)
                .map(|(&s, &b)| rng.gen_range(0..=s - b))
                .collect();
            let order = if rng.gen_bool(0.5) {
                Order::C
            } else {
                Order::Fortran
            };
            Layout::subarray(&sizes, &subsizes, &starts, order, &c)
        }
        8..=9 => {
            let n = rng.gen_range(1..4);
            let mut bls = Vec::new();
            let mut displs = Vec::new();
            let mut types = Vec::new();
            let mut at = 0i64;
            for k in 0..n {
                let t = if k == 0 {
                    c.clone()
                } else {
                    random_layout(rng, depth - 1)
                };
                let b = count(rng);
                bls.push(b);
                displs.push(at);
                at += if rng.gen_bool(0.5) {
                    b as i64 * t.extent()
                } else {
                    rng.gen_range(-8..24)
                };
                types.push(t);
            }
            Layout::structure(&bls, &displs, &types)
        }
        _ => {
            let lb = if rng.gen_bool(0.5) {
                c.lb()
            } else {
                rng.gen_range(-8..8)
            };
            let ext = if rng.gen_bool(0.5) {
                e
            } else {
                rng.gen_range(0..32)
            };
            Layout::resized(&c, lb, ext)
        }
    };
    r.ok()
}

/// The same bytes as `segs`, described as an explicit hindexed of single bytes.
pub(crate) fn flat_hindexed(segs: &[Segment]) -> Layout {
    let lens: Vec<u64> = segs.iter().map(|s| s.len).collect();
    let offs: Vec<i64> = segs.iter().map(|s| s.offset).collect();
    Layout::hindexed(&lens, &offs, &Layout::bytes(1)).expect("flat layout")
}
