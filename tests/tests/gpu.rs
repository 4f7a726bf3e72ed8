//! GPU memory between two processes (`rucx-gpu-peer`), on the machines that have CUDA
//! devices: every size through every path (IPC rendezvous, staging, host and managed
//! memory on either side), on one GPU and across two, the IPC mapping cache and its
//! invalidation after free and re-allocation, and a peer killed mid-rendezvous. Each case
//! says "SKIPPED" with the reason where there is no GPU (CI machines have none; the GPU
//! machine runs these through `contrib/gpu/test.sh`).

use std::time::Duration;

use rucx_tests::ucp_peer::{start_pair, Proc};

/// The peer program: cargo's, or `RUCX_GPU_PEER` where the test binary was carried to
/// another machine (`contrib/gpu/test.sh`).
fn peer() -> String {
    std::env::var("RUCX_GPU_PEER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rucx-gpu-peer").to_string())
}

/// The GPUs here; `None` (after saying why) when there are none.
fn gpus() -> Option<usize> {
    match ucs::cuda::driver() {
        Some(d) => Some(d.devices().len()),
        None => {
            rucx_tests::skipped(&format!(
                "no GPU: {}",
                ucs::cuda::absent_reason().unwrap_or("no CUDA driver")
            ));
            None
        }
    }
}

fn finish(case: &str, tls: &str, mut a: Proc, mut b: Proc) -> (String, String) {
    let ra = a.line("result");
    let rb = b.line("result");
    eprintln!("{tls} {case}:\n  a {ra}\n  b {rb}");
    assert!(
        ra.starts_with("DONE") && rb.starts_with("DONE"),
        "{tls} {case}: a {ra}; b {rb}"
    );
    assert!(a.child.wait().expect("wait").success());
    assert!(b.child.wait().expect("wait").success());
    (ra, rb)
}

fn run(case: &str, tls: &str) -> (String, String) {
    let (a, b) = start_pair(&peer(), case, (tls, "all", "auto"));
    finish(case, tls, a, b)
}

