//! `rucx-info`: what Rucx can use on this machine, and how it is configured.
//!
//! `-d` lists transports and devices with capabilities, limits and performance estimates,
//! and says why each absent transport is absent. `-p` prints the UCP context's resources
//! in UCX's layout (`resource N : md N dev N flags -- tl/dev`). `-c` prints the configuration table with
//! current values (from `UCX_*` variables or defaults).

use clap::Parser;
use ucs::Config;

#[derive(Parser, Debug)]
#[command(
    name = "rucx-info",
    about = "Show Rucx transports, devices and configuration"
)]
struct Args {
    /// List transports and devices with capabilities, limits and estimates.
    #[arg(short = 'd')]
    devices: bool,
    /// Print the configuration table with current values.
    #[arg(short = 'c')]
    config: bool,
    /// Print the library version.
    #[arg(short = 'v')]
    version: bool,
    /// Print the UCP context's resources as UCX's `ucp_context_print_info` does.
    #[arg(short = 'p')]
    context: bool,
    /// Measure the GPU layout model's cost terms on every GPU (and between GPU 0 and 1
    /// where both exist), print them and keep them in the model's cache file.
    #[arg(long)]
    calibrate: bool,
    /// Describe a named application layout (`-D` of rucx-perftest): its bytes of data,
    /// its buffer and its canonical shape.
    #[arg(long, value_name = "SPEC")]
    layout: Option<String>,
}

