//! Rucx's C extensions (`include/rucx.h`): structured datatypes (`ucpx_dt_create_*`) that
//! the `ucp.h` operations accept wherever they take a `ucp_datatype_t`, and
//! `ucpx_status_string`.
//!
//! A layout datatype is the address of a 16-aligned [`LayoutBox`] with class
//! [`UCPX_DATATYPE_LAYOUT`] (4, a class UCX does not use) in the low bits. It holds the
//! `ucp::dt::Layout` and its compiled `DtLayout`; an operation on `count` elements uses the
//! compiled layout itself for `count == 1` and `contiguous(count, layout)` otherwise, built
//! once per count and cached in the box. Operations hold their own `Arc<DtLayout>`, so
//! `ucpx_dt_destroy` while one is in flight is sound.

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};

use ucp::datatype::{DtLayout, LayoutBuf};
use ucp::dt::{Layout, Order};
use ucp::Data;
use ucs::Status;

use crate::types::*;
use crate::{code, guard};

/// The datatype class of layout handles (UCX uses 0, 1, 2 and 7).
pub const UCPX_DATATYPE_LAYOUT: u64 = 4;
pub const UCPX_ORDER_C: c_int = 0;
pub const UCPX_ORDER_FORTRAN: c_int = 1;

const LAYOUT_MAGIC: u64 = 0x5275_6378_4c61_796f;
/// Compiled `contiguous(count, layout)` forms kept per handle.
const COUNT_CACHE: usize = 8;

/// What a layout `ucp_datatype_t` points at.
#[repr(C, align(16))]
#[derive(Debug)]
struct LayoutBox {
    magic: u64,
    layout: Layout,
    one: Arc<DtLayout>,
    /// `(count, contiguous(count, layout))`, most recently used last.
    counts: Mutex<Vec<(usize, Arc<DtLayout>)>>,
}

impl LayoutBox {
    /// The compiled layout of `count` consecutive elements.
    fn for_count(&self, count: usize) -> Result<Arc<DtLayout>, Status> {
        if count == 1 {
            return Ok(self.one.clone());
        }
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = c.iter().position(|(n, _)| *n == count) {
            let e = c.remove(i);
            let dt = e.1.clone();
            c.push(e);
            return Ok(dt);
        }
        let l = Layout::contiguous(count as u64, &self.layout).map_err(|_| Status::InvalidParam)?;
        let dt = DtLayout::new(&l).map_err(|_| Status::InvalidParam)?;
        if c.len() >= COUNT_CACHE {
            c.remove(0);
        }
        c.push((count, dt.clone()));
        Ok(dt)
    }
}

/// The box a layout datatype points at, if `dt` is one of ours.
///
/// # Safety
/// `dt` of class [`UCPX_DATATYPE_LAYOUT`] is a handle from `ucpx_dt_create_*` not yet
/// destroyed.
unsafe fn layout_box<'a>(dt: ucp_datatype_t) -> Option<&'a LayoutBox> {
    if dt & UCP_DATATYPE_CLASS_MASK != UCPX_DATATYPE_LAYOUT {
        return None;
    }
    let p = (dt & !UCP_DATATYPE_CLASS_MASK) as *const LayoutBox;
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract; the magic word rejects stale or foreign handles that still
    // point at readable memory.
    let b = unsafe { &*p };
    (b.magic == LAYOUT_MAGIC).then_some(b)
}

/// `count` elements of layout datatype `dt` from origin `buffer`, as operation data.
///
/// # Safety
/// As for every `ucp.h` operation: every byte the layout touches from `buffer` stays valid
/// until the operation completes; `dt` as for [`layout_box`].
pub(crate) unsafe fn layout_data(
    buffer: *const c_void,
    count: usize,
    dt: ucp_datatype_t,
) -> Result<Data, Status> {
    // SAFETY: forwarded.
    let b = unsafe { layout_box(dt) }.ok_or(Status::InvalidParam)?;
    if count == 0 {
        return Ok(Data::Contig(ucp::Buf::EMPTY));
    }
    let l = b.for_count(count)?;
    if l.size() > 0 && buffer.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: per the contract, the layout's bytes from `buffer` are valid.
    Ok(Data::Layout(unsafe {
        LayoutBuf::new(buffer.cast_mut().cast(), l)
    }))
}

fn publish(layout: Result<Layout, ucp::dt::DtError>, out: *mut ucp_datatype_t) -> ucs_status_t {
    let Ok(layout) = layout else {
        return code(Status::InvalidParam);
    };
    let Ok(one) = DtLayout::new(&layout) else {
        return code(Status::InvalidParam);
    };
    let b = Box::into_raw(Box::new(LayoutBox {
        magic: LAYOUT_MAGIC,
        layout,
        one,
        counts: Mutex::new(Vec::new()),
    }));
    // SAFETY: `out` checked non-NULL by every caller; LayoutBox is 16-aligned, so the class
    // bits of its address are 0.
    unsafe { *out = b as u64 | UCPX_DATATYPE_LAYOUT };
    code(Status::Ok)
}

fn elem(elem_size: usize) -> Result<Layout, ucp::dt::DtError> {
    Layout::try_bytes(elem_size as u64)
}

