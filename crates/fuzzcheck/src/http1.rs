//! `http1_response`: the client's HTTP/1.1 response reader (`meshbench_net::http1`) on bytes a
//! server might send. Whatever arrives, the reader must answer without panicking, never claim
//! more bytes than it was given, always make progress, and give the same answer however the
//! bytes are cut into reads (the kernel decides that, not the server).
//!
//! Input: byte 0 is control (bit 0: the request was HEAD; bits 1-7: how the bytes are cut into
//! reads, 0 meaning one byte per read), the rest is what the server sent.

use meshbench_net::http1::{FrameError, Progress, ResponseReader};

/// How a feed of the whole stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    /// Each response completed: status, keep-alive, offset of its last byte + 1.
    responses: Vec<(u16, bool, usize)>,
    /// The error that stopped reading, if one did.
    error: Option<FrameError>,
    /// What `eof()` said when the peer closed after the last byte (not asked after an error).
    at_eof: Option<u16>,
}

/// Feeds `stream` in reads of the lengths `cut` yields; checks each answer on the way.
fn read_all(stream: &[u8], head: bool, mut cut: impl FnMut() -> usize) -> Outcome {
    let mut r = ResponseReader::default();
    let mut out = Outcome {
        responses: Vec::new(),
        error: None,
        at_eof: None,
    };
    let mut pos = 0;
    while pos < stream.len() {
        let end = (pos + cut().max(1)).min(stream.len());
        // One read may hold the end of one response and the start of the next.
        let mut at = pos;
        while at < end {
            let read = &stream[at..end];
            match r.feed(read, head) {
                Ok(Progress::Partial) => {
                    assert!(r.in_progress(), "bytes arrived but nothing is in progress");
                    at = end;
                }
                Ok(Progress::Complete {
                    status,
                    keep_alive,
                    consumed,
                }) => {
                    assert!(
                        consumed <= read.len(),
                        "consumed {consumed} of a {}-byte read",
                        read.len()
                    );
                    assert!(consumed > 0, "a response completed without using a byte");
                    at += consumed;
                    out.responses.push((status, keep_alive, at));
                    if at == end {
                        assert!(!r.in_progress(), "complete, yet still in progress");
                    }
                }
                Err(e) => {
                    out.error = Some(e);
                    return out;
                }
            }
        }
        pos = end;
    }
    out.at_eof = r.eof();
    out
}

/// The check: one read, then reads cut as byte 0 says, must agree.
pub fn http1_response(data: &[u8]) {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let head = control & 1 == 1;
    let whole = read_all(stream, head, || usize::MAX);
    if let Some(&(_, _, end)) = whole.responses.last() {
        assert!(end <= stream.len());
    }
    // Read lengths from 1 to 16 bytes, from a small generator seeded by the control byte.
    let seed = u32::from(control >> 1);
    let mut state = seed.wrapping_mul(0x9E37_79B9) | 1;
    let cut = || {
        if seed == 0 {
            return 1;
        }
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        1 + (state % 16) as usize
    };
    let split = read_all(stream, head, cut);
    assert_eq!(whole, split, "one read and several reads disagree");
}
