//! The context (`ucp_context_h`): the configuration and the transports it allows. Workers
//! are created from it.

use std::sync::Arc;

use ucs::{Config, Status};
use uct::{Discovery, TlResource};

/// Errors of the control path (context and worker creation).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("configuration: {0}")]
    Config(#[from] ucs::config::ConfigError),
    #[error("no transport could be opened ({0})")]
    NoTransport(String),
    #[error("{call} failed: {source}")]
    Os {
        call: &'static str,
        source: std::io::Error,
    },
    #[error("{0}")]
    Status(Status),
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        match e {
            Error::Config(_) => Status::InvalidParam,
            Error::NoTransport(_) => Status::Unreachable,
            Error::Os { .. } => Status::IoError,
            Error::Status(s) => s,
        }
    }
}

/// A context: configuration plus the transports discovered under it.
#[derive(Debug)]
pub struct Context {
    pub(crate) config: Config,
    pub(crate) discovery: Discovery,
}

impl Context {
    /// A context configured from the `UCX_*` environment.
    pub fn from_env() -> Result<Arc<Context>, Error> {
        Ok(Context::new(Config::from_env()?))
    }

    /// A context with an explicit configuration.
    pub fn new(config: Config) -> Arc<Context> {
        // Where a CUDA driver exists, buffers may be device memory: detect them (before
        // discovery, which opens the driver for the CUDA transports anyway).
        #[cfg(feature = "cuda")]
        {
            ucs::cuda::enable_detection(config.memtype_cache);
            // Small copies between host and device memory through gdrcopy, where gdrdrv
            // exists, unless UCX_TLS leaves gdr_copy out.
            ucs::cuda::gdr::allow(config.tls.selects("gdr_copy", ucs::config::TLS_ALIASES));
        }
        let discovery = uct::discover(&config);
        Arc::new(Context { config, discovery })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The transports and devices workers of this context open.
    pub fn resources(&self) -> &[TlResource] {
        &self.discovery.available
    }

    /// A description of the context in UCX's layout (`ucp_context_print_info`,
    /// `rucx-info -p`): the components (one per transport here), their memory domains, and
    /// one line per resource, `resource N : md N dev N flags -- tl/dev`, which UCXX and
    /// UCX-Py parse for the transports in use. Devices are numbered by name across
    /// transports, as UCX numbers them.
    pub fn info_text(&self) -> String {
        let rs = self.resources();
        let mut tls: Vec<&str> = Vec::new();
        let mut devs: Vec<&str> = Vec::new();
        for r in rs {
            if !tls.contains(&r.tl) {
                tls.push(r.tl);
            }
            if !devs.contains(&r.device.as_str()) {
                devs.push(&r.device);
            }
        }
        let mut s = String::from("#\n# UCP context\n#\n");
        for (i, tl) in tls.iter().enumerate() {
            s.push_str(&format!("#     component {i:<2} :  {tl}\n"));
        }
        s.push_str("#\n");
        for (i, tl) in tls.iter().enumerate() {
            s.push_str(&format!(
                "#            md {i:<2} :  component {i:<2} {tl} \n"
            ));
        }
        s.push_str("#\n");
        for (i, r) in rs.iter().enumerate() {
            let md = tls.iter().position(|t| *t == r.tl).unwrap_or(0);
            let dev = devs.iter().position(|d| *d == r.device).unwrap_or(0);
            s.push_str(&format!(
                "#      resource {i:<2} :  md {md:<2} dev {dev:<2} flags -- {}/{}\n",
                r.tl, r.device
            ));
        }
        s.push_str("#\n");
        s
    }
}
