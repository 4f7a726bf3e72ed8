//! Named application layouts: the derived datatypes of DDTBench's micro-applications
//! (Schneider, Gerstenberger, Hoefler, "Micro-Applications for Communication Data Access
//! Patterns and MPI Datatypes", EuroMPI 2012), as used by the FALCON-X (MILC, WRF,
//! NAS_MG, SPECFEM3D, 3D stencil) and TEMPI (3D stencil halo) evaluations, rebuilt from
//! [`Layout`] constructors and parameterized by grid size. Pure construction: nothing here
//! touches the network; `rucx-perftest -D <name>:<params>` and benchmarks call [`named`].
//!
//! # What a named layout is ([`NamedLayout`])
//!
//! Every application keeps its data in one or more arrays. Here they lie back to back in
//! **one buffer** of [`buf_len`](NamedLayout::buf_len) bytes, and the layout addresses that
//! buffer from its start (offset 0, like DDTBench's `MPI_BOTTOM` sends): allocate
//! `buf_len` bytes and send, pack or unpack the layout with count 1 at base 0. Where
//! DDTBench sends from `&array[i]`, the type is placed at that offset by a one-block
//! `structure`. Element types are `bytes(4)` (`MPI_FLOAT`) or `bytes(8)` (`MPI_DOUBLE`), so
//! [`Layout::type_map`] lists one piece per element.
//!
//! # Grammar
//!
//! ```text
//! spec    := name [ ":" field { "," field } ]          names are case-insensitive
//! field   := uint { "x" uint }  |  word                uint: decimal, > 0
//!
//! milc_su3_zd     [:L | :L2xL3xL4xL5]                  default 16 (16x16x16x16)
//! nas_mg_{x,y,z}  [:N | :D1xD2xD3]                     N: grid (2N+2)x(N+2)x(N+2); default 128
//! wrf_{x,y}_vec   [:N[,K]]                             tile N, K levels; default 32,65
//! wrf_{x,y}_sa    [:N[,K]]                             (same arrays as _vec)
//! specfem3d_cm    [:c1..c4 | :ICM[,IIC[,NCM[,NIC]]]]   default c1
//! stencil3d_face  [:N | :NXxNYxNZ][,x|y|z][,H]         default 128x128x128, x, 1
//! sw4lite_{x,y}   [:N | :NIxNJxNK]                     default 100x100x50
//! ```
//!
//! [`NamedLayout::spec`] spells every parameter out; parsing it again gives the same
//! layout. Bad specs fail with [`DtError::InvalidArgument`] (an unknown name's message lists
//! the known ones), buffers over 1 TiB included; [`list`] gives names and one-line help.
//!
//! # The layouts
//!
//! * **`milc_su3_zd`** — MILC's `su3_rmd` CG halo in the z-down direction. A lattice of
//!   `L2 x L3 x L4 x L5` sites (x fastest) of `su3_vector`s (3 complex floats = 6 floats,
//!   24 bytes), even/odd-checkerboarded so a plane holds `L2*L3/2` sites of one parity.
//!   DDTBench's type: `hvector(2, 1, 24*L2*L3*L4*L5/2 B, vector(L5, L2*L3/2, L2*L3*L4/2,
//!   contiguous(6, float)))`: for each half of the buffer and each t, the first half-plane
//!   of a half-volume — `L2*L3*L5` sites, `24*L2*L3*L5` bytes (768 KiB at 32^4, FALCON-X's
//!   "B"). The deepest nest of the set. Requires `L3` and `L4` even (DDTBench's manual
//!   pack takes the first `L3/2` rows of a plane: the same sites).
//! * **`nas_mg_x`, `nas_mg_y`, `nas_mg_z`** — NAS MG's `comm3` face exchange on a
//!   `D1 x D2 x D3` grid of doubles (x fastest) with one ghost layer: the interior of the
//!   face one layer inside the boundary. x: `hvector(D3-2, 1, D1*D2*8 B, vector(D2-2, 1,
//!   D1, double))` at element `(D1-2, 1, 1)` (single doubles, the most fragmented); y:
//!   `vector(D3-2, D1-2, D1*D2, double)` at `(1, D2-2, 1)`; z: `vector(D2-2, D1-2, D1,
//!   double)` at `(1, 1, 1)`. `:N` gives DDTBench's shapes (34x18x18, 130x66x66,
//!   258x130x130, 514x258x258 for N = 16, 64, 128, 256); the default 258x130x130 is
//!   FALCON-X's "A".
//! * **`wrf_x_vec`, `wrf_y_vec`, `wrf_x_sa`, `wrf_y_sa`** — WRF's halo exchange of many
//!   fields at once, DDTBench's em_b_wave case: 4 2-D arrays `(x, y)`, 3 3-D arrays
//!   `(x, k, y)` and 2 4-D arrays `(x, k, y, scalar)` of 2 scalars of which the second is
//!   sent, floats, x fastest, laid out in that order. `_vec` is a `struct` of one
//!   `vector` (2-D), `hvector(vector)` (3-D) or `hvector(hvector(vector))` (4-D) per array;
//!   `_sa` a `struct` of C-order `subarray`s of the same cells (the same bytes in the
//!   same order, so both give the same canonical form). Tile: memory `(N+8) x K x (N+8)`,
//!   interior `[4, 4+N)` in x and y, all K levels sent; y sends the first 3 interior rows
//!   (`ym`), x the last 3 interior columns (`xp`), as DDTBench's 3-wide halos.
//! * **`specfem3d_cm`** — SPECFEM3D_GLOBE's crust-mantle/inner-core assembly: a `struct`
//!   of two `indexed_block(count, 3, 3*index, float)` over arrays of `NCM` and `NIC`
//!   3-float points, `ICM` and `IIC` points sent. The irregular, fragmented one: DDTBench
//!   draws the indices at random (distinct, unsorted); here they are a deterministic
//!   pseudo-random draw (splitmix64, fixed seeds), so every run and peer gets the same
//!   layout. Presets `c1..c4` are DDTBench's 10x10x6 meshes (c1: 1957, 245, 39929, 1225;
//!   their sizes, 26424 to 177672 bytes, are FALCON-X's Fig. 13 "A" to "D").
//!   With numbers only, missing ones derive as `IIC = ceil(ICM/8)`, `NCM = 20*ICM`,
//!   `NIC = 5*IIC` (close to c1's ratios).
//! * **`stencil3d_face`** — a 7-point stencil's halo send (FALCON-X 3D-Stencil; TEMPI's
//!   halo exchange with radius `H`): a Fortran-order `subarray` of a
//!   `(NX+2H) x (NY+2H) x (NZ+2H)` grid of doubles, the last `H` interior layers normal to
//!   the axis (`starts` = `N` on that axis, `H` elsewhere). Axis x gives `NY*NZ` blocks of
//!   `8H` bytes, z one block per y row.
//! * **`sw4lite_x`, `sw4lite_y`** — SW4Lite's halo exchange, the application of the UMR
//!   paper (Chu et al.): a grid of `NI x NJ x NK` points of 3 doubles with two ghost
//!   layers, i fastest. x: a nested vector of 48-byte blocks (2 points of each interior
//!   (j, k) row); y: one block of two full-width rows per interior k (4992 bytes at the
//!   default 100x100x50). The paper's grid gives 3000 blocks of 48 bytes and 55 of 5 KB;
//!   the default here 5000 and 50.
//!
//! # Approximations
//!
//! DDTBench's arrays are separate allocations addressed absolutely; here they are packed
//! back to back without padding. WRF's tile is parameterized by one size `N` (DDTBench runs
//! fixed decompositions with slightly irregular index ranges). SPECFEM's indices are
//! pseudo-random, not a real mesh. The stencil sends one quantity per cell.

