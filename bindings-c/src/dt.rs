//! Datatypes: `ucp_datatype_t` decoded as UCX encodes it — the class in the low
//! `UCP_DATATYPE_SHIFT` bits; contig carries the element size above them, iov is the bare
//! class (the buffer is a `ucp_dt_iov_t` array), generic is the address of our descriptor
//! with the class in its low bits (`ucp_dt_create_generic`).

use std::ffi::c_void;
use std::sync::Arc;

use smallvec::SmallVec;
use ucp::{Buf, Data, GenericDt, PackState, UnpackState};
use ucs::Status;

use crate::types::*;
use crate::{code, guard};

const DT_MAGIC: u64 = 0x5275_6378_4474_7921;

/// The application's pack/unpack callbacks and context.
#[derive(Debug)]
struct CGeneric {
    ops: ucp_generic_dt_ops_t,
    context: *mut c_void,
}

// SAFETY: the callbacks and context belong to the application, which by `ucp.h`'s contract
// lets them be called from whichever thread progresses the worker.
unsafe impl Send for CGeneric {}
// SAFETY: as above; we never mutate through the shared reference.
unsafe impl Sync for CGeneric {}

/// What a generic `ucp_datatype_t` points at (16-aligned, so the class bits are free).
#[repr(C, align(16))]
#[derive(Debug)]
struct DtBox {
    magic: u64,
    dt: Arc<CGeneric>,
}

/// A state returned by `start_pack`/`start_unpack`.
struct CState {
    ops: ucp_generic_dt_ops_t,
    state: *mut c_void,
}

// SAFETY: as for CGeneric: the state is the application's, used by one operation at a time.
unsafe impl Send for CState {}

impl Drop for CState {
    fn drop(&mut self) {
        if let Some(f) = self.ops.finish {
            // SAFETY: the application's finish callback, once per started state.
            unsafe { f(self.state) };
        }
    }
}

impl CState {
    fn packed_size(&self) -> usize {
        match self.ops.packed_size {
            // SAFETY: the application's callback on its own state.
            Some(f) => unsafe { f(self.state) },
            None => 0,
        }
    }
}

impl PackState for CState {
    fn packed_size(&self) -> usize {
        CState::packed_size(self)
    }
    fn pack(&mut self, offset: usize, dst: &mut [u8]) -> usize {
        let Some(f) = self.ops.pack else { return 0 };
        // SAFETY: dst is writable for dst.len() bytes; the callback writes at most that.
        let n = unsafe { f(self.state, offset, dst.as_mut_ptr().cast(), dst.len()) };
        n.min(dst.len())
    }
}

impl UnpackState for CState {
    fn packed_size(&self) -> usize {
        CState::packed_size(self)
    }
    fn unpack(&mut self, offset: usize, src: &[u8]) -> Result<(), Status> {
        match self.ops.unpack {
            Some(f) => {
                // SAFETY: src is readable for src.len() bytes.
                let s = unsafe { f(self.state, offset, src.as_ptr().cast(), src.len()) };
                match s {
                    0 => Ok(()),
                    s => Err(Status::from_code(s).unwrap_or(Status::IoError)),
                }
            }
            None => Err(Status::Unsupported),
        }
    }
}

impl GenericDt for CGeneric {
    fn start_pack(&self, addr: u64, count: usize) -> Box<dyn PackState> {
        let state = match self.ops.start_pack {
            // SAFETY: the application's callback with its context and buffer.
            Some(f) => unsafe { f(self.context, addr as *const c_void, count) },
            None => std::ptr::null_mut(),
        };
        Box::new(CState {
            ops: self.ops,
            state,
        })
    }
    fn start_unpack(&self, addr: u64, count: usize) -> Box<dyn UnpackState> {
        let state = match self.ops.start_unpack {
            // SAFETY: as above.
            Some(f) => unsafe { f(self.context, addr as *mut c_void, count) },
            None => std::ptr::null_mut(),
        };
        Box::new(CState {
            ops: self.ops,
            state,
        })
    }
}

