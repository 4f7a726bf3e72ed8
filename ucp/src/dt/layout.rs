//! MPI-style layout constructors, sizes, extents and the naive type map (the test oracle).

use std::fmt;
use std::sync::{Arc, OnceLock};

use super::canon::{self, Blocks, Canon, Node};
use super::error::DtError;
use super::segment::{merge_segments, Segment, MAX_ABS_OFFSET, MAX_SIZE};

/// Array order of a [`Layout::subarray`]: C (last dimension fastest) or Fortran (first
/// dimension fastest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    C,
    Fortran,
}

/// How a layout was built (MPI's "envelope"). Strides and displacements are in bytes for
/// the `H*` constructors and `Struct`, in extents of the child otherwise.
#[derive(Debug)]
pub(crate) enum Kind {
    Bytes(u64),
    Contiguous {
        count: u64,
        child: Layout,
    },
    Vector {
        count: u64,
        blocklen: u64,
        stride: i64,
        child: Layout,
    },
    Hvector {
        count: u64,
        blocklen: u64,
        stride: i64,
        child: Layout,
    },
    Indexed {
        blocklens: Vec<u64>,
        displs: Vec<i64>,
        child: Layout,
    },
    Hindexed {
        blocklens: Vec<u64>,
        displs: Vec<i64>,
        child: Layout,
    },
    IndexedBlock {
        blocklen: u64,
        displs: Vec<i64>,
        child: Layout,
    },
    HindexedBlock {
        blocklen: u64,
        displs: Vec<i64>,
        child: Layout,
    },
    Subarray {
        sizes: Vec<u64>,
        subsizes: Vec<u64>,
        starts: Vec<u64>,
        order: Order,
        child: Layout,
    },
    Struct {
        blocklens: Vec<u64>,
        displs: Vec<i64>,
        children: Vec<Layout>,
    },
    Resized {
        lb: i64,
        extent: i64,
        child: Layout,
    },
}

/// A group of copies of one child: copy `(i_1, .., i_k)` at `disp + sum(i_j * stride_j)`,
/// progressions listed outermost first (packing order).
pub(crate) struct Group<'a> {
    pub child: &'a Layout,
    pub disp: i128,
    pub prog: Vec<(u64, i128)>,
}

struct Inner {
    kind: Kind,
    size: u64,
    /// `[true_lb, true_ub)` of the data; `None` when the layout has no data.
    data: Option<(i64, i64)>,
    /// Sticky lb/ub markers (from `resized`/`subarray`), as MPI propagates them.
    mlb: Option<i64>,
    mub: Option<i64>,
    canon: OnceLock<Result<Canon, DtError>>,
}

/// An MPI-style derived datatype over bytes. Cheap to clone (shared, immutable). See the
/// [module docs](super) for the rules.
#[derive(Clone)]
pub struct Layout(Arc<Inner>);

impl fmt::Debug for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Layout")
            .field("kind", &self.0.kind)
            .field("size", &self.0.size)
            .field("lb", &self.lb())
            .field("extent", &self.extent())
            .finish()
    }
}

fn span(count: u64, stride: i128) -> Result<(i128, i128), DtError> {
    if count <= 1 {
        return Ok((0, 0));
    }
    let t = (count as i128 - 1)
        .checked_mul(stride)
        .ok_or(DtError::Overflow)?;
    Ok((t.min(0), t.max(0)))
}

fn add(a: i128, b: i128) -> Result<i128, DtError> {
    a.checked_add(b).ok_or(DtError::Overflow)
}

fn mul(a: i128, b: i128) -> Result<i128, DtError> {
    a.checked_mul(b).ok_or(DtError::Overflow)
}

fn to_offset(v: i128) -> Result<i64, DtError> {
    if v.abs() > MAX_ABS_OFFSET as i128 {
        Err(DtError::Overflow)
    } else {
        Ok(v as i64)
    }
}

fn same_len(a: usize, b: usize) -> Result<(), DtError> {
    if a == b {
        Ok(())
    } else {
        Err(DtError::InvalidArgument(
            "blocklength and displacement arrays differ in length",
        ))
    }
}

