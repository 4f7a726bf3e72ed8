//! UCP stream tests: `stream_lat` (ping-pong of `-s` bytes each way) and `stream_bw` (the
//! client streams, the server receives `-s` bytes at a time and acknowledges the last),
//! with `stream_send` and `stream_recv(waitall)` as `ucx_perftest`'s default receive mode.

use ucp::{Data, RecvParams, ReqId, SendParams, StreamRecv};

use super::{Msgs, Plan, Side};
use crate::args::Args;
use crate::bootstrap::Oob;
use crate::report::Kind;
use crate::report::{LatClock, StreamClock};
use crate::{Error, Role};

impl Side {
    /// Sends one message on the endpoint's stream; `Some` while in flight.
    #[inline(always)]
    fn stream_send(&mut self, data: &Data) -> Result<Option<ReqId>, Error> {
        self.worker
            .stream_send(self.ep, data, SendParams::default())
            .map_err(|e| Error::Peer(format!("stream send failed: {e}")))
    }

    /// Receives exactly one message's bytes from the stream.
    #[inline(always)]
    fn stream_recv(&mut self, data: &Data, oob: &Oob) -> Result<(), Error> {
        let got = match self
            .worker
            .stream_recv(self.ep, data, true, RecvParams::default())
            .map_err(|e| Error::Peer(format!("stream receive failed: {e}")))?
        {
            StreamRecv::Done(n) => n,
            StreamRecv::Pending(id) => self.wait(id, oob)?.map_or(0, |i| i.length),
        };
        if got != self.size {
            return Err(Error::Peer(format!(
                "stream receive got {got} bytes, expected {}",
                self.size
            )));
        }
        Ok(())
    }
}

/// `stream_lat`: the client sends, the server receives the whole message and sends it
/// back.
pub(super) fn lat(
    args: &Args,
    role: Role,
    s: &mut Side,
    tx: &Msgs,
    rx: &Msgs,
    oob: &Oob,
) -> Result<(), Error> {
    let (txd, _) = tx.slot(0);
    let (rxd, _) = rx.slot(0);
    let warmup = args.warmup;
    let total = warmup + args.iters();
    if role == Role::Client {
        let mut clock = LatClock::new(args, Kind::Latency, s.size);
        for i in 0..total {
            let sreq = s.stream_send(txd)?;
            s.stream_recv(rxd, oob)?;
            if let Some(id) = sreq {
                s.wait(id, oob)?;
            }
            clock.tick(i, warmup);
        }
        clock.rep.finish();
    } else {
        for _ in 0..total {
            s.stream_recv(rxd, oob)?;
            if let Some(id) = s.stream_send(txd)? {
                s.wait(id, oob)?;
            }
        }
    }
    Ok(())
}

/// `stream_bw`: the client keeps up to `-O` (1) sends in flight; the server receives the
/// messages one by one and acknowledges the last.
pub(super) fn bw(
    args: &Args,
    plan: &Plan,
    role: Role,
    s: &mut Side,
    tx: &Msgs,
    rx: &Msgs,
    oob: &Oob,
) -> Result<(), Error> {
    let warmup = args.warmup;
    let total = warmup + args.iters();
    if role == Role::Server {
        let (rxd, _) = rx.slot(0);
        for _ in 0..total {
            s.stream_recv(rxd, oob)?;
        }
        return s.send_ack(oob);
    }
    let (txd, _) = tx.slot(0);
    let mut clock = StreamClock::new(args, s.size);
    let mut inflight: Vec<Option<ReqId>> = vec![None; plan.window];
    for i in 0..total {
        if i == warmup && warmup > 0 {
            s.wait_all(&mut inflight, oob)?;
            clock.restart();
        }
        let slot = (i % plan.window as u64) as usize;
        if let Some(id) = inflight[slot].take() {
            s.wait(id, oob)?;
        }
        inflight[slot] = s.stream_send(txd)?;
        clock.tick(i, warmup);
    }
    s.wait_all(&mut inflight, oob)?;
    s.recv_ack(oob)?;
    clock.finish();
    Ok(())
}
