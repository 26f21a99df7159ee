//! Established TCP connections with their byte counters, from the kernel's sock_diag netlink
//! interface. `/proc/net/tcp` would list the connections too, but the kernel formats every
//! socket of the machine into text for it, TIME_WAIT ones included: with connection churn that
//! costs the sampler several percent of a core. Here the kernel filters by state and sends
//! binary records, each with its `tcp_info` (bytes received and acknowledged), which is how
//! roles sharing one loopback get their own bytes in and out.

use std::io;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const TCP_ESTABLISHED: u32 = 1;
const HEADER: usize = 16;
const INET_DIAG_INFO: u16 = 2;
/// Size of inet_diag_msg, after which come the attributes.
const MSG: usize = 72;
/// Offsets of tcpi_bytes_acked and tcpi_bytes_received in struct tcp_info.
const BYTES_ACKED: usize = 120;
const BYTES_RECEIVED: usize = 128;

/// One established connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    pub sport: u16,
    pub dport: u16,
    /// The kernel's unique id of the socket.
    pub cookie: u64,
    /// Bytes received, and bytes sent and acknowledged by the peer.
    pub bytes_received: u64,
    pub bytes_acked: u64,
}

/// Established IPv4 and IPv6 TCP connections of this network namespace.
pub fn established() -> io::Result<Vec<Conn>> {
    let mut conns = Vec::new();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        dump(family, &mut conns)?;
    }
    Ok(conns)
}

fn dump(family: u8, conns: &mut Vec<Conn>) -> io::Result<()> {
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
    // idiag_ext: ask for INET_DIAG_INFO (tcp_info).
    req[18] = 1 << (INET_DIAG_INFO - 1);
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
        if n == 0 || parse_records(&buf[..n as usize], conns)? {
            return Ok(());
        }
    }
}

/// Adds the records of one netlink datagram to `conns`; true at the end of the dump.
pub fn parse_records(mut buf: &[u8], conns: &mut Vec<Conn>) -> io::Result<bool> {
    let u64_at = |b: &[u8], at: usize| {
        b.get(at..at + 8)
            .map_or(0, |x| u64::from_ne_bytes(x.try_into().expect("8 bytes")))
    };
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
            SOCK_DIAG_BY_FAMILY if len >= HEADER + MSG => {
                let msg = &buf[HEADER..len];
                // inet_diag_msg: family, state, timer, retrans, then the socket id: source
                // and destination ports (big-endian), addresses, interface, cookie.
                let mut c = Conn {
                    sport: u16::from_be_bytes([msg[4], msg[5]]),
                    dport: u16::from_be_bytes([msg[6], msg[7]]),
                    cookie: u64_at(msg, 44),
                    bytes_received: 0,
                    bytes_acked: 0,
                };
                // Attributes: {u16 len, u16 type, payload}, each padded to 4 bytes.
                let mut attrs = &msg[MSG..];
                while attrs.len() >= 4 {
                    let alen = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
                    let atype = u16::from_ne_bytes([attrs[2], attrs[3]]);
                    if alen < 4 || alen > attrs.len() {
                        break;
                    }
                    if atype == INET_DIAG_INFO {
                        let info = &attrs[4..alen];
                        c.bytes_acked = u64_at(info, BYTES_ACKED);
                        c.bytes_received = u64_at(info, BYTES_RECEIVED);
                    }
                    attrs = &attrs[((alen + 3) & !3).min(attrs.len())..];
                }
                conns.push(c);
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

    fn record(kind: u16, sport: u16, received: u64) -> Vec<u8> {
        let mut r = vec![0u8; HEADER + MSG + 4 + 136];
        let len = r.len() as u32;
        r[0..4].copy_from_slice(&len.to_ne_bytes());
        r[4..6].copy_from_slice(&kind.to_ne_bytes());
        r[HEADER + 4..HEADER + 6].copy_from_slice(&sport.to_be_bytes());
        r[HEADER + 6..HEADER + 8].copy_from_slice(&9999u16.to_be_bytes());
        let a = HEADER + MSG;
        r[a..a + 2].copy_from_slice(&(4u16 + 136).to_ne_bytes());
        r[a + 2..a + 4].copy_from_slice(&INET_DIAG_INFO.to_ne_bytes());
        r[a + 4 + BYTES_RECEIVED..a + 4 + BYTES_RECEIVED + 8]
            .copy_from_slice(&received.to_ne_bytes());
        r[a + 4 + BYTES_ACKED..a + 4 + BYTES_ACKED + 8]
            .copy_from_slice(&(2 * received).to_ne_bytes());
        r
    }

    #[test]
    fn records_are_read_with_their_ports_and_bytes_until_done() {
        let mut buf = record(SOCK_DIAG_BY_FAMILY, 8080, 10);
        buf.extend(record(SOCK_DIAG_BY_FAMILY, 8080, 20));
        buf.extend(record(SOCK_DIAG_BY_FAMILY, 443, 30));
        let mut conns = Vec::new();
        assert!(!parse_records(&buf, &mut conns).unwrap());
        let on = |port| conns.iter().filter(|c| c.sport == port).count();
        assert_eq!(on(8080), 2);
        assert_eq!(on(443), 1);
        assert_eq!(conns[2].dport, 9999);
        assert_eq!((conns[2].bytes_received, conns[2].bytes_acked), (30, 60));
        assert!(parse_records(&record(NLMSG_DONE, 0, 0), &mut conns).unwrap());
        assert!(parse_records(&buf[..20], &mut conns).is_err());
    }

    #[test]
    fn agrees_with_proc_net_tcp_for_real_connections() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let clients: Vec<TcpStream> = (0..5)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        let mut accepted: Vec<TcpStream> = (0..5).map(|_| listener.accept().unwrap().0).collect();
        use std::io::Write;
        accepted[0].write_all(&[7u8; 1000]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let conns = established().unwrap();

        let server_side: u64 = conns
            .iter()
            .filter(|c| c.sport == port)
            .map(|c| c.bytes_acked)
            .sum();
        let client_side: u64 = conns
            .iter()
            .filter(|c| c.dport == port)
            .map(|c| c.bytes_received)
            .sum();
        assert_eq!((server_side, client_side), (1000, 1000));
        let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let from_proc = crate::sample::established_connections(&text, Some(port));
        assert_eq!(conns.iter().filter(|c| c.sport == port).count(), 5);
        assert_eq!(from_proc, 5);
        drop((clients, accepted));
    }
}