use std::collections::HashMap;

use super::{DtError, Layout, Order};

/// Buffers beyond this many bytes are refused (a typo, not a benchmark).
const MAX_BUF: u64 = 1 << 40;

/// Most points `specfem3d_cm` draws (bounds the index lists built here).
const MAX_POINTS: u64 = 1 << 24;

const FLOAT: u64 = 4;
const DOUBLE: u64 = 8;

const UNKNOWN: &str = "unknown layout name (known: milc_su3_zd, nas_mg_x, nas_mg_y, nas_mg_z, \
     wrf_x_vec, wrf_y_vec, wrf_x_sa, wrf_y_sa, specfem3d_cm, stencil3d_face, sw4lite_x, \
     sw4lite_y)";

const LIST: &[(&str, &str)] = &[
    (
        "milc_su3_zd",
        "MILC su3 z-down halo, hvector(vector(su3_vector)); [:L | :L2xL3xL4xL5], default 16",
    ),
    (
        "nas_mg_x",
        "NAS MG x face, hvector(vector(double)) of single doubles; [:N | :D1xD2xD3], default 128",
    ),
    (
        "nas_mg_y",
        "NAS MG y face, vector of double rows; [:N | :D1xD2xD3], default 128",
    ),
    (
        "nas_mg_z",
        "NAS MG z face, vector of double rows; [:N | :D1xD2xD3], default 128",
    ),
    (
        "wrf_x_vec",
        "WRF x halo of 9 arrays, struct of (h)vectors; [:N[,K]], default 32,65",
    ),
    (
        "wrf_y_vec",
        "WRF y halo of 9 arrays, struct of (h)vectors; [:N[,K]], default 32,65",
    ),
    (
        "wrf_x_sa",
        "WRF x halo of 9 arrays, struct of subarrays; [:N[,K]], default 32,65",
    ),
    (
        "wrf_y_sa",
        "WRF y halo of 9 arrays, struct of subarrays; [:N[,K]], default 32,65",
    ),
    (
        "specfem3d_cm",
        "SPECFEM3D crust-mantle, struct of 2 indexed_block of 3-float points; \
         [:c1..c4 | :ICM[,IIC[,NCM[,NIC]]]], default c1",
    ),
    (
        "stencil3d_face",
        "3D stencil halo face, subarray of doubles; [:N | :NXxNYxNZ][,x|y|z][,H], \
         default 128x128x128,x,1",
    ),
    (
        "sw4lite_x",
        "SW4Lite x halo, nested vector of 48-byte blocks (2 points x 3 doubles); \
         [:N | :NIxNJxNK], default 100x100x50",
    ),
    (
        "sw4lite_y",
        "SW4Lite y halo, vector of ~5 KB blocks (2 rows of 3-double points); \
         [:N | :NIxNJxNK], default 100x100x50",
    ),
];

/// DDTBench's SPECFEM3D_cm cases (10x10x6 mesh, c = 1..4): points sent from the crust
/// mantle and inner core, and the arrays' lengths in points.
const SPECFEM_PRESETS: [[u64; 4]; 4] = [
    [1957, 245, 39929, 1225],
    [3801, 801, 152001, 7209],
    [7125, 1729, 396849, 22477],
    [11797, 3009, 834917, 51153],
];

const SEED_CM: u64 = 0x5eed_0000_00c0_ffee;
const SEED_IC: u64 = 0x5eed_0000_1c0f_fee1;

/// A layout built from a spec by [`named`], with the buffer it addresses.
#[derive(Clone, Debug)]
pub struct NamedLayout {
    /// The name as listed by [`list`].
    pub name: &'static str,
    /// The spec with every parameter spelled out; [`named`] of it gives the same layout.
    pub spec: String,
    /// The layout, addressed from the start of the buffer; its data lies in `[0, buf_len)`.
    pub layout: Layout,
    /// Bytes of buffer the application's arrays take: allocate this, send with count 1.
    pub buf_len: usize,
    /// One line for people: the application, the MPI construction, the sizes.
    pub description: String,
}

/// Names of the application layouts with one line of help each (for `--help`).
pub fn list() -> &'static [(&'static str, &'static str)] {
    LIST
}

