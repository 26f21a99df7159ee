//! Free ports on loopback for the roles the lab starts: one place that chooses them, for the
//! rig's roles and for the control plane's servers alike.

use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::LabError;

/// A loopback port for a role to listen on.
///
/// The port comes from below the kernel's ephemeral range (`ip_local_port_range`): a port from
/// that range could be taken, between this choice and the role's own bind, by any outgoing
/// connection, and roles start one after another (an Envoy already running dials its upstream
/// from such a port). Ports are taken in turn from a start that differs per process, free for
/// TCP and UDP (HTTP/3) alike; the kernel's choice is the fallback.
pub(crate) fn free_port() -> Result<u16, LabError> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FLOOR: u32 = 10_000;
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    if low > FLOOR + 1_000 {
        let span = low - FLOOR;
        let start = std::process::id().wrapping_mul(7_919) % span;
        for _ in 0..span.min(4_096) {
            let k = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = (FLOOR + (start + k) % span) as u16;
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
                && UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
            {
                return Ok(port);
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(LabError::NoFreePort)
}
