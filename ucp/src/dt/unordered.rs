//! The unordered form of a canonical layout: the same bytes as a multiset, for footprint
//! questions only (see the [module docs](super), rule 6). Its `Blocks` entries are sorted by
//! offset, then by their encoding (`wire.rs`), so the form is deterministic; it is flagged
//! in its encoding and hashes differently from the ordered form.

use super::canon::{finish, make_stream, push_entry, Canon, Node};
use super::wire::write_node;

impl Canon {
    /// The unordered ("sorted") form: the same bytes as a multiset, with every nest of
    /// streams sorted by stride (largest outermost, negative strides flipped) and `Blocks`
    /// entries sorted by offset. Not valid for packing; for footprint questions only.
    pub fn unordered(&self) -> Canon {
        if self.size == 0 || !self.ordered {
            return self.clone();
        }
        let (o, n) = unorder(&self.root);
        Canon::from_parts(self.offset + o, n, false).unwrap_or_else(|_| self.clone())
    }
}

/// Sorts every nest of streams by stride (flipping negative strides) and `Blocks` entries
/// by offset; the origin of each result node is the lowest data offset.
fn unorder(n: &Node) -> (i64, Node) {
    match n {
        Node::Dense { .. } => (0, n.clone()),
        Node::Stream { .. } => {
            let mut levels = Vec::new();
            let mut cur = n;
            while let Node::Stream {
                count,
                stride,
                child,
            } = cur
            {
                levels.push((*count, *stride));
                cur = child;
            }
            let (mut shift, inner) = unorder(cur);
            for l in levels.iter_mut() {
                if l.1 < 0 {
                    shift += (l.0 as i64 - 1) * l.1;
                    l.1 = -l.1;
                }
            }
            levels.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
            let mut node = inner;
            for &(c, s) in levels.iter().rev() {
                node = make_stream(c, s, node);
            }
            (shift, node)
        }
        Node::Blocks(b) => {
            let mut v: Vec<(i64, Node, Vec<u8>)> = b
                .entries
                .iter()
                .map(|(o, e)| {
                    let (s, m) = unorder(e);
                    let mut key = Vec::new();
                    write_node(&m, &mut key);
                    (o + s, m, key)
                })
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
            let mut out = Vec::with_capacity(v.len());
            for (o, m, _) in v {
                match m {
                    Node::Blocks(inner) => {
                        for (eo, en) in inner.entries {
                            push_entry(&mut out, o + eo, en);
                        }
                    }
                    m => push_entry(&mut out, o, m),
                }
            }
            let (o0, node) = finish(out).unwrap_or((0, Node::Dense { len: 0 }));
            (o0, node)
        }
    }
}
