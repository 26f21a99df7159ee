//! HTTP/1.1 framing (RFC 9112) for both ends of a benchmark: where a message head ends, how its
//! body is delimited (length, chunked, until close), and whether the connection stays open.
//!
//! Heads are parsed with `httparse`; bodies are never stored, only counted and skipped, so a
//! connection costs a few dozen bytes unless a head arrives split across reads (then only the
//! head prefix is kept, up to [`MAX_HEAD_BYTES`]).

use thiserror::Error;

/// A head larger than this is refused (a 1 MiB header must not become a 1 MiB buffer per
/// connection).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Most headers accepted in one head.
const MAX_HEADERS: usize = 100;

/// Why a byte stream is not valid HTTP/1.1.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    #[error("malformed HTTP head")]
    BadHead,
    #[error(
        "HTTP head larger than {MAX_HEAD_BYTES} bytes or with more than {MAX_HEADERS} headers"
    )]
    HeadTooLarge,
    #[error("invalid Content-Length")]
    BadLength,
    #[error("malformed chunked encoding")]
    BadChunk,
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Empty,
    Length(u64),
    Chunked,
    /// The body ends when the peer closes (responses only).
    UntilClose,
}

/// The parts of a head that framing depends on, read from its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadInfo {
    pub framing: Framing,
    pub keep_alive: bool,
}

/// Derives framing and persistence from a head's version and headers. `no_body` is true for
/// responses that never carry one (to HEAD, 1xx, 204, 304). `is_request` selects the request
/// rule (no length means no body) over the response rule (no length means until close).
pub fn head_info(
    version: u8,
    headers: &[httparse::Header<'_>],
    no_body: bool,
    is_request: bool,
) -> Result<HeadInfo, FrameError> {
    let mut keep_alive = version >= 1;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in headers {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or(FrameError::BadLength)?;
            if length.is_some_and(|l| l != v) {
                return Err(FrameError::BadLength);
            }
            length = Some(v);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = last_token_is(h.value, b"chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            if has_token(h.value, b"close") {
                keep_alive = false;
            } else if has_token(h.value, b"keep-alive") {
                keep_alive = true;
            }
        }
    }
    let framing = if no_body {
        Framing::Empty
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        if n == 0 {
            Framing::Empty
        } else {
            Framing::Length(n)
        }
    } else if is_request {
        Framing::Empty
    } else {
        keep_alive = false;
        Framing::UntilClose
    };
    Ok(HeadInfo {
        framing,
        keep_alive,
    })
}

fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(|t| t.trim_ascii())
}

fn has_token(value: &[u8], token: &[u8]) -> bool {
    tokens(value).any(|t| t.eq_ignore_ascii_case(token))
}

fn last_token_is(value: &[u8], token: &[u8]) -> bool {
    tokens(value)
        .last()
        .is_some_and(|t| t.eq_ignore_ascii_case(token))
}

/// Skips a body of known framing, across as many reads as it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyReader {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
    Done,
}

impl BodyReader {
    pub fn new(framing: Framing) -> Self {
        match framing {
            Framing::Empty => BodyReader::Done,
            Framing::Length(n) => BodyReader::Length(n),
            Framing::Chunked => BodyReader::Chunked(ChunkedDecoder::default()),
            Framing::UntilClose => BodyReader::UntilClose,
        }
    }

