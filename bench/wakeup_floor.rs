//! What one timer wake-up costs on this machine, and how late it lands: the floor under any
//! pacer that wakes once per send. Built and run by bench/pacer.sh (`rustc -O`, no crates).
//!
//! For each period (5 ms down to 50 µs) it sleeps to absolute deadlines (clock_nanosleep, TIMER_ABSTIME) for about
//! two seconds and prints the CPU per wake-up (getrusage) and the lateness percentiles; then the
//! cost of a trivial syscall and of a clock read. Then, at 1 ms and 200 µs, the CPU the sleeper
//! pays per wake-up when it also writes a small request to a loopback TCP peer that sleeps in a
//! read on another CPU: on loopback the writer's system call runs the peer's receive path and
//! wakes it, so an even schedule, which finds its target idle between sends, pays for the
//! target's wake-up too (`idle_peer_send`, with the extra over a bare wake-up).
//!
//! usage: wakeup_floor [SLEEPER_CPU PEER_CPU] (without them, no pinning)

use std::time::Instant;

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

#[repr(C)]
struct Rusage {
    utime: [i64; 2],
    stime: [i64; 2],
    rest: [i64; 14],
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    fn clock_nanosleep(clock: i32, flags: i32, ts: *const Timespec, rem: *mut Timespec) -> i32;
    fn prctl(option: i32, a: u64, b: u64, c: u64, d: u64) -> i32;
    fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    fn getppid() -> i32;
    fn sched_setaffinity(pid: i32, size: usize, mask: *const u64) -> i32;
}

const RUSAGE_THREAD: i32 = 1;

/// Pins the calling thread to one CPU.
fn pin(cpu: usize) {
    let mut mask = [0u64; 16];
    mask[cpu / 64] |= 1 << (cpu % 64);
    unsafe { sched_setaffinity(0, std::mem::size_of_val(&mask), mask.as_ptr()) };
}

fn thread_cpu_ns() -> u64 {
    let mut r = Rusage { utime: [0; 2], stime: [0; 2], rest: [0; 14] };
    unsafe { getrusage(RUSAGE_THREAD, &mut r) };
    ((r.utime[0] + r.stime[0]) * 1_000_000 + r.utime[1] + r.stime[1]) as u64 * 1000
}

fn sleep_until(t: u64) {
    let ts = Timespec { sec: (t / 1_000_000_000) as i64, nsec: (t % 1_000_000_000) as i64 };
    unsafe { clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

/// CPU per wake-up of this thread (µs), sleeping to deadlines `period` ns apart for `n` of
/// them, writing `send` bytes to `to` after each if given.
fn wakes(period: u64, n: u64, mut to: Option<&mut std::net::TcpStream>) -> f64 {
    use std::io::Write;
    let start = now_ns() + 1_000_000;
    let c0 = thread_cpu_ns();
    for i in 0..n {
        sleep_until(start + i * period);
        if let Some(s) = to.as_deref_mut() {
            s.write_all(&[b'x'; 64]).expect("write to the peer");
        }
    }
    (thread_cpu_ns() - c0) as f64 / n as f64 / 1000.0
}

/// The sleeper's CPU per wake-up with and without a write to an idle loopback peer pinned to
/// `peer_cpu`, at `period` ns.
fn idle_peer_send(period: u64, peer_cpu: Option<usize>) -> (f64, f64) {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let peer = std::thread::spawn(move || {
        if let Some(cpu) = peer_cpu {
            pin(cpu);
        }
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = [0u8; 4096];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let n = (1_000_000_000 / period).min(5_000);
    let bare = wakes(period, n, None);
    let with_send = wakes(period, n, Some(&mut s));
    drop(s);
    peer.join().expect("peer");
    (bare, with_send)
}

const CLOCK_MONOTONIC: i32 = 1;
const TIMER_ABSTIME: i32 = 1;
const PR_SET_TIMERSLACK: i32 = 29;

fn now_ns() -> u64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    ts.sec as u64 * 1_000_000_000 + ts.nsec as u64
}

fn cpu_ns() -> u64 {
    let mut r = Rusage { utime: [0; 2], stime: [0; 2], rest: [0; 14] };
    unsafe { getrusage(0, &mut r) };
    ((r.utime[0] + r.stime[0]) * 1_000_000 + r.utime[1] + r.stime[1]) as u64 * 1000
}

fn main() {
    let cpus: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    if let Some(&cpu) = cpus.first() {
        pin(cpu);
    }
    unsafe { prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0) };
    println!("period_us\twakeups\tcpu_per_wakeup_us\tlate_p50_us\tlate_p99_us");
    for period in [5_000_000u64, 1_000_000, 500_000, 200_000, 50_000] {
        let n = (2_000_000_000 / period).min(10_000);
        let mut late = Vec::with_capacity(n as usize);
        let start = now_ns() + 1_000_000;
        let c0 = cpu_ns();
        for i in 0..n {
            let t = start + i * period;
            let ts = Timespec { sec: (t / 1_000_000_000) as i64, nsec: (t % 1_000_000_000) as i64 };
            unsafe { clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
            late.push(now_ns().saturating_sub(t));
        }
        let cpu = cpu_ns() - c0;
        late.sort_unstable();
        let q = |p: f64| late[((late.len() as f64 * p) as usize).min(late.len() - 1)] / 1000;
        println!("{}\t{n}\t{:.1}\t{}\t{}", period / 1000, cpu as f64 / n as f64 / 1000.0, q(0.5), q(0.99));
    }
    let t = Instant::now();
    for _ in 0..200_000 {
        unsafe { getppid() };
    }
    println!("syscall_ns\t{:.0}", t.elapsed().as_nanos() as f64 / 200_000.0);
    let t = Instant::now();
    let mut x = 0;
    for _ in 0..1_000_000 {
        x ^= now_ns();
    }
    println!("clock_read_ns\t{:.0}\t{}", t.elapsed().as_nanos() as f64 / 1_000_000.0, x & 1);
    for period in [1_000_000u64, 200_000] {
        let (bare, with_send) = idle_peer_send(period, cpus.get(1).copied());
        println!("idle_peer_send\t{}\t{with_send:.1}\t{:.1}", period / 1000, with_send - bare);
    }
}
