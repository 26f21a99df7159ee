//! The control protocol: length-prefixed JSON messages over one connection per agent.
//!
//! A frame is a 4-byte big-endian length and that many bytes of one JSON [`Message`]. JSON
//! keeps the protocol readable in a packet capture and lets a test speak it by hand; the only
//! large payloads are histograms, which travel in their compressed V2 form (a second is about
//! 1 KiB, a final recorder a few KiB). Frames over [`MAX_FRAME`] are refused before any
//! allocation.

use std::io::{self, Read, Write};
use std::time::Duration;

use meshbench_engine::recorder::Interval;
use meshbench_engine::{Part, Segment};
use serde::{Deserialize, Serialize};

use super::auth::Hello;
use super::link::Link;
use crate::LoadOptions;

/// The protocol's version: peers that differ refuse each other.
pub const PROTOCOL: u32 = 1;

/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 8 << 20;

/// Everything said on a control connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Both sides, first: who is speaking, which version, a fresh nonce.
    Hello(Hello),
    /// Both sides, second: HMAC-SHA256 of the peer's nonce under the shared token (hex).
    Proof { mac: String },
    /// Either side, then it closes: why it will not go on (wrong token, other version, full).
    Refused { reason: String },
    /// Coordinator: a clock probe (and a heartbeat); the agent answers at once.
    Ping { id: u32 },
    /// Agent: the answer, with its CLOCK_MONOTONIC when it answered.
    Pong { id: u32, clock_ns: u64 },
    /// Agent: still here (sent when nothing else went out for a second).
    Alive,
    /// Coordinator: drive this segment of these options; connect, then say `Ready`.
    Prepare {
        step: u32,
        options: Box<LoadOptions>,
        segment: Segment,
    },
    /// Agent: connections are open; waiting for `Start`.
    Ready { step: u32 },
    /// Coordinator: start at this CLOCK_MONOTONIC time of the agent's clock.
    Start { step: u32, at_ns: u64 },
    /// Agent: one completed second of the measured window.
    Second { step: u32, interval: Box<Interval> },
    /// Agent: the step is over; what it measured.
    Done { step: u32, part: Box<Part> },
    /// Agent: the step could not be carried out (bad options here, no files, too few ports).
    Failed { step: u32, reason: String },
    /// Coordinator: stop sending (`hurry`: and stop waiting for responses).
    Stop { step: u32, hurry: bool },
    /// Coordinator: the session is over.
    Bye,
}

/// A control connection that sends and receives whole messages.
pub struct Framed {
    link: Link,
    inbuf: Vec<u8>,
    /// The largest frame sent so far, bytes (what the control plane costs).
    pub largest_sent: usize,
}

impl Framed {
    /// A message that cannot be written within this time means the peer is gone.
    pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

    pub fn new(link: Link) -> Framed {
        let _ = link.tcp().set_write_timeout(Some(Self::WRITE_TIMEOUT));
        Framed {
            link,
            inbuf: Vec::with_capacity(4096),
            largest_sent: 0,
        }
    }

    pub fn peer(&self) -> String {
        self.link.peer()
    }

    /// Sends one message (written and flushed), returning its size on the wire.
    pub fn send(&mut self, m: &Message) -> io::Result<usize> {
        let body = serde_json::to_vec(m).map_err(io::Error::other)?;
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        self.link.write_all(&frame)?;
        self.link.flush()?;
        self.largest_sent = self.largest_sent.max(frame.len());
        Ok(frame.len())
    }

    /// The next message, waiting at most `wait` for it: `Ok(None)` if none came in time. A
    /// closed connection is `UnexpectedEof`; a frame that is too large or not a message is
    /// `InvalidData`.
    pub fn recv(&mut self, wait: Duration) -> io::Result<Option<Message>> {
        if let Some(m) = self.take_frame()? {
            return Ok(Some(m));
        }
        self.link
            .tcp()
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.link.read(&mut chunk) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the connection was closed",
                    ))
                }
                Ok(n) => {
                    self.inbuf.extend_from_slice(&chunk[..n]);
                    if let Some(m) = self.take_frame()? {
                        return Ok(Some(m));
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn take_frame(&mut self) -> io::Result<Option<Message>> {
        let Some(head) = self.inbuf.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(head.try_into().expect("four bytes")) as usize;
        if len > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a frame of {len} bytes (at most {MAX_FRAME}): not a meshbench peer"),
            ));
        }
        if self.inbuf.len() < 4 + len {
            return Ok(None);
        }
        let parsed = serde_json::from_slice(&self.inbuf[4..4 + len]);
        self.inbuf.drain(..4 + len);
        parsed
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not a message: {e}")))
    }
}
