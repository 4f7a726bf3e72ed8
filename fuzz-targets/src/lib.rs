//! Every decoder of bytes a peer (or an application, for the C ABI's blobs) hands Rucx, as
//! a fuzz target: a function of arbitrary bytes that must never panic, hang or allocate
//! without bound, whatever the bytes are.
//!
//! The same functions run under libFuzzer (`fuzz/`, nightly: `cargo fuzz run NAME`) and in
//! a stable smoke test (`tests/smoke.rs`, which CI runs over the stored corpora and their
//! mutations). Where a decoder accepts its input, the target also checks what it promises
//! (an encoding decodes back to itself, a hash names its encoding).

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::Arc;

use ucp::{Context, EpHandle, Worker};
use ucs::Config;

/// A fuzz target: a function of arbitrary bytes that must not panic.
pub type Target = fn(&[u8]);

/// The targets, by name (the cargo-fuzz binaries and the corpus directories are named so).
pub const TARGETS: &[(&str, Target)] = &[
    ("wire_headers", wire_headers),
    ("worker_address", worker_address),
    ("layout", layout),
    ("tcp_frames", tcp_frames),
    ("rkey", rkey),
    ("c_blobs", c_blobs),
    ("handler", handler),
];

/// The protocol headers' decoders (`ucp::proto::wire`): the first byte picks one, the rest
/// is its input.
pub fn wire_headers(data: &[u8]) {
    use ucp::proto::wire;
    use ucs::wire::Reader;
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 12 {
        0 => {
            let _ = wire::decode_rts(rest);
        }
        1 => {
            let _ = wire::decode_rtr(rest);
        }
        2 => {
            let _ = wire::decode_rtr_put(rest);
        }
        3 => {
            let _ = wire::decode_rtr_split(rest);
        }
        4 => {
            let _ = wire::RtrSplitLayout::decode(rest);
        }
        5 => {
            let _ = wire::decode_ack(rest);
        }
        6 => {
            let _ = wire::Wireup::decode(rest);
        }
        7 => {
            let _ = wire::FirstHdr::read(&mut Reader::new(rest));
        }
        8 => {
            let _ = wire::FragHdr::read(&mut Reader::new(rest));
        }
        9 => {
            let _ = wire::decode_layout_part(rest);
        }
        10 => {
            if let Some(m) = wire::RtrUmr::decode(rest) {
                // What decodes, encodes back to the same bytes.
                assert_eq!(m.encode(), rest);
            }
        }
        _ => {
            let _ = wire::RndvKey::decode(rest);
        }
    }
}

/// A worker address (`ucp::address`), as connecting to a peer decodes it.
pub fn worker_address(data: &[u8]) {
    if let Ok(a) = ucp::address::WorkerAddress::decode(data) {
        // What decodes, encodes again to something that decodes to the same.
        let again = ucp::address::WorkerAddress::decode(&a.encode()).expect("re-encoded address");
        assert_eq!(again.uuid, a.uuid);
    }
}

/// A layout description on the wire (`ucp::dt::Canon::decode`), then compiled as a
/// rendezvous receiver compiles it.
pub fn layout(data: &[u8]) {
    let Ok(c) = ucp::dt::Canon::decode(data) else {
        return;
    };
    let enc = c.encode().expect("a decoded layout encodes");
    let back = ucp::dt::Canon::decode(&enc).expect("its encoding decodes");
    assert_eq!(back.hash128(), c.hash128(), "the hash names the encoding");
    if let Ok(l) = ucp::datatype::DtLayout::from_canon(c) {
        assert_eq!(l.hash(), back.hash128());
    }
}

/// A tcp byte stream, frame by frame (`uct::tl::tcp`).
pub fn tcp_frames(data: &[u8]) {
    let _ = uct::tl::tcp::fuzz_stream(data);
}

/// A worker with only the `self` transport and an endpoint to itself: the peer every
/// message of the stateful targets comes from.
struct Loopback {
    w: Worker,
    ep: EpHandle,
}

thread_local! {
    static LOOPBACK: RefCell<Option<Loopback>> = const { RefCell::new(None) };
}

