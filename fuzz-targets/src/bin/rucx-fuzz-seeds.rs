//! Writes the seed corpora of the fuzz targets (`fuzz/corpus/NAME/seed-*`): valid inputs
//! made by the real encoders, which the fuzzers mutate from.
//!
//!     cargo run -p rucx-fuzz-targets --bin rucx-fuzz-seeds -- fuzz/corpus

use std::path::{Path, PathBuf};

use ucp::proto::wire::{self, FirstHdr, FragHdr, RemoteSeg, RtsData, Wireup};
use ucs::Config;

fn write(dir: &Path, name: &str, seeds: &[Vec<u8>]) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).expect("corpus directory");
    for (i, s) in seeds.iter().enumerate() {
        std::fs::write(d.join(format!("seed-{i:03}")), s).expect("seed file");
    }
    println!("{name}: {} seeds", seeds.len());
}

fn with(id: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![id];
    v.extend_from_slice(body);
    v
}

fn main() {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    let first = FirstHdr {
        tag: 7,
        ep: 0,
        flags: 0,
        sreq: 1,
        total: 20_000,
    };
    let mut h = vec![0u8; 29];
    first.write(&mut h);
    let mut frag = vec![0u8; 20];
    FragHdr {
        ep: 0,
        req: 1,
        offset: 8000,
    }
    .write(&mut frag);
    let segs: wire::Segs = [RemoteSeg {
        addr: 0x1000,
        len: 20_000,
    }]
    .into_iter()
    .collect();
    let rkey: wire::KeyBytes = b"cma key bytes".iter().copied().collect();
    let rts_get = wire::encode_rts(
        &first,
        &RtsData::Get {
            rkey: rkey.clone(),
            segs: segs.clone(),
            help: true,
        },
    );
    let rts_am = wire::encode_rts(&first, &RtsData::Am);
    let rts_layout = wire::encode_rts(
        &first,
        &RtsData::GetLayout {
            rkey: rkey.clone(),
            origin: 0x2000,
            hash: 5,
            layout: Some(vec![1, 0, 0, 1, 5, 48, 0, 16]),
            help: false,
        },
    );
    let wireups: Vec<Vec<u8>> = [1u8, 2, 3]
        .iter()
        .map(|&kind| {
            Wireup {
                kind,
                uuid: 0x1234,
                src_ep: 0,
                dst_ep: 0,
                addr: if kind == 1 { vec![9; 40] } else { Vec::new() },
            }
            .encode()
        })
        .collect();
    let rtr = wire::encode_rtr(0, 1, 2).to_vec();
    let ack = wire::encode_ack(0, 1, 0).to_vec();
    let rtr_put = wire::encode_rtr_put(0, 1, 2, &rkey, &segs);
    let rtr_split = wire::encode_rtr_split(0, 1, 2, 10_000, &rkey, &segs);
    let mut eager = 7u64.to_le_bytes().to_vec();
    eager.extend_from_slice(b"payload");
    let mut sync = 7u64.to_le_bytes().to_vec();
    sync.extend_from_slice(&0u32.to_le_bytes());
    sync.extend_from_slice(&3u64.to_le_bytes());
    sync.extend_from_slice(b"sync payload");
    let mut first_msg = h.clone();
    first_msg.extend_from_slice(&[0xab; 64]);
    let mut middle = frag.clone();
    middle.extend_from_slice(&[0xcd; 64]);

    write(
        &dir,
        "wire_headers",
        &[
            with(0, &rts_get),
            with(0, &rts_am),
            with(0, &rts_layout),
            with(1, &rtr),
            with(2, &rtr_put),
            with(3, &rtr_split),
            with(5, &ack),
            with(6, &wireups[0]),
            with(6, &wireups[1]),
            with(7, &h),
            with(8, &frag),
        ],
    );

    // The handler target: (am id, message) as the protocols send them, to endpoint 0.
    write(
        &dir,
        "handler",
        &[
            with(wire::AM_EAGER, &eager),
            with(wire::AM_EAGER_SYNC, &sync),
            with(wire::AM_EAGER_FIRST, &first_msg),
            with(wire::AM_EAGER_MIDDLE, &middle),
            with(wire::AM_RTS, &rts_get),
            with(wire::AM_RTS, &rts_am),
            with(wire::AM_RTS, &rts_layout),
            with(wire::AM_RTR, &rtr),
            with(wire::AM_ACK, &ack),
            with(wire::AM_RTR_PUT, &rtr_put),
            with(wire::AM_RTR_SPLIT, &rtr_split),
            with(wire::AM_WIREUP, &wireups[0]),
            with(wire::AM_WIREUP, &wireups[1]),
            with(wire::AM_WIREUP, &wireups[2]),
            with(wire::AM_FIN, &frag),
            with(wire::AM_RNDV_DATA, &middle),
        ],
    );

    // Worker addresses and packed keys of a real worker.
    let cfg = Config::from_lookup(|k| (k == "TLS").then(|| "self".to_string())).expect("config");
    let ctx = ucp::Context::new(cfg);
    let mut w = ucp::Worker::new(&ctx).expect("worker");
    let full = ucp::Context::new(Config::default());
    let wf = ucp::Worker::new(&full).expect("worker with every transport");
    write(
        &dir,
        "worker_address",
        &[w.address().to_vec(), wf.address().to_vec()],
    );
    let m = w.mem_map(None, 4096).expect("mem_map");
    let packed = w.rkey_pack(m).expect("rkey_pack");
    write(&dir, "rkey", std::slice::from_ref(&packed));

    // C ABI blobs: (which, how, body) with body a worker address or a C packed key (one
    // key: count, worker id, length, the ucp key).
    let mut c_key = vec![1u8];
    c_key.extend_from_slice(&0u64.to_le_bytes());
    c_key.extend_from_slice(&(packed.len() as u32).to_le_bytes());
    c_key.extend_from_slice(&packed);
    write(
        &dir,
        "c_blobs",
        &[
            [&[0u8, 0][..], w.address()].concat(),
            [&[1u8, 0][..], &c_key[..]].concat(),
        ],
    );

    // Layouts: the named application layouts' encodings and a few plain ones.
    let mut layouts = Vec::new();
    for spec in [
        "milc_su3_zd:4",
        "nas_mg_y:16",
        "wrf_x_sa:8,5",
        "specfem3d_cm:c1",
        "stencil3d_face:32x32x32,y,2",
    ] {
        let nl = ucp::dt::apps::named(spec).expect("named layout");
        let dt = ucp::datatype::DtLayout::new(&nl.layout).expect("compiles");
        layouts.push(dt.canon().encode().expect("encodes"));
    }
    layouts.push(vec![1, 0, 0, 1, 5, 48, 0, 16]);
    write(&dir, "layout", &layouts);

    // tcp frames: a hello, then an AM, a put, a put ack, a get request and response.
    let frame = |ty: u8, id: u8, body: &[u8]| {
        let mut v = vec![ty, id, 0, 0];
        v.extend_from_slice(&(body.len() as u32).to_le_bytes());
        v.extend_from_slice(body);
        v
    };
    let mut hello = b"RTCP".to_vec();
    hello.extend_from_slice(&1u16.to_le_bytes());
    hello.resize(24, 0);
    let stream = [
        frame(1, 0, &hello),
        frame(2, 3, b"an active message"),
        frame(3, 0, &[0u8; 24 + 16]),
        frame(4, 0, &[0u8; 8]),
        frame(5, 0, &[0u8; 24]),
        frame(6, 0, &[0u8; 8 + 16]),
    ]
    .concat();
    write(&dir, "tcp_frames", &[stream, frame(2, 1, &[])]);
}
