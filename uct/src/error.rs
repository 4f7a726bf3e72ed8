//! The control-path error of `uct`: opening a transport that discovery listed. On the
//! bottom floor with the traits, so that every transport returns it without naming the
//! registry that opens them.

/// A transport that failed to open although it was discovered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error("{tl}/{device}: {call} failed: {source}")]
    Os {
        tl: &'static str,
        device: String,
        call: &'static str,
        source: std::io::Error,
    },
    #[error("{tl}: unknown device {device}")]
    NoDevice { tl: &'static str, device: String },
    #[error("transport not available: {0}")]
    UnknownTl(String),
    #[error("{tl}: {reason}")]
    Unavailable { tl: &'static str, reason: String },
}
