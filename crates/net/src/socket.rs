//! Non-blocking sockets: TCP connect, listen with `SO_REUSEPORT`, a connected UDP socket for
//! QUIC, and the two syscalls of the hot path (`send` with `MSG_NOSIGNAL`, `recv`) without any
//! buffering in between.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Outcome of a non-blocking connect.
pub enum Connect {
    /// The connection is established (possible on loopback).
    Done(OwnedFd),
    /// The handshake is under way: wait for writability, then check [`take_error`].
    InProgress(OwnedFd),
}

/// Starts a non-blocking TCP connection with `TCP_NODELAY` set, from `source` if given (see
/// [`bind_source`]). Running out of local ports shows as `EADDRNOTAVAIL` here (or from the bind,
/// `EADDRINUSE`), never as a pending error of the socket.
pub fn connect(addr: &SocketAddr, source: Option<IpAddr>) -> io::Result<Connect> {
    let sock = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    sock.set_tcp_nodelay(true)?;
    if let Some(ip) = source {
        bind_source(&sock, ip)?;
    }
    match sock.connect(&SockAddr::from(*addr)) {
        Ok(()) => Ok(Connect::Done(into_fd(sock))),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
            Ok(Connect::InProgress(into_fd(sock)))
        }
        Err(e) => Err(e),
    }
}

/// A non-blocking UDP socket connected to `addr` (so `send` needs no address and only `addr`'s
/// datagrams are read), bound to `source` if given, else to a port the kernel picks. Its
/// buffers are raised to 4 MiB where the kernel allows, so a burst of QUIC packets is not
/// dropped at the socket. QUIC runs over it.
pub fn udp_connect(addr: &SocketAddr, source: Option<IpAddr>) -> io::Result<OwnedFd> {
    let sock = Socket::new(
        Domain::for_address(*addr),
        Type::DGRAM.nonblocking().cloexec(),
        Some(Protocol::UDP),
    )?;
    let _ = sock.set_recv_buffer_size(4 << 20);
    let _ = sock.set_send_buffer_size(4 << 20);
    if let Some(ip) = source {
        sock.bind(&SockAddr::from(SocketAddr::new(ip, 0)))?;
    }
    sock.connect(&SockAddr::from(*addr))?;
    Ok(into_fd(sock))
}

/// Binds a client socket to the local address `ip` with `IP_BIND_ADDRESS_NO_PORT`, so that
/// the kernel still picks the port at `connect`, per 4-tuple: every source address then has the
/// whole ephemeral range towards each destination. (A bind with port 0 and without the option
/// would pick a port unique to the address alone, which exhausts sooner.) Kernels before 4.2
/// ignore the option's absence: the bind then picks the port.
pub fn bind_source(sock: &Socket, ip: IpAddr) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `one` lives across the call. Failure (an old kernel) leaves a plain bind.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    sock.bind(&SockAddr::from(SocketAddr::new(ip, 0)))
}

/// Whether `ip` can be a source address here (it is one of this machine's, in this network
/// namespace): binds a throwaway socket to it, without taking a port.
pub fn check_source(ip: IpAddr) -> io::Result<()> {
    let domain = if ip.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let sock = Socket::new(domain, Type::STREAM.cloexec(), Some(Protocol::TCP))?;
    bind_source(&sock, ip)
}

/// Whether an error of `connect` (or of its bind) means no local address and port was free:
/// `EADDRNOTAVAIL` (every ephemeral port towards the destination is taken, often by TIME_WAIT
/// sockets, or the source address is gone) or `EADDRINUSE`.
pub fn is_port_exhaustion(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EADDRNOTAVAIL) | Some(libc::EADDRINUSE)
    )
}

fn into_fd(sock: Socket) -> OwnedFd {
    // SAFETY: into_raw_fd hands over ownership of a valid descriptor.
    unsafe { OwnedFd::from_raw_fd(sock.into_raw_fd()) }
}

