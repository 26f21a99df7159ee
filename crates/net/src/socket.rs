//! Non-blocking TCP sockets: connect, listen with `SO_REUSEPORT`, and the two syscalls of the
//! hot path (`send` with `MSG_NOSIGNAL`, `recv`) without any buffering in between.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Outcome of a non-blocking connect.
pub enum Connect {
    /// The connection is established (possible on loopback).
    Done(OwnedFd),
    /// The handshake is under way: wait for writability, then check [`take_error`].
    InProgress(OwnedFd),
}

/// Starts a non-blocking TCP connection with `TCP_NODELAY` set.
pub fn connect(addr: &SocketAddr) -> io::Result<Connect> {
    let sock = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    sock.set_tcp_nodelay(true)?;
    match sock.connect(&SockAddr::from(*addr)) {
        Ok(()) => Ok(Connect::Done(into_fd(sock))),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
            Ok(Connect::InProgress(into_fd(sock)))
        }
        Err(e) => Err(e),
    }
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
