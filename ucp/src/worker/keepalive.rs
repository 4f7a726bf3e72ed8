//! Keepalive rounds (`UCX_KEEPALIVE_INTERVAL`, `UCX_KEEPALIVE_NUM_EPS`).
//!
//! Every interval, up to `num_eps` wired endpoints whose active-message lane is a network
//! transport get a `WIREUP_KEEPALIVE`, which the peer drops. Finding a dead peer is the
//! transport's job: over tcp, data that the peer's host does not acknowledge fails the
//! connection after three intervals (or `TCP_KEEPINTVL` x `TCP_KEEPCNT`, whichever is
//! shorter: `uct::tl::tcp`). The message is what gives it data to watch on a connection
//! that is otherwise idle, where the kernel's own keepalive would take
//! `TCP_KEEPIDLE` + `KEEPINTVL` x `KEEPCNT`. Same-host transports check the peer's
//! process and get no keepalive.
//!
//! UCX probes only endpoints in `UCP_ERR_HANDLING_MODE_PEER`; Rucx's transports report a
//! failed peer in either mode, so every endpoint over a network lane is probed.
//!
//! A worker asleep on its descriptor wakes for a round: a timer descriptor in its epoll
//! set is set, at each successful `arm`, to the next round, while an endpoint to probe
//! exists. Rounds run from `arm` and from `progress`'s periodic slow pass.

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;
use uct::component::DeviceKind;

use super::state::{Core, Ctrl, Ep, Keepalive, Worker};

/// The epoll data of the keepalive timer (interfaces use their index).
pub(crate) const KEEPALIVE_EVENT: u64 = u64::MAX - 2;

/// The rounds of a worker whose interfaces include a network transport, if
/// `UCX_KEEPALIVE_INTERVAL` is not `inf`; the timer joins `epoll`.
pub(crate) fn start(
    cfg: &ucs::Config,
    network: bool,
    epoll: &ucs::wakeup::Epoll,
) -> Option<Keepalive> {
    let every_ns = cfg.keepalive_interval_ns?;
    if !network {
        return None;
    }
    let timer = match TimerFd::new(
        ClockId::CLOCK_MONOTONIC,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    ) {
        Ok(t) => t,
        Err(e) => {
            log::warn!("ucp: no keepalive timer (timerfd_create: {e}); keepalive is off");
            return None;
        }
    };
    let fd = timer.as_fd().as_raw_fd();
    if let Err(e) = epoll.add(fd, libc::EPOLLIN as u32, KEEPALIVE_EVENT) {
        log::warn!("ucp: the keepalive timer cannot wake this worker (epoll_ctl: {e})");
    }
    Some(Keepalive {
        every_ns,
        num_eps: cfg.keepalive_num_eps,
        next_ns: ucs::time::now_ns().saturating_add(every_ns),
        cursor: 0,
        timer,
    })
}

/// Whether a round sends `e` a keepalive: paired, not failed, over a network lane.
fn probed(core: &Core, e: &Ep) -> bool {
    e.failed.is_none() && e.remote_id.is_some() && core.info[e.am.iface].kind == DeviceKind::Network
}

impl Worker {
    /// Runs the keepalive round if one is due.
    pub(crate) fn keepalive_due(&mut self) {
        let Worker {
            keepalive, core, ..
        } = self;
        let Some(k) = keepalive else {
            return;
        };
        let now = ucs::time::now_ns();
        if now < k.next_ns {
            return;
        }
        k.next_ns = now.saturating_add(k.every_ns);
        // The timer has fired (or is about to): take its expiration so that it does not
        // keep the descriptor readable.
        let _ = k.timer.unset();
        let slots: Vec<usize> = core
            .eps
            .iter()
            .filter(|(_, e)| probed(core, e))
            .map(|(i, _)| i)
            .collect();
        if slots.is_empty() {
            return;
        }
        let start = slots.partition_point(|&i| i < k.cursor);
        let n = k.num_eps.min(slots.len());
        for j in 0..n {
            let ep = slots[(start + j) % slots.len()];
            core.queue_ctrl(ep, Ctrl::Keepalive);
            core.stats.keepalives += 1;
            k.cursor = ep + 1;
        }
        core.work = true;
    }

    /// Before sleeping: sets the timer to the next round while there is an endpoint a
    /// round would probe.
    pub(crate) fn keepalive_arm(&mut self) {
        let Worker {
            keepalive, core, ..
        } = self;
        let Some(k) = keepalive else {
            return;
        };
        let any = core.eps.iter().any(|(_, e)| probed(core, e));
        let r = if any {
            let wait = k.next_ns.saturating_sub(ucs::time::now_ns()).max(1);
            k.timer.set(
                Expiration::OneShot(TimeSpec::from_duration(Duration::from_nanos(wait))),
                TimerSetTimeFlags::empty(),
            )
        } else {
            k.timer.unset()
        };
        if let Err(e) = r {
            log::debug!("ucp: keepalive timer: {e}");
        }
    }
}
