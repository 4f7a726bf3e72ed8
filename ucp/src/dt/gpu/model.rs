//! The measured model that picks how a layout on the GPU moves (after TEMPI's: measure
//! each method's cost terms once per GPU and peer relation, then predict per transfer).
//!
//! The methods, and their costs (µs) as this model writes them:
//!
//! | method | when | cost |
//! |---|---|---|
//! | [`Method::Direct`] | both buffers on GPUs that map each other (one process maps the other's buffer through `cuda_ipc`) | `launch + bytes / kernel_bw(word)` |
//! | [`Method::PackUnpack`] | any pair: pack kernel, contiguous transfer, unpack kernel | `2 launch + 2 bytes / local_bw(word) + copy + bytes / copy_bw` |
//! | [`Method::CopyEngine`] | one side's layout is one 2D box and the other's is dense or the same box | `copy + rows * row + bytes / copy_bw` |
//! | [`Method::PerBlock`] | any pair: one copy per piece (what UCX does with an iov list) | `pieces * copy + bytes / copy_bw` |
//!
//! `kernel_bw(word)` scales the kernel's measured bandwidth (16-byte words) by the word:
//! threads moving narrower words issue more instructions per byte (`bw * min(1, word/4)`
//! below 4 bytes). The terms are [`Costs`], calibrated by
//! `launch::calibrate` (run by `rucx-info --calibrate`, cached per GPU in a file) or
//! taken from [`Costs::default_for`] (measured on an H200). [`pick`] is a pure function.

use std::fmt;

/// How the two buffers relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Relation {
    /// Both on one GPU (a kernel of that GPU reads and writes both).
    SameGpu,
    /// Two GPUs with peer access (NVLink or PCIe): a kernel reads or writes the peer.
    PeerGpu,
    /// No mapping between them (another host, or no peer access): only packed bytes
    /// travel, by a contiguous protocol.
    Staged,
}

/// A method of moving a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    Direct,
    PackUnpack,
    CopyEngine,
    PerBlock,
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::Direct => "direct",
            Method::PackUnpack => "pack-unpack",
            Method::CopyEngine => "copy-engine",
            Method::PerBlock => "per-block",
        })
    }
}

/// The measured cost terms of one GPU and relation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Costs {
    /// A kernel launch and its completion seen by the host, µs.
    pub launch_us: f64,
    /// A driver copy's fixed cost, µs.
    pub copy_us: f64,
    /// Per row of a 2D copy, µs.
    pub row_us: f64,
    /// A layout kernel's bandwidth with 16-byte words across the relation, GB/s.
    pub kernel_gbps: f64,
    /// The same within one GPU (what pack and unpack kernels get), GB/s.
    pub local_gbps: f64,
    /// The copy engine's bandwidth across the relation, GB/s.
    pub copy_gbps: f64,
}

impl Costs {
    /// Terms measured on an H200 (2026-11-26, `rucx-info --calibrate`: launch and copy
    /// include the host waiting for the stream), used until a GPU is calibrated.
    pub fn default_for(r: Relation) -> Costs {
        match r {
            Relation::SameGpu => Costs {
                launch_us: 10.0,
                copy_us: 10.5,
                row_us: 0.0007,
                kernel_gbps: 1990.0,
                local_gbps: 1990.0,
                copy_gbps: 2150.0,
            },
            Relation::PeerGpu => Costs {
                launch_us: 10.1,
                copy_us: 7.8,
                row_us: 0.0003,
                kernel_gbps: 370.0,
                local_gbps: 1990.0,
                copy_gbps: 392.0,
            },
            // Packed bytes through host memory (tcp, or no peer mapping): pageable copies.
            Relation::Staged => Costs {
                launch_us: 10.0,
                copy_us: 10.5,
                row_us: 0.0007,
                kernel_gbps: 0.0,
                local_gbps: 1990.0,
                copy_gbps: 15.0,
            },
        }
    }
}

/// What the model needs to know about one transfer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Case {
    pub relation: Relation,
    pub bytes: u64,
    /// Pieces after cutting the two layouts against each other.
    pub pieces: u64,
    /// The word a kernel would move (1 to 16 bytes).
    pub word: u32,
    /// Rows of a 2D copy, when the pair is one ([`Method::CopyEngine`] applies).
    pub box_rows: Option<u64>,
}