/// Parses `<name>[:<params>]` (see the [module docs](self) for the grammar) and builds the
/// layout. Fails with [`DtError::InvalidArgument`] on a bad spec or a buffer over 1 TiB,
/// [`DtError::Overflow`] if the layout leaves the supported range.
pub fn named(spec: &str) -> Result<NamedLayout, DtError> {
    let spec = spec.trim();
    let (name, params) = match spec.split_once(':') {
        Some((n, p)) => (n.trim(), Some(p)),
        None => (spec, None),
    };
    let fields: Vec<&str> = match params {
        None => Vec::new(),
        Some(p) if p.trim().is_empty() => {
            return Err(DtError::InvalidArgument("empty parameter list after ':'"))
        }
        Some(p) => p.split(',').map(str::trim).collect(),
    };
    match name.to_ascii_lowercase().as_str() {
        "milc_su3_zd" => milc_su3_zd(&fields),
        "nas_mg_x" => nas_mg(Axis::X, &fields),
        "nas_mg_y" => nas_mg(Axis::Y, &fields),
        "nas_mg_z" => nas_mg(Axis::Z, &fields),
        "wrf_x_vec" => wrf(Axis::X, false, &fields),
        "wrf_y_vec" => wrf(Axis::Y, false, &fields),
        "wrf_x_sa" => wrf(Axis::X, true, &fields),
        "wrf_y_sa" => wrf(Axis::Y, true, &fields),
        "specfem3d_cm" => specfem3d_cm(&fields),
        "stencil3d_face" => stencil3d_face(&fields),
        "sw4lite_x" => sw4lite(Axis::X, &fields),
        "sw4lite_y" => sw4lite(Axis::Y, &fields),
        _ => Err(DtError::InvalidArgument(UNKNOWN)),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Axis {
    X,
    Y,
    Z,
}

impl Axis {
    fn index(self) -> usize {
        match self {
            Axis::X => 0,
            Axis::Y => 1,
            Axis::Z => 2,
        }
    }

    fn letter(self) -> char {
        ['x', 'y', 'z'][self.index()]
    }
}

/// A positive decimal integer.
fn num(s: &str) -> Result<u64, DtError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(DtError::InvalidArgument(
            "layout parameter is not a decimal integer",
        ));
    }
    match s.parse::<u64>() {
        Ok(0) => Err(DtError::InvalidArgument(
            "layout parameter must be positive",
        )),
        Ok(v) => Ok(v),
        Err(_) => Err(DtError::InvalidArgument("layout parameter too large")),
    }
}

/// `A` or `AxBx...`: positive integers separated by `x`.
fn dims(s: &str) -> Result<Vec<u64>, DtError> {
    s.split('x').map(num).collect()
}

/// Sizes are computed saturating: anything that overflows is over [`MAX_BUF`] anyway.
fn mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

fn product(v: &[u64]) -> u64 {
    v.iter().fold(1u64, |acc, &x| mul(acc, x))
}

/// Checks a buffer size against [`MAX_BUF`]; afterwards every offset inside the buffer
/// fits an `i64` and products of in-buffer quantities cannot overflow.
fn buffer(bytes: u64) -> Result<usize, DtError> {
    if bytes > MAX_BUF {
        return Err(DtError::InvalidArgument(
            "application buffer over 1 TiB; use smaller parameters",
        ));
    }
    usize::try_from(bytes).map_err(|_| DtError::Overflow)
}

/// `t` placed at byte `offset` of the buffer (DDTBench sends it from `&array[i]`).
fn at(offset: u64, t: &Layout) -> Result<Layout, DtError> {
    Layout::structure(&[1], &[offset as i64], std::slice::from_ref(t))
}

fn milc_su3_zd(f: &[&str]) -> Result<NamedLayout, DtError> {
    let d = match f {
        [] => [16; 4],
        [s] => match dims(s)?[..] {
            [l] => [l; 4],
            [a, b, c, d] => [a, b, c, d],
            _ => {
                return Err(DtError::InvalidArgument(
                    "milc_su3_zd takes L or L2xL3xL4xL5",
                ))
            }
        },
        _ => return Err(DtError::InvalidArgument("milc_su3_zd takes one parameter")),
    };
    let [l2, l3, l4, l5] = d;
    let sites = product(&d);
    let buf_len = buffer(mul(sites, 6 * FLOAT))?;
    if l3 % 2 != 0 || l4 % 2 != 0 {
        return Err(DtError::InvalidArgument(
            "milc_su3_zd needs L3 and L4 even (half planes, two z halves)",
        ));
    }
    let su3_vector = Layout::contiguous(6, &Layout::bytes(FLOAT))?;
    let half_plane = l2 * l3 / 2;
    let half_volume = l2 * l3 * l4 / 2;
    let temp = Layout::vector(l5, half_plane, half_volume as i64, &su3_vector)?;
    let half_buffer = sites / 2 * 6 * FLOAT;
    let layout = Layout::hvector(2, 1, half_buffer as i64, &temp)?;
    Ok(NamedLayout {
        name: "milc_su3_zd",
        spec: format!("milc_su3_zd:{l2}x{l3}x{l4}x{l5}"),
        description: format!(
            "MILC su3_zdown halo on a {l2}x{l3}x{l4}x{l5} lattice of su3_vectors (6 floats): \
             hvector(2, 1, {half_buffer} B, vector({l5}, {half_plane}, {half_volume}, \
             contiguous(6, float))); {} bytes",
            layout.size()
        ),
        layout,
        buf_len,
    })
}

fn nas_mg(axis: Axis, f: &[&str]) -> Result<NamedLayout, DtError> {
    let from_n = |n: u64| {
        let m = n.saturating_add(2);
        [mul(n, 2).saturating_add(2), m, m]
    };
    let [d1, d2, d3] = match f {
        [] => from_n(128),
        [s] => match dims(s)?[..] {
            [n] => from_n(n),
            [a, b, c] => [a, b, c],
            _ => return Err(DtError::InvalidArgument("nas_mg takes N or D1xD2xD3")),
        },
        _ => return Err(DtError::InvalidArgument("nas_mg takes one parameter")),
    };
    let buf_len = buffer(mul(product(&[d1, d2, d3]), DOUBLE))?;
    if d1 < 3 || d2 < 3 || d3 < 3 {
        return Err(DtError::InvalidArgument(
            "nas_mg grid dimensions must be at least 3 (ghost layers on both sides)",
        ));
    }
    let double = Layout::bytes(DOUBLE);
    let elem = |x: u64, y: u64, z: u64| (x + d1 * (y + d2 * z)) * DOUBLE;
    let (face, origin, what) = match axis {
        Axis::X => {
            let column = Layout::vector(d2 - 2, 1, d1 as i64, &double)?;
            let stride = d1 * d2 * DOUBLE;
            (
                Layout::hvector(d3 - 2, 1, stride as i64, &column)?,
                (d1 - 2, 1, 1),
                format!(
                    "hvector({}, 1, {stride} B, vector({}, 1, {d1}, double))",
                    d3 - 2,
                    d2 - 2
                ),
            )
        }
        Axis::Y => (
            Layout::vector(d3 - 2, d1 - 2, (d1 * d2) as i64, &double)?,
            (1, d2 - 2, 1),
            format!("vector({}, {}, {}, double)", d3 - 2, d1 - 2, d1 * d2),
        ),
        Axis::Z => (
            Layout::vector(d2 - 2, d1 - 2, d1 as i64, &double)?,
            (1, 1, 1),
            format!("vector({}, {}, {d1}, double)", d2 - 2, d1 - 2),
        ),
    };
    let layout = at(elem(origin.0, origin.1, origin.2), &face)?;
    let a = axis.letter();
    Ok(NamedLayout {
        name: ["nas_mg_x", "nas_mg_y", "nas_mg_z"][axis.index()],
        spec: format!("nas_mg_{a}:{d1}x{d2}x{d3}"),
        description: format!(
            "NAS MG {a} face of a {d1}x{d2}x{d3} grid of doubles: {what} at element \
             {origin:?}; {} bytes",
            layout.size()
        ),
        layout,
        buf_len,
    })
}

