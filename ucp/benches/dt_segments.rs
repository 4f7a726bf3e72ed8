//! Segment generation, packing and canonicalization cost of `ucp::dt` layouts.
//! Run with `cargo bench -p ucp --bench dt_segments`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ucp::dt::{pack, Cursor, Layout, Order, Segment};

fn segments(c: &mut Criterion) {
    let mut g = c.benchmark_group("dt_segments");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));

    // 1M segments of 8 bytes, 16 apart, generated 1024 at a time.
    let v = Layout::hvector(1 << 20, 1, 16, &Layout::bytes(8)).unwrap();
    let cv = v.canonical().unwrap();
    g.throughput(Throughput::Elements(1 << 20));
    g.bench_function("vector_1M_x8B_chunks_of_1024", |b| {
        let mut chunk: Vec<Segment> = Vec::with_capacity(1024);
        b.iter(|| {
            let mut cur = Cursor::new(cv, 0).unwrap();
            let mut n = 0;
            while cur.fill(&mut chunk, 1024, u64::MAX) > 0 {
                n += chunk.len();
            }
            black_box(n)
        })
    });

    // A 3D halo face (subarray of doubles): rows of 64 bytes inside planes.
    let s = Layout::subarray(
        &[64, 64, 64],
        &[62, 62, 8],
        &[1, 1, 1],
        Order::C,
        &Layout::bytes(8),
    )
    .unwrap();
    let cs = s.canonical().unwrap();
    g.throughput(Throughput::Elements(cs.pieces()));
    g.bench_function("subarray_3d_halo_segments", |b| {
        let mut chunk: Vec<Segment> = Vec::with_capacity(256);
        b.iter(|| {
            let mut cur = Cursor::new(cs, 0).unwrap();
            let mut n = 0;
            while cur.fill(&mut chunk, 256, u64::MAX) > 0 {
                n += chunk.len();
            }
            black_box(n)
        })
    });

    // Packing the same face.
    let src = vec![7u8; 64 * 64 * 64 * 8];
    let mut out = vec![0u8; cs.size() as usize];
    g.throughput(Throughput::Bytes(cs.size()));
    g.bench_function("subarray_3d_halo_pack", |b| {
        b.iter(|| pack(cs, &src, 0, &mut out).unwrap())
    });

    // Canonicalizing a nested struct-of-vector type (a fresh layout each time: no cache).
    g.throughput(Throughput::Elements(1));
    g.bench_function("canonicalize_nested_struct", |b| {
        b.iter(|| {
            let d = Layout::bytes(8);
            let st = Layout::structure(&[1, 3], &[0, 16], &[Layout::bytes(4), d.clone()]).unwrap();
            let v = Layout::vector(100, 2, 5, &Layout::resized(&st, 0, 40).unwrap()).unwrap();
            black_box(v.canonical().unwrap().hash128())
        })
    });
    g.finish();
}

criterion_group!(benches, segments);
criterion_main!(benches);