impl Layout {
    fn build(kind: Kind) -> Result<Layout, DtError> {
        let mut size: u128 = 0;
        let mut data: Option<(i128, i128)> = None;
        let mut mlb: Option<i128> = None;
        let mut mub: Option<i128> = None;
        if let Kind::Bytes(n) = kind {
            size = n as u128;
            if n > 0 {
                data = Some((0, n as i128));
            }
        }
        for g in groups(&kind)? {
            let mut n: u128 = 1;
            let (mut mn, mut mx) = (g.disp, g.disp);
            for &(c, s) in &g.prog {
                n = n.checked_mul(c as u128).ok_or(DtError::Overflow)?;
                let (a, b) = span(c, s)?;
                mn = add(mn, a)?;
                mx = add(mx, b)?;
            }
            if n == 0 {
                continue;
            }
            let c = &g.child.0;
            size = size
                .checked_add(n.checked_mul(c.size as u128).ok_or(DtError::Overflow)?)
                .ok_or(DtError::Overflow)?;
            if size > MAX_SIZE as u128 {
                return Err(DtError::Overflow);
            }
            if let Some((lo, hi)) = c.data {
                let (lo, hi) = (add(lo as i128, mn)?, add(hi as i128, mx)?);
                data = Some(match data {
                    None => (lo, hi),
                    Some((a, b)) => (a.min(lo), b.max(hi)),
                });
            }
            if let Some(m) = c.mlb {
                let m = add(m as i128, mn)?;
                mlb = Some(mlb.map_or(m, |x| x.min(m)));
            }
            if let Some(m) = c.mub {
                let m = add(m as i128, mx)?;
                mub = Some(mub.map_or(m, |x| x.max(m)));
            }
        }
        match &kind {
            Kind::Resized { lb, extent, .. } => {
                mlb = Some(*lb as i128);
                mub = Some(add(*lb as i128, *extent as i128)?);
            }
            Kind::Subarray { sizes, child, .. } => {
                let mut total: i128 = child.extent() as i128;
                for &s in sizes {
                    total = mul(total, s as i128)?;
                }
                mlb = Some(0);
                mub = Some(total);
            }
            _ => {}
        }
        if size > MAX_SIZE as u128 {
            return Err(DtError::Overflow);
        }
        let data = match data {
            Some((a, b)) => Some((to_offset(a)?, to_offset(b)?)),
            None => None,
        };
        let inner = Inner {
            kind,
            size: size as u64,
            data,
            mlb: mlb.map(to_offset).transpose()?,
            mub: mub.map(to_offset).transpose()?,
            canon: OnceLock::new(),
        };
        let l = Layout(Arc::new(inner));
        // The extent must be representable too (it multiplies strides of parents).
        to_offset(l.ub() as i128 - l.lb() as i128)?;
        Ok(l)
    }

    /// A base element: `n` contiguous bytes, lb 0, extent `n`.
    ///
    /// # Panics
    ///
    /// If `n > MAX_SIZE` (2^61); [`try_bytes`](Self::try_bytes) returns an error instead.
    pub fn bytes(n: u64) -> Layout {
        match Self::try_bytes(n) {
            Ok(l) => l,
            Err(_) => panic!("base element of {n} bytes exceeds MAX_SIZE"),
        }
    }

    /// A base element of `n` bytes; [`DtError::Overflow`] if `n > MAX_SIZE`.
    pub fn try_bytes(n: u64) -> Result<Layout, DtError> {
        if n > MAX_SIZE {
            return Err(DtError::Overflow);
        }
        Ok(Layout(Arc::new(Inner {
            kind: Kind::Bytes(n),
            size: n,
            data: (n > 0).then_some((0, n as i64)),
            mlb: None,
            mub: None,
            canon: OnceLock::new(),
        })))
    }

    /// `MPI_Type_contiguous`: `count` copies of `old`, one extent apart.
    pub fn contiguous(count: u64, old: &Layout) -> Result<Layout, DtError> {
        Self::build(Kind::Contiguous {
            count,
            child: old.clone(),
        })
    }