/// WRF's em_b_wave arrays, as DDTBench sends them.
const WRF_2D: u64 = 4;
const WRF_3D: u64 = 3;
const WRF_4D: u64 = 2;
/// Scalars per 4-D array (`limit_4D_arrays`), and the first one sent (0-based; DDTBench's
/// `param_first_scalar = 2`).
const WRF_SCALARS: u64 = 2;
const WRF_FIRST_SCALAR: u64 = 1;
/// Memory cells outside the interior on each side, and the halo width sent.
const WRF_PAD: u64 = 4;
const WRF_HALO: u64 = 3;

fn wrf(axis: Axis, sa: bool, f: &[&str]) -> Result<NamedLayout, DtError> {
    let (n, k) = match f {
        [] => (32, 65),
        [a] => (num(a)?, 65),
        [a, b] => (num(a)?, num(b)?),
        _ => return Err(DtError::InvalidArgument("wrf takes N[,K]")),
    };
    let d1 = n.saturating_add(2 * WRF_PAD);
    let (d2, d3) = (k, d1);
    let a2 = mul(d1, d3);
    let a3 = mul(a2, d2);
    let a4 = mul(a3, WRF_SCALARS);
    let floats = mul(WRF_2D, a2)
        .saturating_add(mul(WRF_3D, a3))
        .saturating_add(mul(WRF_4D, a4));
    let buf_len = buffer(mul(floats, FLOAT))?;
    if n < WRF_HALO {
        return Err(DtError::InvalidArgument(
            "wrf tile N must be at least the halo width 3",
        ));
    }
    // Start and extent of the sent cells in x (dim 1), k (dim 2) and y (dim 3).
    let (is, sub1, js, sub3) = match axis {
        Axis::X => (WRF_PAD + n - WRF_HALO, WRF_HALO, WRF_PAD, n),
        _ => (WRF_PAD, n, WRF_PAD, WRF_HALO),
    };
    let (ks, sub2) = (0, k);
    let nscal = WRF_SCALARS - WRF_FIRST_SCALAR;
    let fl = Layout::bytes(FLOAT);
    let mut displs = Vec::new();
    let mut types = Vec::new();
    let mut base = 0u64;
    if sa {
        let t2 = Layout::subarray(&[d3, d1], &[sub3, sub1], &[js, is], Order::C, &fl)?;
        let t3 = Layout::subarray(
            &[d3, d2, d1],
            &[sub3, sub2, sub1],
            &[js, ks, is],
            Order::C,
            &fl,
        )?;
        let t4 = Layout::subarray(
            &[WRF_SCALARS, d3, d2, d1],
            &[nscal, sub3, sub2, sub1],
            &[WRF_FIRST_SCALAR, js, ks, is],
            Order::C,
            &fl,
        )?;
        for (count, len, t) in [(WRF_2D, a2, t2), (WRF_3D, a3, t3), (WRF_4D, a4, t4)] {
            for _ in 0..count {
                displs.push(base as i64);
                types.push(t.clone());
                base += len * FLOAT;
            }
        }
    } else {
        let t2 = Layout::vector(sub3, sub1, d1 as i64, &fl)?;
        let plane = Layout::vector(sub2, sub1, d1 as i64, &fl)?;
        let t3 = Layout::hvector(sub3, 1, (d1 * d2 * FLOAT) as i64, &plane)?;
        let t4 = Layout::hvector(nscal, 1, (a3 * FLOAT) as i64, &t3)?;
        let first2 = is + d1 * js;
        let first3 = is + d1 * (ks + d2 * js);
        let first4 = first3 + a3 * WRF_FIRST_SCALAR;
        for (count, len, first, t) in [
            (WRF_2D, a2, first2, t2),
            (WRF_3D, a3, first3, t3),
            (WRF_4D, a4, first4, t4),
        ] {
            for _ in 0..count {
                displs.push((base + first * FLOAT) as i64);
                types.push(t.clone());
                base += len * FLOAT;
            }
        }
    }
    let layout = Layout::structure(&vec![1; types.len()], &displs, &types)?;
    let a = axis.letter();
    let (suffix, how) = if sa {
        ("sa", "subarrays")
    } else {
        ("vec", "vector/hvector")
    };
    let name = match (axis, sa) {
        (Axis::X, false) => "wrf_x_vec",
        (Axis::X, true) => "wrf_x_sa",
        (_, false) => "wrf_y_vec",
        (_, true) => "wrf_y_sa",
    };
    Ok(NamedLayout {
        name,
        spec: format!("wrf_{a}_{suffix}:{n},{k}"),
        description: format!(
            "WRF {a} halo ({sub1}x{sub2}x{sub3} cells of floats) of 4 2-D, 3 3-D and 2 4-D \
             arrays of a {d1}x{d2}x{d3} tile: struct of 9 {how}; {} bytes",
            layout.size()
        ),
        layout,
        buf_len,
    })
}

/// splitmix64: a small, well-mixed deterministic generator.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `k` distinct indices from `0..n` in random order (the first `k` of a Fisher-Yates
/// shuffle, as DDTBench's `utilities_random_array_shuffle`, kept sparse: O(k) memory).
fn sample_distinct(k: u64, n: u64, seed: u64) -> Vec<u64> {
    let mut state = seed;
    let mut moved: HashMap<u64, u64> = HashMap::new();
    let mut out = Vec::with_capacity(k as usize);
    for i in 0..k {
        let r = ((splitmix64(&mut state) as u128 * (n - i) as u128) >> 64) as u64;
        let j = i + r;
        let vi = *moved.get(&i).unwrap_or(&i);
        let vj = *moved.get(&j).unwrap_or(&j);
        moved.insert(j, vi);
        out.push(vj);
    }
    out
}

