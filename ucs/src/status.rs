//! `Status`: the data-path result code, numerically identical to UCX's `ucs_status_t`.
//!
//! The numbers and their order are taken from Debian's `libucx-dev` header
//! `ucs/type/status.h` (UCX 1.13.1). `Status` is `Copy` and carries no strings, so it can
//! be returned from every fast-path call; `Status::NoResource` means "queue it on pending".

use std::fmt;

/// A UCX status code. `Ok` and `InProgress` are not errors; all others are.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(i8)]
pub enum Status {
    Ok = 0,
    InProgress = 1,
    NoMessage = -1,
    NoResource = -2,
    IoError = -3,
    NoMemory = -4,
    InvalidParam = -5,
    Unreachable = -6,
    InvalidAddr = -7,
    NotImplemented = -8,
    MessageTruncated = -9,
    NoProgress = -10,
    BufferTooSmall = -11,
    NoElem = -12,
    SomeConnectsFailed = -13,
    NoDevice = -14,
    Busy = -15,
    Canceled = -16,
    ShmemSegment = -17,
    AlreadyExists = -18,
    OutOfRange = -19,
    TimedOut = -20,
    ExceedsLimit = -21,
    Unsupported = -22,
    Rejected = -23,
    NotConnected = -24,
    ConnectionReset = -25,
    /// `UCS_ERR_FIRST_LINK_FAILURE`
    LinkFailure = -40,
    /// `UCS_ERR_FIRST_ENDPOINT_FAILURE`
    EndpointFailure = -60,
    EndpointTimeout = -80,
}

/// Every variant, in declaration order (used by the C shim and by tests).
pub const ALL_STATUSES: [Status; 30] = [
    Status::Ok,
    Status::InProgress,
    Status::NoMessage,
    Status::NoResource,
    Status::IoError,
    Status::NoMemory,
    Status::InvalidParam,
    Status::Unreachable,
    Status::InvalidAddr,
    Status::NotImplemented,
    Status::MessageTruncated,
    Status::NoProgress,
    Status::BufferTooSmall,
    Status::NoElem,
    Status::SomeConnectsFailed,
    Status::NoDevice,
    Status::Busy,
    Status::Canceled,
    Status::ShmemSegment,
    Status::AlreadyExists,
    Status::OutOfRange,
    Status::TimedOut,
    Status::ExceedsLimit,
    Status::Unsupported,
    Status::Rejected,
    Status::NotConnected,
    Status::ConnectionReset,
    Status::LinkFailure,
    Status::EndpointFailure,
    Status::EndpointTimeout,
];

/// `UCS_ERR_LAST`: every valid code is strictly greater.
pub const UCS_ERR_LAST: i8 = -100;

impl Status {
    /// The raw `ucs_status_t` value.
    #[inline]
    pub const fn code(self) -> i8 {
        self as i8
    }

    /// Maps a raw `ucs_status_t` back. Codes inside UCX's link/endpoint failure ranges
    /// map to the first code of their range; unknown codes give `None`.
    #[inline]
    pub fn from_code(code: i8) -> Option<Status> {
        // The two every request test sees, without the table walk.
        match code {
            0 => return Some(Status::Ok),
            1 => return Some(Status::InProgress),
            _ => {}
        }
        if let Some(s) = ALL_STATUSES.iter().copied().find(|s| s.code() == code) {
            return Some(s);
        }
        match code {
            -59..=-41 => Some(Status::LinkFailure),
            -89..=-61 => Some(Status::EndpointFailure),
            _ => None,
        }
    }

    #[inline]
    pub const fn is_err(self) -> bool {
        (self as i8) < 0
    }