    /// `MPI_Type_vector`: `count` blocks of `blocklen` copies of `old`, block starts `stride`
    /// extents of `old` apart.
    pub fn vector(count: u64, blocklen: u64, stride: i64, old: &Layout) -> Result<Layout, DtError> {
        Self::build(Kind::Vector {
            count,
            blocklen,
            stride,
            child: old.clone(),
        })
    }

    /// `MPI_Type_create_hvector`: as [`vector`](Self::vector) with the stride in bytes.
    pub fn hvector(
        count: u64,
        blocklen: u64,
        stride: i64,
        old: &Layout,
    ) -> Result<Layout, DtError> {
        Self::build(Kind::Hvector {
            count,
            blocklen,
            stride,
            child: old.clone(),
        })
    }

    /// `MPI_Type_indexed`: block `k` is `blocklens[k]` copies of `old` at `displs[k]` extents.
    pub fn indexed(blocklens: &[u64], displs: &[i64], old: &Layout) -> Result<Layout, DtError> {
        same_len(blocklens.len(), displs.len())?;
        Self::build(Kind::Indexed {
            blocklens: blocklens.to_vec(),
            displs: displs.to_vec(),
            child: old.clone(),
        })
    }

    /// `MPI_Type_create_hindexed`: as [`indexed`](Self::indexed) with displacements in bytes.
    pub fn hindexed(blocklens: &[u64], displs: &[i64], old: &Layout) -> Result<Layout, DtError> {
        same_len(blocklens.len(), displs.len())?;
        Self::build(Kind::Hindexed {
            blocklens: blocklens.to_vec(),
            displs: displs.to_vec(),
            child: old.clone(),
        })
    }

    /// `MPI_Type_create_indexed_block`: every block `blocklen` copies, displacements in extents.
    pub fn indexed_block(blocklen: u64, displs: &[i64], old: &Layout) -> Result<Layout, DtError> {
        Self::build(Kind::IndexedBlock {
            blocklen,
            displs: displs.to_vec(),
            child: old.clone(),
        })
    }

    /// `MPI_Type_create_hindexed_block`: every block `blocklen` copies, displacements in bytes.
    pub fn hindexed_block(blocklen: u64, displs: &[i64], old: &Layout) -> Result<Layout, DtError> {
        Self::build(Kind::HindexedBlock {
            blocklen,
            displs: displs.to_vec(),
            child: old.clone(),
        })
    }

    /// `MPI_Type_create_subarray`: the `subsizes` box at `starts` of an array of `sizes`
    /// elements of `old`. As in MPI, the result has lb 0 and extent `prod(sizes) * extent(old)`.
    pub fn subarray(
        sizes: &[u64],
        subsizes: &[u64],
        starts: &[u64],
        order: Order,
        old: &Layout,
    ) -> Result<Layout, DtError> {
        if sizes.is_empty() || sizes.len() != subsizes.len() || sizes.len() != starts.len() {
            return Err(DtError::InvalidArgument(
                "subarray arrays must be non-empty and equal in length",
            ));
        }
        for i in 0..sizes.len() {
            let end = starts[i]
                .checked_add(subsizes[i])
                .ok_or(DtError::Overflow)?;
            if sizes[i] == 0 || end > sizes[i] {
                return Err(DtError::InvalidArgument("subarray box outside the array"));
            }
        }
        Self::build(Kind::Subarray {
            sizes: sizes.to_vec(),
            subsizes: subsizes.to_vec(),
            starts: starts.to_vec(),
            order,
            child: old.clone(),
        })
    }

    /// `MPI_Type_create_struct`: block `k` is `blocklens[k]` copies of `types[k]` at byte
    /// displacement `displs[k]`.
    pub fn structure(
        blocklens: &[u64],
        displs: &[i64],
        types: &[Layout],
    ) -> Result<Layout, DtError> {
        same_len(blocklens.len(), displs.len())?;
        same_len(blocklens.len(), types.len())?;
        Self::build(Kind::Struct {
            blocklens: blocklens.to_vec(),
            displs: displs.to_vec(),
            children: types.to_vec(),
        })
    }

