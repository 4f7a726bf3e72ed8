//! Measurements of stream-triggered queues (`docs/queues.md` records the results):
//!
//! * `rucx-st poll`: what polling costs, with no GPU. Two workers over shared memory in
//!   one process. `progress()` per call with no queue, and with a queue armed whose
//!   trigger has not come (what a worker pays while a stream has not reached its start);
//!   the time from a trigger written by the host to the operation posted; the CPU time a
//!   `ProgressThread` burns over one second with nothing armed, and with a queue armed.
//! * `rucx-st lat [N]`: trigger latency on a GPU (stream 0 of GPU 0). A stream waits on a
//!   gate the host opens at t0; then either the stream writes a flag the host spins on
//!   (the anchor: stream write → host sees it), or the stream writes the queue's trigger
//!   and the worker posts an 8-byte send (stream write → operation posted). Both with
//!   stream memory operations and with trigger kernels. The difference of the medians is
//!   the queue's own cost on top of the stream write's visibility.
//! * `rucx-st ofi [N] [provider]`: deferred work in a libfabric provider's own queue
//!   (`uct::tl::ofi`, `sockets` unless named): two endpoints in one process, a host write of
//!   the trigger counter → the peer's deferred receive counted complete, 8 bytes; beside it
//!   the same through the software engine (a `ucp` queue over tcp), for scale.
#![allow(unsafe_code)] // describes its buffers to ucp, as an application does

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ucp::{Buf, Data, QueueParams, QueueStream, RecvParams, Worker};

/// Two workers of one context over `tls`, and an endpoint from the first to the second.
fn pair(tls: &str) -> (Worker, Worker, ucp::EpHandle) {
    let ctx = ucp::Context::new(
        ucs::Config::from_lookup(|k| (k == "TLS").then(|| tls.to_string())).expect("configuration"),
    );
    let mut a = Worker::new(&ctx).expect("worker");
    let mut b = Worker::new(&ctx).expect("worker");
    let ab = a.ep_create(b.address()).expect("ep");
    let _ = b.ep_create(a.address()).expect("ep");
    (a, b, ab)
}

