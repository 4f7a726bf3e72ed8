//! A layout compiled for communication ([`DtLayout`]).

use std::sync::Arc;

use super::canon::Canon;
use super::error::DtError;
use super::layout::Layout;

/// A layout compiled for communication: its canonical form, that form's encoding (what a
/// peer is sent), and the 128-bit hash that names it in memoized exchanges.
#[derive(Debug)]
pub struct DtLayout {
    canon: Canon,
    /// The canonical form rebased so its data starts at offset 0 (for local packing into
    /// a slice that starts where the data does).
    local: Arc<Canon>,
    encoded: Vec<u8>,
    hash: u128,
}

impl DtLayout {
    /// Compiles `layout` (`ucpx_dt_create_*` then commit).
    pub fn new(layout: &Layout) -> Result<Arc<DtLayout>, DtError> {
        DtLayout::from_canon(layout.canonical()?.clone())
    }

    /// Wraps a canonical form (for example one decoded from a peer).
    pub fn from_canon(canon: Canon) -> Result<Arc<DtLayout>, DtError> {
        let encoded = canon.encode()?;
        let hash = canon.hash128();
        let local = Arc::new(canon.rebased(canon.bounds().0));
        Ok(Arc::new(DtLayout {
            canon,
            local,
            encoded,
            hash,
        }))
    }

    pub fn canon(&self) -> &Canon {
        &self.canon
    }
    pub(crate) fn local(&self) -> &Arc<Canon> {
        &self.local
    }
    /// Bytes of data (the packed size).
    pub fn size(&self) -> usize {
        self.canon.size() as usize
    }
    pub fn hash(&self) -> u128 {
        self.hash
    }
    pub fn encoded(&self) -> &[u8] {
        &self.encoded
    }
}