/// The pending error of a socket (`SO_ERROR`), e.g. the result of a non-blocking connect.
pub fn take_error(fd: RawFd) -> io::Result<Option<io::Error>> {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: err and len are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((err != 0).then(|| io::Error::from_raw_os_error(err)))
}

/// A non-blocking listener bound with `SO_REUSEADDR` and `SO_REUSEPORT`, so that several
/// threads can each own one listener on the same port and the kernel spreads connections.
pub fn listen(addr: &SocketAddr, backlog: i32) -> io::Result<OwnedFd> {
    let sock = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    sock.bind(&SockAddr::from(*addr))?;
    sock.listen(backlog)?;
    Ok(into_fd(sock))
}

/// The local address a socket is bound to.
pub fn local_addr(fd: &OwnedFd) -> io::Result<SocketAddr> {
    let sock = socket2::SockRef::from(fd);
    sock.local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("not an IP socket"))
}

/// Accepts one pending connection as a non-blocking socket with `TCP_NODELAY`.
pub fn accept(listener: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: null address pointers are allowed; flags are valid.
    let fd = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: `one` lives across the call. Failure to set NODELAY is harmless.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    Ok(fd)
}

/// One `send(2)` with `MSG_NOSIGNAL`.
#[inline]
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of buf.len() bytes.
    let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One `writev(2)` of two slices (a response head and its body).
#[inline]
pub fn send2(fd: RawFd, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let iov = [
        libc::iovec {
            iov_base: a.as_ptr() as *mut libc::c_void,
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        },
    ];
    // SAFETY: zeroed msghdr is valid; iov points at live slices for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = 2;
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One `recv(2)`; `Ok(0)` is end of stream.
#[inline]
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of buf.len() bytes.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Closes a socket with an RST instead of a FIN (`SO_LINGER` 0): used by tests that need a peer
/// to reset connections.
pub fn set_linger_zero(fd: RawFd) -> io::Result<()> {
    let sock = std::mem::ManuallyDrop::new(unsafe { Socket::from_raw_fd(fd) });
    sock.set_linger(Some(std::time::Duration::ZERO))
}

/// Raises the soft open-file limit to the hard limit; returns the new soft limit. Ten thousand
/// connections need more than the usual default of 1024.
pub fn raise_nofile_limit() -> u64 {
    // SAFETY: rl is valid for reads and writes.
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 {
            return 0;
        }
        if rl.rlim_cur < rl.rlim_max {
            let want = libc::rlimit {
                rlim_cur: rl.rlim_max,
                rlim_max: rl.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return want.rlim_cur;
            }
        }
    }
    rl.rlim_cur
}

/// Asks the kernel to stamp received data with its arrival time (`SO_TIMESTAMPNS`), so that a
/// response's end is known to the nanosecond however late the reader wakes up.
pub fn enable_rx_timestamps(fd: RawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `one` lives across the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One `recvmsg(2)`: the bytes read and, when timestamps are enabled, the arrival time of the
/// last segment read (CLOCK_REALTIME nanoseconds). `Ok((0, _))` is end of stream.
#[inline]
pub fn recv_timestamped(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: zeroed msghdr is valid; iov and control outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: the CMSG macros walk the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::timespec);
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, stamp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_address_must_be_local() {
        assert!(check_source("127.0.0.1".parse().unwrap()).is_ok());
        // TEST-NET-1: never an address of this machine.
        let err = check_source("192.0.2.77".parse().unwrap()).unwrap_err();
        assert!(is_port_exhaustion(&err), "{err}");
        assert!(!is_port_exhaustion(&io::Error::from_raw_os_error(
            libc::ECONNREFUSED
        )));
    }

    #[test]
    fn a_bound_connect_leaves_from_the_source() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let source: IpAddr = "127.0.0.2".parse().unwrap();
        let fd = match connect(&to, Some(source)).unwrap() {
            Connect::Done(fd) | Connect::InProgress(fd) => fd,
        };
        let (_, peer) = listener.accept().unwrap();
        assert_eq!(peer.ip(), source);
        assert_eq!(local_addr(&fd).unwrap().ip(), source);
    }
}