/// The predicted time of `m` for `c`, µs; `None` when the method does not apply.
pub fn predict(k: &Costs, c: &Case, m: Method) -> Option<f64> {
    let b = c.bytes as f64 / 1e3; // bytes per µs at 1 GB/s
    let narrow = (c.word as f64 / 4.0).min(1.0);
    match m {
        Method::Direct => (c.relation != Relation::Staged && k.kernel_gbps > 0.0)
            .then(|| k.launch_us + b / (k.kernel_gbps * narrow)),
        Method::PackUnpack => Some(
            2.0 * k.launch_us + 2.0 * b / (k.local_gbps * narrow) + k.copy_us + b / k.copy_gbps,
        ),
        Method::CopyEngine => c
            .box_rows
            .filter(|_| c.relation != Relation::Staged)
            .map(|rows| k.copy_us + rows as f64 * k.row_us + b / k.copy_gbps),
        Method::PerBlock => Some(c.pieces as f64 * k.copy_us + b / k.copy_gbps),
    }
}

/// The model's choice with every prediction it weighed.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub method: Method,
    pub predicted: Vec<(Method, f64)>,
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.method)?;
        for (m, t) in &self.predicted {
            write!(f, " {m}={t:.1}us")?;
        }
        Ok(())
    }
}

/// The method predicted fastest among `allowed` (ties go to the earlier method).
pub fn pick(k: &Costs, c: &Case, allowed: &[Method]) -> Option<Choice> {
    let predicted: Vec<(Method, f64)> = allowed
        .iter()
        .filter_map(|&m| predict(k, c, m).map(|t| (m, t)))
        .collect();
    let method = predicted
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|&(m, _)| m)?;
    Some(Choice { method, predicted })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Method; 4] = [
        Method::Direct,
        Method::PackUnpack,
        Method::CopyEngine,
        Method::PerBlock,
    ];

    fn case(relation: Relation, bytes: u64, pieces: u64, word: u32, rows: Option<u64>) -> Case {
        Case {
            relation,
            bytes,
            pieces,
            word,
            box_rows: rows,
        }
    }

    #[test]
    fn picks_for_a_table_of_cases() {
        use Method::*;
        use Relation::*;
        let table = [
            // 128 × 1 KiB on one GPU, different layouts each side: one kernel, not 128
            // copies.
            (case(SameGpu, 128 << 10, 128, 16, None), Direct),
            // The same across two GPUs.
            (case(PeerGpu, 128 << 10, 128, 16, None), Direct),
            // 1024 × 128 B.
            (case(SameGpu, 128 << 10, 1024, 16, None), Direct),
            // Staged (no mapping): packing beats a copy per block.
            (case(Staged, 128 << 10, 128, 16, None), PackUnpack),
            // A single piece staged: a copy, nothing to pack.
            (case(Staged, 64 << 10, 1, 16, None), PerBlock),
            // One 2D box of 128 rows: a kernel launch and a 2D copy cost about the same;
            // the kernel by a little.
            (case(SameGpu, 128 << 10, 128, 16, Some(128)), Direct),
            // A large box of long rows: the copy engines stream faster than a kernel.
            (case(SameGpu, 256 << 20, 64, 16, Some(64)), CopyEngine),
            // Byte-wide words make kernels slower, but a per-byte copy is worse still.
            (case(SameGpu, 1 << 20, 1 << 18, 1, None), Direct),
        ];
        for (c, want) in table {
            let k = Costs::default_for(c.relation);
            let got = pick(&k, &c, &ALL).unwrap();
            assert_eq!(got.method, want, "{c:?}: {got}");
            // The pick is the minimum of its own predictions.
            let best = got.predicted.iter().map(|p| p.1).fold(f64::MAX, f64::min);
            assert_eq!(predict(&k, &c, got.method), Some(best));
        }
    }

    #[test]
    fn methods_that_do_not_apply_are_not_predicted() {
        let c = case(Relation::Staged, 4096, 4, 8, Some(4));
        let k = Costs::default_for(Relation::Staged);
        assert_eq!(predict(&k, &c, Method::Direct), None);
        assert_eq!(predict(&k, &c, Method::CopyEngine), None);
        let c = case(Relation::SameGpu, 4096, 4, 8, None);
        assert_eq!(predict(&k, &c, Method::CopyEngine), None);
        assert!(pick(&k, &c, &[]).is_none());
        let only = pick(&k, &c, &[Method::PerBlock]).unwrap();
        assert_eq!(only.method, Method::PerBlock);
        assert!(only.to_string().starts_with("per-block per-block="));
    }

    #[test]
    fn predictions_grow_with_bytes_and_pieces() {
        let k = Costs::default_for(Relation::PeerGpu);
        for m in ALL {
            let a = predict(&k, &case(Relation::PeerGpu, 1 << 16, 16, 16, Some(16)), m).unwrap();
            let b = predict(&k, &case(Relation::PeerGpu, 1 << 20, 16, 16, Some(16)), m).unwrap();
            let c = predict(&k, &case(Relation::PeerGpu, 1 << 20, 256, 16, Some(256)), m).unwrap();
            assert!(a < b && b <= c, "{m}: {a} {b} {c}");
        }
    }
}