fn loopback_new() -> Loopback {
    let cfg = Config::from_lookup(|k| (k == "TLS").then(|| "self".to_string()))
        .expect("a self-only configuration");
    let ctx: Arc<Context> = Context::new(cfg);
    let mut w = Worker::new(&ctx).expect("a self-only worker");
    let addr = w.address().to_vec();
    let ep = w.ep_create(&addr).expect("an endpoint to itself");
    for _ in 0..100 {
        w.progress();
    }
    Loopback { w, ep }
}

/// Runs `f` on the loopback worker, made again when an input failed its endpoint (so every
/// input meets a live one).
fn with_loopback(f: impl FnOnce(&mut Loopback)) {
    LOOPBACK.with(|cell| {
        let mut slot = cell.borrow_mut();
        let lb = slot.get_or_insert_with(loopback_new);
        f(lb);
        if lb.w.poll_ep_error().is_some() {
            *slot = Some(loopback_new());
        }
    });
}

/// A packed remote key (`Worker::rkey_unpack`), as `ucp_ep_rkey_unpack` hands it on.
pub fn rkey(data: &[u8]) {
    with_loopback(|lb| {
        if let Ok(k) = lb.w.rkey_unpack(lb.ep, data) {
            let (base, len) = k.bounds();
            assert!(base.checked_add(len).is_some(), "a key's range fits");
        }
    });
}

/// A protocol message (the first byte is its active-message id), handed to the worker's
/// handlers as if it had arrived from the endpoint's peer.
pub fn handler(data: &[u8]) {
    let Some((&id, rest)) = data.split_first() else {
        return;
    };
    with_loopback(|lb| {
        lb.w.deliver_for_fuzzing(id, rest);
        for _ in 0..4 {
            lb.w.progress();
        }
    });
}

mod c {
    //! The C ABI entry points the `c_blobs` target calls (linked from the
    //! `rucx-bindings-c` rlib).
    use rucx_bindings_c::types::{
        ucp_params_t, ucp_worker_address_attr_t, ucp_worker_params_t, ucs_status_t,
    };
    use std::ffi::{c_char, c_uint, c_void};

    extern "C" {
        pub fn ucp_config_read(
            prefix: *const c_char,
            file: *const c_char,
            config: *mut *mut c_void,
        ) -> ucs_status_t;
        pub fn ucp_config_modify(
            config: *mut c_void,
            name: *const c_char,
            value: *const c_char,
        ) -> ucs_status_t;
        pub fn ucp_config_release(config: *mut c_void);
        pub fn ucp_init_version(
            major: c_uint,
            minor: c_uint,
            params: *const ucp_params_t,
            config: *const c_void,
            ctx: *mut *mut c_void,
        ) -> ucs_status_t;
        pub fn ucp_worker_create(
            ctx: *mut c_void,
            params: *const ucp_worker_params_t,
            worker: *mut *mut c_void,
        ) -> ucs_status_t;
        pub fn ucp_worker_get_address(
            worker: *mut c_void,
            address: *mut *mut c_void,
            len: *mut usize,
        ) -> ucs_status_t;
        pub fn ucp_worker_release_address(worker: *mut c_void, address: *mut c_void);
        pub fn ucp_worker_address_query(
            address: *mut c_void,
            attr: *mut ucp_worker_address_attr_t,
        ) -> ucs_status_t;
        pub fn ucp_ep_create(
            worker: *mut c_void,
            params: *const rucx_bindings_c::types::ucp_ep_params_t,
            ep: *mut *mut c_void,
        ) -> ucs_status_t;
        pub fn ucp_ep_rkey_unpack(
            ep: *mut c_void,
            buffer: *const c_void,
            rkey: *mut *mut c_void,
        ) -> ucs_status_t;
        pub fn ucp_rkey_destroy(rkey: *mut c_void);
    }
}

/// A C worker (self transport only) and an endpoint to itself, for `c_blobs`.
struct CLoop {
    ep: *mut c_void,
}

thread_local! {
    static CLOOP: RefCell<Option<CLoop>> = const { RefCell::new(None) };
}