fn size(n: usize) -> String {
    match n {
        usize::MAX => "unlimited".into(),
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}G", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

fn print_devices(cfg: &Config) -> bool {
    let d = uct::discover(cfg);
    let mut ok = true;
    for r in &d.available {
        println!("#");
        if r.tl == "rc_verbs" && r.device == uct::tl::rc_verbs::MODEL_DEVICE {
            println!("#      Transport: rc_verbs (software HCA model: a model of an HCA, not one)");
        } else {
            println!("#      Transport: {}", r.tl);
        }
        println!("#         Device: {}", r.device);
        println!("#           Type: {:?}", r.kind);
        match uct::open(r, cfg) {
            Ok(iface) => {
                let a = iface.attr();
                println!("#   Capabilities: {:?}", a.flags);
                let f = a.flags;
                if f.contains(uct::IfaceFlags::AM_SHORT) {
                    println!("#      am_short: <= {}", size(a.am.max_short));
                }
                if f.contains(uct::IfaceFlags::AM_BCOPY) {
                    println!("#      am_bcopy: <= {}", size(a.am.max_bcopy));
                }
                if f.contains(uct::IfaceFlags::AM_ZCOPY) {
                    println!(
                        "#      am_zcopy: <= {}, up to {} iov, header <= {}",
                        size(a.am.max_zcopy),
                        a.am.max_iov,
                        a.am.max_hdr
                    );
                }
                if f.contains(uct::IfaceFlags::PUT_ZCOPY) {
                    println!(
                        "#     put_zcopy: <= {}, up to {} iov",
                        size(a.put.max_zcopy),
                        size(a.put.max_iov)
                    );
                }
                if f.contains(uct::IfaceFlags::GET_ZCOPY) {
                    println!(
                        "#     get_zcopy: <= {}, up to {} iov",
                        size(a.get.max_zcopy),
                        size(a.get.max_iov)
                    );
                }
                println!(
                    "#       Estimate: overhead {:.0} ns, latency {:.0} ns, bandwidth {:.2} GB/s",
                    a.perf.overhead_ns,
                    a.perf.latency_ns,
                    a.perf.bandwidth / 1e9
                );
                println!(
                    "#      Addresses: device {} bytes, interface {} bytes; memory domain {}",
                    a.device_addr_len,
                    a.iface_addr_len,
                    iface.md().name()
                );
                println!(
                    "#   Memory types: am {:?}, put/get local {:?}, remote {:?}; registers {:?}",
                    a.mem.am,
                    a.mem.rma_local,
                    a.mem.rma_remote,
                    iface.md().reg_mem_types()
                );
            }
            Err(e) => {
                ok = false;
                println!("#          Error: {e}");
            }
        }
    }
    println!("#");
    for a in &d.absent {
        println!("# Not available: {a}");
    }
    print_gpus();
    println!("#");
    println!(
        "# Deferred work (stream-triggered queues): the software trigger engine; libfabric: {}",
        match uct::trigger::cxi_presence() {
            Ok(found) => found,
            Err(why) => why,
        }
    );
    // The NIC's own queue, where a Slingshot NIC is (uct::tl::ofi).
    if std::path::Path::new("/dev/cxi0").exists() {
        match uct::tl::ofi::TriggeredEp::open(&Default::default()) {
            Ok(t) => println!("# Deferred work in the NIC: cxi queue opened ({t:?})"),
            Err(e) => println!("# Deferred work in the NIC: cxi queue not opened: {e}"),
        }
    }
    ok
}

/// Each CUDA device: name, memory, PCI bus, and which peers it can access directly.
#[cfg(feature = "cuda")]
fn print_gpus() {
    println!("#");
    match ucs::cuda::driver() {
        Some(d) => {
            for g in d.devices() {
                let peers: Vec<String> = g.peers.iter().map(|p| format!("cuda:{p}")).collect();
                println!(
                    "# GPU cuda:{}: {}, {}, PCI {}, peer access: {}",
                    g.ordinal,
                    g.name,
                    size(g.total_mem),
                    g.pci_bus_id,
                    if peers.is_empty() {
                        "none".to_string()
                    } else {
                        peers.join(" ")
                    }
                );
            }
        }
        None => println!(
            "# GPUs: none ({})",
            ucs::cuda::absent_reason().unwrap_or("no CUDA driver")
        ),
    }
    if ucs::cuda::driver().is_none() {
        return;
    }
    if ucs::cuda::gdr::absent_reason().is_none() {
        println!(
            "# gdr_copy: host -> GPU copies of up to {} bytes by CPU stores, GPU -> host of up \
             to {} by CPU loads, through gdrcopy; device messages of up to {} bytes go eager",
            ucs::cuda::gdr::GDR_COPY_MAX,
            ucs::cuda::gdr::GDR_READ_MAX,
            ucs::cuda::gdr::eager_max()
        );
    }
    match ucs::cuda::nvrtc::describe() {
        Some((path, (maj, min))) => {
            println!("# GPU layout kernels: compiled at run time by NVRTC {maj}.{min} ({path})")
        }
        None => println!(
            "# GPU layout kernels: none ({})",
            ucs::cuda::nvrtc::absent_reason().unwrap_or("no NVRTC")
        ),
    }
}

/// With `--layout` on a GPU machine: the host time of queueing the layout's pack and
/// unpack kernels on GPU 0, and their time with the wait, in this one process.
#[cfg(feature = "cuda")]
fn time_layout(l: &ucp::dt::Layout) {
    if ucs::cuda::driver().is_none() {
        return;
    }
    let Ok(c) = l.canonical() else { return };
    match ucp::dt::gpu::launch::time_layout(0, c, 201) {
        Ok([(pl, pt), (ul, ut)]) => {
            println!("gpu0 pack {pl:.2} us to queue, {pt:.2} us with the wait");
            println!("gpu0 unpack {ul:.2} us to queue, {ut:.2} us with the wait");
        }
        Err(e) => println!("gpu0 timing failed: {e}"),
    }
}

#[cfg(not(feature = "cuda"))]
fn time_layout(_l: &ucp::dt::Layout) {}

/// `--calibrate`: the layout model's terms per GPU and relation.
#[cfg(feature = "cuda")]
fn calibrate() -> bool {
    let Some(d) = ucs::cuda::driver() else {
        eprintln!(
            "rucx-info: no GPU to calibrate: {}",
            ucs::cuda::absent_reason().unwrap_or("no CUDA driver")
        );
        return false;
    };
    let n = d.devices().len() as i32;
    let mut ok = true;
    for dev in 0..n {
        let peer = (dev == 0 && n > 1).then_some(1);
        match ucp::dt::gpu::launch::calibrate(dev, peer, true) {
            Ok(v) => {
                for (r, k) in v {
                    println!(
                        "# cuda:{dev} {r:?}: launch {:.2} us, copy {:.2} us, 2D row {:.4} us, kernel {:.0} GB/s, local kernel {:.0} GB/s, copy {:.0} GB/s",
                        k.launch_us, k.copy_us, k.row_us, k.kernel_gbps, k.local_gbps, k.copy_gbps
                    );
                }
            }
            Err(e) => {
                eprintln!("rucx-info: calibrating cuda:{dev} failed: {e}");
                ok = false;
            }
        }
    }
    if let Some(f) = ucp::dt::gpu::launch::costs_file() {
        println!("# kept in {}", f.display());
    }
    ok
}

#[cfg(not(feature = "cuda"))]
fn calibrate() -> bool {
    eprintln!("rucx-info: built without the `cuda` feature");
    false
}

#[cfg(not(feature = "cuda"))]
fn print_gpus() {
    println!("#");
    println!("# GPUs: not looked for (built without the `cuda` feature)");
}

fn print_config(cfg: &Config) {
    println!(
        "# {:<28} {:<14} {:<10} meaning",
        "variable", "value", "default"
    );
    for v in ucs::config::TABLE {
        println!(
            "UCX_{:<24} {:<14} {:<10} {}",
            v.name,
            cfg.value_of(v.name).unwrap_or_default(),
            v.default,
            v.doc
        );
    }
}

fn main() {
    let args = Args::parse();
    let cfg = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rucx-info: {e}");
            std::process::exit(1);
        }
    };
    ucs::log::init(cfg.log_level.to_filter());
    if args.version {
        println!("# Rucx version {}", env!("CARGO_PKG_VERSION"));
    }
    if args.config {
        print_config(&cfg);
    }
    if args.devices && !print_devices(&cfg) {
        std::process::exit(1);
    }
    if args.context {
        print!("{}", ucp::Context::new(cfg.clone()).info_text());
    }
    if let Some(spec) = &args.layout {
        match ucp::dt::apps::named(spec) {
            Ok(l) => {
                println!("size {}", l.layout.size());
                println!("buffer {}", l.buf_len);
                println!("pieces {}", l.layout.canonical().map_or(0, |c| c.pieces()));
                println!("# {}", l.description);
                time_layout(&l.layout);
            }
            Err(e) => {
                eprintln!("rucx-info: --layout {spec}: {e}");
                std::process::exit(1);
            }
        }
    }
    if args.calibrate && !calibrate() {
        std::process::exit(1);
    }
    if !(args.devices
        || args.config
        || args.version
        || args.context
        || args.calibrate
        || args.layout.is_some())
    {
        eprintln!(
            "rucx-info: nothing to show; use -d (devices), -p (context resources), \
             -c (configuration), -v or --calibrate"
        );
        std::process::exit(1);
    }
}
