//! `layout_ops:<A-MEM>:<B-MEM>:<A-GPU>:<B-GPU>`: layouts through the operations other than
//! tag send/receive, every byte checked, for each layout of [`layouts`]:
//!
//! * RMA: `a` puts from its layout into `b`'s registered contiguous region, flushes, and
//!   `b` checks the region holds `a`'s bytes in packed order; `b` writes a new pattern
//!   there, and `a` gets it into its layout (filled with a sentinel first) and checks each
//!   packed byte and every byte around them.
//! * Active messages: `a` sends its layout with the default protocol and with rendezvous
//!   forced; `b`'s handler checks eager data as it arrives, and receives rendezvous data
//!   into a layout of its own (`am_recv_data`).
//! * Stream: `a` sends its layout on the endpoint's byte stream and `b` receives it into
//!   a layout of its own with `waitall`.
//!
//! Control messages (the remote key, "done", "ready") are tagged messages in host memory.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ucp::datatype::{DtLayout, LayoutBuf};
use ucp::dt::Layout;
use ucp::{AmData, AmSendParams, Buf, Data, RecvParams, SendParams, StreamRecv};

use super::layouts::{bytes, named, positions, random, As, Side, SENTINEL};
use super::{byte, parse_mem, Mem, Peer};

const CTL: u64 = 1 << 60;
const AM_ID: u16 = 7;
const LIMIT: Duration = Duration::from_secs(60);

fn layouts() -> Vec<(&'static str, Layout)> {
    vec![
        (
            "vector 128x1KiB",
            Layout::hvector(128, 1, 2048, &bytes(1024)).expect("vector"),
        ),
        (
            "12-byte blocks",
            Layout::hvector(500, 1, 20, &bytes(12)).expect("vector"),
        ),
        ("face z of 64^3", named("stencil3d_face:64,z")),
        ("random", random(7, 200, None)),
        ("specfem3d_cm", named("specfem3d_cm")),
    ]
}

fn ctl_send(p: &mut Peer, tag: u64, bytes: &[u8]) -> Result<(), String> {
    let mut v = bytes.to_vec();
    // SAFETY: `v` outlives the send, which is waited for.
    let d = Data::Contig(unsafe { Buf::from_raw(v.as_mut_ptr(), v.len()) });
    let id =
        p.w.tag_send(p.ep, &d, CTL | tag, SendParams::default())
            .map_err(|e| format!("control send: {e}"))?;
    p.wait(id, "control send", LIMIT)
}

fn ctl_recv(p: &mut Peer, tag: u64) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; 4096];
    // SAFETY: as in ctl_send.
    let d = Data::Contig(unsafe { Buf::from_raw(v.as_mut_ptr(), v.len()) });
    let id =
        p.w.tag_recv(&d, CTL | tag, u64::MAX, RecvParams::default())
            .map_err(|e| format!("control recv: {e}"))?;
    let n = p.wait_len(id, "control recv")?.unwrap_or(0);
    v.truncate(n);
    Ok(v)
}

/// Checks that `got` holds the sender's packed bytes of message `seq`.
fn check_packed(what: &str, got: &[u8], seq: u64, pos: &[i64], lo: i64) -> Result<(), String> {
    if got.len() != pos.len() {
        return Err(format!(
            "{what}: {} bytes, expected {}",
            got.len(),
            pos.len()
        ));
    }
    match (0..pos.len()).find(|&k| got[k] != byte(seq, (pos[k] - lo) as usize)) {
        None => Ok(()),
        Some(k) => Err(format!(
            "{what}: packed byte {k} is {:#x}, expected {:#x}",
            got[k],
            byte(seq, (pos[k] - lo) as usize)
        )),
    }
}

/// What `b`'s AM handler saw.
#[derive(Default)]
struct AmGot {
    eager: Option<Vec<u8>>,
    rndv: Option<Result<ucp::ReqId, String>>,
}