/// The element size of a contig datatype.
pub(crate) fn contig_size(dt: ucp_datatype_t) -> Option<usize> {
    (dt & UCP_DATATYPE_CLASS_MASK == UCP_DATATYPE_CONTIG)
        .then_some((dt >> UCP_DATATYPE_SHIFT) as usize)
}

/// The data `count` elements of `dt` at `buffer` describe.
///
/// # Safety
/// As for every `ucp.h` operation: the buffer (or iov array and its buffers, or the generic
/// datatype's elements) stays valid until the operation completes.
pub(crate) unsafe fn data(
    buffer: *const c_void,
    count: usize,
    dt: ucp_datatype_t,
) -> Result<Data, Status> {
    match dt & UCP_DATATYPE_CLASS_MASK {
        UCP_DATATYPE_CONTIG => {
            let len = count
                .checked_mul((dt >> UCP_DATATYPE_SHIFT) as usize)
                .ok_or(Status::InvalidParam)?;
            if len > 0 && buffer.is_null() {
                return Err(Status::InvalidParam);
            }
            // SAFETY: per the contract.
            Ok(Data::Contig(unsafe {
                Buf::from_raw(buffer.cast_mut().cast(), len)
            }))
        }
        UCP_DATATYPE_IOV => {
            if count > 0 && buffer.is_null() {
                return Err(Status::InvalidParam);
            }
            let mut v: SmallVec<[Buf; 4]> = SmallVec::with_capacity(count);
            for i in 0..count {
                // SAFETY: buffer is an array of `count` ucp_dt_iov_t by contract.
                let e = unsafe { *buffer.cast::<ucp_dt_iov_t>().add(i) };
                if e.length > 0 && e.buffer.is_null() {
                    return Err(Status::InvalidParam);
                }
                // SAFETY: per the contract.
                v.push(unsafe { Buf::from_raw(e.buffer.cast(), e.length) });
            }
            Ok(Data::Iov(v))
        }
        UCP_DATATYPE_GENERIC => {
            let p = (dt & !UCP_DATATYPE_CLASS_MASK) as *const DtBox;
            if p.is_null() {
                return Err(Status::InvalidParam);
            }
            // SAFETY: a generic datatype is the address of our DtBox, live until
            // ucp_dt_destroy (checked by magic).
            let b = unsafe { &*p };
            if b.magic != DT_MAGIC {
                return Err(Status::InvalidParam);
            }
            Ok(Data::Generic {
                dt: b.dt.clone(),
                addr: buffer as u64,
                count,
            })
        }
        // SAFETY: forwarded (a layout handle from ucpx_dt_create_*, checked by magic).
        crate::ext::UCPX_DATATYPE_LAYOUT => unsafe { crate::ext::layout_data(buffer, count, dt) },
        _ => Err(Status::Unsupported),
    }
}

/// # Safety
/// `ops` readable; `datatype_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_dt_create_generic(
    ops: *const ucp_generic_dt_ops_t,
    context: *mut c_void,
    datatype_p: *mut ucp_datatype_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if ops.is_null() || datatype_p.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable by contract.
        let ops = unsafe { *ops };
        if ops.start_pack.is_none()
            || ops.start_unpack.is_none()
            || ops.packed_size.is_none()
            || ops.pack.is_none()
            || ops.unpack.is_none()
            || ops.finish.is_none()
        {
            return code(Status::InvalidParam);
        }
        let b = Box::into_raw(Box::new(DtBox {
            magic: DT_MAGIC,
            dt: Arc::new(CGeneric { ops, context }),
        }));
        // SAFETY: writable (checked non-NULL); DtBox is 16-aligned, so the class bits are 0.
        unsafe { *datatype_p = b as u64 | UCP_DATATYPE_GENERIC };
        code(Status::Ok)
    })
}