/// Every memory-type pairing on one GPU, through `cuda_ipc` (the default transports) and
/// staged through host buffers where `cuda_ipc` is left out (shared memory, with and
/// without the `cuda_copy` engine, and tcp). Host data received into device memory lands
/// in a pinned bounce that `cuda_copy` copies into the device buffer on its streams.
#[test]
fn every_memory_pairing_on_one_gpu() {
    if gpus().is_none() {
        return;
    }
    let pairs = [
        ("cuda", "cuda"),
        ("cuda", "host"),
        ("host", "cuda"),
        ("cuda-managed", "cuda"),
        ("cuda", "cuda-managed"),
        ("cuda-managed", "host"),
    ];
    for tls in ["all", "posix,cma", "posix,cma,cuda_copy", "tcp"] {
        for (am, bm) in pairs {
            let (ra, rb) = run(&format!("pingpong:{am}:{bm}:0:0"), tls);
            if tls == "all" && am == "cuda" && bm == "cuda" {
                assert!(!ra.contains("rndv_device 0,"), "IPC rendezvous: {ra}");
            }
            if tls != "all" && am == "cuda" {
                // Device data without a device lane: the staged pipeline's fragments.
                assert!(
                    counter(&ra, "rndv_staged") > 0,
                    "{tls}: no staged fragments sent: {ra}"
                );
            }
            if tls.contains("cuda_copy") && am == "host" && bm == "cuda" {
                let copies: u64 = rb
                    .split("(\"copy_async\", ")
                    .nth(1)
                    .and_then(|r| r.split(')').next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                assert!(copies > 0, "no cuda_copy copy into device memory: {rb}");
            }
        }
    }
}

/// Device memory of GPU 0 to GPU 1 and back, both ways, through IPC and staged.
#[test]
fn between_two_gpus() {
    match gpus() {
        None => return,
        Some(n) if n < 2 => {
            rucx_tests::skipped("one GPU here; the two-GPU cases need two");
            return;
        }
        Some(_) => {}
    }
    for tls in ["all", "posix,cma"] {
        run("pingpong:cuda:cuda:0:1", tls);
        run("pingpong:cuda:cuda:1:0", tls);
        run("pingpong:cuda:host:1:0", tls);
    }
}

/// Device memory of the virtual memory API (`cuMemCreate`, exportable by descriptor) on
/// both sides, on one GPU and across two where there are two: `cuda_ipc` shares it by a
/// shareable handle (the exporter's descriptor, taken by the peer with `pidfd_getfd`) and
/// the rendezvous is zero-copy through it, every byte checked; with ordinary device memory
/// on the other side too.
#[test]
fn virtual_memory_allocations_go_through_shareable_handles() {
    let Some(n) = gpus() else {
        return;
    };
    let mut cases = vec![
        "pingpong:cuda-vmm:cuda-vmm:0:0",
        "pingpong:cuda-vmm:cuda:0:0",
        "pingpong:cuda:cuda-vmm:0:0",
    ];
    if n >= 2 {
        cases.push("pingpong:cuda-vmm:cuda-vmm:0:1");
    }
    for case in cases {
        let (ra, rb) = run(case, "all");
        for r in [&ra, &rb] {
            assert!(!r.contains("rndv_device 0,"), "IPC rendezvous: {r}");
        }
        let opened = |out: &str| -> u64 {
            out.split("(\"ipc_opened\", ")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        assert!(
            opened(&ra) + opened(&rb) > 0,
            "{case}: no mapping opened: a {ra}; b {rb}"
        );
    }
}

/// The copying side maps the other's allocation once (three messages, one open), and after
/// the other frees it and allocates again at the same address, maps the new one (the stale
/// mapping is closed, never served). Which side copies depends on the worker ids, so the
/// counters of both are read.
#[test]
fn ipc_mappings_are_cached_and_invalidated() {
    if gpus().is_none() {
        return;
    }
    let (ra, rb) = run("ipc_cache", "all");
    let count = |out: &str, name: &str| -> u64 {
        out.split(&format!("(\"{name}\", "))
            .nth(1)
            .and_then(|r| r.split(')').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {out}"))
    };
    let (copier, other) = if count(&ra, "ipc_opened") > 0 {
        (&ra, &rb)
    } else {
        (&rb, &ra)
    };
    let both = format!("a: {ra}\nb: {rb}");
    assert_eq!(count(copier, "ipc_opened"), 2, "{both}");
    assert_eq!(count(copier, "ipc_hits"), 2, "{both}");
    assert_eq!(count(other, "ipc_opened"), 0, "one side copies: {both}");
    if other.contains("same address: true") {
        assert_eq!(count(copier, "ipc_stale_closed"), 1, "{both}");
    } else {
        eprintln!("note: the driver gave the new buffer another address, so nothing was stale");
    }
}

/// A peer killed while 64 MiB device messages flow: the survivor's operation ends with an
/// error within 2 s, whichever side dies.
#[test]
fn peer_killed_mid_rendezvous_on_gpu_buffers() {
    if gpus().is_none() {
        return;
    }
    // Through IPC, and staged through pinned fragments over tcp.
    for (victim, tls) in [("a", "all"), ("b", "all"), ("a", "tcp"), ("b", "tcp")] {
        let (mut a, mut b) = start_pair(&peer(), "endless", (tls, "all", "auto"));
        for (side, p) in [("a", &a), ("b", &b)] {
            let l = p
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{side} never got going"));
            assert_eq!(l, "READY", "{side}");
        }
        let (dead, survivor) = if victim == "a" {
            (&mut a, &b)
        } else {
            (&mut b, &a)
        };
        dead.child.kill().expect("kill");
        let killed = std::time::Instant::now();
        let r = survivor
            .lines
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_else(|_| panic!("no error 2 s after killing {victim}"));
        assert!(r.starts_with("DONE ERR"), "{tls}: {victim} killed: {r}");
        eprintln!(
            "{tls}: {victim} killed: survivor {r} after {:?}",
            killed.elapsed()
        );
    }
}

/// Stream-triggered queues on a CUDA stream between two processes, with stream memory
/// operations and with trigger kernels: the stream fills, triggers, waits and reads back;
/// every byte checked, one round at a time and eight in flight.
#[test]
fn stream_triggered_queues_on_gpu_streams() {
    if gpus().is_none() {
        return;
    }
    for trig in ["memop", "kernel"] {
        run(&format!("queue:{trig}"), "all");
    }
}

/// A stream waiting on a queue whose peer is killed runs on: the completion counter is
/// released with the error.
#[test]
fn a_gpu_stream_waiting_on_a_dead_peer_is_released() {
    if gpus().is_none() {
        return;
    }
    let (a, mut b) = start_pair(&peer(), "queue_kill", ("all", "all", "auto"));
    assert_eq!(b.line("b ready"), "READY");
    assert_eq!(a.line("a ready"), "READY");
    b.child.kill().expect("kill");
    let r = a.line("result");
    eprintln!("queue_kill: {r}");
    assert!(r.starts_with("DONE released"), "{r}");
}

/// `run` with extra environment for both peers.
fn run_env(case: &str, tls: &str, env: &[(&str, &str)]) -> (String, String) {
    let cfg = (tls, "all", "auto");
    let mut a = Proc::spawn(&peer(), "a", case, cfg, env);
    let mut b = Proc::spawn(&peer(), "b", case, cfg, env);
    let hex = |p: &Proc| p.line("ADDR").trim_start_matches("ADDR ").to_string();
    let (ah, bh) = (hex(&a), hex(&b));
    a.say(&bh);
    b.say(&ah);
    finish(&format!("{case} {env:?}"), tls, a, b)
}

/// The counter `name` of a peer's summary line (`name N`).
fn counter(line: &str, name: &str) -> u64 {
    line.split(&format!("{name} "))
        .nth(1)
        .and_then(|r| r.split([',', ';']).next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Noncontiguous device data between two processes on one GPU, a different layout on each
/// side, every byte checked both ways (`rucx-gpu-peer layouts`): through the model's pick
/// and through each method forced (one kernel between the two layouts over a `cuda_ipc`
/// mapping, one 2D copy where the pair is a box, one copy per piece, and pack → contiguous
/// device rendezvous → unpack); device to host and back; staged through host buffers
/// (shared memory without `cuda_ipc`, and tcp), where kernels pack and unpack.
#[test]
fn layouts_on_one_gpu_through_every_method() {
    if gpus().is_none() {
        return;
    }
    for method in ["", "direct", "copy-engine", "per-block", "pack-unpack"] {
        let env: Vec<(&str, &str)> = if method.is_empty() {
            vec![]
        } else {
            vec![("RUCX_GPU_DT_METHOD", method)]
        };
        let (ra, rb) = run_env("layouts:cuda:cuda:0:0", "all", &env);
        let direct = counter(&ra, "rndv_device_direct") + counter(&rb, "rndv_device_direct");
        if method == "pack-unpack" {
            assert_eq!(direct, 0, "pack-unpack forced: {ra} / {rb}");
        } else {
            assert!(direct > 0, "{method}: no direct transfer: {ra} / {rb}");
        }
    }
    for (am, bm) in [("cuda", "host"), ("host", "cuda"), ("cuda-managed", "cuda")] {
        run_env(&format!("layouts:{am}:{bm}:0:0"), "all", &[]);
    }
    // Descriptions too large for one RTS (SPECFEM3D, the random layouts) sent in parts,
    // so that those layouts move direct too.
    let (ra, rb) = run_env(
        "layouts:cuda:cuda:0:0",
        "all",
        &[("UCX_RNDV_LAYOUT_PARTS", "y")],
    );
    assert!(counter(&ra, "rndv_device_direct") + counter(&rb, "rndv_device_direct") > 0);
    for tls in ["posix,cma", "tcp"] {
        let (ra, rb) = run_env("layouts:cuda:cuda:0:0", tls, &[]);
        assert_eq!(
            counter(&ra, "rndv_device_direct") + counter(&rb, "rndv_device_direct"),
            0,
            "{tls}: no device lane, yet a direct transfer: {ra}"
        );
    }
}

/// The same pairs, partial receives included, in host memory on both sides: the test's own
/// checks and the host layout paths, on every machine (CI has no GPU).
#[test]
fn layouts_on_host_between_processes() {
    // (rc_verbs: on the software HCA model, by UMR or packed as its cost model picks.)
    for tls in ["all", "tcp", "rc_verbs,self"] {
        let (ra, rb) = run_env("layouts:host:host:0:0", tls, &[]);
        assert!(ra.contains("27 layout pairs"), "{tls}: {ra} / {rb}");
        let (_, rb) = run_env("layout_ops:host:host:0:0", tls, &[]);
        assert!(!rb.contains("AM rendezvous 0"), "{tls}: {rb}");
    }
}

/// Device memory through `rc_verbs` on the software HCA model (a model of an HCA): the
/// model reaches the peer's device memory through its CUDA IPC handle and copies with
/// CUDA, so a rendezvous of device data is RDMA on the model; contiguous data of every
/// size both ways, and device layouts (packed by kernels around the model's RDMA), every
/// byte checked.
#[test]
fn device_memory_over_rc_verbs_on_the_model() {
    if gpus().is_none() {
        return;
    }
    let tls = "rc_verbs,self,cuda_copy";
    for (am, bm) in [("cuda", "cuda"), ("cuda", "host"), ("host", "cuda")] {
        let (ra, _) = run(&format!("pingpong:{am}:{bm}:0:0"), tls);
        if am == "cuda" && bm == "cuda" {
            assert!(ra.contains("rc_verbs"), "{ra}");
        }
    }
    run("layouts:cuda:cuda:0:0", tls);
    // UMR over device layouts: the sender's keys over its device blocks, the receiver's
    // over its scratch buffer (unpacked by a kernel), written by the model through CUDA.
    let (ra, rb) = run_env("layouts:cuda:cuda:0:0", tls, &[("RUCX_UMR", "umr")]);
    let writes = |out: &str| -> u64 {
        out.split("(\"umr_writes\", ")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    assert!(writes(&ra) + writes(&rb) > 0, "no UMR write: {ra} / {rb}");
}

/// Device layouts through put and get (into a device or host region, over `cuda_ipc`
/// and through messages), active messages (eager, and rendezvous into a device layout)
/// and the stream API, every byte checked (`rucx-gpu-peer layout_ops`).
#[test]
fn layouts_through_rma_am_and_stream() {
    if gpus().is_none() {
        return;
    }
    for (m, tls) in [
        ("cuda:cuda", "all"),
        ("cuda:host", "all"),
        ("host:cuda", "all"),
        ("cuda:cuda", "posix,cma"),
        ("cuda:cuda", "tcp"),
    ] {
        let (_, rb) = run_env(&format!("layout_ops:{m}:0:0"), tls, &[]);
        assert!(!rb.contains("AM rendezvous 0"), "{m} {tls}: {rb}");
    }
}

/// The same between two GPUs (peer access over NVLink or PCIe): the kernel of the copying
/// side reads or writes the other GPU's memory through the mapping.
#[test]
fn layouts_between_two_gpus() {
    match gpus() {
        None => return,
        Some(n) if n < 2 => {
            rucx_tests::skipped("one GPU here; the two-GPU cases need two");
            return;
        }
        Some(_) => {}
    }
    let (ra, rb) = run_env("layouts:cuda:cuda:0:1", "all", &[]);
    assert!(counter(&ra, "rndv_device_direct") + counter(&rb, "rndv_device_direct") > 0);
    run_env(
        "layouts:cuda:cuda:1:0",
        "all",
        &[("RUCX_GPU_DT_METHOD", "pack-unpack")],
    );
    run_env("layouts:cuda:cuda:0:1", "posix,cma", &[]);
    run_env("layout_ops:cuda:cuda:0:1", "all", &[]);
}

/// The route by which an RDMA device registers GPU memory (`ibv_reg_dmabuf_mr` in the real
/// verbs provider): the driver exports a range of an allocation as a DMA-BUF, whose size
/// the kernel reports in the descriptor's fdinfo. No HCA is needed to check the export.
#[test]
fn device_memory_exports_as_a_dmabuf() {
    if gpus().is_none() {
        return;
    }
    let d = ucs::cuda::driver().unwrap();
    let n = 3 << 20;
    let p = d.alloc(0, n).expect("cuMemAlloc");
    let (len, off) = (100_000usize, 4196u64);
    match d.dmabuf(p + off, len) {
        Ok((fd, offset)) => {
            use std::os::fd::AsRawFd;
            let page = ucs::sys::page_size() as u64;
            assert!(offset < page, "offset {offset} within one page");
            assert_eq!((p + off - offset) % page, 0, "the export starts on a page");
            let info =
                std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).unwrap();
            let size: u64 = info
                .lines()
                .find_map(|l| l.strip_prefix("size:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("a DMA-BUF's fdinfo has its size");
            assert!(
                size >= offset + len as u64,
                "exported {size} bytes for {len} at {offset}"
            );
            assert_eq!(size % page, 0);
            eprintln!("dmabuf: {size} bytes exported, offset {offset}; fdinfo:\n{info}");
        }
        Err(s) => rucx_tests::skipped(&format!("the driver exports no DMA-BUF here: {s}")),
    }
    // Out of the allocation: refused before the driver is asked.
    assert!(d.dmabuf(p + n as u64 - 10, 100).is_err());
    // SAFETY: `p` came from `alloc` above and nothing uses it any more (the DMA-BUF
    // descriptor was closed at the end of its scope).
    unsafe { d.free(p) }.unwrap();
}