fn cloop_new() -> CLoop {
    use rucx_bindings_c::types::*;
    let mut cfg = std::ptr::null_mut();
    let mut ctx = std::ptr::null_mut();
    let mut w = std::ptr::null_mut();
    let mut addr = std::ptr::null_mut();
    let mut len = 0usize;
    let mut ep = std::ptr::null_mut();
    // SAFETY: the C ABI's calls with valid arguments, in the order ucp.h gives them; the
    // context and worker live for the rest of the process (one per thread).
    unsafe {
        assert_eq!(ucp_config_read_ok(&mut cfg), 0);
        c::ucp_config_modify(cfg, c"TLS".as_ptr(), c"self".as_ptr());
        let mut p: ucp_params_t = std::mem::zeroed();
        p.field_mask = UCP_PARAM_FIELD_FEATURES;
        p.features = 1 | 2; // UCP_FEATURE_TAG | UCP_FEATURE_RMA
        assert_eq!(c::ucp_init_version(1, 13, &p, cfg, &mut ctx), 0);
        c::ucp_config_release(cfg);
        let wp: ucp_worker_params_t = std::mem::zeroed();
        assert_eq!(c::ucp_worker_create(ctx, &wp, &mut w), 0);
        assert_eq!(c::ucp_worker_get_address(w, &mut addr, &mut len), 0);
        let mut e: ucp_ep_params_t = std::mem::zeroed();
        e.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        e.address = addr.cast_const().cast();
        assert_eq!(c::ucp_ep_create(w, &e, &mut ep), 0);
        c::ucp_worker_release_address(w, addr);
    }
    CLoop { ep }
}

/// # Safety
/// `cfg` writable.
unsafe fn ucp_config_read_ok(cfg: *mut *mut c_void) -> i32 {
    // SAFETY: per the contract; NULL prefix and file are allowed.
    unsafe { c::ucp_config_read(std::ptr::null(), std::ptr::null(), cfg) }
}

/// The C ABI's framed blobs: a worker address (`ucp_worker_address_query`) and a packed
/// remote key (`ucp_ep_rkey_unpack`). The first byte picks one; the rest is framed as the
/// library frames its blobs (magic, length), with the wrong magic when the second byte's
/// low bit is set (the application's contract is a blob of ours, so only the magic and
/// what the frame carries are the library's to check).
pub fn c_blobs(data: &[u8]) {
    use rucx_bindings_c::types::ucp_worker_address_attr_t;
    let [which, how, rest @ ..] = data else {
        return;
    };
    const ADDR_MAGIC: u32 = 0x4452_5852; // "RXRD", bindings-c/src/worker.rs
    const RKEY_MAGIC: u32 = 0x4b52_5852; // "RXRK", bindings-c/src/context.rs
    let magic = match (which & 1, how & 1) {
        (0, 0) => ADDR_MAGIC,
        (_, 0) => RKEY_MAGIC,
        (0, _) => RKEY_MAGIC,
        _ => ADDR_MAGIC,
    };
    let mut blob = Vec::with_capacity(8 + rest.len());
    blob.extend_from_slice(&magic.to_le_bytes());
    blob.extend_from_slice(&(rest.len() as u32).to_le_bytes());
    blob.extend_from_slice(rest);
    if which & 1 == 0 {
        // SAFETY: attr is writable; the blob is readable for the length its header gives
        // (framed so above).
        unsafe {
            let mut attr: ucp_worker_address_attr_t = std::mem::zeroed();
            attr.field_mask = 1; // UCP_WORKER_ADDRESS_ATTR_FIELD_UID
            let _ = c::ucp_worker_address_query(blob.as_mut_ptr().cast(), &mut attr);
        }
    } else {
        CLOOP.with(|cell| {
            let mut slot = cell.borrow_mut();
            let cl = slot.get_or_insert_with(cloop_new);
            let mut k = std::ptr::null_mut();
            // SAFETY: our endpoint; the blob readable as above; k writable.
            unsafe {
                if c::ucp_ep_rkey_unpack(cl.ep, blob.as_ptr().cast(), &mut k) == 0 {
                    c::ucp_rkey_destroy(k);
                }
            }
        });
    }
}