fn ns_per_call(w: &mut Worker, n: u64) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        w.progress();
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn cpu_seconds() -> f64 {
    // SAFETY: an out-parameter struct, zeroed, filled by the kernel.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A queue whose counters the caller writes (no stream).
fn external_queue(w: &mut Worker) -> ucp::QueueId {
    w.queue_create(QueueParams {
        stream: QueueStream::External,
        counter_base: 0,
    })
    .expect("queue")
}

/// `n` samples (ns) from the host writing a queue's trigger (an 8-byte send from `a`
/// to `b` released by it) to the send posted by `a`'s worker, or, with `received`, to
/// `b`'s receive complete.
fn trigger_samples(
    a: &mut Worker,
    b: &mut Worker,
    ab: ucp::EpHandle,
    n: u32,
    received: bool,
) -> Vec<f64> {
    let q = external_queue(a);
    let m = [0u8; 8];
    let mut got = [0u8; 8];
    let mut lat = Vec::with_capacity(n as usize);
    for i in 1..=n {
        // SAFETY: `m` and `got` outlive every operation (each finished before the next).
        let d = Data::Contig(unsafe { Buf::from_slice(&m) });
        a.enqueue_send(q, ab, &d, 2).expect("enqueue");
        a.enqueue_start(q).expect("start");
        // SAFETY: as above.
        let r = b
            .tag_recv(
                &Data::Contig(unsafe { Buf::from_mut_slice(&mut got) }),
                2,
                u64::MAX,
                RecvParams::default(),
            )
            .expect("recv");
        let t = Instant::now();
        a.queue_counters(q)
            .expect("counters")
            .trigger()
            .store(i, Ordering::Release);
        if received {
            while b.request_test(r).is_none() {
                a.progress();
                b.progress();
            }
        } else {
            while a.queue_query(q).expect("query").pending > 0 {
                a.progress();
            }
        }
        lat.push(t.elapsed().as_nanos() as f64);
        while b.request_test(r).is_none() || a.queue_query(q).expect("query").running > 0 {
            a.progress();
            b.progress();
        }
    }
    let _ = a.queue_destroy(q);
    lat
}

fn poll() {
    let (mut a, mut b, ab) = pair("posix,cma");
    let n = 5_000_000;
    for _ in 0..3 {
        let idle = ns_per_call(&mut a, n);
        let q = external_queue(&mut a);
        let m = [0u8; 8];
        // SAFETY: `m` outlives the queue (destroyed below).
        let d = Data::Contig(unsafe { Buf::from_slice(&m) });
        a.enqueue_send(q, ab, &d, 1).expect("enqueue");
        a.enqueue_start(q).expect("start");
        let armed = ns_per_call(&mut a, n);
        let _ = a.queue_destroy(q);
        println!("progress(): no queue {idle:.1} ns/call, a queue armed and not triggered {armed:.1} ns/call");
    }
    // Host-written trigger → operation posted, in the polling thread.
    let mut lat = trigger_samples(&mut a, &mut b, ab, 20_000, false);
    println!(
        "host trigger → send posted: median {:.0} ns, p90 {:.0} ns ({} samples)",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.9),
        lat.len()
    );
    // The progress thread: asleep with nothing armed, polling with a queue armed.
    let m = [0u8; 8];
    let a = Arc::new(Mutex::new(a));
    let pt = ucp::ProgressThread::spawn(Arc::clone(&a));
    std::thread::sleep(Duration::from_millis(100));
    let c0 = cpu_seconds();
    std::thread::sleep(Duration::from_secs(1));
    let idle_cpu = cpu_seconds() - c0;
    let q = {
        let mut w = a.lock().expect("lock");
        let q = external_queue(&mut w);
        // SAFETY: `m` outlives the queue.
        let d = Data::Contig(unsafe { Buf::from_slice(&m) });
        w.enqueue_send(q, ab, &d, 3).expect("enqueue");
        w.enqueue_start(q).expect("start");
        q
    };
    let c0 = cpu_seconds();
    std::thread::sleep(Duration::from_secs(1));
    let armed_cpu = cpu_seconds() - c0;
    let polls = {
        let _ = a.lock().expect("lock").queue_destroy(q);
        pt.stop()
    };
    println!(
        "progress thread: {:.1}% of a core over 1 s with nothing armed, {:.1}% with a queue armed ({polls} progress calls in all)",
        idle_cpu * 100.0,
        armed_cpu * 100.0
    );
    drop(b);
}

