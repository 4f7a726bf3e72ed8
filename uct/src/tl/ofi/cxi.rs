//! What the `cxi` provider adds to libfabric's counters (`fi_cxi_ext.h`), for a GPU to drive
//! the NIC's deferred-work queue with no host in the loop:
//! - each counter has an MMIO region; a 64-bit store of `n` at its start adds `n` to the
//!   counter's success count (the NIC's doorbell), at 8 words in its error count;
//! - the NIC can write a counter's value to a client buffer (*writeback*): bit 63 set, the
//!   success count in bits 0–47, the error count in bits 48–54.
//!
//! A stream triggers work with one 64-bit write to the trigger counter's doorbell, and
//! waits for the completion counter's writeback word to reach `success_value(n)`.
//!
//! No machine here has a Slingshot NIC: `CxiCounterOps::open` is reached only with the
//! `cxi` provider, and the encodings below are checked against the header's definitions
//! only.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;

use ucs::{Status, UcsResult};

use super::sys::{Fid, FidCntr};

/// `FI_CXI_COUNTER_OPS`: the name of the extension's operations.
const COUNTER_OPS: &std::ffi::CStr = c"cxi_counter_ops";

/// The largest success count (48 bits).
pub const SUCCESS_MAX: u64 = (1 << 48) - 1;
/// The largest error count (7 bits).
pub const FAILURE_MAX: u64 = (1 << 7) - 1;

/// The writeback word of a counter with `n` successes (`fi_cxi_gen_cntr_success`), the
/// value a stream waits for; `None` past 48 bits.
pub fn success_value(n: u64) -> Option<u64> {
    (n <= SUCCESS_MAX).then_some((1 << 63) | n)
}

/// The success and error counts in a writeback word (`fi_cxi_cntr_wb_read` and
/// `fi_cxi_cntr_wb_readerr`).
pub fn read_writeback(word: u64) -> (u64, u64) {
    (word & SUCCESS_MAX, (word >> 48) & FAILURE_MAX)
}

/// Where in a counter's MMIO region a store adds to its success count, and to its error
/// count (`fi_cxi_get_cntr_add_addr`, `fi_cxi_get_cntr_adderr_addr`: word 0 and word 8).
pub fn doorbells(mmio: u64) -> (u64, u64) {
    (mmio, mmio + 8 * 8)
}

/// `struct fi_cxi_cntr_ops`.
#[repr(C)]
struct CntrOps {
    set_wb_buffer: unsafe extern "C" fn(*mut Fid, *mut c_void, usize) -> c_int,
    get_mmio_addr: unsafe extern "C" fn(*mut Fid, *mut *mut c_void, *mut usize) -> c_int,
}

/// A `cxi` counter's extension operations, borrowed from the endpoint that owns the
/// counter.
#[derive(Debug)]
pub struct CxiCounterOps<'a> {
    cntr: *mut FidCntr,
    ops: *const CntrOps,
    _owner: PhantomData<&'a ()>,
}

impl CxiCounterOps<'_> {
    /// The extension of `cntr`; `Unsupported` where the provider is not `cxi`.
    ///
    /// # Safety
    /// `cntr` is an open counter that outlives the value.
    pub(super) unsafe fn open<'a>(cntr: *mut FidCntr) -> UcsResult<CxiCounterOps<'a>> {
        let fid = cntr.cast::<Fid>();
        let mut ops: *mut c_void = std::ptr::null_mut();
        // SAFETY: fi_open_ops on an open counter with the extension's name; a provider
        // that has none answers with an error and writes nothing.
        let rc = unsafe {
            ((*(*fid).ops).ops_open)(fid, COUNTER_OPS.as_ptr(), 0, &mut ops, std::ptr::null_mut())
        };
        if rc != 0 || ops.is_null() {
            return Err(Status::Unsupported);
        }
        Ok(CxiCounterOps {
            cntr,
            ops: ops.cast(),
            _owner: PhantomData,
        })
    }

    /// The counter's MMIO region (host address and length; a GPU reaches it once the
    /// region is registered with the driver as I/O memory).
    pub fn mmio(&self) -> UcsResult<(u64, usize)> {
        let (mut addr, mut len) = (std::ptr::null_mut(), 0usize);
        // SAFETY: the extension's call on the counter it was opened for.
        let rc = unsafe { ((*self.ops).get_mmio_addr)(self.cntr.cast(), &mut addr, &mut len) };
        if rc != 0 {
            return Err(Status::IoError);
        }
        Ok((addr as u64, len))
    }

    /// Has the NIC write the counter's value to `buf` (8 bytes, in memory a stream can
    /// wait on).
    ///
    /// # Safety
    /// `buf` stays valid for 8 bytes of writes until the counter is closed.
    pub unsafe fn set_writeback(&self, buf: *mut u64) -> UcsResult<()> {
        // SAFETY: the extension's call on its counter; `buf` per the contract.
        let rc = unsafe { ((*self.ops).set_wb_buffer)(self.cntr.cast(), buf.cast(), 8) };
        if rc != 0 {
            return Err(Status::IoError);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_follow_the_header() {
        assert_eq!(success_value(0), Some(1 << 63));
        assert_eq!(success_value(5), Some((1 << 63) | 5));
        assert_eq!(success_value(SUCCESS_MAX + 1), None);
        assert!(success_value(7).unwrap() > success_value(6).unwrap());
        let word = (1u64 << 63) | (3 << 48) | 42;
        assert_eq!(read_writeback(word), (42, 3));
        assert_eq!(doorbells(0x1000), (0x1000, 0x1040));
    }
}
