//! The control-path error of layouts: construction, canonicalization, descriptor decoding.

use std::fmt;

/// Errors of layout construction, canonicalization and descriptor decoding (control path).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DtError {
    /// A constructor argument is invalid (mismatched array lengths, subarray out of range).
    InvalidArgument(&'static str),
    /// A size, offset or extent leaves the supported range ([`MAX_SIZE`],
    /// [`MAX_ABS_OFFSET`]).
    ///
    /// [`MAX_SIZE`]: super::MAX_SIZE
    /// [`MAX_ABS_OFFSET`]: super::MAX_ABS_OFFSET
    Overflow,
    /// Materializing the type map would exceed the caller's limit.
    TooManyPieces { limit: usize },
    /// The form is nested deeper than the wire format allows ([`MAX_WIRE_DEPTH`]).
    ///
    /// [`MAX_WIRE_DEPTH`]: super::MAX_WIRE_DEPTH
    TooDeep { depth: usize },
    /// A layout descriptor received from a peer is malformed.
    Malformed(&'static str),
}

impl fmt::Display for DtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DtError::InvalidArgument(what) => write!(f, "invalid layout argument: {what}"),
            DtError::Overflow => write!(f, "layout size or offset out of range"),
            DtError::TooManyPieces { limit } => write!(f, "type map has more than {limit} pieces"),
            DtError::TooDeep { depth } => {
                write!(f, "layout nested {depth} deep, wire limit exceeded")
            }
            DtError::Malformed(what) => write!(f, "malformed layout descriptor: {what}"),
        }
    }
}

impl std::error::Error for DtError {}

impl From<DtError> for ucs::Status {
    fn from(e: DtError) -> Self {
        match e {
            DtError::InvalidArgument(_) | DtError::Malformed(_) => ucs::Status::InvalidParam,
            DtError::Overflow | DtError::TooManyPieces { .. } | DtError::TooDeep { .. } => {
                ucs::Status::ExceedsLimit
            }
        }
    }
}
