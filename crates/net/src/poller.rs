//! A minimal level-triggered epoll wrapper with nanosecond timeouts.
//!
//! `epoll_wait` only takes milliseconds; an open-loop pacer at 50,000 requests per second needs
//! to wake every 20 µs, so [`Poller::wait`] uses `epoll_pwait2` (Linux 5.11+) and falls back to
//! millisecond `epoll_wait` where the kernel lacks it. Level-triggered interest means a socket
//! is read once per readiness and never drained to `EAGAIN`: one `recv` per response.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// What a registration waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interest(u32);

impl Interest {
    /// Readable data, peer hang-up or error.
    pub const READ: Interest = Interest((libc::EPOLLIN | libc::EPOLLRDHUP) as u32);
    /// Room in the send buffer (also: a non-blocking connect finished).
    pub const WRITE: Interest = Interest(libc::EPOLLOUT as u32);
    /// Both.
    pub const BOTH: Interest = Interest(Self::READ.0 | Self::WRITE.0);
    /// Only errors and hang-ups (a connection parked on purpose).
    pub const NONE: Interest = Interest(0);
}

/// One readiness report.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub token: u64,
    pub readable: bool,
    pub writable: bool,
    /// The peer hung up or the socket has an error pending.
    pub closed: bool,
}

/// An epoll instance and its event buffer.
pub struct Poller {
    epfd: OwnedFd,
    events: Vec<libc::epoll_event>,
    ready: usize,
    has_pwait2: bool,
}

impl Poller {
    /// A poller that returns at most `capacity` events per wait.
    pub fn new(capacity: usize) -> io::Result<Self> {
        // SAFETY: plain syscall; the returned fd is owned below.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: fd is a fresh, valid descriptor we own.
            epfd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.max(1)],
            ready: 0,
            has_pwait2: true,
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: interest.0,
            u64: token,
        };
        // SAFETY: ev is valid for the duration of the call.
        let rc = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Starts watching `fd`.
    pub fn add(&self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
    }

    /// Changes what `fd` is watched for.
    pub fn modify(&self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
    }

    /// Waits for events or the timeout; returns how many are ready. `None` waits forever.
    /// An interrupted wait (a signal) returns 0 events.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let epfd = self.epfd.as_raw_fd();
        let max = self.events.len() as libc::c_int;
        let ptr = self.events.as_mut_ptr();
        let rc = if self.has_pwait2 {
            let ts = timeout.map(|d| libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            });
            let ts_ptr = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: the event buffer holds `max` entries; ts_ptr is null or points to a live
            // timespec; a null sigmask means "do not change the mask".
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    epfd,
                    ptr,
                    max,
                    ts_ptr,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            } as libc::c_int;
            if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                self.has_pwait2 = false;
                return self.wait(timeout);
            }
            rc
        } else {
            let ms = timeout.map_or(-1, |d| {
                // Round up so that a 20 µs timeout does not become a busy loop of 0 ms waits.
                d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
            });
            // SAFETY: as above.
            unsafe { libc::epoll_wait(epfd, ptr, max, ms) }
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                self.ready = 0;
                return Ok(0);
            }
            return Err(err);
        }
        self.ready = rc as usize;
        Ok(self.ready)
    }

    /// The `i`-th event of the last wait.
    #[inline]
    pub fn event(&self, i: usize) -> Event {
        debug_assert!(i < self.ready);
        let ev = self.events[i];
        let bits = ev.events;
        Event {
            token: ev.u64,
            readable: bits & (libc::EPOLLIN as u32) != 0,
            writable: bits & (libc::EPOLLOUT as u32) != 0,
            closed: bits & ((libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32) != 0,
        }
    }
}