    /// `MPI_Type_create_resized`: the same bytes with lb `lb` and extent `extent`.
    pub fn resized(old: &Layout, lb: i64, extent: i64) -> Result<Layout, DtError> {
        Self::build(Kind::Resized {
            lb,
            extent,
            child: old.clone(),
        })
    }

    /// Bytes of data (`MPI_Type_size`).
    pub fn size(&self) -> u64 {
        self.0.size
    }

    /// Lower bound (`MPI_Type_get_extent`): the least lb marker if any, else the least data offset.
    pub fn lb(&self) -> i64 {
        let i = &self.0;
        i.mlb.or(i.data.map(|d| d.0)).or(i.mub).unwrap_or(0)
    }

    /// Upper bound: the greatest ub marker if any, else the end of the data.
    pub fn ub(&self) -> i64 {
        let i = &self.0;
        i.mub.or(i.data.map(|d| d.1)).unwrap_or_else(|| self.lb())
    }

    /// `ub - lb`: the stride at which copies of this layout are replicated.
    pub fn extent(&self) -> i64 {
        self.ub() - self.lb()
    }

    /// `[true_lb, true_ub)` of the data (`MPI_Type_get_true_extent`); `None` if empty.
    pub fn true_bounds(&self) -> Option<(i64, i64)> {
        self.0.data
    }

    /// Whether both handles share one layout object.
    pub(crate) fn same(&self, other: &Layout) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    pub(crate) fn kind(&self) -> &Kind {
        &self.0.kind
    }

    /// The canonical form, computed once per layout and cached.
    pub fn canonical(&self) -> Result<&Canon, DtError> {
        self.0
            .canon
            .get_or_init(|| lower(self).and_then(canon::canonicalize))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The MPI type map as byte pieces in order, one per base element, adjacent pieces NOT
    /// merged. Fails with [`DtError::TooManyPieces`] beyond `limit` pieces. For tests and
    /// debugging; data paths use [`Canon`] and [`super::Cursor`].
    pub fn type_map(&self, limit: usize) -> Result<Vec<Segment>, DtError> {
        let mut out = Vec::new();
        walk(self, 0, &mut out, limit)?;
        Ok(out)
    }

    /// [`type_map`](Self::type_map) with adjacent pieces merged.
    pub fn type_map_merged(&self, limit: usize) -> Result<Vec<Segment>, DtError> {
        Ok(merge_segments(&self.type_map(limit)?))
    }
}

/// The copies a layout is made of, as groups of arithmetic progressions (shared by the
/// bounds computation and the lowering to the canonical IR).
pub(crate) fn groups(kind: &Kind) -> Result<Vec<Group<'_>>, DtError> {
    let g = |child, disp, prog| Group { child, disp, prog };
    Ok(match kind {
        Kind::Bytes(_) => Vec::new(),
        Kind::Contiguous { count, child } => {
            vec![g(child, 0, vec![(*count, child.extent() as i128)])]
        }
        Kind::Vector {
            count,
            blocklen,
            stride,
            child,
        } => {
            let e = child.extent() as i128;
            vec![g(
                child,
                0,
                vec![(*count, mul(*stride as i128, e)?), (*blocklen, e)],
            )]
        }
        Kind::Hvector {
            count,
            blocklen,
            stride,
            child,
        } => {
            let e = child.extent() as i128;
            vec![g(child, 0, vec![(*count, *stride as i128), (*blocklen, e)])]
        }
        Kind::Indexed {
            blocklens,
            displs,
            child,
        } => {
            let e = child.extent() as i128;
            let mut v = Vec::with_capacity(displs.len());
            for (&b, &d) in blocklens.iter().zip(displs) {
                v.push(g(child, mul(d as i128, e)?, vec![(b, e)]));
            }
            v
        }
        Kind::Hindexed {
            blocklens,
            displs,
            child,
        } => {
            let e = child.extent() as i128;
            blocklens
                .iter()
                .zip(displs)
                .map(|(&b, &d)| g(child, d as i128, vec![(b, e)]))
                .collect()
        }
        Kind::IndexedBlock {
            blocklen,
            displs,
            child,
        } => {
            let e = child.extent() as i128;
            let mut v = Vec::with_capacity(displs.len());
            for &d in displs {
                v.push(g(child, mul(d as i128, e)?, vec![(*blocklen, e)]));
            }
            v
        }
        Kind::HindexedBlock {
            blocklen,
            displs,
            child,
        } => {
            let e = child.extent() as i128;
            displs
                .iter()
                .map(|&d| g(child, d as i128, vec![(*blocklen, e)]))
                .collect()
        }
        Kind::Subarray {
            sizes,
            subsizes,
            starts,
            order,
            child,
        } => {
            let strides = subarray_strides(sizes, *order, child.extent() as i128)?;
            let mut disp = 0i128;
            for (s, st) in starts.iter().zip(&strides) {
                disp = add(disp, mul(*s as i128, *st)?)?;
            }
            let dims: Vec<usize> = match order {
                Order::C => (0..sizes.len()).collect(),
                Order::Fortran => (0..sizes.len()).rev().collect(),
            };
            vec![g(
                child,
                disp,
                dims.into_iter()
                    .map(|k| (subsizes[k], strides[k]))
                    .collect(),
            )]
        }
        Kind::Struct {
            blocklens,
            displs,
            children,
        } => blocklens
            .iter()
            .zip(displs)
            .zip(children)
            .map(|((&b, &d), c)| g(c, d as i128, vec![(b, c.extent() as i128)]))
            .collect(),
        Kind::Resized { child, .. } => vec![g(child, 0, vec![(1, 0)])],
    })
}

