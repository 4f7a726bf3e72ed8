//! The peer process of the two-process tests. See `rucx_tests::peer` for the protocol.
//!
//! Commands (one per line; answers one line each):
//! - `open TL DEV` → `addr DEVHEX IFACEHEX`
//! - `connect DEVHEX IFACEHEX` → `ep N`
//! - `expect N` → waits until N more checked messages arrived → `got N errors E`
//! - `pause` / `resume` → stop / restart receive progress → `ok`
//! - `reg SIZE SEED` → registers a region filled with `region_byte(SEED, i)` → `region ADDR RKEYHEX`
//! - `check OFF LEN SEED` → `ok` when region[OFF..OFF+LEN] holds `region_byte(SEED, OFF+i)`, else `bad I`
//! - `send EP COUNT SIZE` → sends COUNT checked messages (seq from 0) → `sent COUNT`
//! - `stream EP SIZE` → sends checked messages to EP until killed (no answer)
//! - `quit`

use std::io::BufRead;
use std::sync::mpsc::{channel, TryRecvError};

use rucx_tests::{from_hex, pattern, to_hex};
use ucs::{Config, Status};
use uct::{EpId, Handler, Iface};

#[derive(Default)]
struct Rx {
    got: u64,
    errors: u64,
    next_seq: u32,
    first_error: Option<String>,
}

impl Handler for Rx {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.got += 1;
        let res = if id != 5 {
            Err(format!("am id {id}"))
        } else {
            pattern::check(data).and_then(|seq| {
                if seq == self.next_seq {
                    Ok(())
                } else {
                    Err(format!("seq {seq} arrived, expected {}", self.next_seq))
                }
            })
        };
        self.next_seq = self.next_seq.wrapping_add(1);
        if let Err(e) = res {
            self.errors += 1;
            self.first_error.get_or_insert(e);
        }
    }
    fn ep_error(&mut self, ep: EpId, status: Status) {
        eprintln!("peer: ep {} failed: {status}", ep.0);
    }
}

fn main() {
    ucs::log::init(log::LevelFilter::Warn);
    let (tx, cmds) = channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send("quit".into());
    });

    let cfg = Config::from_env().expect("configuration");
    let mut iface: Option<Box<dyn Iface>> = None;
    let mut rx = Rx::default();
    let mut paused = false;
    let mut expect: Option<u64> = None;
    let mut region: Vec<u8> = Vec::new();

    loop {
        if !paused {
            if let Some(i) = iface.as_mut() {
                i.progress(&mut rx);
            }
        }
        if let Some(n) = expect {
            if rx.got >= n {
                let err = rx
                    .first_error
                    .take()
                    .map(|e| format!(" first {e}"))
                    .unwrap_or_default();
                println!("got {} errors {}{err}", rx.got, rx.errors);
                rx.got = 0;
                rx.errors = 0;
                expect = None;
            }
            continue;
        }
        let line = match cmds.try_recv() {
            Ok(l) => l,
            Err(TryRecvError::Empty) => {
                if iface.is_none() || paused {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                continue;
            }
            Err(TryRecvError::Disconnected) => return,
        };
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["open", tl, dev] => match rucx_tests::open_iface(tl, dev, &cfg) {
                Ok(i) => {
                    println!(
                        "addr {} {}",
                        hex_or_dash(i.device_address()),
                        to_hex(i.iface_address())
                    );
                    iface = Some(i);
                }
                Err(e) => println!("error {e}"),
            },
            ["connect", dev, ifa] => {
                let i = iface.as_mut().expect("open first");
                match i.ep_connect(
                    &from_hex(dev).unwrap_or_default(),
                    &from_hex(ifa).unwrap_or_default(),
                ) {
                    Ok(ep) => println!("ep {}", ep.0),
                    Err(e) => println!("error {e}"),
                }
            }
            ["expect", n] => expect = Some(n.parse().expect("count")),
            ["pause"] => {
                paused = true;
                println!("ok");
            }
            ["resume"] => {
                paused = false;
                println!("ok");
            }
            ["reg", size, seed] => {
                let size: usize = size.parse().expect("size");
                let seed: u32 = seed.parse().expect("seed");
                region = (0..size).map(|i| pattern::region_byte(seed, i)).collect();
                let i = iface.as_ref().expect("open first");
                // SAFETY: `region` stays alive (and is not reallocated) until the next `reg`
                // or exit; the tests use one region at a time.
                let mh =
                    unsafe { i.md().mem_reg(region.as_mut_ptr(), region.len()) }.expect("mem_reg");
                println!("region {} {}", mh.base, to_hex(&i.md().mkey_pack(&mh)));
            }
            ["check", off, len, seed] => {
                let (off, len, seed): (usize, usize, u32) = (
                    off.parse().unwrap(),
                    len.parse().unwrap(),
                    seed.parse().unwrap(),
                );
                match (off..off + len)
                    .find(|&k| region.get(k) != Some(&pattern::region_byte(seed, k)))
                {
                    None => println!("ok"),
                    Some(k) => println!("bad {k}"),
                }
            }
            ["send", ep, count, size] => {
                let ep = EpId(ep.parse().expect("ep"));
                let (count, size): (u32, usize) =
                    (count.parse().expect("count"), size.parse().expect("size"));
                let i = iface.as_mut().expect("open first");
                let mut seq = 0u32;
                while seq < count {
                    match i.am_bcopy(ep, 5, &mut |b| pattern::fill(b, seq, size)) {
                        Ok(_) => seq += 1,
                        Err(Status::NoResource) => {}
                        Err(e) => {
                            println!("error {e}");
                            break;
                        }
                    }
                    i.progress(&mut rx);
                }
                if seq == count {
                    println!("sent {count}");
                }
            }
            ["stream", ep, size] => {
                let ep = EpId(ep.parse().expect("ep"));
                let size: usize = size.parse().expect("size");
                let i = iface.as_mut().expect("open first");
                let mut seq = 0u32;
                loop {
                    match i.am_bcopy(ep, 5, &mut |b| pattern::fill(b, seq, size)) {
                        Ok(_) => seq = seq.wrapping_add(1),
                        Err(Status::NoResource) => {}
                        Err(e) => {
                            eprintln!("peer: stream stopped: {e}");
                            return;
                        }
                    }
                    i.progress(&mut rx);
                }
            }
            ["quit"] => return,
            _ => println!("error unknown command {line}"),
        }
    }
}

fn hex_or_dash(b: &[u8]) -> String {
    if b.is_empty() {
        "-".into()
    } else {
        to_hex(b)
    }
}
