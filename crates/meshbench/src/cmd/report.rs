//! placeholder
use anyhow::Result;
pub fn execute(_a: crate::cli::ReportArgs) -> Result<u8> { Ok(0) }
