//! The transports. Each module is one transport, complete in itself; the smallest,
//! [`self_`], is the place to start reading.

pub mod cma;
pub mod posix;
pub mod self_;
pub mod tcp;

use std::path::Path;

/// Transports whose hardware or kernel module is missing here, with the reason. They are
/// written against their real libraries in feature-gated modules; discovery lists them as
/// absent so `rucx-info -d` can say why.
pub(crate) fn absent_hardware() -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    if !Path::new("/dev/xpmem").exists() {
        v.push((
            "xpmem",
            "/dev/xpmem not found (xpmem kernel module not loaded)".to_string(),
        ));
    } else {
        v.push(("xpmem", "built without the `xpmem` feature".to_string()));
    }
    let hca = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| d.count())
        .unwrap_or(0);
    if hca == 0 {
        v.push((
            "rc_verbs",
            "no RDMA device in /sys/class/infiniband".to_string(),
        ));
    } else {
        v.push(("rc_verbs", "built without the `verbs` feature".to_string()));
    }
    let gpu = Path::new("/dev/nvidiactl").exists();
    for tl in ["cuda_copy", "cuda_ipc"] {
        v.push((
            tl,
            if gpu {
                "built without the `cuda` feature"
            } else {
                "no NVIDIA driver (/dev/nvidiactl not found)"
            }
            .to_string(),
        ));
    }
    v.push((
        "gdr_copy",
        if Path::new("/dev/gdrdrv").exists() {
            "built without the `gdrcopy` feature"
        } else {
            "/dev/gdrdrv not found (gdrdrv module not loaded)"
        }
        .to_string(),
    ));
    v.push(("cxi", "no Slingshot NIC (/dev/cxi0 not found)".to_string()));
    v
}

/// Copies `src` into the iov list in order; returns bytes copied.
pub(crate) fn scatter(src: &[u8], iov: &[crate::Iov]) -> usize {
    let mut off = 0;
    for v in iov {
        let n = v.length.min(src.len() - off);
        // SAFETY: the caller of the zcopy operation guarantees each iov entry is writable
        // for `length` bytes; `n` is within both buffers.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(off), v.buffer, n) };
        off += n;
        if off == src.len() {
            break;
        }
    }
    off
}

/// Copies the bytes of the iov list, in order, into `dst`; returns bytes copied.
pub(crate) fn gather(iov: &[crate::Iov], dst: &mut [u8]) -> usize {
    let mut off = 0;
    for v in iov {
        let n = v.length.min(dst.len() - off);
        // SAFETY: the caller of the zcopy operation guarantees each iov entry is readable
        // for `length` bytes; `n` is within both buffers.
        unsafe { std::ptr::copy_nonoverlapping(v.buffer, dst.as_mut_ptr().add(off), n) };
        off += n;
        if off == dst.len() {
            break;
        }
    }
    off
}
