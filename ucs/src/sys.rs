//! System facts: page size, host identity (boot id + hostname), process liveness.

use std::sync::OnceLock;

/// The page size in bytes.
pub fn page_size() -> usize {
    static PS: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PS.get_or_init(|| unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize)
}

/// The system's IOV_MAX.
pub fn iov_max() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_IOV_MAX) };
    if v > 0 {
        v as usize
    } else {
        1024
    }
}

/// Bytes of the last-level cache CPU 0 sees (sysfs `cache/index*/size` of the highest
/// level), or 32 MiB when the kernel does not say. `sysconf(_SC_LEVEL3_CACHE_SIZE)` is not
/// used: under a hypervisor glibc derives it from CPUID leaves that may describe the host
/// (256 MiB on a machine whose sysfs and `lscpu` say 32 MiB).
pub fn llc_size() -> usize {
    static LLC: OnceLock<usize> = OnceLock::new();
    *LLC.get_or_init(|| {
        let dir = "/sys/devices/system/cpu/cpu0/cache";
        let mut best: Option<(u32, usize)> = None;
        for i in 0..8 {
            let read = |f: &str| std::fs::read_to_string(format!("{dir}/index{i}/{f}"));
            let (Ok(level), Ok(size)) = (read("level"), read("size")) else {
                continue;
            };
            if let (Ok(l), Some(b)) = (level.trim().parse::<u32>(), parse_cache_size(&size)) {
                if best.is_none_or(|(bl, _)| l > bl) {
                    best = Some((l, b));
                }
            }
        }
        best.map_or(32 << 20, |(_, b)| b)
    })
}

/// A sysfs cache size: `"32768K"`, `"1M"` or plain bytes.
fn parse_cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mul) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .ok()?
        .checked_mul(mul)
        .filter(|&b| b > 0)
}

/// The kernel's boot id (changes each boot; identical for every process on this host).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A 64-bit id of this host: FNV-1a of boot id and hostname. Two processes have the same
/// id exactly when they run under the same kernel boot with the same hostname (network
/// namespaces with their own UTS name count as other hosts, as they should).
pub fn host_id() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(|| fnv1a64(format!("{}\0{}", boot_id(), hostname()).as_bytes()))
}

/// True when a peer that reported `peer_host_id` runs on this host.
pub fn same_host(peer_host_id: u64) -> bool {
    peer_host_id == host_id()
}

/// FNV-1a, 64-bit.
pub fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// True while process `pid` exists (a zombie counts as dead).
pub fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    // A zombie still answers kill(0): read its state.
    let mut buf = [0u8; STAT_BUF];
    match read_stat(pid, &mut buf) {
        Some(s) => match s.rfind(')') {
            Some(i) => !matches!(s.as_bytes().get(i + 2), Some(b'Z') | Some(b'X')),
            None => true,
        },
        None => false,
    }
}

/// Enough of /proc/PID/stat for its first 22 fields (the line is a few hundred bytes).
const STAT_BUF: usize = 1024;

/// The start of /proc/PID/stat, read into `buf` without allocating (the liveness checks
/// run periodically from transports' `progress`). `None` when it cannot be read.
fn read_stat(pid: i32, buf: &mut [u8; STAT_BUF]) -> Option<&str> {
    use std::io::{Read, Write};
    let mut path = [0u8; 32];
    let mut w = &mut path[..];
    write!(w, "/proc/{pid}/stat").ok()?;
    let n = 32 - w.len();
    // A path this short goes to open(2) through a stack buffer.
    let mut f = std::fs::File::open(std::str::from_utf8(&path[..n]).ok()?).ok()?;
    let mut len = 0;
    while len < buf.len() {
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(k) => len += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    // A line cut inside a multi-byte character of the name: keep the valid part.
    match std::str::from_utf8(&buf[..len]) {
        Ok(s) => Some(s),
        Err(e) => std::str::from_utf8(&buf[..e.valid_up_to()]).ok(),
    }
}

/// Whether the process a peer named by `(pid, start_time)` is gone: dead (a zombie
/// included), or its pid now belongs to a process started at another time.
pub fn process_gone(pid: i32, start_time: u64) -> bool {
    !process_alive(pid) || process_start_time(pid).is_some_and(|s| s != start_time)
}

/// The process start time in clock ticks (field 22 of /proc/PID/stat): with the pid it
/// names a process uniquely, so a recycled pid is not mistaken for the old peer.
pub fn process_start_time(pid: i32) -> Option<u64> {
    let mut buf = [0u8; STAT_BUF];
    let s = read_stat(pid, &mut buf)?;
    let rest = s.get(s.rfind(')')? + 2..)?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("4096"), Some(4096));
        assert_eq!(parse_cache_size("0K"), None);
        assert_eq!(parse_cache_size("lots"), None);
        assert_eq!(parse_cache_size(""), None);
        assert!(llc_size() > 0);
    }

    #[test]
    fn host_identity_is_stable() {
        assert_eq!(host_id(), host_id());
        assert!(same_host(host_id()));
        assert!(!boot_id().is_empty());
        assert!(page_size() >= 4096);
        assert!(iov_max() >= 16);
    }

    #[test]
    fn liveness() {
        let me = std::process::id() as i32;
        assert!(process_alive(me));
        // Field 22, as a plain read of the whole file gives it.
        let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
        let field22: u64 = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .nth(19)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(process_start_time(me), Some(field22));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(!process_alive(pid));
        assert!(!process_alive(-1));
    }
}
