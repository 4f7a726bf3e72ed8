//! Datatypes and layouts: MPI-style derived datatypes, their canonical form, lazy segment
//! generation and strided pack/unpack. Pure logic, but for [`gpu`]'s kernel launches and
//! scratch buffers: nothing here sends a byte; the protocols (eager bcopy packing,
//! zero-copy iov lists, rendezvous pipelining, layout memoization) consume it.
//!
//! # Layouts ([`Layout`])
//!
//! A [`Layout`] is built like an MPI datatype — [`Layout::bytes`] (a base element of `n`
//! bytes), [`contiguous`](Layout::contiguous), [`vector`](Layout::vector),
//! [`hvector`](Layout::hvector), [`indexed`](Layout::indexed), [`hindexed`](Layout::hindexed),
//! [`indexed_block`](Layout::indexed_block), [`hindexed_block`](Layout::hindexed_block),
//! [`subarray`](Layout::subarray) (C or Fortran order), [`structure`](Layout::structure)
//! and [`resized`](Layout::resized), nested to any depth. Each knows its `size` (bytes of
//! data), its `lb`/`ub`/`extent` with MPI's rules (lb/ub markers set by `resized` and
//! `subarray` are sticky and propagate through later constructors; otherwise the bounds of
//! the data; no alignment padding, since we work on bytes), its true bounds, and its MPI type
//! map as `(offset, length)` pieces, one per base element in type-map order
//! ([`Layout::type_map`], unmerged; [`Layout::type_map_merged`], adjacent pieces merged).
//! The type map is the test oracle; it is never used on a data path.
//!
//! # The canonical form ([`Canon`], after TEMPI)
//!
//! The same bytes can be described in many ways (a vector of contiguous or a vector with a
//! bigger block; `contiguous(n, contiguous(m, x))` or `contiguous(n*m, x)`; a subarray or
//! the equivalent vector). The canonical form gives them one description, so that a hash
//! of it can key a memoization table (FALCON-X) and a peer can be sent a compact descriptor.
//!
//! The IR ([`Node`]) has three kinds of node. Every node describes bytes relative to its own
//! origin, and its first byte in packing order lies at the origin (offset 0); the offset of
//! the whole layout's first byte is kept once, in [`Canon::offset`].
//!
//! * `Dense { len }` — `len` contiguous bytes (TEMPI's `DenseData`).
//! * `Stream { count, stride, child }` — `count` copies of `child`, copy `i` at `i * stride`
//!   bytes (TEMPI's `StreamData`; the stride may be negative or zero).
//! * `Blocks` — an explicit list of `(offset, node)` entries in packing order, for what is
//!   not regular (irregular `indexed`/`hindexed`/`struct`).
//!
//! A layout is first *lowered* structurally: contiguous, vector, hvector and subarray map
//! straight to nested streams, (h)indexed and struct to a `Blocks` of streams, resized to
//! its child (resizing changes the extent, not the bytes). Then these transformations are
//! applied bottom-up until none applies (a fixed point):
//!
//! 1. **Empty removal** — zero-size nodes, count-0 streams and empty entries disappear.
//! 2. **Dense folding** — `Stream{c, s, Dense{l}}` with `s == l` becomes `Dense{c*l}`; in a
//!    `Blocks`, consecutive `Dense` entries that touch (`off_i + l_i == off_{i+1}`) fuse.
//! 3. **Stream elision** — `Stream{1, _, x}` becomes `x`; a one-entry `Blocks` becomes its
//!    entry (its offset moves up to the parent).
//! 4. **Stream flattening** — `Stream{c1, s1, Stream{c2, s2, x}}` with `s1 == c2*s2`
//!    becomes `Stream{c1*c2, s2, x}` (copy `(i, j)` sits at `i*c2*s2 + j*s2 = (i*c2+j)*s2`,
//!    in the same order). A `Blocks` entry that is itself a `Blocks` is spliced in.
//! 5. **Regularization** — in a `Blocks`, a run of ≥ 2 consecutive equal nodes at a
//!    constant offset step becomes one `Stream` entry (an `indexed` with equal blocks at a
//!    constant step is a `vector`); a `Blocks` of explicit dense entries that is exactly a
//!    nest of streams is recognised as that nest.
//! 6. **Sorting** — TEMPI also sorts the stream hierarchy by stride. In the *ordered* form
//!    (the one used for packing, iov lists and hashing) that transformation is never applied,
//!    because it is never both non-trivial and order-preserving: swapping two adjacent
//!    streams `Stream{a, S, Stream{b, s, x}}` (`a, b >= 2`) keeps the packed byte order only
//!    if copy 1 lands at the same place in both orders (`s == S`) and the index sums
//!    `i + j` come out in the same order (`a == b`) — and then the swapped tree is the same
//!    tree. So in the ordered form, sorting is the identity. [`Canon::unordered`] gives a
//!    separate *unordered* form that does sort (largest stride outermost, negative strides
//!    flipped, `Blocks` entries by offset): it describes the same bytes as a multiset, not
//!    in order, and is only for questions where order does not matter (the footprint of a
//!    buffer, e.g. what to register); it is flagged in its encoding and hashes differently.
//!
//! **What "canonical" guarantees.** The canonical form is a function of the *merged* byte
//! sequence (the type map with touching pieces merged, in order) whenever it is a *clean
//! chain* (a nest of streams over one dense block whose pieces never touch across levels —
//! every contiguous/vector/hvector/subarray nest) or has at most [`COMPRESS_LIMIT`] pieces:
//! small or irregular layouts are rebuilt from their merged segment list by a deterministic
//! compressor (chain recognition, then greedy runs, then repeated groups), and for clean
//! chains the structural result provably equals what that compressor would give (a chain
//! level's leading run of equal steps is exactly its count, since flattening has removed
//! every level whose stride continues the run). So two layouts that describe the same bytes in
//! the same order canonicalize identically unless one of them is a large (> `COMPRESS_LIMIT`
//! pieces), irregular, non-chain layout; there the form is still exact but equivalent
//! descriptions may differ — a memoization miss, never wrong data.
//!
//! The hash ([`Canon::hash128`]) is XXH3-128 over the compact encoding
//! ([`Canon::encode`]); the decoder ([`Canon::decode`]) bounds every length and depth and
//! validates the structure, so peer-supplied descriptors never panic. A receiver keeps the
//! layouts each peer sent under keys it recomputes from their encodings
//! (`Core::learn_layout`), one memo per peer: a peer can name only layouts it sent, and two
//! of them colliding by accident is a 2^-128 event, not FNV's structured risk.
//!
//! # Wire format ([`Canon::encode`], [`Canon::decode`])
//!
//! ```text
//! canon  := version:u8 (= 1)  flags:u8 (bit 0: unordered)  offset:svarint  node
//! node   := 0x00 len:uvarint                          Dense   (len >= 1)
//!         | 0x01 count:uvarint stride:svarint node     Stream  (count >= 2)
//!         | 0x02 n:uvarint (offset:svarint node){n}    Blocks  (n >= 2, first offset 0)
//! empty  := 0x01 0x00 0x00 0x00 0x00                   (offset 0, Dense len 0)
//! ```
//!
//! `uvarint` is LEB128 in its shortest form (at most 10 bytes), `svarint` a zigzagged
//! `uvarint`. Trees deeper than [`MAX_WIRE_DEPTH`] are neither encoded nor decoded.
//!
//! # Segments ([`Cursor`]) and packing ([`pack`], [`unpack`])
//!
//! A [`Cursor`] walks the canonical form lazily with one frame per tree level, starting at
//! any byte offset of the packed data, and fills a caller's `Vec<Segment>` with at most `N`
//! merged `(offset, len)` segments and at most `B` packed bytes per call — a 100-million
//! segment layout is never materialized. [`pack`]/[`unpack`] (and the `_range` variants for
//! a window of the packed stream) copy between a buffer holding the layout and contiguous
//! bytes with strided loops generated from the canonical form, after one bounds check.

pub mod apps;
mod canon;
mod compiled;
mod error;
pub mod gpu;
mod iter;
mod layout;
mod pack;
mod segment;
mod unordered;
mod wire;

#[cfg(test)]
mod testgen;

pub use canon::{Blocks, Canon, Node, COMPRESS_LIMIT};
pub use compiled::DtLayout;
pub use error::DtError;
pub use iter::Cursor;
pub use layout::{Layout, Order};
pub use pack::{pack, pack_range, unpack, unpack_range};
pub use segment::{merge_segments, Segment, MAX_ABS_OFFSET, MAX_SIZE};
pub use wire::{MAX_WIRE_DEPTH, WIRE_VERSION};
