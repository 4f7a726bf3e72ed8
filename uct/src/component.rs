//! Transport discovery: which transports can run on this machine, on which devices, and
//! why the others cannot. `ucp` opens what [`discover`] lists; `rucx-info -d` prints both
//! lists.
//!
//! The registry: the one module that names every transport, on the top floor of `uct`
//! above them (`docs/layers.md`); no transport names it.

use std::fmt;
use std::path::Path;

use ucs::Config;

use crate::dispatch::OpenIface;
use crate::error::OpenError;
use crate::iface::Iface;
use crate::tl;

/// A transport on a device that can be opened here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlResource {
    pub tl: &'static str,
    pub device: String,
    pub kind: DeviceKind,
}

/// What kind of device a resource uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// In-process loopback.
    Loopback,
    /// Same-host shared memory or cross-memory attach.
    SharedMemory,
    /// A network interface.
    Network,
    /// An accelerator (GPU).
    Accelerator,
}

/// A transport that is not offered, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlAbsent {
    pub tl: &'static str,
    pub reason: String,
}

impl fmt::Display for TlAbsent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.tl, self.reason)
    }
}

/// The result of discovery.
#[derive(Clone, Debug, Default)]
pub struct Discovery {
    pub available: Vec<TlResource>,
    pub absent: Vec<TlAbsent>,
}

/// Lists the transports and devices usable under `cfg` (`UCX_TLS`, `UCX_NET_DEVICES`).
pub fn discover(cfg: &Config) -> Discovery {
    let mut d = Discovery::default();
    let mut offer = |tl: &'static str, found: Result<Vec<(String, DeviceKind)>, String>| {
        if !cfg.tl_enabled(tl) {
            d.absent.push(TlAbsent {
                tl,
                reason: "excluded by UCX_TLS".into(),
            });
            return;
        }
        match found {
            Ok(devs) if devs.is_empty() => d.absent.push(TlAbsent {
                tl,
                reason: "no usable device".into(),
            }),
            Ok(devs) => d
                .available
                .extend(
                    devs.into_iter()
                        .map(|(device, kind)| TlResource { tl, device, kind }),
                ),
            Err(reason) => d.absent.push(TlAbsent { tl, reason }),
        }
    };
    offer("self", Ok(vec![("memory".into(), DeviceKind::Loopback)]));
    offer(
        "posix",
        tl::posix::probe().map(|()| vec![("memory".into(), DeviceKind::SharedMemory)]),
    );
    offer(
        "cma",
        tl::cma::probe().map(|()| vec![("memory".into(), DeviceKind::SharedMemory)]),
    );
    offer(
        "xpmem",
        tl::xpmem::probe().map(|()| vec![("memory".into(), DeviceKind::SharedMemory)]),
    );
    offer(
        "tcp",
        tl::tcp::devices(cfg).map(|v| v.into_iter().map(|n| (n, DeviceKind::Network)).collect()),
    );
    offer(
        "rc_verbs",
        tl::rc_verbs::devices().map(|v| v.into_iter().map(|n| (n, DeviceKind::Network)).collect()),
    );
    #[cfg(feature = "cuda")]
    offer(
        "cuda_copy",
        tl::cuda_copy::probe().map(|_| vec![("cuda".into(), DeviceKind::Accelerator)]),
    );
    #[cfg(feature = "cuda")]
    offer(
        "cuda_ipc",
        tl::cuda_ipc::probe().map(|_| vec![("cuda".into(), DeviceKind::Accelerator)]),
    );
    #[cfg(feature = "mock")]
    if cfg.tls.names.iter().any(|n| n == "mock_dev") && !cfg.tls.negate {
        offer(
            "mock_dev",
            Ok(vec![("model".into(), DeviceKind::Accelerator)]),
        );
    }
    for (tl, reason) in absent_hardware() {
        offer(tl, Err(reason));
    }
    for a in &d.absent {
        log::debug!("transport {a}");
    }
    d
}