    /// Consumes body bytes from `data`; returns (bytes used, body complete).
    pub fn feed(&mut self, data: &[u8]) -> Result<(usize, bool), FrameError> {
        match self {
            BodyReader::Done => Ok((0, true)),
            BodyReader::UntilClose => Ok((data.len(), false)),
            BodyReader::Length(left) => {
                let n = (*left).min(data.len() as u64);
                *left -= n;
                let done = *left == 0;
                if done {
                    *self = BodyReader::Done;
                }
                Ok((n as usize, done))
            }
            BodyReader::Chunked(dec) => {
                let r = dec.feed(data)?;
                if r.1 {
                    *self = BodyReader::Done;
                }
                Ok(r)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ChunkState {
    /// Reading the hex size; `digits` counts the digits seen.
    #[default]
    Size,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerLineStart,
    TrailerLine,
    TrailerEndLf,
}

/// A streaming decoder for `Transfer-Encoding: chunked` that only counts bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
    size: u64,
    digits: u8,
}

impl ChunkedDecoder {
    /// Consumes chunked bytes; returns (bytes used, body complete).
    pub fn feed(&mut self, data: &[u8]) -> Result<(usize, bool), FrameError> {
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            match self.state {
                ChunkState::Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                        if self.digits >= 15 {
                            return Err(FrameError::BadChunk);
                        }
                        self.size = self.size * 16 + d;
                        self.digits += 1;
                    }
                    b';' | b' ' | b'\t' if self.digits > 0 => self.state = ChunkState::Extension,
                    b'\r' if self.digits > 0 => self.state = ChunkState::SizeLf,
                    b'\n' if self.digits > 0 => self.end_size_line(),
                    _ => return Err(FrameError::BadChunk),
                },
                ChunkState::Extension => match b {
                    b'\r' => self.state = ChunkState::SizeLf,
                    b'\n' => self.end_size_line(),
                    _ => {}
                },
                ChunkState::SizeLf => {
                    if b != b'\n' {
                        return Err(FrameError::BadChunk);
                    }
                    self.end_size_line();
                }
                ChunkState::Data => {
                    let n = self.size.min((data.len() - i) as u64);
                    self.size -= n;
                    i += n as usize;
                    if self.size == 0 {
                        self.state = ChunkState::DataCr;
                    }
                    continue;
                }
                ChunkState::DataCr => match b {
                    b'\r' => self.state = ChunkState::DataLf,
                    b'\n' => self.state = ChunkState::Size,
                    _ => return Err(FrameError::BadChunk),
                },
                ChunkState::DataLf => {
                    if b != b'\n' {
                        return Err(FrameError::BadChunk);
                    }
                    self.state = ChunkState::Size;
                }
                ChunkState::TrailerLineStart => match b {
                    b'\r' => self.state = ChunkState::TrailerEndLf,
                    b'\n' => {
                        *self = Self::default();
                        return Ok((i + 1, true));
                    }
                    _ => self.state = ChunkState::TrailerLine,
                },
                ChunkState::TrailerLine => {
                    if b == b'\n' {
                        self.state = ChunkState::TrailerLineStart;
                    }
                }
                ChunkState::TrailerEndLf => {
                    if b != b'\n' {
                        return Err(FrameError::BadChunk);
                    }
                    *self = Self::default();
                    return Ok((i + 1, true));
                }
            }
            i += 1;
        }
        Ok((i, false))
    }

    fn end_size_line(&mut self) {
        self.state = if self.size == 0 {
            ChunkState::TrailerLineStart
        } else {
            ChunkState::Data
        };
        self.digits = 0;
    }
}