pub(super) fn run(p: &mut Peer, a: bool, spec: &[&str]) -> Result<String, String> {
    let [am, bm, ad, bd] = spec else {
        return Err("layout_ops:<a-mem>:<b-mem>:<a-gpu>:<b-gpu>".into());
    };
    let (mem, dev) = if a { (am, ad) } else { (bm, bd) };
    let mem = parse_mem(mem)?;
    let dev: i32 = dev.parse().map_err(|_| format!("bad GPU {dev}"))?;
    let list = layouts();
    let t0 = Instant::now();

    // RMA.
    let max = list.iter().map(|(_, l)| l.size()).max().unwrap_or(0) as usize;
    let mut region = None;
    let mut memh = None;
    let mut remote = None;
    if a {
        let blob = ctl_recv(p, 0)?;
        let (addr, blob) = blob.split_at(8);
        let base = u64::from_le_bytes(addr.try_into().expect("8 bytes"));
        let rkey =
            p.w.rkey_unpack(p.ep, blob)
                .map_err(|e| format!("rkey_unpack: {e}"))?;
        remote = Some((base, rkey));
    } else {
        let mut r = Mem::new(mem, dev, max)?;
        // SAFETY: the region lives until it is unmapped at the end of the RMA phase.
        let buf = unsafe { Buf::from_raw(r.ptr(), max) };
        let h =
            p.w.mem_map(Some(buf), max)
                .map_err(|e| format!("mem_map: {e}"))?;
        let mut msg = (r.ptr() as u64).to_le_bytes().to_vec();
        msg.extend(p.w.rkey_pack(h).map_err(|e| format!("rkey_pack: {e}"))?);
        ctl_send(p, 0, &msg)?;
        region = Some(r);
        memh = Some(h);
    }
    for (k, (name, l)) in list.iter().enumerate() {
        let seq = 100 + 2 * k as u64;
        let n = l.size() as usize;
        let pos = positions(l);
        let lo = l.true_bounds().map_or(0, |b| b.0);
        let what = format!("put from '{name}'");
        if let Some((base, rkey)) = &remote {
            let mut side = Side::new(mem, dev, l, As::Layout)?;
            side.mem.fill(seq, side.span);
            let d = side.data()?;
            let id =
                p.w.put(p.ep, &d, *base, rkey, SendParams::default())
                    .map_err(|e| format!("{what}: {e}"))?;
            p.wait(id, &what, LIMIT)?;
            let f = p.w.flush(Some(p.ep)).map_err(|e| format!("flush: {e}"))?;
            p.wait(Some(f), "flush", LIMIT)?;
            ctl_send(p, 1, &[k as u8])?;
            ctl_recv(p, 2)?;
            // b wrote message seq + 1 in packed order: get it into the layout.
            let what = format!("get into '{name}'");
            side.mem.write(&vec![SENTINEL; side.span]);
            let d = side.data()?;
            let id =
                p.w.get(p.ep, &d, *base, rkey, SendParams::default())
                    .map_err(|e| format!("{what}: {e}"))?;
            p.wait(id, &what, LIMIT)?;
            let contiguous: Vec<i64> = (0..n as i64).collect();
            side.check(&what, seq + 1, &contiguous, 0)?;
        } else {
            ctl_recv(p, 1)?;
            let r = region.as_mut().expect("b's region");
            check_packed(&what, &r.read(n), seq, &pos, lo)?;
            let v: Vec<u8> = (0..n).map(|i| byte(seq + 1, i)).collect();
            r.write(&v);
            ctl_send(p, 2, &[k as u8])?;
        }
    }
    // The region stays mapped until a's last get is done.
    if a {
        ctl_send(p, 6, &[])?;
    } else {
        ctl_recv(p, 6)?;
    }
    if let Some(h) = memh {
        p.w.mem_unmap(h).map_err(|e| format!("mem_unmap: {e}"))?;
    }
    drop(region);

    // Active messages, the default protocol and rendezvous forced.
    let got = Arc::new(Mutex::new(AmGot::default()));
    let mut am_eager = 0;
    let mut am_rndv = 0;
    for rndv in [false, true] {
        for (k, (name, l)) in list.iter().enumerate() {
            let seq = 200 + 2 * k as u64 + u64::from(rndv) * 100;
            let pos = positions(l);
            let lo = l.true_bounds().map_or(0, |b| b.0);
            let what = format!("AM of '{name}' (rendezvous forced: {rndv})");
            let mut side = Side::new(mem, dev, l, As::Layout)?;
            if a {
                ctl_recv(p, 3)?;
                side.mem.fill(seq, side.span);
                let d = side.data()?;
                let params = AmSendParams {
                    rndv,
                    ..Default::default()
                };
                let id =
                    p.w.am_send(p.ep, AM_ID, &[k as u8], &d, params)
                        .map_err(|e| format!("{what}: {e}"))?;
                p.wait(id, &what, LIMIT)?;
                ctl_recv(p, 4)?;
            } else {
                side.mem.write(&vec![SENTINEL; side.span]);
                *got.lock().expect("lock") = AmGot::default();
                let dt = DtLayout::new(l).map_err(|e| format!("{e}"))?;
                let origin = side.mem.ptr().wrapping_offset(-side.lo as isize) as usize;
                let g = Arc::clone(&got);
                p.w.am_set_handler(
                    AM_ID,
                    Some(Box::new(move |w, ev| {
                        let mut g = g.lock().expect("lock");
                        match ev.data {
                            AmData::Eager(b) => g.eager = Some(b.to_vec()),
                            AmData::Rndv(r) => {
                                // SAFETY: the layout's buffer lives until the test
                                // waited for this receive.
                                let lb = unsafe { LayoutBuf::new(origin as *mut u8, dt.clone()) };
                                g.rndv = Some(
                                    w.am_recv_data(r, &Data::Layout(lb), RecvParams::default())
                                        .map_err(|e| format!("am_recv_data: {e}")),
                                );
                            }
                        }
                    })),
                );
                ctl_send(p, 3, &[])?;
                let t = Instant::now();
                let arrived = loop {
                    {
                        let mut g = got.lock().expect("lock");
                        if let Some(v) = g.eager.take() {
                            break Ok(v);
                        }
                        if let Some(r) = g.rndv.take() {
                            break Err(r?);
                        }
                    }
                    if t.elapsed() > LIMIT {
                        return Err(format!("{what}: nothing arrived"));
                    }
                    p.w.progress();
                };
                match arrived {
                    Ok(v) => {
                        check_packed(&what, &v, seq, &pos, lo)?;
                        am_eager += 1;
                    }
                    Err(id) => {
                        p.wait(Some(id), &what, LIMIT)?;
                        side.check(&what, seq, &pos, lo)?;
                        am_rndv += 1;
                    }
                }
                if rndv && am_rndv == 0 {
                    return Err(format!("{what}: arrived eager"));
                }
                ctl_send(p, 4, &[])?;
            }
        }
    }

    // Stream.
    for (k, (name, l)) in list.iter().enumerate() {
        let seq = 400 + 2 * k as u64;
        let pos = positions(l);
        let lo = l.true_bounds().map_or(0, |b| b.0);
        let what = format!("stream of '{name}'");
        let mut side = Side::new(mem, dev, l, As::Layout)?;
        if a {
            side.mem.fill(seq, side.span);
            let d = side.data()?;
            let id =
                p.w.stream_send(p.ep, &d, SendParams::default())
                    .map_err(|e| format!("{what}: {e}"))?;
            p.wait(id, &what, LIMIT)?;
            ctl_recv(p, 5)?;
        } else {
            side.mem.write(&vec![SENTINEL; side.span]);
            let d = side.data()?;
            let r =
                p.w.stream_recv(p.ep, &d, true, RecvParams::default())
                    .map_err(|e| format!("{what}: {e}"))?;
            let n = match r {
                StreamRecv::Done(n) => Some(n),
                StreamRecv::Pending(id) => p.wait_len(id, &what)?,
            };
            if n != Some(pos.len()) {
                return Err(format!("{what}: received {n:?} bytes of {}", pos.len()));
            }
            side.check(&what, seq, &pos, lo)?;
            ctl_send(p, 5, &[])?;
        }
    }
    let st = p.w.stats();
    Ok(format!(
        "{} layouts through put, get, AM and stream, {:.2} s; AM eager {am_eager}, AM rendezvous {am_rndv}; rndv_device {}; {:?}",
        list.len(),
        t0.elapsed().as_secs_f64(),
        st.rndv_device,
        p.w.transport_counters()
    ))
}
