//! CUDA C source for the layout kernels (compiled at run time by NVRTC, see
//! `ucs::cuda::nvrtc`).
//!
//! * [`strided`]: one kernel per (source shape, destination shape, word): thread `p` moves
//!   packed word `p`, its two addresses computed from constants (divisions by constants
//!   compile to multiplications). Pack is shape → dense, unpack dense → shape, a direct
//!   transfer shape → shape.
//! * [`PLAN_SOURCE`]: the generic kernel, one warp per [`Piece`](super::Piece) of a
//!   [`Plan`](super::Plan), each piece moved in the widest word its two addresses and
//!   length allow.

use std::fmt::Write;

use super::Shape;

/// Threads per block of every kernel here.
pub const BLOCK_THREADS: u32 = 256;

/// The C type moved per thread for a word of `w` bytes.
fn word_type(w: u32) -> &'static str {
    match w {
        16 => "rucx_w16",
        8 => "unsigned long long",
        4 => "unsigned int",
        2 => "unsigned short",
        _ => "unsigned char",
    }
}

const PRELUDE: &str = "struct alignas(16) rucx_w16 { unsigned long long x, y; };\n";

/// Appends the statements that set `var` (a `long long`) to the offset of packed word
/// `p` in `shape` (offsets count from the shape's first byte).
fn offset_code(out: &mut String, var: &str, shape: &Shape, word: u32) {
    let words_per_block = shape.block / word as u64;
    if shape.levels.is_empty() {
        let _ = writeln!(out, "        {var} = (long long)p * {word}LL;");
        return;
    }
    let _ = writeln!(
        out,
        "        e = p / {words_per_block}ULL;\n        {var} = (long long)(p % {words_per_block}ULL) * {word}LL;"
    );
    let last = shape.levels.len() - 1;
    for (k, (count, stride)) in shape.levels.iter().enumerate() {
        if k == last {
            let _ = writeln!(out, "        {var} += (long long)e * {stride}LL;");
        } else {
            let _ = writeln!(
                out,
                "        {var} += (long long)(e % {count}ULL) * {stride}LL; e /= {count}ULL;"
            );
        }
    }
}

/// The name of the kernel [`strided`] generates.
pub const STRIDED_NAME: &str = "rucx_strided";

