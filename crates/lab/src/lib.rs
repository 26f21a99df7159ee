//! The lab: starting real systems under test. For now, nginx (installed from Debian packages
//! when missing) as a reverse proxy in front of the backend or as a fixed-body server, and the
//! backend as its own process. Every process started here is stopped, and its files removed,
//! when its handle is dropped.

pub mod backend;
pub mod nginx;

pub use backend::BackendProcess;
pub use nginx::{LabError, Nginx, NginxSite};
