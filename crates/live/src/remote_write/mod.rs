//! Prometheus remote write: the board's series pushed to a receiver while the load runs.
//!
//! One thread of its own does everything: it looks at the board every [`POLL`] (the hub's lock
//! held only to copy the steps that have news), turns the families of each step into
//! remote-write 1.0 requests ([`batch`], [`proto`]), and pushes them in order ([`send`]) from
//! a bounded queue with retries ([`queue`]). The load never waits for it: the runner only
//! meets it at the hub's lock, and an unreachable or hanging receiver costs this thread its
//! time, nothing else.
//!
//! What goes out, and when:
//! - a running step's series once per `interval` of its data (a push per completed second by
//!   default), stamped with the wall-clock time of its newest second;
//! - when a step ends (or at [`RemoteWriter::finish`]): its final values, then a stale marker
//!   one millisecond later for every series it ever pushed, so the series end in PromQL where
//!   the step did instead of lingering for the five minutes of lookback;
//! - classic histograms always (`_bucket{le}`, `_count`, `_sum`); native histograms too, in
//!   requests of their own, until the receiver refuses one (see [`Natives`]): the classic data
//!   never rides with them, so a refusal loses nothing.
//!
//! Failures: 5xx, 429 and transport errors are retried (exponential backoff with jitter, or the
//! receiver's `Retry-After`); any other 4xx drops the request and records the error. The queue
//! holds at most [`MAX_PENDING_REQUESTS`] requests and drops its oldest beyond that; every
//! value is cumulative, so what a later request carries makes up for a dropped one. At the
//! end, a receiver that answers gets the caller's time limit for the last pushes; one that is
//! failing gets one more try and at most [`FAILING_GRACE`].

pub mod batch;
pub mod proto;
pub mod queue;
pub mod send;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::series::families_of;
use crate::{Hub, LiveError, Scope, StepState};

use batch::{Lane, SeriesKey};
use queue::{Backoff, Pending, Queue};
use send::{Failure, Sender};

/// How often the thread looks at the board (and notices `finish`).
pub const POLL: Duration = Duration::from_millis(100);
/// Samples in one request at most (Prometheus' own sender sends up to 2,000); the series of one
/// histogram are never split, so a histogram with more buckets goes alone.
pub const MAX_SAMPLES_PER_REQUEST: usize = 2_000;
/// Requests waiting at most: two minutes of pushes at one request a second.
pub const MAX_PENDING_REQUESTS: usize = 120;
/// The longest a push may take, from connecting to the answer's last byte.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The first retry's delay (before jitter); each failure doubles it, up to [`BACKOFF_MAX`].
pub const BACKOFF_FIRST: Duration = Duration::from_millis(200);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// What `finish` allows a receiver that is failing (its last try failed, or a push has waited
/// longer than this for an answer): a dead receiver must not hold up the end of the run.
pub const FAILING_GRACE: Duration = Duration::from_secs(1);
/// Native requests that fail with a server error this many times in a row, before any was
/// taken, count as refused.
const NATIVE_STRIKES: u32 = 3;

/// Where and how to push.
#[derive(Debug, Clone)]
pub struct RemoteWriteConfig {
    pub url: String,
    /// Extra headers on every push (`Authorization: Bearer ...`, a tenant id).
    pub headers: Vec<(String, String)>,
    /// How often the current values are pushed.
    pub interval: Duration,
    /// Samples per request at most.
    pub max_samples_per_request: usize,
    /// Requests waiting at most; the oldest is dropped beyond.
    pub max_pending_requests: usize,
    /// One push's time limit, connecting included.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// Send native histograms too (until the receiver refuses them).
    pub native_histograms: bool,
}

impl Default for RemoteWriteConfig {
    fn default() -> Self {
        RemoteWriteConfig {
            url: String::new(),
            headers: Vec::new(),
            interval: Duration::from_secs(1),
            max_samples_per_request: MAX_SAMPLES_PER_REQUEST,
            max_pending_requests: MAX_PENDING_REQUESTS,
            request_timeout: REQUEST_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
            native_histograms: true,
        }
    }
}

