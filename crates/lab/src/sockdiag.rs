//! Established TCP connections per local port, from the kernel's sock_diag netlink interface.
//! `/proc/net/tcp` would give the same figure, but the kernel formats every socket of the
//! machine into text for it, TIME_WAIT ones included: with connection churn that costs the
//! sampler several percent of a core. Here the kernel filters by state and sends binary
//! records, so the cost follows the established connections only.

use std::collections::HashMap;
use std::io;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const TCP_ESTABLISHED: u32 = 1;
const HEADER: usize = 16;

/// Established IPv4 and IPv6 TCP connections of this network namespace, counted by local port.
pub fn established_by_port() -> io::Result<HashMap<u16, u64>> {
    let mut counts = HashMap::new();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        dump(family, &mut counts)?;
    }
    Ok(counts)
}

fn dump(family: u8, counts: &mut HashMap<u16, u64>) -> io::Result<()> {
    // SAFETY: plain socket(2); the descriptor is closed by `Fd` on every path.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = Fd(fd);
    // nlmsghdr (16 bytes) + inet_diag_req_v2 (56 bytes).
    let mut req = [0u8; 72];
    req[0..4].copy_from_slice(&72u32.to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[16] = family;
    req[17] = libc::IPPROTO_TCP as u8;
    req[20..24].copy_from_slice(&(1u32 << TCP_ESTABLISHED).to_ne_bytes());
    // SAFETY: sending a buffer we own to the kernel (a zeroed sockaddr_nl is pid 0).
    let sent = unsafe {
        let mut addr: libc::sockaddr_nl = std::mem::zeroed();
        addr.nl_family = libc::AF_NETLINK as u16;
        libc::sendto(
            fd.0,
            req.as_ptr().cast(),
            req.len(),
            0,
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: receiving into a buffer we own.
        let n = unsafe { libc::recv(fd.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 || count_records(&buf[..n as usize], counts)? {
            return Ok(());
        }
    }
}

/// Adds the records of one netlink datagram to `counts`; true at the end of the dump.
pub fn count_records(mut buf: &[u8], counts: &mut HashMap<u16, u64>) -> io::Result<bool> {
    while buf.len() >= HEADER {
        let len = u32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(buf[4..6].try_into().expect("2 bytes"));
        if len < HEADER || len > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "truncated netlink record",
            ));
        }
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let code = buf
                    .get(HEADER..HEADER + 4)
                    .map_or(0, |b| i32::from_ne_bytes(b.try_into().expect("4 bytes")));
                return Err(io::Error::from_raw_os_error(-code));
            }
            SOCK_DIAG_BY_FAMILY if len >= HEADER + 8 => {
                // inet_diag_msg: family, state, timer, retrans, then the socket id whose
                // first field is the source port, big-endian.
                let port = u16::from_be_bytes([buf[HEADER + 4], buf[HEADER + 5]]);
                *counts.entry(port).or_default() += 1;
            }
            _ => {}
        }
        let step = (len + 3) & !3;
        buf = &buf[step.min(buf.len())..];
    }
    Ok(false)
}

struct Fd(i32);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor this guard owns.
        unsafe { libc::close(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn record(kind: u16, port: u16) -> Vec<u8> {
        let mut r = vec![0u8; HEADER + 72];
        let len = r.len() as u32;
        r[0..4].copy_from_slice(&len.to_ne_bytes());
        r[4..6].copy_from_slice(&kind.to_ne_bytes());
        r[HEADER + 4..HEADER + 6].copy_from_slice(&port.to_be_bytes());
        r
    }

    #[test]
    fn records_are_counted_by_source_port_until_done() {
        let mut buf = record(SOCK_DIAG_BY_FAMILY, 8080);
        buf.extend(record(SOCK_DIAG_BY_FAMILY, 8080));
        buf.extend(record(SOCK_DIAG_BY_FAMILY, 443));
        let mut counts = HashMap::new();
        assert!(!count_records(&buf, &mut counts).unwrap());
        assert_eq!(counts[&8080], 2);
        assert_eq!(counts[&443], 1);
        assert!(count_records(&record(NLMSG_DONE, 0), &mut counts).unwrap());
        assert!(count_records(&buf[..20], &mut counts).is_err());
    }

    #[test]
    fn agrees_with_proc_net_tcp_for_real_connections() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let clients: Vec<TcpStream> = (0..5)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        let accepted: Vec<TcpStream> = (0..5).map(|_| listener.accept().unwrap().0).collect();
        let counts = established_by_port().unwrap();
        let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let from_proc = crate::sample::established_connections(&text, Some(port));
        assert_eq!(counts.get(&port).copied().unwrap_or(0), 5);
        assert_eq!(from_proc, 5);
        drop((clients, accepted));
    }
}