/// # Safety
/// `datatype` from `ucp_dt_create_generic` (or a contig/iov datatype: nothing to do).
#[no_mangle]
pub unsafe extern "C" fn ucp_dt_destroy(datatype: ucp_datatype_t) {
    guard((), || {
        if datatype & UCP_DATATYPE_CLASS_MASK != UCP_DATATYPE_GENERIC {
            return;
        }
        let p = (datatype & !UCP_DATATYPE_CLASS_MASK) as *mut DtBox;
        if p.is_null() {
            return;
        }
        // SAFETY: our DtBox by contract (checked by magic); operations in flight hold
        // their own Arc, so freeing the box now is sound.
        unsafe {
            if (*p).magic != DT_MAGIC {
                return;
            }
            (*p).magic = 0;
            drop(Box::from_raw(p));
        }
    })
}

/// The packed size of `count` elements of `datatype` (`UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE`;
/// `count` 1 unless `UCP_DATATYPE_ATTR_FIELD_COUNT`): contig and layout datatypes from the
/// datatype alone; iov and generic ones need `buffer` (the `ucp_dt_iov_t` array, or the data
/// the generic callbacks are started on), as in UCX. Without `PACKED_SIZE` nothing is
/// asked: `UCS_OK`.
///
/// # Safety
/// `attr` writable; `buffer`, when given, as an operation on `datatype` would take it.
#[no_mangle]
pub unsafe extern "C" fn ucp_dt_query(
    datatype: ucp_datatype_t,
    attr: *mut ucp_datatype_attr_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if attr.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: writable by contract; field_mask first.
        let a = unsafe { &mut *attr };
        if a.field_mask & !UCP_DATATYPE_ATTR_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        if a.field_mask & UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE == 0 {
            return code(Status::Ok);
        }
        let count = if a.field_mask & UCP_DATATYPE_ATTR_FIELD_COUNT != 0 {
            a.count
        } else {
            1
        };
        let buffer = if a.field_mask & UCP_DATATYPE_ATTR_FIELD_BUFFER != 0 {
            a.buffer
        } else {
            std::ptr::null()
        };
        // SAFETY: forwarded contract (the buffer as an operation would take it).
        match unsafe { packed_size(datatype, buffer, count) } {
            Ok(n) => {
                a.packed_size = n;
                code(Status::Ok)
            }
            Err(s) => code(s),
        }
    })
}

/// The bytes `count` elements of `dt` at `buffer` pack into.
///
/// # Safety
/// As for [`ucp_dt_query`].
unsafe fn packed_size(
    dt: ucp_datatype_t,
    buffer: *const c_void,
    count: usize,
) -> Result<usize, Status> {
    match dt & UCP_DATATYPE_CLASS_MASK {
        UCP_DATATYPE_CONTIG => count
            .checked_mul((dt >> UCP_DATATYPE_SHIFT) as usize)
            .ok_or(Status::InvalidParam),
        UCP_DATATYPE_IOV | UCP_DATATYPE_GENERIC if buffer.is_null() => Err(Status::InvalidParam),
        UCP_DATATYPE_IOV => {
            let mut n = 0usize;
            for i in 0..count {
                // SAFETY: buffer is an array of `count` ucp_dt_iov_t by contract.
                let e = unsafe { *buffer.cast::<ucp_dt_iov_t>().add(i) };
                n = n.checked_add(e.length).ok_or(Status::InvalidParam)?;
            }
            Ok(n)
        }
        UCP_DATATYPE_GENERIC => {
            // SAFETY: forwarded (a generic datatype of ours, checked by magic); the state
            // is started on the application's buffer and finished when dropped.
            match unsafe { data(buffer, count, dt) }? {
                Data::Generic { dt, addr, count } => Ok(dt.start_pack(addr, count).packed_size()),
                _ => Err(Status::InvalidParam),
            }
        }
        crate::ext::UCPX_DATATYPE_LAYOUT => {
            let mut one = 0usize;
            // SAFETY: a layout handle of ours (checked by magic); `one` writable.
            let s = unsafe { crate::ext::ucpx_dt_query(dt, &mut one, std::ptr::null_mut()) };
            if s != code(Status::Ok) {
                return Err(Status::InvalidParam);
            }
            one.checked_mul(count).ok_or(Status::InvalidParam)
        }
        _ => Err(Status::InvalidParam),
    }
}