/// What the pushes did, for the closing line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushReport {
    /// Requests the receiver took.
    pub requests_sent: u64,
    /// Float samples the receiver took (stale markers included).
    pub samples_sent: u64,
    /// Native histogram samples the receiver took.
    pub histograms_sent: u64,
    /// Samples of either kind given up: the queue was full, the receiver refused them (4xx),
    /// or the run ended first. Native histograms a receiver does not take are not counted.
    pub samples_dropped: u64,
    /// Tries that failed and were tried again.
    pub retries: u64,
    /// The newest failure, if any try failed.
    pub last_error: Option<String>,
    /// Why native histograms stopped, when the receiver refused them (classic ones went on).
    pub natives_refused: Option<String>,
}

/// Whether the receiver takes native histograms, as learnt from its answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Natives {
    /// None sent yet, or none answered: `strikes` server errors in a row so far.
    Unknown { strikes: u32 },
    /// One was taken: failures from now on are ordinary.
    Taken,
    /// Refused (a 4xx, or an error naming histograms): none are sent any more.
    Refused,
}

/// The thread's figures, readable by `finish` even while a push hangs.
#[derive(Debug, Default)]
struct Shared {
    report: PushReport,
    /// Samples in the queue.
    queued: u64,
    /// Since when the push under way has waited (its samples are in `queued`).
    in_flight: Option<Instant>,
    /// The last try failed in a way worth retrying (the receiver is down or overloaded).
    failing: bool,
}

/// `finish` telling the thread to wrap up.
#[derive(Debug, Clone, Copy)]
struct WrapUp {
    /// Whatever is not pushed by then is dropped.
    deadline: Instant,
    /// The receiver was well at the end: failures are retried until the deadline. When it was
    /// failing already, the first failure ends the pushing.
    patient: bool,
}

/// Where `finish` (or drop) leaves the thread its [`WrapUp`], with the condvar that wakes it.
#[derive(Default)]
struct Mailbox {
    stop: Mutex<Option<WrapUp>>,
    wake: Condvar,
}