fn specfem3d_cm(f: &[&str]) -> Result<NamedLayout, DtError> {
    let [icm, iic, ncm, nic] = match f {
        [] => SPECFEM_PRESETS[0],
        [p] if p.starts_with('c') => match *p {
            "c1" => SPECFEM_PRESETS[0],
            "c2" => SPECFEM_PRESETS[1],
            "c3" => SPECFEM_PRESETS[2],
            "c4" => SPECFEM_PRESETS[3],
            _ => return Err(DtError::InvalidArgument("specfem3d_cm presets are c1..c4")),
        },
        f if f.len() <= 4 => {
            let icm = num(f[0])?;
            let iic = match f.get(1) {
                Some(s) => num(s)?,
                None => icm.div_ceil(8),
            };
            let ncm = match f.get(2) {
                Some(s) => num(s)?,
                None => mul(icm, 20),
            };
            let nic = match f.get(3) {
                Some(s) => num(s)?,
                None => mul(iic, 5),
            };
            [icm, iic, ncm, nic]
        }
        _ => {
            return Err(DtError::InvalidArgument(
                "specfem3d_cm takes c1..c4 or ICM[,IIC[,NCM[,NIC]]]",
            ))
        }
    };
    let point = 3 * FLOAT;
    let buf_len = buffer(mul(ncm.saturating_add(nic), point))?;
    if icm > ncm || iic > nic {
        return Err(DtError::InvalidArgument(
            "specfem3d_cm sends more points than its arrays hold",
        ));
    }
    if icm + iic > MAX_POINTS {
        return Err(DtError::InvalidArgument(
            "specfem3d_cm sends more than 2^24 points",
        ));
    }
    let fl = Layout::bytes(FLOAT);
    let block = |k, n, seed| -> Result<Layout, DtError> {
        let displs: Vec<i64> = sample_distinct(k, n, seed)
            .into_iter()
            .map(|i| (3 * i) as i64)
            .collect();
        Layout::indexed_block(3, &displs, &fl)
    };
    let cm = block(icm, ncm, SEED_CM)?;
    let ic = block(iic, nic, SEED_IC)?;
    let layout = Layout::structure(&[1, 1], &[0, (ncm * point) as i64], &[cm, ic])?;
    Ok(NamedLayout {
        name: "specfem3d_cm",
        spec: format!("specfem3d_cm:{icm},{iic},{ncm},{nic}"),
        description: format!(
            "SPECFEM3D crust-mantle + inner-core assembly: struct of indexed_block({icm}, 3, \
             float) over {ncm} points and indexed_block({iic}, 3, float) over {nic} points \
             (pseudo-random distinct indices); {} bytes",
            layout.size()
        ),
        layout,
        buf_len,
    })
}

/// SW4Lite's halo exchange (the UMR paper's application): a 3-D grid of points of 3
/// doubles (the displacement's components, 24 bytes), `NI x NJ x NK` interior points with
/// two ghost layers on every side, i fastest. The x face is the last two interior planes
/// of i: for each interior (j, k), 2 points, 48 bytes, as a nested vector `hvector(NK, 1,
/// plane, vector(NJ, 2, NI+4, point))`; the y face is the last two interior rows of j at
/// full width, for each interior k one block of `2 (NI+4)` points (4992 bytes at the
/// default), `vector(NK, 2 (NI+4), (NI+4)(NJ+4), point)`. The paper's run (a 100x100x50
/// grid) has 3000 blocks of 48 bytes one way and 55 of 5 KB the other; this grid gives
/// 5000 and 50.
fn sw4lite(axis: Axis, f: &[&str]) -> Result<NamedLayout, DtError> {
    const POINT: u64 = 3 * DOUBLE;
    const GHOST: u64 = 2;
    let [ni, nj, nk] = match f {
        [] => [100, 100, 50],
        [s] => match dims(s)?[..] {
            [n] => [n, n, n],
            [a, b, c] => [a, b, c],
            _ => return Err(DtError::InvalidArgument("sw4lite takes N or NIxNJxNK")),
        },
        _ => return Err(DtError::InvalidArgument("sw4lite takes one parameter")),
    };
    if ni < GHOST || nj < GHOST {
        return Err(DtError::InvalidArgument(
            "sw4lite grid must be at least 2 points wide in i and j",
        ));
    }
    let (mi, mj, mk) = (ni + 2 * GHOST, nj + 2 * GHOST, nk + 2 * GHOST);
    let buf_len = buffer(mul(product(&[mi, mj, mk]), POINT))?;
    let point = Layout::bytes(POINT);
    let elem = |i: u64, j: u64, k: u64| (i + mi * (j + mj * k)) * POINT;
    let plane = mi * mj * POINT;
    let (face, origin, what) = match axis {
        Axis::X => {
            let column = Layout::vector(nj, GHOST, mi as i64, &point)?;
            (
                Layout::hvector(nk, 1, plane as i64, &column)?,
                (ni, GHOST, GHOST),
                format!("hvector({nk}, 1, {plane} B, vector({nj}, 2, {mi}, 3 doubles))"),
            )
        }
        _ => (
            Layout::vector(nk, GHOST * mi, (mi * mj) as i64, &point)?,
            (0, nj, GHOST),
            format!("vector({nk}, {}, {}, 3 doubles)", GHOST * mi, mi * mj),
        ),
    };
    let layout = at(elem(origin.0, origin.1, origin.2), &face)?;
    let a = axis.letter();
    Ok(NamedLayout {
        name: if axis == Axis::X {
            "sw4lite_x"
        } else {
            "sw4lite_y"
        },
        spec: format!("sw4lite_{a}:{ni}x{nj}x{nk}"),
        description: format!(
            "SW4Lite {a} halo of a {ni}x{nj}x{nk} grid (2 ghost layers) of 3-double points: \
             {what} at point {origin:?}; {} bytes",
            layout.size()
        ),
        layout,
        buf_len,
    })
}