/// The source of the kernel copying `src`'s packed words into `dst`'s, `word` bytes each:
/// `rucx_strided(const char *src, char *dst, unsigned long long nwords)`, where `src` and
/// `dst` point at each shape's first byte. `word` divides both block lengths, every stride
/// and both base addresses ([`super::pair_word`]).
pub fn strided(src: &Shape, dst: &Shape, word: u32) -> String {
    let t = word_type(word);
    let mut s = String::with_capacity(1024);
    let _ = writeln!(
        s,
        "// Rucx layout copy: {} blocks of {} B (levels {:?}) -> {} blocks of {} B (levels {:?}), {word}-byte words",
        src.blocks(),
        src.block,
        src.levels.as_slice(),
        dst.blocks(),
        dst.block,
        dst.levels.as_slice()
    );
    s.push_str(PRELUDE);
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void __launch_bounds__({BLOCK_THREADS}) {STRIDED_NAME}(const char *__restrict__ src, char *__restrict__ dst, unsigned long long n)\n{{"
    );
    s.push_str(
        "    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;\n    for (unsigned long long p = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; p < n; p += step) {\n        unsigned long long e;\n        long long so, dof;\n",
    );
    offset_code(&mut s, "so", src, word);
    offset_code(&mut s, "dof", dst, word);
    let _ = writeln!(
        s,
        "        (void)e;\n        *({t} *)(dst + dof) = *(const {t} *)(src + so);\n    }}\n}}"
    );
    s
}

/// The name of the generic kernel in [`PLAN_SOURCE`].
pub const PLAN_NAME: &str = "rucx_plan";

/// The generic kernel: `rucx_plan(const char *src, char *dst, const piece *pieces,
/// unsigned long long npieces)`, one warp per piece.
pub const PLAN_SOURCE: &str = r#"// Rucx generic layout copy: one warp per (src, dst, len) piece.
struct alignas(16) rucx_w16 { unsigned long long x, y; };
struct rucx_piece { long long src, dst; unsigned long long len; };
template <typename T>
__device__ __forceinline__ void rucx_move(const char *s, char *d, unsigned long long n, unsigned lane)
{
    const T *a = (const T *)s;
    T *b = (T *)d;
    for (unsigned long long i = lane; i < n / sizeof(T); i += 32)
        b[i] = a[i];
}
extern "C" __global__ void __launch_bounds__(256) rucx_plan(const char *__restrict__ src, char *__restrict__ dst, const rucx_piece *__restrict__ pieces, unsigned long long np)
{
    unsigned lane = threadIdx.x & 31;
    unsigned long long w = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    unsigned long long nw = ((unsigned long long)gridDim.x * blockDim.x) >> 5;
    for (; w < np; w += nw) {
        rucx_piece p = pieces[w];
        const char *s = src + p.src;
        char *d = dst + p.dst;
        unsigned long long a = (unsigned long long)s | (unsigned long long)d | p.len;
        if ((a & 15) == 0)
            rucx_move<rucx_w16>(s, d, p.len, lane);
        else if ((a & 7) == 0)
            rucx_move<unsigned long long>(s, d, p.len, lane);
        else if ((a & 3) == 0)
            rucx_move<unsigned int>(s, d, p.len, lane);
        else if ((a & 1) == 0)
            rucx_move<unsigned short>(s, d, p.len, lane);
        else
            rucx_move<unsigned char>(s, d, p.len, lane);
    }
}
"#;

/// Blocks to launch for `threads` threads: enough to fill the GPU, at most `cap`
/// (a grid-stride loop does the rest).
pub fn grid_for(threads: u64, cap: u32) -> u32 {
    threads.div_ceil(BLOCK_THREADS as u64).clamp(1, cap as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dt::gpu::pair_word;
    use crate::dt::{Layout, Order};

    fn shape(l: &Layout) -> Shape {
        Shape::of(l.canonical().unwrap()).unwrap()
    }

    /// Golden source: a vector of 128 blocks of 1 KiB (stride 2 KiB) packed.
    #[test]
    fn golden_vector_pack() {
        let v = shape(&Layout::hvector(128, 1024, 2048, &Layout::bytes(1)).unwrap());
        let d = Shape::dense(v.size());
        let w = pair_word(&v, 0x7f00_0000_0000, &d, 0x7f10_0000_0000);
        assert_eq!(w, 16);
        let want = r#"// Rucx layout copy: 128 blocks of 1024 B (levels [(128, 2048)]) -> 1 blocks of 131072 B (levels []), 16-byte words
struct alignas(16) rucx_w16 { unsigned long long x, y; };
extern "C" __global__ void __launch_bounds__(256) rucx_strided(const char *__restrict__ src, char *__restrict__ dst, unsigned long long n)
{
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long p = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; p < n; p += step) {
        unsigned long long e;
        long long so, dof;
        e = p / 64ULL;
        so = (long long)(p % 64ULL) * 16LL;
        so += (long long)e * 2048LL;
        dof = (long long)p * 16LL;
        (void)e;
        *(rucx_w16 *)(dst + dof) = *(const rucx_w16 *)(src + so);
    }
}
"#;
        assert_eq!(strided(&v, &d, w), want);
    }

    /// Golden source: a 3D subarray face (doubles) into a vector of another shape.
    #[test]
    fn golden_subarray_to_vector() {
        let dbl = Layout::bytes(8);
        let face = shape(
            &Layout::subarray(&[16, 16, 16], &[4, 8, 2], &[1, 2, 3], Order::C, &dbl).unwrap(),
        );
        let vec = shape(&Layout::vector(32, 2, 5, &dbl).unwrap());
        let w = pair_word(&face, 0x1000, &vec, 0x2000);
        assert_eq!(w, 8);
        let want = r#"// Rucx layout copy: 32 blocks of 16 B (levels [(8, 128), (4, 2048)]) -> 32 blocks of 16 B (levels [(32, 40)]), 8-byte words
struct alignas(16) rucx_w16 { unsigned long long x, y; };
extern "C" __global__ void __launch_bounds__(256) rucx_strided(const char *__restrict__ src, char *__restrict__ dst, unsigned long long n)
{
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long p = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; p < n; p += step) {
        unsigned long long e;
        long long so, dof;
        e = p / 2ULL;
        so = (long long)(p % 2ULL) * 8LL;
        so += (long long)(e % 8ULL) * 128LL; e /= 8ULL;
        so += (long long)e * 2048LL;
        e = p / 2ULL;
        dof = (long long)(p % 2ULL) * 8LL;
        dof += (long long)e * 40LL;
        (void)e;
        *(unsigned long long *)(dst + dof) = *(const unsigned long long *)(src + so);
    }
}
"#;
        assert_eq!(strided(&face, &vec, w), want);
    }

    /// The generated index arithmetic, run here on the CPU as the kernel would run it,
    /// lands every word where the two type maps say.
    #[test]
    fn strided_index_arithmetic_matches_the_type_maps() {
        let dbl = Layout::bytes(8);
        let cases = [
            (
                Layout::subarray(&[6, 5, 7], &[2, 3, 4], &[1, 1, 2], Order::C, &dbl).unwrap(),
                Layout::vector(12, 2, 3, &Layout::contiguous(2, &dbl).unwrap()).unwrap(),
            ),
            (
                Layout::subarray(&[6, 5, 7], &[2, 3, 4], &[1, 1, 2], Order::Fortran, &dbl).unwrap(),
                Layout::contiguous(24, &dbl).unwrap(),
            ),
        ];
        for (a, b) in cases {
            let (sa, sb) = (shape(&a), shape(&b));
            let w = pair_word(&sa, 0, &sb, 0) as u64;
            let words = sa.size() / w;
            let eval = |s: &Shape, p: u64| -> i64 {
                let wpb = s.block / w;
                let mut e = p / wpb;
                let mut off = ((p % wpb) * w) as i64;
                for (k, (c, st)) in s.levels.iter().enumerate() {
                    if k + 1 == s.levels.len() {
                        off += e as i64 * st;
                    } else {
                        off += (e % c) as i64 * st;
                        e /= c;
                    }
                }
                off
            };
            let bytes = |l: &Layout| -> Vec<i64> {
                let c = l.canonical().unwrap();
                c.segments(10_000)
                    .unwrap()
                    .iter()
                    .flat_map(|g| g.offset..g.end())
                    .map(|o| o - c.offset())
                    .collect()
            };
            let (ta, tb) = (bytes(&a), bytes(&b));
            for p in 0..words {
                let (x, y) = (eval(&sa, p), eval(&sb, p));
                for k in 0..w as usize {
                    let i = p as usize * w as usize + k;
                    assert_eq!((x + k as i64, y + k as i64), (ta[i], tb[i]), "word {p}");
                }
            }
        }
    }

    #[test]
    fn plan_source_names_its_kernel() {
        assert!(PLAN_SOURCE.contains(&format!("void __launch_bounds__(256) {PLAN_NAME}(")));
        assert_eq!(grid_for(1, 1024), 1);
        assert_eq!(grid_for(8192, 1024), 32);
        assert_eq!(grid_for(1 << 40, 1024), 1024);
    }
}
