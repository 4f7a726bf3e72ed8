//! A short fuzzing run of every target on the stable toolchain, for CI: each target gets
//! its stored corpus (`fuzz/corpus/NAME/`) and then mutations of it (bit flips, byte
//! changes, insertions, deletions, splices) for `RUCX_FUZZ_SMOKE_SECS` seconds (default 4).
//! A panic fails the test with the input that caused it; so does any single allocation
//! over `MAX_ALLOC` (the bound docs/fuzzing.md states). The long runs are cargo-fuzz's
//! (`fuzz/`, nightly).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

/// The largest single allocation a target may make for one input.
const MAX_ALLOC: usize = 64 << 20;

/// Counts the largest allocation since the last reset.
struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LARGEST.fetch_max(new, Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn corpus(name: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(name);
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| std::fs::read(e.ok()?.path()).ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(!v.is_empty(), "no corpus in {}", dir.display());
    v.sort();
    v
}

fn mutate(rng: &mut rand::rngs::StdRng, pool: &[Vec<u8>]) -> Vec<u8> {
    let mut d = pool[rng.gen_range(0..pool.len())].clone();
    for _ in 0..rng.gen_range(1..=4) {
        match rng.gen_range(0..6) {
            0 if !d.is_empty() => {
                let i = rng.gen_range(0..d.len());
                d[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !d.is_empty() => {
                let i = rng.gen_range(0..d.len());
                d[i] = *[0u8, 1, 0x7f, 0x80, 0xff]
                    .get(rng.gen_range(0..5))
                    .unwrap_or(&0);
            }
            2 => {
                let i = rng.gen_range(0..=d.len());
                d.insert(i, rng.gen());
            }
            3 if !d.is_empty() => {
                let i = rng.gen_range(0..d.len());
                d.remove(i);
            }
            4 => {
                let other = &pool[rng.gen_range(0..pool.len())];
                let cut = rng.gen_range(0..=d.len());
                let from = rng.gen_range(0..=other.len());
                d.truncate(cut);
                d.extend_from_slice(&other[from..]);
            }
            _ if d.len() >= 8 => {
                // A little-endian length or count set to something large.
                let i = rng.gen_range(0..d.len() - 7);
                let v: u64 = [u64::from(u32::MAX), u64::MAX, 1 << 40, 1 << 31][rng.gen_range(0..4)];
                d[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            _ => {}
        }
    }
    d
}

fn run_one(name: &str, f: fn(&[u8]), input: &[u8]) {
    LARGEST.store(0, Ordering::Relaxed);
    let r = std::panic::catch_unwind(|| f(input));
    assert!(
        r.is_ok(),
        "target {name} panicked on input {:02x?}",
        &input[..input.len().min(256)]
    );
    let big = LARGEST.load(Ordering::Relaxed);
    assert!(
        big <= MAX_ALLOC,
        "target {name} allocated {big} bytes at once on input {:02x?}",
        &input[..input.len().min(256)]
    );
}

#[test]
fn every_target_survives_its_corpus_and_mutations() {
    let secs: u64 = std::env::var("RUCX_FUZZ_SMOKE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for &(name, f) in rucx_fuzz_targets::TARGETS {
        let pool = corpus(name);
        for input in &pool {
            run_one(name, f, input);
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5275_6378 ^ name.len() as u64);
        let end = Instant::now() + Duration::from_secs(secs);
        let mut n = 0u64;
        while Instant::now() < end {
            let input = mutate(&mut rng, &pool);
            run_one(name, f, &input);
            n += 1;
        }
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "fuzz smoke {name}: {} corpus inputs, {n} mutations in {secs} s",
            pool.len()
        );
    }
}