fn stencil3d_face(f: &[&str]) -> Result<NamedLayout, DtError> {
    let mut n = [128u64; 3];
    let mut axis = None;
    let mut halo = None;
    if let Some(s) = f.first() {
        n = match dims(s)?[..] {
            [a] => [a; 3],
            [a, b, c] => [a, b, c],
            _ => {
                return Err(DtError::InvalidArgument(
                    "stencil3d_face grid is N or NXxNYxNZ",
                ))
            }
        };
    }
    for s in f.iter().skip(1) {
        match (*s, axis, halo) {
            ("x" | "y" | "z", None, _) => {
                axis = Some(match *s {
                    "x" => Axis::X,
                    "y" => Axis::Y,
                    _ => Axis::Z,
                })
            }
            (_, _, None) if s.bytes().all(|b| b.is_ascii_digit()) => halo = Some(num(s)?),
            _ => {
                return Err(DtError::InvalidArgument(
                    "stencil3d_face takes GRID[,x|y|z][,H], each at most once",
                ))
            }
        }
    }
    let axis = axis.unwrap_or(Axis::X);
    let h = halo.unwrap_or(1);
    let mut sizes = [0u64; 3];
    for (s, &m) in sizes.iter_mut().zip(&n) {
        *s = mul(h, 2).saturating_add(m);
    }
    let buf_len = buffer(mul(product(&sizes), DOUBLE))?;
    if n.iter().any(|&m| m < h) {
        return Err(DtError::InvalidArgument(
            "stencil3d_face halo wider than the grid",
        ));
    }
    let ax = axis.index();
    let mut subsizes = n;
    subsizes[ax] = h;
    let mut starts = [h; 3];
    starts[ax] = n[ax];
    let layout = Layout::subarray(
        &sizes,
        &subsizes,
        &starts,
        Order::Fortran,
        &Layout::bytes(DOUBLE),
    )?;
    let [nx, ny, nz] = n;
    let a = axis.letter();
    Ok(NamedLayout {
        name: "stencil3d_face",
        spec: format!("stencil3d_face:{nx}x{ny}x{nz},{a},{h}"),
        description: format!(
            "3D stencil {a} face, halo {h}, of a {nx}x{ny}x{nz} grid of doubles: Fortran \
             subarray(sizes {sizes:?}, subsizes {subsizes:?}, starts {starts:?}); {} bytes",
            layout.size()
        ),
        layout,
        buf_len,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{pack, unpack, Segment};
    use super::*;

    const LIMIT: usize = 1 << 22;

    /// Offsets of `len`-byte elements, in order, as unmerged type-map pieces.
    fn pieces(offsets: impl IntoIterator<Item = u64>, len: u64) -> Vec<Segment> {
        offsets
            .into_iter()
            .map(|o| Segment::new(o as i64, len))
            .collect()
    }

    fn pattern(i: usize) -> u8 {
        ((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
    }

    /// Pack from a patterned buffer and check against the naive gather; unpack into a zeroed
    /// buffer and check that exactly the layout's bytes came back; the canonical segments
    /// equal the merged type map; the data lies inside the buffer.
    fn round_trip(nl: &NamedLayout) {
        let c = nl.layout.canonical().unwrap();
        let map = nl.layout.type_map_merged(LIMIT).unwrap();
        assert_eq!(c.segments(LIMIT).unwrap(), map, "{}", nl.spec);
        let (lo, hi) = nl.layout.true_bounds().unwrap();
        assert!(lo >= 0 && hi as usize <= nl.buf_len, "{}", nl.spec);
        let src: Vec<u8> = (0..nl.buf_len).map(pattern).collect();
        let mut want = Vec::new();
        let mut want_dst = vec![0u8; nl.buf_len];
        for s in &map {
            let r = s.offset as usize..s.end() as usize;
            want.extend_from_slice(&src[r.clone()]);
            want_dst[r.clone()].copy_from_slice(&src[r]);
        }
        let size = nl.layout.size();
        assert_eq!(want.len() as u64, size);
        let mut packed = vec![0u8; size as usize];
        assert_eq!(pack(c, &src, 0, &mut packed), Ok(size));
        assert!(packed == want, "{}: packed bytes differ", nl.spec);
        let mut dst = vec![0u8; nl.buf_len];
        assert_eq!(unpack(c, &packed, &mut dst, 0), Ok(size));
        assert!(dst == want_dst, "{}: unpacked buffer differs", nl.spec);
        // The full spec reproduces the layout.
        let again = named(&nl.spec).unwrap();
        assert_eq!(again.spec, nl.spec);
        assert_eq!(again.buf_len, nl.buf_len);
        assert_eq!(again.layout.canonical().unwrap(), c);
    }

    fn size_of(spec: &str) -> (u64, usize) {
        let nl = named(spec).unwrap();
        (nl.layout.size(), nl.buf_len)
    }

    #[test]
    fn every_listed_name_builds_with_defaults() {
        assert_eq!(list().len(), 12);
        for (name, help) in list() {
            let nl = named(name).unwrap();
            assert_eq!(nl.name, *name);
            assert!(nl.spec.starts_with(name));
            assert!(!help.is_empty() && !nl.description.is_empty());
            assert!(nl.layout.size() > 0);
            let c = nl.layout.canonical().unwrap();
            let (lo, hi) = c.bounds();
            assert!(lo >= 0 && hi as usize <= nl.buf_len, "{name}");
            // Case-insensitive names, as DDTBench spells them.
            let upper = named(&name.to_ascii_uppercase()).unwrap();
            assert_eq!(upper.layout.canonical().unwrap(), c);
        }
    }

    #[test]
    fn milc_sizes_and_type_map() {
        // 2 halves * L5 * L2*L3/2 sites * 24 bytes = L2*L3*L5*24.
        assert_eq!(
            size_of("milc_su3_zd"),
            (16 * 16 * 16 * 24, 16usize.pow(4) * 24)
        );
        assert_eq!(size_of("milc_su3_zd:32").0, 786_432); // FALCON-X's "B": 768 KiB
        assert_eq!(
            size_of("MILC_su3_zd:8x6x4x3"),
            (8 * 6 * 3 * 24, 8 * 6 * 4 * 3 * 24)
        );
        let (l2, l3, l4, l5) = (3u64, 4, 4, 3);
        let nl = named(&format!("milc_su3_zd:{l2}x{l3}x{l4}x{l5}")).unwrap();
        let site = |s: u64| (0..6).map(move |e| s * 24 + e * 4);
        // DDT order: half h of the buffer, then t, then the half-plane's sites.
        let mut want = Vec::new();
        for h in 0..2 {
            for t in 0..l5 {
                for s in 0..l2 * l3 / 2 {
                    want.extend(site(h * l2 * l3 * l4 * l5 / 2 + t * l2 * l3 * l4 / 2 + s));
                }
            }
        }
        let map = nl.layout.type_map(LIMIT).unwrap();
        assert_eq!(map, pieces(want, 4));
        // DDTBench's manual pack loop visits the same sites (t outer, z in {0, L4/2}).
        let mut manual = Vec::new();
        for t in 0..l5 {
            for z in [0, l4 / 2] {
                for y in 0..l3 / 2 {
                    for x in 0..l2 {
                        manual.extend(site(x + l2 * (y + l3 * (z + l4 * t))));
                    }
                }
            }
        }
        let mut got: Vec<u64> = map.iter().map(|s| s.offset as u64).collect();
        got.sort_unstable();
        manual.sort_unstable();
        assert_eq!(got, manual);
        round_trip(&nl);
    }

    #[test]
    fn nas_mg_sizes_and_type_map() {
        // Default N = 128: 258x130x130.
        assert_eq!(size_of("nas_mg_x"), (128 * 128 * 8, 258 * 130 * 130 * 8));
        assert_eq!(size_of("nas_mg_y"), (256 * 128 * 8, 258 * 130 * 130 * 8));
        assert_eq!(size_of("nas_mg_z"), (256 * 128 * 8, 258 * 130 * 130 * 8));
        assert_eq!(size_of("nas_mg_x:16").0, 16 * 16 * 8); // 34x18x18
        assert_eq!(size_of("nas_mg_y:16").0, 32 * 16 * 8);
        assert_eq!(size_of("nas_mg_z:7x5x4").0, 5 * 3 * 8);
        let (d1, d2, d3) = (7u64, 5, 4);
        let idx = |x: u64, y: u64, z: u64| (x + d1 * (y + d2 * z)) * 8;
        let mut x_face = Vec::new();
        let mut y_face = Vec::new();
        let mut z_face = Vec::new();
        for k in 1..d3 - 1 {
            for j in 1..d2 - 1 {
                x_face.push(idx(d1 - 2, j, k));
            }
            for i in 1..d1 - 1 {
                y_face.push(idx(i, d2 - 2, k));
            }
        }
        for j in 1..d2 - 1 {
            for i in 1..d1 - 1 {
                z_face.push(idx(i, j, 1));
            }
        }
        for (axis, want) in [("x", x_face), ("y", y_face), ("z", z_face)] {
            let nl = named(&format!("nas_mg_{axis}:{d1}x{d2}x{d3}")).unwrap();
            assert_eq!(nl.buf_len as u64, d1 * d2 * d3 * 8);
            assert_eq!(
                nl.layout.type_map(LIMIT).unwrap(),
                pieces(want, 8),
                "{axis}"
            );
            round_trip(&nl);
        }
        round_trip(&named("nas_mg_x:16").unwrap());
    }

    /// DDTBench's manual WRF pack loop over the buffer's arrays, as float offsets.
    fn wrf_manual(axis: char, n: u64, k: u64) -> Vec<u64> {
        let (d1, d2, d3) = (n + 8, k, n + 8);
        let (xs, ys) = if axis == 'x' {
            (n + 1..n + 4, 4..4 + n)
        } else {
            (4..4 + n, 4..7)
        };
        let mut out = Vec::new();
        let mut base = 0;
        for _ in 0..4 {
            for y in ys.clone() {
                out.extend(xs.clone().map(|x| base + x + d1 * y));
            }
            base += d1 * d3;
        }
        for _ in 0..3 {
            for y in ys.clone() {
                for l in 0..k {
                    out.extend(xs.clone().map(|x| base + x + d1 * (l + d2 * y)));
                }
            }
            base += d1 * d2 * d3;
        }
        for _ in 0..2 {
            for y in ys.clone() {
                for l in 0..k {
                    let t = d1 * d2 * d3; // scalar 1 of 2
                    out.extend(xs.clone().map(|x| base + t + x + d1 * (l + d2 * y)));
                }
            }
            base += 2 * d1 * d2 * d3;
        }
        out
    }

    #[test]
    fn wrf_sizes_and_type_map() {
        // Either axis: 4*3N + 3*3NK + 2*3NK floats.
        let floats = |n: u64, k: u64| 12 * n + 15 * n * k;
        let buf = |n: u64, k: u64| ((4 + 7 * k) * (n + 8) * (n + 8) * 4) as usize;
        for name in ["wrf_x_vec", "wrf_y_vec", "wrf_x_sa", "wrf_y_sa"] {
            assert_eq!(size_of(name), (floats(32, 65) * 4, buf(32, 65)));
            assert_eq!(
                size_of(&format!("{name}:5,2")),
                (floats(5, 2) * 4, buf(5, 2))
            );
        }
        for axis in ['x', 'y'] {
            let (n, k) = (5, 3);
            let want = pieces(wrf_manual(axis, n, k).into_iter().map(|o| o * 4), 4);
            let vec = named(&format!("wrf_{axis}_vec:{n},{k}")).unwrap();
            let sa = named(&format!("wrf_{axis}_sa:{n},{k}")).unwrap();
            assert_eq!(vec.layout.type_map(LIMIT).unwrap(), want, "{axis} vec");
            assert_eq!(sa.layout.type_map(LIMIT).unwrap(), want, "{axis} sa");
            // Same bytes in the same order: one canonical form.
            assert_eq!(
                vec.layout.canonical().unwrap(),
                sa.layout.canonical().unwrap()
            );
            round_trip(&vec);
            round_trip(&sa);
        }
    }

    #[test]
    fn specfem_sizes_indices_and_type_map() {
        assert_eq!(
            size_of("specfem3d_cm"),
            ((1957 + 245) * 12, (39929 + 1225) * 12)
        );
        assert_eq!(
            size_of("specfem3d_cm:c4"),
            ((11797 + 3009) * 12, (834_917 + 51153) * 12)
        );
        // The message sizes of FALCON-X's Fig. 13 ("A..D") are the presets c1..c4.
        let sizes: Vec<u64> = ["c1", "c2", "c3", "c4"]
            .iter()
            .map(|p| size_of(&format!("specfem3d_cm:{p}")).0)
            .collect();
        assert_eq!(sizes, [26424, 55224, 106_248, 177_672]);
        // Derived: IIC = ceil(1000/8) = 125, NCM = 20000, NIC = 625.
        let nl = named("specfem3d_cm:1000").unwrap();
        assert_eq!(nl.spec, "specfem3d_cm:1000,125,20000,625");
        assert_eq!((nl.layout.size(), nl.buf_len), (1125 * 12, 20625 * 12));
        // Distinct, in range, not sorted, deterministic.
        let v = sample_distinct(500, 600, SEED_CM);
        let mut s = v.clone();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), 500);
        assert!(s.iter().all(|&i| i < 600));
        assert_ne!(v, s);
        assert_eq!(v, sample_distinct(500, 600, SEED_CM));
        assert_eq!(sample_distinct(7, 7, 1).len(), 7);
        // Type map: cm points, then ic points after the cm array.
        let (icm, iic, ncm, nic) = (40, 9, 50, 12);
        let nl = named(&format!("specfem3d_cm:{icm},{iic},{ncm},{nic}")).unwrap();
        let mut want = Vec::new();
        for p in sample_distinct(icm, ncm, SEED_CM) {
            want.extend((0..3).map(|e| p * 12 + e * 4));
        }
        for p in sample_distinct(iic, nic, SEED_IC) {
            want.extend((0..3).map(|e| ncm * 12 + p * 12 + e * 4));
        }
        assert_eq!(nl.layout.type_map(LIMIT).unwrap(), pieces(want, 4));
        round_trip(&nl);
        round_trip(&named("specfem3d_cm").unwrap());
    }

    #[test]
    fn stencil_sizes_and_type_map() {
        assert_eq!(
            size_of("stencil3d_face"),
            (128 * 128 * 8, 130usize.pow(3) * 8)
        );
        assert_eq!(
            size_of("stencil3d_face:64x32x16,y,3"),
            (64 * 3 * 16 * 8, 70 * 38 * 22 * 8)
        );
        assert_eq!(
            size_of("stencil3d_face:64x32x16,2,z"),
            (64 * 32 * 2 * 8, 68 * 36 * 20 * 8)
        );
        let (nx, ny, nz, h) = (5u64, 4, 3, 2);
        let (sx, sy) = (nx + 2 * h, ny + 2 * h);
        let idx = |x: u64, y: u64, z: u64| (x + sx * (y + sy * z)) * 8;
        for axis in ['x', 'y', 'z'] {
            // The last h interior layers normal to the axis; x fastest.
            let range = |a: char, m: u64| if a == axis { m..m + h } else { h..h + m };
            let mut want = Vec::new();
            for z in range('z', nz) {
                for y in range('y', ny) {
                    want.extend(range('x', nx).map(|x| idx(x, y, z)));
                }
            }
            let nl = named(&format!("stencil3d_face:{nx}x{ny}x{nz},{axis},{h}")).unwrap();
            assert_eq!(nl.buf_len as u64, sx * sy * (nz + 2 * h) * 8);
            assert_eq!(
                nl.layout.type_map(LIMIT).unwrap(),
                pieces(want, 8),
                "{axis}"
            );
            round_trip(&nl);
        }
        round_trip(&named("stencil3d_face:16").unwrap());
    }

    #[test]
    fn sw4lite_faces_have_the_papers_shapes() {
        let x = named("sw4lite_x").unwrap();
        let y = named("sw4lite_y").unwrap();
        assert_eq!(x.spec, "sw4lite_x:100x100x50");
        let (mi, mj, mk) = (104u64, 104u64, 54u64);
        assert_eq!(x.buf_len as u64, mi * mj * mk * 24);
        let bx = x.layout.type_map_merged(LIMIT).unwrap();
        assert_eq!(bx.len(), 100 * 50);
        assert!(bx.iter().all(|g| g.len == 48));
        // The first block: the last two interior points of row (j, k) = (2, 2).
        assert_eq!(bx[0].offset as u64, ((2 * mj + 2) * mi + 100) * 24);
        assert_eq!(bx[1].offset - bx[0].offset, (mi * 24) as i64, "next row");
        let by = y.layout.type_map_merged(LIMIT).unwrap();
        assert_eq!(by.len(), 50);
        assert!(by.iter().all(|g| g.len == 2 * mi * 24 && g.len == 4992));
        assert_eq!(by[0].offset as u64, (2 * mj + 100) * mi * 24);
        assert_eq!(
            by[1].offset - by[0].offset,
            (mi * mj * 24) as i64,
            "next plane"
        );
        for t in [&x, &y] {
            round_trip(t);
            assert_eq!(named(&t.spec).unwrap().layout.size(), t.layout.size());
        }
    }

    #[test]
    fn bad_specs_are_invalid_arguments() {
        let msg = |spec: &str| match named(spec) {
            Err(DtError::InvalidArgument(m)) => m,
            other => panic!("{spec}: {other:?}"),
        };
        let unknown = msg("lammps_full:10");
        for (name, _) in list() {
            assert!(unknown.contains(name), "{name} missing from '{unknown}'");
        }
        assert!(msg("").contains("unknown"));
        for spec in [
            "nas_mg_x:",
            "nas_mg_x:0",
            "nas_mg_x:-4",
            "nas_mg_x:12x",
            "nas_mg_x:4x4",
            "nas_mg_x:2x5x5",
            "nas_mg_x:8,8",
            "nas_mg_z:99999999999999999999",
            "nas_mg_y:10000",
            "nas_mg_y:18446744073709551615",
            "milc_su3_zd:3",
            "milc_su3_zd:4x4x3x4",
            "milc_su3_zd:4x3x4x4",
            "milc_su3_zd:4x4x4",
            "wrf_x_vec:2",
            "wrf_y_sa:8,8,8",
            "wrf_y_vec:8,x",
            "specfem3d_cm:c5",
            "specfem3d_cm:10,10,5",
            "specfem3d_cm:1,2,3,4,5",
            "specfem3d_cm:20000000,1,40000000,1",
            "stencil3d_face:8,w",
            "stencil3d_face:8,x,y",
            "stencil3d_face:8,1,2",
            "stencil3d_face:8,x,9",
            "stencil3d_face:x",
            "stencil3d_face:4x4x4x4",
            "sw4lite_x:1x8x8",
            "sw4lite_y:8,8",
            "sw4lite_y:8x8",
        ] {
            let _ = msg(spec);
        }
        assert!(msg("nas_mg_y:10000").contains("1 TiB"));
        assert!(msg("stencil3d_face:18446744073709551615,2").contains("1 TiB"));
        // Whitespace and case are forgiven.
        assert!(named("  NAS_MG_Z : 16 ").is_ok());
    }
}
