//! A TCP relay in the test process: what listens on one address and carries each connection
//! to another, both ways, until either side closes. The suite's API server listens on loopback
//! only; a relay is how something that cannot reach loopback reaches it (the pods, through the
//! `kubernetes` Service; a network namespace whose only route is to this machine).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A running relay; dropping it closes its listener (connections in flight run to their end).
pub struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accepting: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on `listen` (port 0: any) and carries each connection to `target`.
    pub fn start(listen: SocketAddr, target: SocketAddr) -> Relay {
        let listener = TcpListener::bind(listen)
            .unwrap_or_else(|e| panic!("the relay cannot listen on {listen}: {e}"));
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let quit = stop.clone();
        let accepting = std::thread::spawn(move || {
            while !quit.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((from, _)) => {
                        let _ = from.set_nonblocking(false);
                        if let Ok(to) = TcpStream::connect(target) {
                            pipe(from, to);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Relay {
            addr,
            stop,
            accepting: Some(accepting),
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(a) = self.accepting.take() {
            let _ = a.join();
        }
    }
}

/// Copies both ways between `a` and `b` until either closes.
fn pipe(a: TcpStream, b: TcpStream) {
    let copy = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let mut buf = [0u8; 32 * 1024];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    };
    copy(a.try_clone().unwrap(), b.try_clone().unwrap());
    copy(b, a);
}