    /// UCX's C enumerator name, e.g. `UCS_ERR_NO_RESOURCE`.
    pub const fn name(self) -> &'static str {
        use Status::*;
        match self {
            Ok => "UCS_OK",
            InProgress => "UCS_INPROGRESS",
            NoMessage => "UCS_ERR_NO_MESSAGE",
            NoResource => "UCS_ERR_NO_RESOURCE",
            IoError => "UCS_ERR_IO_ERROR",
            NoMemory => "UCS_ERR_NO_MEMORY",
            InvalidParam => "UCS_ERR_INVALID_PARAM",
            Unreachable => "UCS_ERR_UNREACHABLE",
            InvalidAddr => "UCS_ERR_INVALID_ADDR",
            NotImplemented => "UCS_ERR_NOT_IMPLEMENTED",
            MessageTruncated => "UCS_ERR_MESSAGE_TRUNCATED",
            NoProgress => "UCS_ERR_NO_PROGRESS",
            BufferTooSmall => "UCS_ERR_BUFFER_TOO_SMALL",
            NoElem => "UCS_ERR_NO_ELEM",
            SomeConnectsFailed => "UCS_ERR_SOME_CONNECTS_FAILED",
            NoDevice => "UCS_ERR_NO_DEVICE",
            Busy => "UCS_ERR_BUSY",
            Canceled => "UCS_ERR_CANCELED",
            ShmemSegment => "UCS_ERR_SHMEM_SEGMENT",
            AlreadyExists => "UCS_ERR_ALREADY_EXISTS",
            OutOfRange => "UCS_ERR_OUT_OF_RANGE",
            TimedOut => "UCS_ERR_TIMED_OUT",
            ExceedsLimit => "UCS_ERR_EXCEEDS_LIMIT",
            Unsupported => "UCS_ERR_UNSUPPORTED",
            Rejected => "UCS_ERR_REJECTED",
            NotConnected => "UCS_ERR_NOT_CONNECTED",
            ConnectionReset => "UCS_ERR_CONNECTION_RESET",
            LinkFailure => "UCS_ERR_FIRST_LINK_FAILURE",
            EndpointFailure => "UCS_ERR_FIRST_ENDPOINT_FAILURE",
            EndpointTimeout => "UCS_ERR_ENDPOINT_TIMEOUT",
        }
    }

    /// The human-readable text `ucs_status_string()` returns.
    pub const fn message(self) -> &'static str {
        use Status::*;
        match self {
            Ok => "Success",
            InProgress => "Operation in progress",
            NoMessage => "No pending message",
            NoResource => "No resources are available to initiate the operation",
            IoError => "Input/output error",
            NoMemory => "Out of memory",
            InvalidParam => "Invalid parameter",
            Unreachable => "Destination is unreachable",
            InvalidAddr => "Address not valid",
            NotImplemented => "Function not implemented",
            MessageTruncated => "Message truncated",
            NoProgress => "No progress",
            BufferTooSmall => "Provided buffer is too small",
            NoElem => "No such element",
            SomeConnectsFailed => "Failed to connect some of the requested endpoints",
            NoDevice => "No such device",
            Busy => "Device is busy",
            Canceled => "Request canceled",
            ShmemSegment => "Shared memory error",
            AlreadyExists => "Element already exists",
            OutOfRange => "Index out of range",
            TimedOut => "Operation timed out",
            ExceedsLimit => "User-defined limit was reached",
            Unsupported => "Unsupported operation",
            Rejected => "Operation rejected by remote peer",
            NotConnected => "Endpoint is not connected",
            ConnectionReset => "Connection reset by remote peer",
            LinkFailure => "Link failure",
            EndpointFailure => "Endpoint failure",
            EndpointTimeout => "Endpoint timeout",
        }
    }

    /// Maps an OS error to the closest status (used where a syscall fails on the data path).
    pub fn from_errno(errno: i32) -> Status {
        match errno {
            libc::EAGAIN => Status::NoResource,
            libc::ENOMEM => Status::NoMemory,
            libc::EINVAL => Status::InvalidParam,
            libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED => Status::ConnectionReset,
            libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH => Status::Unreachable,
            libc::ETIMEDOUT => Status::TimedOut,
            libc::ENOTCONN => Status::NotConnected,
            libc::ESRCH => Status::EndpointFailure,
            libc::EFAULT => Status::InvalidAddr,
            libc::EPERM | libc::EACCES => Status::Rejected,
            libc::ENODEV | libc::ENOENT => Status::NoDevice,
            _ => Status::IoError,
        }
    }

    /// The status for the last OS error of this thread.
    pub fn last_os_error() -> Status {
        Status::from_errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Status {}

/// Data-path result: `Err` is always an error status (never `Ok`/`InProgress`).
pub type UcsResult<T> = Result<T, Status>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for s in ALL_STATUSES {
            assert_eq!(Status::from_code(s.code()), Some(s), "{}", s.name());
        }
        assert_eq!(Status::from_code(-45), Some(Status::LinkFailure));
        assert_eq!(Status::from_code(-70), Some(Status::EndpointFailure));
        assert_eq!(Status::from_code(-30), None);
        assert_eq!(Status::from_code(2), None);
    }

    #[test]
    fn numbers_match_ucs_status_h() {
        assert_eq!(Status::NoResource.code(), -2);
        assert_eq!(Status::MessageTruncated.code(), -9);
        assert_eq!(Status::Canceled.code(), -16);
        assert_eq!(Status::Unsupported.code(), -22);
        assert_eq!(Status::ConnectionReset.code(), -25);
        assert_eq!(Status::EndpointTimeout.code(), -80);
        assert!(ALL_STATUSES.iter().all(|s| s.code() > UCS_ERR_LAST));
        assert!(!Status::InProgress.is_err());
        assert!(Status::NoElem.is_err());
    }
}
