//! The lab: starting real systems under test. For now, nginx (installed from Debian packages
//! when missing) as a reverse proxy in front of the backend or as a fixed-body server. Every
//! process started here is stopped, and its files removed, when its handle is dropped.

pub mod nginx;

pub use nginx::{LabError, Nginx, NginxSite};
