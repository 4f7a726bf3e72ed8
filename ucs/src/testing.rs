//! Test support shared by the crates' tests: network namespaces for a peer host whose
//! link can be cut. Not used by the library itself.

/// Two network namespaces joined by a veth pair, for a peer host whose link can be cut;
/// removed on drop.
#[derive(Debug)]
pub struct Netns {
    ns: [String; 2],
    /// The veth's name inside both namespaces.
    pub dev: &'static str,
}

impl Netns {
    /// The addresses of the two ends.
    pub const ADDRS: [&'static str; 2] = ["10.78.0.1", "10.78.0.2"];

    /// Makes the pair, or says why it cannot (not root, no `ip`).
    pub fn new() -> Result<Netns, String> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let id = std::process::id();
        let ip = |args: &[&str]| -> Result<(), String> {
            let out = std::process::Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| format!("cannot run ip: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "ip {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let mut me = Netns {
            ns: [String::new(), String::new()],
            dev: "rucx0",
        };
        for (i, side) in ["a", "b"].into_iter().enumerate() {
            let name = format!("rucx-{id}-{n}-{side}");
            ip(&["netns", "add", &name])?;
            me.ns[i] = name;
        }
        let (va, vb) = (
            format!("rta{}_{n}", id % 100_000),
            format!("rtb{}_{n}", id % 100_000),
        );
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])?;
        for (i, v) in [va, vb].iter().enumerate() {
            let ns = me.ns[i].clone();
            if let Err(e) = ip(&["link", "set", v, "netns", &ns]) {
                let _ = ip(&["link", "del", v]);
                return Err(e);
            }
            ip(&["-n", &ns, "link", "set", v, "name", me.dev])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", Self::ADDRS[i]),
                "dev",
                me.dev,
            ])?;
            ip(&["-n", &ns, "link", "set", me.dev, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(me)
    }

    /// Runs `f` on a thread inside namespace `i`: the sockets it makes (listening, and
    /// connecting later) belong to that namespace; accepted ones to their listener's.
    pub fn run<T: Send>(&self, i: usize, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.ns[i]);
        std::thread::scope(|s| {
            s.spawn(move || {
                let ns = std::fs::File::open(&path).expect("the namespace's file");
                nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                f()
            })
            .join()
            .expect("the thread inside the namespace")
        })
    }

    /// Takes namespace `i`'s end of the link down: its host stops answering, without a
    /// reset or a close reaching anyone.
    pub fn cut(&self, i: usize) {
        let st = std::process::Command::new("ip")
            .args(["-n", &self.ns[i], "link", "set", self.dev, "down"])
            .status()
            .expect("run ip");
        assert!(st.success(), "cutting the link");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in self.ns.iter().filter(|n| !n.is_empty()) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .status();
        }
    }
}