#[cfg(feature = "cuda")]
fn lat(n: usize) -> Result<(), String> {
    use ucp::TriggerKind;
    use uct::trigger::Counters;
    let d = ucs::cuda::driver().ok_or_else(|| {
        format!(
            "SKIPPED: no GPU ({})",
            ucs::cuda::absent_reason().unwrap_or("no CUDA driver")
        )
    })?;
    let s = d.stream(0).map_err(|e| e.to_string())?;
    let stream = ucs::cuda::StreamRef::of(&s);
    let (mut a, mut b, ab) = pair("posix,cma");
    let gates = Counters::new(0, true).map_err(|e| format!("mapped counters: {e}"))?;
    let (gate_dev, flag_dev) = gates.device_ptrs().ok_or("counters not mapped")?;
    let mut seq = 0u32;
    let settle = || {
        // Let the stream reach its wait before the gate opens.
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(200) {
            std::hint::spin_loop();
        }
    };
    for kind in [TriggerKind::MemOp, TriggerKind::Kernel] {
        let wait = |v: u32| match kind {
            TriggerKind::MemOp => stream.wait_value(gate_dev, v),
            _ => stream.kernel_wait(gate_dev, v),
        };
        // The anchor: the stream's write seen by a spinning host.
        let mut base = Vec::new();
        for _ in 0..n {
            seq += 1;
            wait(seq).map_err(|e| e.to_string())?;
            match kind {
                TriggerKind::Kernel => stream.kernel_write(flag_dev, seq),
                _ => stream.write_value(flag_dev, seq),
            }
            .map_err(|e| e.to_string())?;
            settle();
            let t = Instant::now();
            gates.trigger().store(seq, Ordering::Release);
            while gates.completion().load(Ordering::Acquire) != seq {
                std::hint::spin_loop();
            }
            base.push(t.elapsed().as_nanos() as f64 / 1e3);
        }
        stream.synchronize().map_err(|e| e.to_string())?;
        // The queue: the stream's trigger write, fired by this worker as an 8-byte send.
        let q = a
            .queue_create(QueueParams {
                stream: QueueStream::Cuda {
                    stream,
                    trigger: kind,
                },
                counter_base: 0,
            })
            .map_err(|e| format!("queue: {e}"))?;
        let m = [0u8; 8];
        let mut got = [0u8; 8];
        let mut st = Vec::new();
        for _ in 0..n {
            seq += 1;
            // SAFETY: `m` and `got` outlive every operation (each finished before the next).
            let dm = Data::Contig(unsafe { Buf::from_slice(&m) });
            a.enqueue_send(q, ab, &dm, 9).map_err(|e| e.to_string())?;
            wait(seq).map_err(|e| e.to_string())?;
            a.enqueue_start(q).map_err(|e| e.to_string())?;
            // SAFETY: as above.
            let r = b
                .tag_recv(
                    &Data::Contig(unsafe { Buf::from_mut_slice(&mut got) }),
                    9,
                    u64::MAX,
                    RecvParams::default(),
                )
                .map_err(|e| e.to_string())?;
            settle();
            let t = Instant::now();
            gates.trigger().store(seq, Ordering::Release);
            while a.queue_query(q).map_err(|e| e.to_string())?.pending > 0 {
                a.progress();
            }
            st.push(t.elapsed().as_nanos() as f64 / 1e3);
            while b.request_test(r).is_none() {
                b.progress();
                a.progress();
            }
        }
        stream.synchronize().map_err(|e| e.to_string())?;
        // From the call on an idle stream: a stream write seen by the host, against a
        // start whose send is posted (each includes the stream's submission latency).
        let (mut wseen, mut qpost) = (Vec::new(), Vec::new());
        for _ in 0..n {
            seq += 1;
            let t = Instant::now();
            match kind {
                TriggerKind::Kernel => stream.kernel_write(flag_dev, seq),
                _ => stream.write_value(flag_dev, seq),
            }
            .map_err(|e| e.to_string())?;
            while gates.completion().load(Ordering::Acquire) != seq {
                std::hint::spin_loop();
            }
            wseen.push(t.elapsed().as_nanos() as f64 / 1e3);
            stream.synchronize().map_err(|e| e.to_string())?;
            // SAFETY: as above.
            let dm = Data::Contig(unsafe { Buf::from_slice(&m) });
            a.enqueue_send(q, ab, &dm, 9).map_err(|e| e.to_string())?;
            // SAFETY: as above.
            let r = b
                .tag_recv(
                    &Data::Contig(unsafe { Buf::from_mut_slice(&mut got) }),
                    9,
                    u64::MAX,
                    RecvParams::default(),
                )
                .map_err(|e| e.to_string())?;
            let t = Instant::now();
            a.enqueue_start(q).map_err(|e| e.to_string())?;
            while a.queue_query(q).map_err(|e| e.to_string())?.pending > 0 {
                a.progress();
            }
            qpost.push(t.elapsed().as_nanos() as f64 / 1e3);
            while b.request_test(r).is_none() {
                b.progress();
                a.progress();
            }
            stream.synchronize().map_err(|e| e.to_string())?;
        }
        let _ = a.queue_destroy(q);
        let (wm, qm) = (pct(&mut wseen, 0.5), pct(&mut qpost, 0.5));
        println!(
            "{kind:?}: call on an idle stream → write seen: median {wm:.2} µs (p90 {:.2}); enqueue_start on an idle stream → send posted: median {qm:.2} µs (p90 {:.2}); the queue adds {:.2} µs",
            pct(&mut wseen, 0.9),
            pct(&mut qpost, 0.9),
            qm - wm
        );
        let (bm, sm) = (pct(&mut base, 0.5), pct(&mut st, 0.5));
        println!(
            "{kind:?}: gate → stream write seen: median {bm:.2} µs (p10 {:.2}, p90 {:.2}); gate → send posted: median {sm:.2} µs (p10 {:.2}, p90 {:.2}); the queue adds {:.2} µs",
            pct(&mut base, 0.1),
            pct(&mut base, 0.9),
            pct(&mut st, 0.1),
            pct(&mut st, 0.9),
            sm - bm
        );
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn lat(_: usize) -> Result<(), String> {
    Err("SKIPPED: built without the cuda feature".into())
}

fn ofi(n: usize, provider: &str) -> Result<(), String> {
    use uct::tl::ofi::{Params, TriggeredEp};
    let p = Params {
        provider: Some(provider.to_string()),
        node: Some("127.0.0.1".into()),
    };
    let mut a = TriggeredEp::open(&p).map_err(|e| format!("SKIPPED: {e}"))?;
    let mut b = TriggeredEp::open(&p).map_err(|e| e.to_string())?;
    let peer = a
        .insert_peer(&b.address().map_err(|e| format!("{e:?}"))?)
        .map_err(|e| format!("{e:?}"))?;
    let m = [7u8; 8];
    let mut got = [0u8; 8];
    let mut lat = Vec::with_capacity(n);
    for i in 1..=n as u64 {
        // SAFETY: `m` and `got` outlive every operation; each is complete before the next.
        unsafe {
            b.post_recv(0, got.as_mut_ptr(), 8, i, 0)
                .map_err(|e| format!("{e:?}"))?;
            a.post_send(i, peer, m.as_ptr(), 8, i)
                .map_err(|e| format!("{e:?}"))?;
        }
        let t = Instant::now();
        a.trigger_add(1).map_err(|e| format!("{e:?}"))?;
        while b.progress().total() < i {}
        lat.push(t.elapsed().as_nanos() as f64);
        while a.progress().total() < i {}
    }
    println!(
        "{provider}: host trigger → peer's deferred receive complete: median {:.1} µs, p90 {:.1} µs ({} samples)",
        pct(&mut lat, 0.5) / 1e3,
        pct(&mut lat, 0.9) / 1e3,
        lat.len()
    );
    // The software engine, for scale: a ucp queue over tcp loopback.
    let (mut wa, mut wb, ab) = pair("tcp");
    let mut lat = trigger_samples(&mut wa, &mut wb, ab, n as u32, true);
    println!(
        "software engine, ucp over tcp: host trigger → peer's receive complete: median {:.1} µs, p90 {:.1} µs",
        pct(&mut lat, 0.5) / 1e3,
        pct(&mut lat, 0.9) / 1e3
    );
    Ok(())
}

fn main() {
    ucs::log::init(log::LevelFilter::Warn);
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("poll") => poll(),
        Some("lat") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
            if let Err(e) = lat(n) {
                println!("{e}");
                if !e.starts_with("SKIPPED") {
                    std::process::exit(1);
                }
            }
        }
        Some("ofi") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
            let prov = args.get(2).map_or("sockets", String::as_str);
            if let Err(e) = ofi(n, prov) {
                println!("{e}");
                if !e.starts_with("SKIPPED") {
                    std::process::exit(1);
                }
            }
        }
        _ => {
            eprintln!("usage: rucx-st poll | rucx-st lat [iterations] | rucx-st ofi [iterations] [provider]");
            std::process::exit(2);
        }
    }
}