/// What a response reader has seen so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// More bytes are needed.
    Partial,
    /// A whole response ended after `consumed` bytes of the last input.
    Complete {
        status: u16,
        keep_alive: bool,
        consumed: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ReaderState {
    Head,
    Body {
        status: u16,
        keep_alive: bool,
        body: BodyReader,
    },
}

/// Reads one response at a time from a client connection.
#[derive(Debug, Clone)]
pub struct ResponseReader {
    /// A head that arrived split across reads; empty in the common case.
    head: Vec<u8>,
    state: ReaderState,
    /// Bytes of the current response seen so far (to tell an idle close from a cut response).
    seen: u64,
}

impl Default for ResponseReader {
    fn default() -> Self {
        Self {
            head: Vec::new(),
            state: ReaderState::Head,
            seen: 0,
        }
    }
}

impl ResponseReader {
    /// Forgets any partial response (after the connection is closed).
    pub fn reset(&mut self) {
        self.head = Vec::new();
        self.state = ReaderState::Head;
        self.seen = 0;
    }

    /// True when part of a response has arrived but not all of it.
    pub fn in_progress(&self) -> bool {
        self.seen > 0
    }

    /// Feeds received bytes. `head_request` says the request was HEAD (no body follows).
    pub fn feed(&mut self, data: &[u8], head_request: bool) -> Result<Progress, FrameError> {
        let mut pos = 0;
        self.seen += data.len() as u64;
        loop {
            match &mut self.state {
                ReaderState::Head => {
                    let parsed = if self.head.is_empty() {
                        match parse_response_head(&data[pos..], head_request)? {
                            Some((len, status, info)) => {
                                pos += len;
                                (status, info)
                            }
                            None => {
                                if data.len() - pos > MAX_HEAD_BYTES {
                                    return Err(FrameError::HeadTooLarge);
                                }
                                self.head.extend_from_slice(&data[pos..]);
                                return Ok(Progress::Partial);
                            }
                        }
                    } else {
                        let old = self.head.len();
                        let take =
                            (data.len() - pos).min(MAX_HEAD_BYTES + 1 - old.min(MAX_HEAD_BYTES));
                        self.head.extend_from_slice(&data[pos..pos + take]);
                        // Parse again only if the new bytes may end the head: parsing the whole
                        // prefix on every read would cost O(n^2) against a server that drips a
                        // long head a few bytes at a time.
                        let parsed = if may_end_head(&self.head[old.saturating_sub(2)..]) {
                            parse_response_head(&self.head, head_request)?
                        } else {
                            None
                        };
                        match parsed {
                            Some((len, status, info)) => {
                                pos += len - old;
                                self.head.clear();
                                (status, info)
                            }
                            None => {
                                if self.head.len() > MAX_HEAD_BYTES {
                                    return Err(FrameError::HeadTooLarge);
                                }
                                return Ok(Progress::Partial);
                            }
                        }
                    };
                    let (status, info) = parsed;
                    if (100..200).contains(&status) && status != 101 {
                        continue; // informational: the real response follows
                    }
                    self.state = ReaderState::Body {
                        status,
                        keep_alive: info.keep_alive,
                        body: BodyReader::new(info.framing),
                    };
                }
                ReaderState::Body {
                    status,
                    keep_alive,
                    body,
                } => {
                    let (used, done) = body.feed(&data[pos..])?;
                    pos += used;
                    if !done {
                        return Ok(Progress::Partial);
                    }
                    let done = Progress::Complete {
                        status: *status,
                        keep_alive: *keep_alive,
                        consumed: pos,
                    };
                    self.state = ReaderState::Head;
                    self.seen = 0;
                    return Ok(done);
                }
            }
        }
    }

    /// The peer closed the connection: completes a body delimited by close, if one is open.
    pub fn eof(&mut self) -> Option<u16> {
        match &self.state {
            ReaderState::Body {
                status,
                body: BodyReader::UntilClose,
                ..
            } => {
                let status = *status;
                self.reset();
                Some(status)
            }
            _ => None,
        }
    }
}

/// Whether `bytes` hold the end of a head: an empty line, CRLF or bare LF.
fn may_end_head(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b == b'\n')
        .any(|(i, _)| matches!(&bytes[i + 1..], [b'\n', ..] | [b'\r', b'\n', ..]))
}

/// Parses a response head: Some((head length, status, framing)) or None if incomplete.
fn parse_response_head(
    buf: &[u8],
    head_request: bool,
) -> Result<Option<(usize, u16, HeadInfo)>, FrameError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let status = resp.code.unwrap_or(0);
            let no_body =
                head_request || (100..200).contains(&status) || status == 204 || status == 304;
            let info = head_info(resp.version.unwrap_or(1), resp.headers, no_body, false)?;
            Ok(Some((len, status, info)))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(FrameError::HeadTooLarge),
        Err(_) => Err(FrameError::BadHead),
    }
}

