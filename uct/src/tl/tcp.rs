//! `tcp`: placeholder replaced by the tcp transport module.
use crate::component::OpenError;
use ucs::Config;
pub fn devices(_cfg: &Config) -> Result<Vec<String>, String> {
    Err("not built yet".into())
}
#[derive(Debug)]
pub struct TcpIface;
impl TcpIface {
    pub fn open(_cfg: &Config, dev: &str) -> Result<crate::tl::self_::SelfIface, OpenError> {
        Err(OpenError::NoDevice {
            tl: "tcp",
            device: dev.into(),
        })
    }
}