/// Byte stride of each subarray dimension.
fn subarray_strides(sizes: &[u64], order: Order, ext: i128) -> Result<Vec<i128>, DtError> {
    let n = sizes.len();
    let mut strides = vec![0i128; n];
    let mut acc = ext;
    let dims: Vec<usize> = match order {
        Order::C => (0..n).rev().collect(),
        Order::Fortran => (0..n).collect(),
    };
    for k in dims {
        strides[k] = acc;
        acc = mul(acc, sizes[k] as i128)?;
    }
    Ok(strides)
}

fn push(out: &mut Vec<Segment>, off: i128, len: u64, limit: usize) -> Result<(), DtError> {
    if out.len() >= limit {
        return Err(DtError::TooManyPieces { limit });
    }
    out.push(Segment::new(off as i64, len));
    Ok(())
}

/// The naive type map, straight from MPI's definitions (independent of [`groups`] and of
/// the canonical form, so that tests compare two implementations).
fn walk(l: &Layout, base: i128, out: &mut Vec<Segment>, limit: usize) -> Result<(), DtError> {
    if l.size() == 0 {
        return Ok(());
    }
    match l.kind() {
        Kind::Bytes(n) => push(out, base, *n, limit)?,
        Kind::Contiguous { count, child } => {
            let e = child.extent() as i128;
            for i in 0..*count as i128 {
                walk(child, base + i * e, out, limit)?;
            }
        }
        Kind::Vector {
            count,
            blocklen,
            stride,
            child,
        } => {
            let e = child.extent() as i128;
            for i in 0..*count as i128 {
                for j in 0..*blocklen as i128 {
                    walk(child, base + i * *stride as i128 * e + j * e, out, limit)?;
                }
            }
        }
        Kind::Hvector {
            count,
            blocklen,
            stride,
            child,
        } => {
            let e = child.extent() as i128;
            for i in 0..*count as i128 {
                for j in 0..*blocklen as i128 {
                    walk(child, base + i * *stride as i128 + j * e, out, limit)?;
                }
            }
        }
        Kind::Indexed {
            blocklens,
            displs,
            child,
        } => {
            let e = child.extent() as i128;
            for (&b, &d) in blocklens.iter().zip(displs) {
                for j in 0..b as i128 {
                    walk(child, base + d as i128 * e + j * e, out, limit)?;
                }
            }
        }
        Kind::Hindexed {
            blocklens,
            displs,
            child,
        } => {
            let e = child.extent() as i128;
            for (&b, &d) in blocklens.iter().zip(displs) {
                for j in 0..b as i128 {
                    walk(child, base + d as i128 + j * e, out, limit)?;
                }
            }
        }
        Kind::IndexedBlock {
            blocklen,
            displs,
            child,
        } => {
            let e = child.extent() as i128;
            for &d in displs {
                for j in 0..*blocklen as i128 {
                    walk(child, base + d as i128 * e + j * e, out, limit)?;
                }
            }
        }
        Kind::HindexedBlock {
            blocklen,
            displs,
            child,
        } => {
            let e = child.extent() as i128;
            for &d in displs {
                for j in 0..*blocklen as i128 {
                    walk(child, base + d as i128 + j * e, out, limit)?;
                }
            }
        }
        Kind::Subarray {
            sizes,
            subsizes,
            starts,
            order,
            child,
        } => {
            // Enumerate the index tuples in array order, the fastest dimension last.
            let e = child.extent() as i128;
            let n = sizes.len();
            let fast_to_slow: Vec<usize> = match order {
                Order::C => (0..n).rev().collect(),
                Order::Fortran => (0..n).collect(),
            };
            let mut idx = vec![0u64; n];
            loop {
                // Linear element index in the full array, then bytes.
                let mut lin: i128 = 0;
                let mut mult: i128 = 1;
                for &k in &fast_to_slow {
                    lin += (starts[k] + idx[k]) as i128 * mult;
                    mult *= sizes[k] as i128;
                }
                walk(child, base + lin * e, out, limit)?;
                // Odometer increment, fastest dimension first.
                let mut carry = true;
                for &k in &fast_to_slow {
                    idx[k] += 1;
                    if idx[k] < subsizes[k] {
                        carry = false;
                        break;
                    }
                    idx[k] = 0;
                }
                if carry {
                    break;
                }
            }
        }
        Kind::Struct {
            blocklens,
            displs,
            children,
        } => {
            for ((&b, &d), c) in blocklens.iter().zip(displs).zip(children) {
                let e = c.extent() as i128;
                for j in 0..b as i128 {
                    walk(c, base + d as i128 + j * e, out, limit)?;
                }
            }
        }
        Kind::Resized { child, .. } => walk(child, base, out, limit)?,
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Lowering to the canonical IR

fn off64(v: i128) -> Result<i64, DtError> {
    i64::try_from(v).map_err(|_| DtError::Overflow)
}

/// Structural lowering: streams for progressions, a `Blocks` for several groups. Offsets
/// are not normalized yet (that is `canon::canonicalize`'s job).
fn lower(l: &Layout) -> Result<Option<(i64, Node)>, DtError> {
    if l.size() == 0 {
        return Ok(None);
    }
    match l.kind() {
        Kind::Bytes(n) => return Ok(Some((0, Node::Dense { len: *n }))),
        Kind::Resized { child, .. } => return lower(child),
        _ => {}
    }
    let gs = groups(l.kind())?;
    // Lower each distinct child once (all groups share one child except in a struct).
    let mut cache: Option<(&Layout, Option<(i64, Node)>)> = None;
    let mut entries = Vec::new();
    for g in gs {
        if g.child.size() == 0 || g.prog.iter().any(|&(c, _)| c == 0) {
            continue;
        }
        let lowered = match &cache {
            Some((k, v)) if k.same(g.child) => v.clone(),
            _ => {
                let v = lower(g.child)?;
                cache = Some((g.child, v.clone()));
                v
            }
        };
        let Some((co, mut node)) = lowered else {
            continue;
        };
        for &(c, s) in g.prog.iter().rev() {
            node = Node::Stream {
                count: c,
                stride: off64(s)?,
                child: Box::new(node),
            };
        }
        entries.push((off64(g.disp + co as i128)?, node));
    }
    Ok(match entries.len() {
        0 => None,
        1 => entries.pop(),
        _ => Some((0, Node::Blocks(Blocks::new(entries)))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_follow_mpi() {
        let d = Layout::bytes(8);
        assert_eq!((d.size(), d.lb(), d.extent()), (8, 0, 8));
        // vector(3, 2, 4) of doubles: data at blocks 0, 4, 8 (elements), 2 elements each.
        let v = Layout::vector(3, 2, 4, &d).unwrap();
        assert_eq!(v.size(), 48);
        assert_eq!((v.lb(), v.ub()), (0, 80));
        // Negative stride: lb below zero.
        let n = Layout::hvector(3, 1, -16, &d).unwrap();
        assert_eq!((n.lb(), n.ub()), (-32, 8));
        // Resized markers are sticky through a contiguous.
        let r = Layout::resized(&d, -4, 24).unwrap();
        assert_eq!(
            (r.lb(), r.extent(), r.true_bounds()),
            (-4, 24, Some((0, 8)))
        );
        let c = Layout::contiguous(3, &r).unwrap();
        assert_eq!((c.lb(), c.ub()), (-4, 68));
        assert_eq!(
            c.type_map(100).unwrap(),
            vec![Segment::new(0, 8), Segment::new(24, 8), Segment::new(48, 8)]
        );
        // Subarray: lb 0, extent of the whole array.
        let s = Layout::subarray(&[4, 5], &[2, 3], &[1, 1], Order::C, &d).unwrap();
        assert_eq!((s.size(), s.lb(), s.extent()), (48, 0, 160));
        assert_eq!(
            s.type_map_merged(100).unwrap(),
            vec![Segment::new(48, 24), Segment::new(88, 24)]
        );
        let f = Layout::subarray(&[4, 5], &[2, 3], &[1, 1], Order::Fortran, &d).unwrap();
        assert_eq!(
            f.type_map_merged(100).unwrap(),
            vec![
                Segment::new(40, 16),
                Segment::new(72, 16),
                Segment::new(104, 16)
            ]
        );
        // Struct of a resized and a plain type: the markers decide lb/ub.
        let st = Layout::structure(&[1, 2], &[100, 0], &[r.clone(), d.clone()]).unwrap();
        assert_eq!((st.lb(), st.ub()), (96, 120));
        assert_eq!(st.true_bounds(), Some((0, 108)));
        // Empty layouts.
        let e = Layout::contiguous(0, &d).unwrap();
        assert_eq!((e.size(), e.extent(), e.true_bounds()), (0, 0, None));
    }

    #[test]
    fn constructor_errors() {
        let d = Layout::bytes(8);
        assert!(matches!(
            Layout::indexed(&[1, 2], &[0], &d),
            Err(DtError::InvalidArgument(_))
        ));
        assert!(matches!(
            Layout::subarray(&[4], &[3], &[2], Order::C, &d),
            Err(DtError::InvalidArgument(_))
        ));
        assert!(matches!(
            Layout::subarray(&[], &[], &[], Order::C, &d),
            Err(DtError::InvalidArgument(_))
        ));
        assert_eq!(
            Layout::contiguous(u64::MAX, &d).unwrap_err(),
            DtError::Overflow
        );
        assert_eq!(
            Layout::hvector(2, 1, i64::MAX, &d).unwrap_err(),
            DtError::Overflow
        );
        assert_eq!(
            Layout::resized(&d, i64::MAX, i64::MAX).unwrap_err(),
            DtError::Overflow
        );
        let big = Layout::contiguous(1 << 40, &d).unwrap();
        assert_eq!(
            big.type_map(10).unwrap_err(),
            DtError::TooManyPieces { limit: 10 }
        );
        assert_eq!(
            Layout::try_bytes(MAX_SIZE + 1).unwrap_err(),
            DtError::Overflow
        );
        assert_eq!(
            Layout::contiguous(4, &Layout::bytes(MAX_SIZE / 2)).unwrap_err(),
            DtError::Overflow
        );
    }
}