impl Mailbox {
    fn stop_at(&self) -> Option<WrapUp> {
        *self.stop.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stop(&self, stop: WrapUp) {
        *self.stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(stop);
        self.wake.notify_all();
    }

    /// Sleeps until `until`, or until told to stop if not told yet.
    fn sleep(&self, until: Instant) {
        let mut stop = self.stop.lock().unwrap_or_else(|p| p.into_inner());
        let told = stop.is_some();
        loop {
            let now = Instant::now();
            if now >= until || stop.is_some() != told {
                return;
            }
            stop = self
                .wake
                .wait_timeout(stop, until - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

/// A running pusher.
pub struct RemoteWriter {
    mailbox: Arc<Mailbox>,
    shared: Arc<Mutex<Shared>>,
    done: mpsc::Receiver<PushReport>,
    thread: Option<JoinHandle<()>>,
    shown: String,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RemoteWriter {
    /// Checks the URL and headers (a bad one is [`LiveError::Config`]) and starts the thread.
    pub fn start(config: RemoteWriteConfig, hub: Hub) -> Result<RemoteWriter, LiveError> {
        let sender = Sender::new(&config.url, &config.headers, config.connect_timeout)?;
        let shown = sender.shown().to_string();
        let mailbox = Arc::new(Mailbox::default());
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (tx, done) = mpsc::channel();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut writer = Writer {
            hub,
            sender,
            queue: Queue::new(config.max_pending_requests),
            backoff: Backoff::new(BACKOFF_FIRST, BACKOFF_MAX, seed),
            config,
            mailbox: mailbox.clone(),
            shared: shared.clone(),
            tracks: BTreeMap::new(),
            seen: None,
            natives: Natives::Unknown { strikes: 0 },
        };
        let thread = std::thread::Builder::new()
            .name("remote-write".into())
            .spawn(move || {
                let report = writer.run();
                let _ = tx.send(report);
            })
            .map_err(LiveError::WriterThread)?;
        Ok(RemoteWriter {
            mailbox,
            shared,
            done,
            thread: Some(thread),
            shown,
        })
    }

    /// Pushes what is left (the last values and the stale markers), waiting at most `timeout`;
    /// at most [`FAILING_GRACE`] if the receiver is failing already.
    pub fn finish(mut self, timeout: Duration) -> PushReport {
        let failing = {
            let s = lock(&self.shared);
            s.failing
                || s.in_flight
                    .is_some_and(|since| since.elapsed() > FAILING_GRACE)
        };
        let budget = if failing {
            timeout.min(FAILING_GRACE)
        } else {
            timeout
        };
        self.mailbox.stop(WrapUp {
            deadline: Instant::now() + budget,
            patient: !failing,
        });
        // The thread keeps to the deadline itself; only a push that began before it and hangs
        // can hold it longer. Then it is left behind (it ends with the process).
        let outcome = self.done.recv_timeout(budget + POLL * 2);
        let thread = self.thread.take();
        if let Ok(report) = outcome {
            if let Some(t) = thread {
                let _ = t.join();
            }
            return report;
        }
        let s = lock(&self.shared);
        let mut r = s.report.clone();
        r.samples_dropped += s.queued;
        r.last_error = Some(match (outcome, s.in_flight) {
            (Err(mpsc::RecvTimeoutError::Timeout), Some(since)) => format!(
                "{}: no answer: a push was still waiting after {:.1} s when the run ended",
                self.shown,
                since.elapsed().as_secs_f64()
            ),
            (Err(mpsc::RecvTimeoutError::Timeout), None) => {
                format!("{}: the pusher did not stop in time", self.shown)
            }
            _ => format!("{}: the pusher stopped early (a bug)", self.shown),
        });
        r
    }
}

impl Drop for RemoteWriter {
    fn drop(&mut self) {
        // Dropped without `finish`: stop now, wait for nothing.
        if self.thread.is_some() {
            self.mailbox.stop(WrapUp {
                deadline: Instant::now(),
                patient: false,
            });
        }
    }
}

/// What the thread remembers of a step.
#[derive(Debug, Default)]
struct Track {
    /// When the step started: a step run again under the same scope is a new one.
    started_ms: u64,
    /// Wall clock of the newest second pushed, ms.
    pushed_ms: u64,
    /// Every series pushed, for the stale markers.
    classic: BTreeSet<SeriesKey>,
    native: BTreeSet<SeriesKey>,
    /// Final values and stale markers are queued.
    ended: bool,
}

struct Writer {
    hub: Hub,
    sender: Sender,
    config: RemoteWriteConfig,
    queue: Queue,
    backoff: Backoff,
    mailbox: Arc<Mailbox>,
    shared: Arc<Mutex<Shared>>,
    tracks: BTreeMap<Scope, Track>,
    /// The board's sequence number at the last look.
    seen: Option<u64>,
    natives: Natives,
}

impl Writer {
    fn run(&mut self) -> PushReport {
        loop {
            let stop = self.mailbox.stop_at();
            self.look(stop.is_some());
            let now = Instant::now();
            if let Some(stop) = stop {
                if self.queue.is_empty() {
                    break;
                }
                if now >= stop.deadline {
                    self.give_up();
                    break;
                }
            }
            let mut due = self.queue.head().map(|h| h.not_before);
            if stop.is_some_and(|s| !s.patient) {
                // A failing receiver gets one more try at once, not after its backoff.
                due = due.map(|t| t.min(now));
            }
            if due.is_some_and(|t| t <= now) {
                self.try_head(stop);
                continue;
            }
            let mut wake = now + POLL;
            if let Some(t) = due {
                wake = wake.min(t);
            }
            if let Some(stop) = stop {
                wake = wake.min(stop.deadline);
            }
            self.mailbox.sleep(wake);
        }
        lock(&self.shared).report.clone()
    }

    /// Queues the news of every step: values due, and the end of steps that finished (all of
    /// them once `stopping`).
    fn look(&mut self, stopping: bool) {
        let interval_ms = (self.config.interval.as_millis() as u64).max(1);
        let mut work: Vec<(Scope, Option<StepState>, bool)> = Vec::new();
        let mut on_board: BTreeSet<Scope> = BTreeSet::new();
        let mut restarted: Vec<Track> = Vec::new();
        {
            let board = self.hub.board();
            if !stopping && self.seen == Some(board.seq) {
                return;
            }
            self.seen = Some(board.seq);
            for s in &board.steps {
                let scope = &s.info.scope;
                on_board.insert(scope.clone());
                let track = self.tracks.entry(scope.clone()).or_default();
                if track.started_ms != s.info.started_ms {
                    let old = std::mem::replace(
                        track,
                        Track {
                            started_ms: s.info.started_ms,
                            ..Track::default()
                        },
                    );
                    if !old.ended {
                        // The scope's earlier run never ended here: end it before this one.
                        restarted.push(old);
                    }
                }
                if track.ended {
                    continue;
                }
                let ending = s.finished || stopping;
                let t = &s.totals;
                let news = t.seconds > 0 && t.last_ms > track.pushed_ms;
                let due = news
                    && (ending
                        || track.pushed_ms == 0
                        || t.last_ms >= track.pushed_ms + interval_ms * 9 / 10);
                if due || ending {
                    // A copy (histograms included) is a memcpy: the lock goes back at once.
                    work.push((scope.clone(), due.then(|| s.clone()), ending));
                }
            }
        }
        // Steps that left the board before their end was seen end now; ended ones that left
        // are forgotten.
        for (scope, track) in &self.tracks {
            if !track.ended && !on_board.contains(scope) {
                work.push((scope.clone(), None, true));
            }
        }
        self.tracks
            .retain(|scope, t| !t.ended || on_board.contains(scope));
        for old in restarted {
            self.queue_stale(old);
        }
        for (scope, step, ending) in work {
            if let Some(mut step) = step {
                step.finished |= ending;
                self.queue_values(&scope, &step);
            }
            if ending {
                self.queue_end(&scope);
            }
        }
    }

    fn queue_values(&mut self, scope: &Scope, step: &StepState) {
        let t_ms = step.totals.last_ms;
        let families = families_of(&[step], t_ms);
        let natives = self.config.native_histograms && self.natives != Natives::Refused;
        let max = self.config.max_samples_per_request;
        let track = self.tracks.entry(scope.clone()).or_default();
        track.pushed_ms = t_ms;
        let batches = batch::snapshot(
            &families,
            t_ms as i64,
            natives,
            max,
            &mut track.classic,
            &mut track.native,
        );
        for b in batches {
            self.enqueue(b);
        }
    }

    /// A step ended: stale markers for its series, which it then forgets.
    fn queue_end(&mut self, scope: &Scope) {
        let Some(track) = self.tracks.get_mut(scope) else {
            return;
        };
        track.ended = true;
        let series = Track {
            pushed_ms: track.pushed_ms,
            classic: std::mem::take(&mut track.classic),
            native: std::mem::take(&mut track.native),
            ..Track::default()
        };
        self.queue_stale(series);
    }

    fn queue_stale(&mut self, track: Track) {
        let max = self.config.max_samples_per_request;
        // Just after the last value: the series ends where the step did, and a scope run again
        // starts after it.
        let t_ms = track.pushed_ms as i64 + 1;
        let mut batches = batch::stale(&track.classic, Lane::Classic, t_ms, max);
        if self.natives != Natives::Refused {
            batches.extend(batch::stale(&track.native, Lane::Native, t_ms, max));
        }
        for b in batches {
            self.enqueue(b);
        }
    }

    fn enqueue(&mut self, b: batch::Batch) {
        let p = Pending {
            lane: b.lane,
            body: proto::encode_body(&b.request),
            samples: b.samples,
            histograms: b.histograms,
            failures: 0,
            not_before: Instant::now(),
        };
        if let Some(old) = self.queue.push(p) {
            self.drop_request(&old);
        }
        lock(&self.shared).queued = self.queue.samples();
    }

    fn drop_request(&mut self, p: &Pending) {
        let refused_native = p.lane == Lane::Native && self.natives == Natives::Refused;
        if !refused_native {
            lock(&self.shared).report.samples_dropped += p.all_samples();
        }
    }

    /// One try of the oldest request.
    fn try_head(&mut self, stop: Option<WrapUp>) {
        let Some(head) = self.queue.head() else {
            return;
        };
        if head.lane == Lane::Native && self.natives == Natives::Refused {
            self.queue.pop();
            lock(&self.shared).queued = self.queue.samples();
            return;
        }
        let mut timeout = self.config.request_timeout;
        if let Some(stop) = stop {
            timeout = timeout.min(stop.deadline.saturating_duration_since(Instant::now()));
        }
        lock(&self.shared).in_flight = Some(Instant::now());
        let result = self.sender.post(&head.body, timeout);
        {
            let mut s = lock(&self.shared);
            s.in_flight = None;
            s.failing = matches!(&result, Err(f) if f.retryable());
        }
        match result {
            Ok(()) => {
                let done = self.queue.pop().expect("the head was there");
                if done.lane == Lane::Native {
                    self.natives = Natives::Taken;
                }
                let mut s = lock(&self.shared);
                s.report.requests_sent += 1;
                s.report.samples_sent += done.samples;
                s.report.histograms_sent += done.histograms;
            }
            Err(f) => self.failed(f, stop),
        }
        lock(&self.shared).queued = self.queue.samples();
    }

    fn failed(&mut self, f: Failure, stop: Option<WrapUp>) {
        let lane = self.queue.head().map(|h| h.lane);
        let message = format!("{}: {}", self.sender.shown(), f.message);
        if lane == Some(Lane::Native) && self.natives != Natives::Taken {
            if f.refuses_natives() {
                self.refuse_natives(message);
                return;
            }
            if let (Natives::Unknown { strikes }, Some(_)) = (&mut self.natives, f.status) {
                *strikes += 1;
                if *strikes >= NATIVE_STRIKES {
                    self.refuse_natives(message);
                    return;
                }
            }
        }
        lock(&self.shared).report.last_error = Some(message);
        if f.retryable() && stop.is_some_and(|s| !s.patient) {
            // Failing before the end and failing still: no use waiting out the grace.
            self.give_up();
        } else if f.retryable() {
            let head = self.queue.head_mut().expect("the head was there");
            head.failures += 1;
            let wait = f
                .retry_after
                .unwrap_or_else(|| self.backoff.delay(head.failures));
            head.not_before = Instant::now() + wait;
            lock(&self.shared).report.retries += 1;
        } else {
            let gone = self.queue.pop().expect("the head was there");
            self.drop_request(&gone);
        }
    }

    /// The receiver does not take native histograms: none are sent from now on; the classic
    /// series carry the same buckets.
    fn refuse_natives(&mut self, why: String) {
        self.natives = Natives::Refused;
        self.queue.remove_lane(Lane::Native);
        // The receiver answered: it is not failing, it only does not take these.
        lock(&self.shared).failing = false;
        for t in self.tracks.values_mut() {
            t.native.clear();
        }
        lock(&self.shared).report.natives_refused = Some(why);
    }

    /// The deadline passed: what is still queued is dropped.
    fn give_up(&mut self) {
        let left = self.queue.drain();
        for p in &left {
            self.drop_request(p);
        }
        let mut s = lock(&self.shared);
        s.queued = 0;
        if !left.is_empty() && s.report.last_error.is_none() {
            s.report.last_error = Some(format!(
                "{}: {} requests not pushed by the end of the run",
                self.sender.shown(),
                left.len()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against real loopback servers that answer as a receiver would (or do not answer).

    use super::proto::{decode_body, is_stale, WriteRequest};
    use super::*;
    use crate::{names, StepInfo};
    use meshbench_engine::recorder::{ErrorKind, Interval};
    use meshbench_results::usage::now_ms;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The answer to the n-th request (from 0): status and body.
    type Answer = fn(usize, &WriteRequest) -> (u16, &'static str);

    /// A receiver on loopback that decodes every push and answers as `answer` says; with no
    /// answer, it accepts and never replies.
    struct Receiver {
        addr: SocketAddr,
        got: Got,
        stop: Arc<AtomicBool>,
    }

    impl Receiver {
        fn start(answer: Option<Answer>) -> Receiver {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let addr = listener.local_addr().unwrap();
            let got = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let (g, st) = (got.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut parked = Vec::new();
                while !st.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => match answer {
                            Some(a) => {
                                let g = g.clone();
                                std::thread::spawn(move || serve(conn, a, g));
                            }
                            None => parked.push(conn),
                        },
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            });
            Receiver { addr, got, stop }
        }

        fn url(&self) -> String {
            format!("http://{}/api/v1/write", self.addr)
        }

        fn requests(&self) -> Vec<WriteRequest> {
            self.got
                .lock()
                .unwrap()
                .iter()
                .map(|(_, r)| r.clone())
                .collect()
        }
    }

    impl Drop for Receiver {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    type Got = Arc<Mutex<Vec<(Vec<(String, String)>, WriteRequest)>>>;

    fn serve(mut conn: TcpStream, answer: Answer, got: Got) {
        conn.set_nonblocking(false).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf: Vec<u8> = Vec::new();
        let mut chunk = [0u8; 65536];
        loop {
            while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                let headers: Vec<(String, String)> = head
                    .lines()
                    .skip(1)
                    .filter_map(|l| l.split_once(':'))
                    .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect();
                let length: usize = headers
                    .iter()
                    .find(|(n, _)| n == "content-length")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                if buf.len() < end + 4 + length {
                    break;
                }
                let body: Vec<u8> = buf[end + 4..end + 4 + length].to_vec();
                buf.drain(..end + 4 + length);
                let req = decode_body(&body).expect("a snappy WriteRequest");
                let n = {
                    let mut g = got.lock().unwrap();
                    g.push((headers, req.clone()));
                    g.len() - 1
                };
                let (status, text) = answer(n, &req);
                let reply = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                );
                if conn.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            }
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn scope() -> Scope {
        Scope {
            experiment: "e".into(),
            step: 0,
            variant: "v".into(),
        }
    }

    /// A step of `seconds` seconds, each of 50 × 200, 2 × 500 and a timeout, `gap` apart.
    fn feed(hub: &Hub, seconds: u32, gap: Duration) -> u64 {
        let n = feed_step(hub, &scope(), seconds, gap);
        hub.step_finished(&scope());
        n
    }

    /// `feed` without the end: the step stays running.
    fn feed_step(hub: &Hub, scope: &Scope, seconds: u32, gap: Duration) -> u64 {
        hub.step_started(StepInfo {
            scope: scope.clone(),
            load: "50 rps".into(),
            target_rps: Some(53.0),
            steps: 1,
            step_secs: seconds as f64,
            left_after_secs: 0.0,
            started_ms: now_ms(),
        });
        for n in 0..seconds {
            let mut iv = Interval::new(n);
            for i in 0..52u64 {
                iv.counts.response(if i < 50 { 200 } else { 500 });
                iv.latency.record(200 + i * 31).unwrap();
            }
            iv.counts.error(ErrorKind::Timeout);
            iv.sends = 53;
            hub.second(scope, &iv, &[], now_ms());
            std::thread::sleep(gap);
        }
        seconds as u64 * 53
    }

    fn config(url: String) -> RemoteWriteConfig {
        RemoteWriteConfig {
            url,
            interval: Duration::from_millis(100),
            ..RemoteWriteConfig::default()
        }
    }

    fn ok(_: usize, _: &WriteRequest) -> (u16, &'static str) {
        (204, "")
    }

    /// Every float sample of series `name` received, in order.
    fn values(reqs: &[WriteRequest], name: &str) -> Vec<f64> {
        reqs.iter()
            .flat_map(|r| &r.timeseries)
            .filter(|s| s.label("__name__") == Some(name))
            .flat_map(|s| s.samples.iter().map(|x| x.value))
            .collect()
    }

    #[test]
    fn values_then_stale_markers_in_requests_within_the_limit() {
        let rx = Receiver::start(Some(ok));
        let hub = Hub::new();
        let mut c = config(rx.url());
        c.max_samples_per_request = 40;
        let w = RemoteWriter::start(c, hub.clone()).unwrap();
        let total = feed(&hub, 3, Duration::from_millis(150));
        let report = w.finish(Duration::from_secs(5));
        assert_eq!(report.samples_dropped, 0, "{report:?}");
        assert_eq!(report.last_error, None);
        let reqs = rx.requests();
        assert_eq!(report.requests_sent as usize, reqs.len());
        let requests = values(&reqs, names::REQUESTS);
        assert!(requests.len() >= 3, "{requests:?}");
        assert_eq!(requests[requests.len() - 2], total as f64);
        assert!(is_stale(*requests.last().unwrap()));
        // Every series ends with a stale marker, after its last value.
        let mut last: BTreeMap<Vec<proto::Label>, (i64, f64)> = BTreeMap::new();
        let mut newest_value = 0;
        for s in reqs.iter().flat_map(|r| &r.timeseries) {
            for x in &s.samples {
                last.insert(s.labels.clone(), (x.timestamp, x.value));
                if !is_stale(x.value) {
                    newest_value = newest_value.max(x.timestamp);
                }
            }
            for h in &s.histograms {
                last.insert(s.labels.clone(), (h.timestamp, h.sum));
                if !is_stale(h.sum) {
                    newest_value = newest_value.max(h.timestamp);
                }
            }
        }
        assert!(last
            .values()
            .all(|(t, v)| is_stale(*v) && *t > newest_value));
        // Natives went in requests of their own; the limit held but for single histograms.
        for r in &reqs {
            let natives = r.timeseries.iter().any(|s| !s.histograms.is_empty());
            let floats = r.timeseries.iter().any(|s| !s.samples.is_empty());
            assert!(!(natives && floats));
            let n: usize = r.timeseries.iter().map(|s| s.samples.len()).sum();
            let families: BTreeSet<&str> = r
                .timeseries
                .iter()
                .filter_map(|s| s.label("__name__"))
                .map(|n| n.trim_end_matches("_bucket").trim_end_matches("_count"))
                .map(|n| n.trim_end_matches("_sum"))
                .collect();
            assert!(n <= 40 || families.len() == 1, "{n} samples: {families:?}");
        }
        let counts = values(&reqs, &format!("{}_count", names::LATENCY));
        assert_eq!(counts[counts.len() - 2], 3.0 * 52.0);
    }

    /// Samples of `name` by step label, in the order received; their timestamps increase.
    fn by_step(reqs: &[WriteRequest], name: &str) -> BTreeMap<String, Vec<f64>> {
        let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut times: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for s in reqs.iter().flat_map(|r| &r.timeseries) {
            if s.label("__name__") == Some(name) {
                let step = s.label(names::STEP).unwrap_or_default().to_string();
                times
                    .entry(step.clone())
                    .or_default()
                    .extend(s.samples.iter().map(|x| x.timestamp));
                out.entry(step)
                    .or_default()
                    .extend(s.samples.iter().map(|x| x.value));
            }
        }
        for t in times.values() {
            assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
        }
        out
    }

    #[test]
    fn each_step_ends_with_its_own_stale_markers() {
        let rx = Receiver::start(Some(ok));
        let hub = Hub::new();
        let w = RemoteWriter::start(config(rx.url()), hub.clone()).unwrap();
        let first = scope();
        let second = Scope { step: 1, ..scope() };
        let n0 = feed_step(&hub, &first, 2, Duration::from_millis(150));
        // Starting the next step ends the one before.
        let n1 = feed_step(&hub, &second, 3, Duration::from_millis(150));
        std::thread::sleep(POLL * 2);
        // The same scope run again is a new series history: the old one ends first.
        std::thread::sleep(Duration::from_millis(5));
        let n1b = feed_step(&hub, &second, 1, Duration::from_millis(150));
        let report = w.finish(Duration::from_secs(5));
        assert_eq!(report.samples_dropped, 0, "{report:?}");
        let steps = by_step(&rx.requests(), names::REQUESTS);
        let s0 = &steps["0"];
        assert_eq!(s0[s0.len() - 2], n0 as f64);
        assert!(is_stale(s0[s0.len() - 1]));
        let s1 = &steps["1"];
        let stale_at: Vec<usize> = (0..s1.len()).filter(|&i| is_stale(s1[i])).collect();
        assert_eq!(stale_at.len(), 2, "{s1:?}");
        assert_eq!(s1[stale_at[0] - 1], n1 as f64);
        assert_eq!(s1[stale_at[1] - 1], n1b as f64);
        assert_eq!(stale_at[1], s1.len() - 1);
    }

    #[test]
    fn server_errors_are_retried_until_taken() {
        let rx = Receiver::start(Some(|n, _| if n < 2 { (503, "busy") } else { (200, "") }));
        let hub = Hub::new();
        let w = RemoteWriter::start(config(rx.url()), hub.clone()).unwrap();
        feed(&hub, 2, Duration::from_millis(150));
        let report = w.finish(Duration::from_secs(5));
        assert_eq!(report.retries, 2, "{report:?}");
        assert_eq!(report.samples_dropped, 0);
        assert!(report.last_error.unwrap().contains("HTTP 503: busy"));
        assert_eq!(report.requests_sent as usize + 2, rx.requests().len());
    }

    #[test]
    fn a_client_error_drops_the_request_and_says_why() {
        let rx = Receiver::start(Some(|n, _| {
            if n == 0 {
                (400, "out of order sample")
            } else {
                (200, "")
            }
        }));
        let hub = Hub::new();
        let w = RemoteWriter::start(config(rx.url()), hub.clone()).unwrap();
        feed(&hub, 2, Duration::from_millis(150));
        let report = w.finish(Duration::from_secs(5));
        let first = &rx.requests()[0];
        let first_samples: usize = first.timeseries.iter().map(|s| s.samples.len()).sum();
        assert_eq!(report.samples_dropped as usize, first_samples, "{report:?}");
        assert_eq!(report.retries, 0);
        assert!(report
            .last_error
            .unwrap()
            .ends_with("HTTP 400: out of order sample"));
    }

    #[test]
    fn refused_natives_stop_and_the_classic_data_is_whole() {
        let rx = Receiver::start(Some(|_, r| {
            if r.timeseries.iter().any(|s| !s.histograms.is_empty()) {
                (500, "native histograms are disabled")
            } else {
                (200, "")
            }
        }));
        let hub = Hub::new();
        let w = RemoteWriter::start(config(rx.url()), hub.clone()).unwrap();
        let total = feed(&hub, 3, Duration::from_millis(150));
        let report = w.finish(Duration::from_secs(5));
        assert!(report
            .natives_refused
            .as_deref()
            .unwrap()
            .contains("native histograms are disabled"));
        assert_eq!(report.samples_dropped, 0, "{report:?}");
        assert_eq!(report.histograms_sent, 0);
        let reqs = rx.requests();
        let native_requests = reqs
            .iter()
            .filter(|r| r.timeseries.iter().any(|s| !s.histograms.is_empty()))
            .count();
        assert_eq!(native_requests, 1, "one try, then none");
        let requests = values(&reqs, names::REQUESTS);
        assert_eq!(requests[requests.len() - 2], total as f64);
    }

    #[test]
    fn an_unreachable_receiver_costs_at_most_the_grace() {
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let hub = Hub::new();
        let mut c = config(format!("http://{closed}/api/v1/write"));
        c.max_pending_requests = 2;
        let w = RemoteWriter::start(c, hub.clone()).unwrap();
        feed(&hub, 4, Duration::from_millis(150));
        let t = Instant::now();
        let report = w.finish(Duration::from_secs(10));
        // Failing before the end: one more try, refused at once, and no waiting after it.
        assert!(t.elapsed() < FAILING_GRACE / 2, "{:?}", t.elapsed());
        assert_eq!(report.requests_sent, 0);
        assert!(report.samples_dropped > 0);
        assert!(report.last_error.unwrap().ends_with("connection refused"));
    }

    #[test]
    fn a_hanging_receiver_does_not_hold_the_end() {
        let rx = Receiver::start(None);
        let hub = Hub::new();
        let mut c = config(rx.url());
        c.request_timeout = Duration::from_secs(30);
        let w = RemoteWriter::start(c, hub.clone()).unwrap();
        feed(&hub, 2, Duration::from_millis(150));
        std::thread::sleep(FAILING_GRACE + POLL);
        let t = Instant::now();
        let report = w.finish(Duration::from_secs(10));
        assert!(t.elapsed() < FAILING_GRACE + POLL * 3, "{:?}", t.elapsed());
        assert_eq!(report.requests_sent, 0);
        assert!(report.samples_dropped > 0);
        let err = report.last_error.unwrap();
        assert!(err.contains("no answer"), "{err}");
    }

    #[test]
    fn headers_and_user_agent_go_with_every_push() {
        let rx = Receiver::start(Some(ok));
        let hub = Hub::new();
        let mut c = config(rx.url());
        c.headers = vec![("X-Scope-OrgID".into(), "tenant-1".into())];
        let w = RemoteWriter::start(c, hub.clone()).unwrap();
        feed(&hub, 1, Duration::ZERO);
        w.finish(Duration::from_secs(5));
        let got = rx.got.lock().unwrap();
        assert!(!got.is_empty());
        for (h, _) in got.iter() {
            let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
            assert_eq!(get("x-scope-orgid"), Some("tenant-1"));
            assert_eq!(get("content-encoding"), Some("snappy"));
            assert_eq!(get("content-type"), Some("application/x-protobuf"));
            assert_eq!(get("x-prometheus-remote-write-version"), Some("0.1.0"));
            assert!(get("user-agent").unwrap().starts_with("meshbench/"));
        }
    }
}