/// Reads `n` elements of a C array (empty for `n == 0`).
///
/// # Safety
/// `p` readable for `n` elements when `n > 0` (checked non-NULL).
unsafe fn arr<'a, T>(p: *const T, n: usize) -> Option<&'a [T]> {
    if n == 0 {
        return Some(&[]);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    Some(unsafe { std::slice::from_raw_parts(p, n) })
}

/// `MPI_Type_vector` over `elem_size`-byte elements: `count` blocks of `blocklen` elements,
/// block starts `stride` elements apart.
///
/// # Safety
/// `out` writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_dt_create_vector(
    count: usize,
    blocklen: usize,
    stride: isize,
    elem_size: usize,
    out: *mut ucp_datatype_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if out.is_null() || elem_size == 0 {
            return code(Status::InvalidParam);
        }
        let l = elem(elem_size)
            .and_then(|e| Layout::vector(count as u64, blocklen as u64, stride as i64, &e));
        publish(l, out)
    })
}

/// `MPI_Type_indexed` over `elem_size`-byte elements: block `k` is `blocklens[k]` elements at
/// `displs[k]` elements from the origin.
///
/// # Safety
/// `blocklens` and `displs` readable for `count` elements; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_dt_create_indexed(
    count: usize,
    blocklens: *const usize,
    displs: *const isize,
    elem_size: usize,
    out: *mut ucp_datatype_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if out.is_null() || elem_size == 0 {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable for `count` elements by contract.
        let arrays = unsafe { (arr(blocklens, count), arr(displs, count)) };
        let (Some(bl), Some(ds)) = arrays else {
            return code(Status::InvalidParam);
        };
        let bl: Vec<u64> = bl.iter().map(|&b| b as u64).collect();
        let ds: Vec<i64> = ds.iter().map(|&d| d as i64).collect();
        publish(
            elem(elem_size).and_then(|e| Layout::indexed(&bl, &ds, &e)),
            out,
        )
    })
}

/// `MPI_Type_create_subarray` over `elem_size`-byte elements: the `subsizes` box at `starts`
/// of an `ndims`-dimensional array of `sizes` elements, in `UCPX_ORDER_C` or
/// `UCPX_ORDER_FORTRAN` order. The datatype's extent is the whole array.
///
/// # Safety
/// `sizes`, `subsizes` and `starts` readable for `ndims` elements; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_dt_create_subarray(
    ndims: c_int,
    sizes: *const usize,
    subsizes: *const usize,
    starts: *const usize,
    order: c_int,
    elem_size: usize,
    out: *mut ucp_datatype_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let order = match order {
            UCPX_ORDER_C => Order::C,
            UCPX_ORDER_FORTRAN => Order::Fortran,
            _ => return code(Status::InvalidParam),
        };
        if out.is_null() || elem_size == 0 || ndims <= 0 {
            return code(Status::InvalidParam);
        }
        let n = ndims as usize;
        // SAFETY: readable for `ndims` elements by contract.
        // SAFETY: as above.
        let arrays = unsafe { (arr(sizes, n), arr(subsizes, n), arr(starts, n)) };
        let (Some(sz), Some(sub), Some(st)) = arrays else {
            return code(Status::InvalidParam);
        };
        let v = |a: &[usize]| a.iter().map(|&x| x as u64).collect::<Vec<u64>>();
        let l = elem(elem_size).and_then(|e| Layout::subarray(&v(sz), &v(sub), &v(st), order, &e));
        publish(l, out)
    })
}

/// The packed size (bytes of data) and extent of one element of a layout datatype.
///
/// # Safety
/// `datatype` from `ucpx_dt_create_*`; `packed_size` and `extent` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn ucpx_dt_query(
    datatype: ucp_datatype_t,
    packed_size: *mut usize,
    extent: *mut isize,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract (checked by class and magic).
        let Some(b) = (unsafe { layout_box(datatype) }) else {
            return code(Status::InvalidParam);
        };
        if !packed_size.is_null() {
            // SAFETY: writable by contract.
            unsafe { *packed_size = b.layout.size() as usize };
        }
        if !extent.is_null() {
            // SAFETY: writable by contract.
            unsafe { *extent = b.layout.extent() as isize };
        }
        code(Status::Ok)
    })
}

/// Destroys a layout datatype (operations in flight keep what they use).
///
/// # Safety
/// `datatype` from `ucpx_dt_create_*`, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn ucpx_dt_destroy(datatype: ucp_datatype_t) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract (checked by class and magic).
        if unsafe { layout_box(datatype) }.is_none() {
            return code(Status::InvalidParam);
        }
        let p = (datatype & !UCP_DATATYPE_CLASS_MASK) as *mut LayoutBox;
        // SAFETY: our live box (checked above); clearing the magic makes a second destroy
        // or later use fail the check instead of reading a freed box's fields as valid.
        unsafe {
            (*p).magic = 0;
            drop(Box::from_raw(p));
        }
        code(Status::Ok)
    })
}

/// The text of a status code (what UCX's `ucs_status_string` returns), for programs that
/// link Rucx's libucp alone.
#[no_mangle]
pub extern "C" fn ucpx_status_string(status: ucs_status_ret_t) -> *const c_char {
    // (A one-byte argument: `ucs_status_t` is a packed enum.)
    guard(c"Unknown error".as_ptr(), || {
        let s = Status::from_code(status);
        match s {
            Some(s) => status_cstr(s),
            None => c"Unknown error".as_ptr(),
        }
    })
}

/// A NUL-terminated copy of `s.message()`, made once per status and kept.
fn status_cstr(s: Status) -> *const c_char {
    use std::collections::HashMap;
    use std::ffi::CString;
    use std::sync::OnceLock;
    static TEXTS: OnceLock<Mutex<HashMap<i8, CString>>> = OnceLock::new();
    let m = TEXTS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    m.entry(s.code())
        .or_insert_with(|| CString::new(s.message()).unwrap_or_default())
        .as_ptr()
}