/// Serialises a request once, for a connection to send many times: the request line, `Host`,
/// a `User-Agent` and `Content-Length` unless the caller set them, the caller's headers, the body.
pub fn encode_request(
    method: &str,
    target: &str,
    host: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Vec<u8> {
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut out = Vec::with_capacity(128 + body.len());
    out.extend_from_slice(format!("{method} {target} HTTP/1.1\r\n").as_bytes());
    if !has("host") {
        out.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
    }
    if !has("user-agent") {
        out.extend_from_slice(
            concat!("User-Agent: meshbench/", env!("CARGO_PKG_VERSION"), "\r\n").as_bytes(),
        );
    }
    let needs_length = !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH");
    if needs_length && !has("content-length") && !has("transfer-encoding") {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    for (n, v) in headers {
        out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// The same serialised request announcing its connection's end (`Connection: close` before the
/// blank line), so that the server closes first; `None` if the request names a `Connection` of
/// its own (the caller's choice stands) or has no complete head.
pub fn closing_variant(request: &[u8]) -> Option<Vec<u8>> {
    let end = request.windows(4).position(|w| w == b"\r\n\r\n")? + 2;
    let (head, rest) = request.split_at(end);
    let names_connection = head
        .split(|&b| b == b'\n')
        .skip(1)
        .filter_map(|line| line.iter().position(|&b| b == b':').map(|i| &line[..i]))
        .any(|name| name.trim_ascii().eq_ignore_ascii_case(b"connection"));
    if names_connection {
        return None;
    }
    const CLOSE: &[u8] = b"Connection: close\r\n";
    let mut out = Vec::with_capacity(request.len() + CLOSE.len());
    out.extend_from_slice(head);
    out.extend_from_slice(CLOSE);
    out.extend_from_slice(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closing_variant_announces_the_end_once() {
        let plain = encode_request("GET", "/", "h", &[], b"");
        let closing = closing_variant(&plain).unwrap();
        let text = String::from_utf8(closing.clone()).unwrap();
        assert!(text.ends_with("\r\nConnection: close\r\n\r\n"), "{text:?}");
        assert_eq!(closing.len(), plain.len() + "Connection: close\r\n".len());
        // The body stays after the blank line, untouched (even one that looks like a head).
        let body = b"a: b\r\n\r\nconnection: keep-alive\r\n\r\n";
        let post = encode_request("POST", "/", "h", &[], body);
        let closing = closing_variant(&post).unwrap();
        assert!(closing.ends_with(body));
        assert!(String::from_utf8_lossy(&closing).contains("Connection: close\r\n\r\na: b"));
        // The caller's own Connection header stands, whatever its case.
        for (name, value) in [("Connection", "keep-alive"), ("CONNECTION", "close")] {
            let own = encode_request("GET", "/", "h", &[(name.into(), value.into())], b"");
            assert_eq!(closing_variant(&own), None, "{name}: {value}");
        }
        // A header that merely contains the word is not one.
        let other = encode_request("GET", "/", "h", &[("X-Connection".into(), "1".into())], b"");
        assert!(closing_variant(&other).is_some());
        assert_eq!(
            closing_variant(b"GET / HTTP/1.1\r\n"),
            None,
            "no complete head"
        );
    }

    fn complete(status: u16, keep_alive: bool, consumed: usize) -> Progress {
        Progress::Complete {
            status,
            keep_alive,
            consumed,
        }
    }

    /// Stands for "the whole input" in the table below.
    const ALL: usize = usize::MAX;

    #[test]
    fn whole_responses_in_one_read() {
        type Case = (
            &'static str,
            &'static [u8],
            bool,
            Result<Progress, FrameError>,
        );
        let cases: &[Case] = &[
            ("length", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, Ok(complete(200, true, ALL))),
            ("no body 204", b"HTTP/1.1 204 No Content\r\n\r\n", false, Ok(complete(204, true, ALL))),
            ("head request", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true, Ok(complete(200, true, ALL))),
            ("close", b"HTTP/1.1 503 X\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false, Ok(complete(503, false, ALL))),
            ("http/1.0", b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false, Ok(complete(200, false, ALL))),
            ("chunked", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false, Ok(complete(200, true, ALL))),
            ("chunked ext+trailer", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n", false, Ok(complete(200, true, ALL))),
            ("100 continue", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, Ok(complete(200, true, ALL))),
            ("garbage", b"SSH-2.0-OpenSSH_9.2\r\n\r\n", false, Err(FrameError::BadHead)),
            ("bad length", b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false, Err(FrameError::BadLength)),
            ("two lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", false, Err(FrameError::BadLength)),
            ("bad chunk", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false, Err(FrameError::BadChunk)),
            ("partial", b"HTTP/1.1 200 OK\r\nContent-Le", false, Ok(Progress::Partial)),
        ];
        for (name, input, head, want) in cases {
            let mut r = ResponseReader::default();
            let want = match *want {
                Ok(Progress::Complete {
                    status,
                    keep_alive,
                    consumed: ALL,
                }) => Ok(complete(status, keep_alive, input.len())),
                other => other,
            };
            assert_eq!(r.feed(input, *head), want, "case {name}");
        }
    }

    #[test]
    fn every_split_point_gives_the_same_answer() {
        let inputs: &[&[u8]] = &[
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n",
        ];
        for input in inputs {
            for split in 1..input.len() {
                let mut r = ResponseReader::default();
                assert_eq!(
                    r.feed(&input[..split], false),
                    Ok(Progress::Partial),
                    "split {split}"
                );
                assert!(r.in_progress());
                match r.feed(&input[split..], false) {
                    Ok(Progress::Complete {
                        status: 200,
                        consumed,
                        ..
                    }) => {
                        assert_eq!(consumed, input.len() - split)
                    }
                    other => panic!("split {split}: {other:?}"),
                }
                assert!(!r.in_progress());
            }
        }
    }

    #[test]
    fn body_until_close_completes_at_eof() {
        let mut r = ResponseReader::default();
        assert_eq!(
            r.feed(b"HTTP/1.1 200 OK\r\n\r\nsome bytes", false),
            Ok(Progress::Partial)
        );
        assert_eq!(r.eof(), Some(200));
        let mut cut = ResponseReader::default();
        assert_eq!(
            cut.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", false),
            Ok(Progress::Partial)
        );
        assert_eq!(
            cut.eof(),
            None,
            "a cut length-delimited body is not a response"
        );
    }

    #[test]
    fn a_huge_head_is_refused_with_bounded_memory() {
        let mut r = ResponseReader::default();
        assert_eq!(
            r.feed(b"HTTP/1.1 200 OK\r\nX-Big: ", false),
            Ok(Progress::Partial)
        );
        let chunk = vec![b'a'; 16 * 1024];
        let mut result = Ok(Progress::Partial);
        for _ in 0..64 {
            result = r.feed(&chunk, false);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(FrameError::HeadTooLarge));
        assert!(r.head.len() <= MAX_HEAD_BYTES + 1);
    }

    #[test]
    fn a_head_dripped_byte_by_byte_is_parsed_in_linear_time() {
        let mut input = b"HTTP/1.1 200 OK\r\n".to_vec();
        let mut line = b"X-Drip: ".to_vec();
        line.resize(1_000, b'a');
        line.extend_from_slice(b"\r\n");
        while input.len() < MAX_HEAD_BYTES - 2_000 {
            input.extend_from_slice(&line);
        }
        input.truncate(input.len() - 2);
        input.extend_from_slice(b"\nContent-Length: 0\n\n");
        let started = std::time::Instant::now();
        let mut r = ResponseReader::default();
        let (last, rest) = input.split_last().unwrap();
        for b in rest {
            assert_eq!(
                r.feed(std::slice::from_ref(b), false),
                Ok(Progress::Partial)
            );
        }
        assert_eq!(r.feed(&[*last], false), Ok(complete(200, true, 1)));
        // Parsing the whole prefix at every byte took minutes here (debug build).
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        // The end is found whether its line breaks are CRLF, LF, or split across reads.
        for end in [&b"\r\n\r\n"[..], b"\n\n", b"\r\n\n", b"\n\r\n"] {
            let mut head = b"HTTP/1.1 204 No Content".to_vec();
            head.extend_from_slice(end);
            for split in 1..head.len() {
                let mut r = ResponseReader::default();
                assert_eq!(r.feed(&head[..split], false), Ok(Progress::Partial));
                let rest = head.len() - split;
                assert_eq!(r.feed(&head[split..], false), Ok(complete(204, true, rest)));
            }
        }
    }

    #[test]
    fn chunked_decoder_table() {
        type Case = (&'static [u8], Result<(usize, bool), FrameError>);
        let cases: &[Case] = &[
            (b"0\r\n\r\n", Ok((5, true))),
            (b"A\r\n0123456789\r\n0\r\n\r\n", Ok((20, true))),
            (b"1\nx\n0\n\n", Ok((7, true))),
            (b"\r\n", Err(FrameError::BadChunk)),
            (b"1\r\nxy", Err(FrameError::BadChunk)),
            (b"fffffffffffffffff\r\n", Err(FrameError::BadChunk)),
            (b"4\r\nab", Ok((5, false))),
        ];
        for (input, want) in cases {
            let mut d = ChunkedDecoder::default();
            assert_eq!(
                d.feed(input),
                *want,
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    /// Random bytes and randomly cut valid responses never panic, and a valid response gives the
    /// same answer however it is cut.
    #[test]
    fn random_input_never_panics() {
        let mut rng = crate::rng::SplitMix64(7);
        let valid: &[&[u8]] = &[
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        ];
        for _ in 0..20_000 {
            let mut r = ResponseReader::default();
            let len = (rng.next_u64() % 200) as usize;
            let garbage: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let _ = r.feed(&garbage, rng.next_u64().is_multiple_of(2));
            let _ = r.eof();
            let input = valid[(rng.next_u64() % valid.len() as u64) as usize];
            let mut r = ResponseReader::default();
            let mut pos = 0;
            let mut done = None;
            while pos < input.len() {
                let step = 1 + (rng.next_u64() % 8) as usize;
                let end = (pos + step).min(input.len());
                match r.feed(&input[pos..end], false) {
                    Ok(Progress::Complete {
                        status, consumed, ..
                    }) => {
                        done = Some(status);
                        assert_eq!(pos + consumed, input.len());
                        break;
                    }
                    Ok(Progress::Partial) => pos = end,
                    Err(e) => panic!("valid input refused: {e}"),
                }
            }
            assert!(done.is_some());
        }
    }

    #[test]
    fn request_encoding_adds_what_is_missing() {
        let req = encode_request(
            "POST",
            "/a?b=1",
            "h:8080",
            &[("X-A".into(), "1".into())],
            b"xyz",
        );
        let text = String::from_utf8(req).unwrap();
        assert!(text.starts_with("POST /a?b=1 HTTP/1.1\r\nHost: h:8080\r\nUser-Agent: meshbench/"));
        assert!(text.ends_with("Content-Length: 3\r\nX-A: 1\r\n\r\nxyz"));
        let custom = encode_request("GET", "/", "h", &[("host".into(), "other".into())], b"");
        let text = String::from_utf8(custom).unwrap();
        assert!(!text.contains("Host: h\r\n") && text.contains("host: other\r\n"));
        assert!(!text.contains("Content-Length"));
    }
}
