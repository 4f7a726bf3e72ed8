//! Measuring what UMR transfers and their packed alternative cost on a provider
//! (`Iface::umr_cost`), between two QPs of the provider's own.

use crate::iface::UmrCost;
use crate::tl::verbs::{
    Opcode, Provider, QpAddr, QpState, RecvWr, SendWr, Sge, WcStatus, ACCESS_ALL,
};

/// Measures the costs of [`UmrCost`] on provider `p`, between two QPs of its own (on a CQ
/// of their own): RDMA WRITEs through indirect keys of `n = min(max_klm, 63)` 8-byte
/// entries a page apart, of one `8n`-byte entry and of one `n` pages, and SENDs of `seg`
/// bytes (the transport's bounce segment). A few milliseconds on the model; the two CQs
/// stay allocated (the provider has no verb to destroy one).
pub(super) fn calibrate(
    p: &mut dyn Provider,
    max_klm: usize,
    seg: usize,
) -> crate::tl::verbs::VResult<UmrCost> {
    use crate::tl::verbs::{Klm, VerbsError};
    const REPS: usize = 64;
    const STRIDE: u64 = 4160;
    let n = max_klm.clamp(2, 63);
    let len = STRIDE as usize * n + seg;
    let (mut src, mut dst) = (vec![1u8; len], vec![0u8; len]);
    let (sa, da) = (src.as_mut_ptr() as u64, dst.as_mut_ptr() as u64);
    let sk = p.reg_mr(sa, len as u64, ACCESS_ALL)?;
    let dk = p.reg_mr(da, len as u64, ACCESS_ALL)?;
    // The requester's completions, and the responder's (its receives) apart.
    let (cq, cq_b) = (p.create_cq()?, p.create_cq()?);
    let (qa, qb) = (p.create_qp(cq, cq)?, p.create_qp(cq_b, cq_b)?);
    let mut keys = Vec::new();
    let r = (|| -> crate::tl::verbs::VResult<UmrCost> {
        let dev = p.device_address();
        for (q, other) in [(qa, qb), (qb, qa)] {
            p.modify_qp(q, QpState::Init, None)?;
            let to = QpAddr {
                device: dev.clone(),
                qpn: other,
            };
            p.modify_qp(q, QpState::Rtr, Some(&to))?;
            p.modify_qp(q, QpState::Rts, None)?;
        }
        let mut mk = |p: &mut dyn Provider, base: u64, key: u32, entries: &[(u64, u64)]| {
            let klms: Vec<Klm> = entries
                .iter()
                .map(|&(o, l)| Klm {
                    addr: base + o,
                    len: l,
                    key,
                })
                .collect();
            let k = p.create_mkey(&klms, ACCESS_ALL)?;
            keys.push(k);
            Ok::<u32, VerbsError>(k)
        };
        let scattered: Vec<(u64, u64)> = (0..n as u64).map(|i| (i * STRIDE, 8)).collect();
        let one = [(0u64, 8 * n as u64)];
        let pages = [(0u64, n as u64 * 4096)];
        let mut wcs = Vec::new();
        let mut time = |p: &mut dyn Provider, sge: Sge, rkey: u32, opcode: Opcode| {
            let t0 = ucs::time::now_ns();
            for i in 0..REPS {
                let wr = SendWr {
                    wr_id: i as u64,
                    opcode,
                    sges: smallvec::smallvec![sge],
                    remote_addr: 0,
                    rkey,
                    signaled: true,
                };
                p.post_send(qa, &wr)?;
                loop {
                    wcs.clear();
                    if p.poll_cq(cq, 4, &mut wcs) > 0 {
                        break;
                    }
                }
                if wcs.iter().any(|w| w.status != WcStatus::Success) {
                    return Err(VerbsError::Invalid);
                }
            }
            Ok::<f64, VerbsError>((ucs::time::now_ns() - t0) as f64 / REPS as f64)
        };
        let write = |l: u32, bytes: u64| Sge {
            addr: 0,
            len: bytes as u32,
            lkey: l,
        };
        let (ls, rs) = (mk(p, sa, sk, &scattered)?, mk(p, da, dk, &scattered)?);
        let t_scattered = time(p, write(ls, 8 * n as u64), rs, Opcode::RdmaWrite)?;
        let (lo, ro) = (mk(p, sa, sk, &one)?, mk(p, da, dk, &one)?);
        let t_one = time(p, write(lo, 8 * n as u64), ro, Opcode::RdmaWrite)?;
        let (lp, rp) = (mk(p, sa, sk, &pages)?, mk(p, da, dk, &pages)?);
        let t_pages = time(p, write(lp, n as u64 * 4096), rp, Opcode::RdmaWrite)?;
        // SENDs of one bounce segment into posted receives.
        for i in 0..REPS {
            let rwr = RecvWr {
                wr_id: i as u64,
                sges: smallvec::smallvec![Sge {
                    addr: da,
                    len: seg as u32,
                    lkey: dk,
                }],
            };
            p.post_recv(qb, &rwr)?;
        }
        let send = Sge {
            addr: sa,
            len: seg as u32,
            lkey: sk,
        };
        let t_send = time(p, send, 0, Opcode::Send)?;
        let extra = (2 * n - 2) as f64;
        let big = (n as u64 * 4096 - 8 * n as u64) as f64;
        Ok(UmrCost {
            wr_ns: t_one,
            entry_ns: ((t_scattered - t_one) / extra).max(0.0),
            byte_ns: ((t_pages - t_one) / big).max(0.0),
            send_ns: t_send,
            seg,
        })
    })();
    for k in keys {
        let _ = p.destroy_mkey(k);
    }
    let _ = p.destroy_qp(qa);
    let _ = p.destroy_qp(qb);
    let _ = p.dereg_mr(sk);
    let _ = p.dereg_mr(dk);
    drop((src, dst));
    r
}