/// Transports whose hardware, kernel module or library is missing here, with the reason;
/// discovery lists them as absent so `rucx-info -d` can say why.
fn absent_hardware() -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    // libfabric is loaded only where a Slingshot NIC exists: listing its providers costs
    // ~0.3 s, too much for every process that opens a context (`rucx-info -d` asks it
    // anyway, `uct::trigger::cxi_presence`).
    v.push((
        "cxi",
        if !Path::new("/dev/cxi0").exists() {
            "no Slingshot NIC (/dev/cxi0 not found)".to_string()
        } else {
            match crate::trigger::cxi_presence() {
                Ok(found) => format!(
                    "{found}: deferred work can run in its queue (uct::tl::ofi), but no \
                     interface carries ucp's traffic over it; ucp queues use the software \
                     trigger engine"
                ),
                Err(why) => why,
            }
        },
    ));
    #[cfg(not(feature = "cuda"))]
    for tl in ["cuda_copy", "cuda_ipc"] {
        v.push((tl, "built without the `cuda` feature".to_string()));
    }
    #[cfg(feature = "cuda")]
    if let Some(why) = ucs::cuda::gdr::absent_reason() {
        v.push(("gdr_copy", why));
    }
    #[cfg(not(feature = "cuda"))]
    v.push(("gdr_copy", "built without the `cuda` feature".to_string()));
    v
}

/// Opens an interface on a discovered resource.
pub fn open(res: &TlResource, cfg: &Config) -> Result<Box<dyn Iface>, OpenError> {
    match res.tl {
        "self" => Ok(Box::new(tl::self_::SelfIface::open(cfg))),
        "posix" => Ok(Box::new(tl::posix::PosixIface::open(cfg)?)),
        "cma" => Ok(Box::new(tl::cma::CmaIface::open(cfg)?)),
        "xpmem" => Ok(Box::new(tl::xpmem::XpmemIface::open(cfg)?)),
        "tcp" => Ok(Box::new(tl::tcp::TcpIface::open(cfg, &res.device)?)),
        "rc_verbs" => Ok(Box::new(tl::rc_verbs::RcIface::open(cfg, &res.device)?)),
        #[cfg(feature = "cuda")]
        "cuda_copy" => tl::cuda_copy::CudaCopyIface::open()
            .map(|i| Box::new(i) as Box<dyn Iface>)
            .map_err(|s| OpenError::Unavailable {
                tl: "cuda_copy",
                reason: s.to_string(),
            }),
        #[cfg(feature = "cuda")]
        "cuda_ipc" => tl::cuda_ipc::CudaIpcIface::open(cfg)
            .map(|i| Box::new(i) as Box<dyn Iface>)
            .map_err(|s| OpenError::Unavailable {
                tl: "cuda_ipc",
                reason: s.to_string(),
            }),
        #[cfg(feature = "mock")]
        "mock_dev" => Ok(Box::new(tl::mock_dev::MockDevIface::open())),
        other => Err(OpenError::UnknownTl(other.to_string())),
    }
}

/// [`open`], holding posix and self by their own types (see [`OpenIface`]).
pub fn open_iface(res: &TlResource, cfg: &Config) -> Result<OpenIface, OpenError> {
    match res.tl {
        "posix" => Ok(OpenIface::Posix(Box::new(tl::posix::PosixIface::open(
            cfg,
        )?))),
        "self" => Ok(OpenIface::SelfTl(Box::new(tl::self_::SelfIface::open(cfg)))),
        _ => open(res, cfg).map(OpenIface::Dyn),
    }
}

/// Opens transport `tl` on `device` (or its first device when `None`), for tests and tools.
pub fn open_by_name(
    tl: &str,
    device: Option<&str>,
    cfg: &Config,
) -> Result<Box<dyn Iface>, OpenError> {
    let d = discover(cfg);
    let res = d
        .available
        .iter()
        .find(|r| r.tl == tl && device.is_none_or(|dev| r.device == dev))
        .ok_or_else(|| match d.available.iter().find(|r| r.tl == tl) {
            Some(r) => OpenError::NoDevice {
                tl: r.tl,
                device: device.unwrap_or_default().to_string(),
            },
            None => OpenError::UnknownTl(match d.absent.iter().find(|a| a.tl == tl) {
                Some(a) => a.to_string(),
                None => tl.to_string(),
            }),
        })?;
    open(res, cfg)
}
