//! The changes of a step, beside its load: a thread of their own applies each change at its
//! instant of the measured window (the gateway, or Istio's sidecars' mesh, told its own way:
//! `meshbench_lab::change`), then probes it every few milliseconds until it is served (a route
//! answers on a connection of its own, or stops answering; a sidecar holds a new cluster). Every instant is on the sampler's clock, so that the
//! engine's seconds and the roles' samples line up with it; what each change cost is read from
//! the engine's seconds afterwards ([`figures`]).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use meshbench_engine::recorder::{ErrorKind, Interval};
use meshbench_lab::change::{BackendRoll, Changer, GatewayProbe, Probe, ServedWhen};
use meshbench_lab::program::envoy::admin;
use meshbench_net::tls::{client_config, server_name, ClientTlsOptions, Roots};
use meshbench_results::change::{ChangeRecord, ErrorsByKind, SECONDS_AFTER, SERVED_WITHIN};
use meshbench_results::usage::now_ms;
use meshbench_results::{ChangeFigures, ChangeKind, Stop};

/// How often a probe asks.
pub const PROBE_EVERY: Duration = Duration::from_millis(5);

/// How long one probe may take (connect, TLS, answer).
const PROBE_WITHIN: Duration = Duration::from_secs(1);

/// What a step does about changes: the paired step without them says how they would be told;
/// the step with them applies them.
pub enum StepChanges {
    Still { told_by: &'static str },
    Apply(Box<Changes>),
}

/// A gateway or a mesh to change on a schedule, probed from where the load comes.
pub struct Changes {
    pub changer: Box<dyn Changer>,
    /// What rolls the backend's replicas, where the place can (`kind: backend`).
    pub backend: Option<Box<dyn BackendRoll>>,
    /// Instants after the window opens, and what changes then.
    pub schedule: Vec<(Duration, ChangeKind)>,
    /// The network namespace the load (so the probe) leaves from; `None`: this one.
    pub netns: Option<String>,
    /// The port-forward the probe reaches the gateway through, open while the changes run.
    pub forward: Option<meshbench_k8s::Forward>,
}

/// A roll begun and not yet done: the index of its change, when it was written.
struct Rolling {
    index: usize,
    written: Instant,
}

/// One change as the thread applied it.
pub(crate) struct Applied {
    kind: ChangeKind,
    what: String,
    /// On the sampler's clock.
    written_ms: u64,
    told_ms: f64,
    served_ms: Option<f64>,
    failed: Option<String>,
    /// Requests the probe sent through the gateway.
    probes: u64,
}

/// The changes under way beside a load.
pub(crate) struct Running {
    told_by: String,
    window_start: WindowStart,
    load_over: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Applied>>>,
}

/// When the measured window opens on the sampler's clock (milliseconds since the Unix epoch;
/// 0 until known): set from the load's first live report (`crate::load_window`).
#[derive(Clone, Default)]
pub(crate) struct WindowStart(Arc<AtomicU64>);

impl WindowStart {
    pub(crate) fn set(&self, ms: u64) {
        let _ = (self.0).compare_exchange(0, ms.max(1), Ordering::Relaxed, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|&ms| ms > 0)
    }
}

impl StepChanges {
    /// Starts applying them (the step with changes) once `window_start` is known.
    pub(crate) fn start(self, window_start: WindowStart, stop: Stop) -> Running {
        let load_over = Arc::new(AtomicBool::new(false));
        let (told_by, thread) = match self {
            StepChanges::Still { told_by } => (told_by.to_string(), None),
            StepChanges::Apply(changes) => {
                let told_by = changes.told_by();
                let over = Arc::clone(&load_over);
                let start = window_start.clone();
                let thread = std::thread::Builder::new()
                    .name("changes".into())
                    .spawn(move || changes.run(&start, &stop, &over))
                    .ok();
                (told_by, thread)
            }
        };
        Running {
            told_by,
            window_start,
            load_over,
            thread,
        }
    }
}

impl Running {
    /// Ends the changes once the load is over, and reads what each cost from the engine's
    /// `seconds` of the measured window.
    pub(crate) fn finish(mut self, seconds: &[Interval]) -> ChangeFigures {
        self.load_over.store(true, Ordering::Relaxed);
        let applied = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let start = self.window_start.get().unwrap_or(0);
        figures(self.told_by, &applied, start, seconds)
    }
}

impl Changes {
    /// How the changes are told: the gateway's way, the backend's when it is rolled, or both.
    fn told_by(&self) -> String {
        let gateway = self.changer.told_by();
        let rolls = (self.schedule.iter())
            .filter(|(_, k)| *k == ChangeKind::Backend)
            .count();
        match (&self.backend, rolls) {
            (Some(b), n) if n == self.schedule.len() => format!("backend: {}", b.told_by()),
            (Some(b), n) if n > 0 => format!("{gateway}; backend: {}", b.told_by()),
            _ => gateway.to_string(),
        }
    }

    /// Applies every change of the schedule at its instant (none after the load is over or a
    /// stop), each probed until served or until the next one is due; a backend's roll is
    /// followed between them. Then puts the gateway's configuration back where it outlives
    /// the step (a failure to is the last change's).
    fn run(mut self, start: &WindowStart, stop: &Stop, load_over: &AtomicBool) -> Vec<Applied> {
        let over = || stop.requested() || load_over.load(Ordering::Relaxed);
        let schedule = std::mem::take(&mut self.schedule);
        let Some(window_start_ms) = wait_for_start(start, &over) else {
            return Vec::new();
        };
        let mut prober = Prober {
            netns: self.netns.take(),
            tls: None,
        };
        let mut applied = Vec::new();
        let mut rolling: Option<Rolling> = None;
        for (i, &(at, kind)) in schedule.iter().enumerate() {
            let due = window_start_ms + at.as_millis() as u64;
            let mut follow = || self.follow(&mut rolling, &mut applied);
            if !wait_until(due, &over, &mut follow) {
                break;
            }
            let next_due = schedule
                .get(i + 1)
                .map(|(t, _)| window_start_ms + t.as_millis() as u64);
            let change = match kind {
                ChangeKind::Backend => self.roll(&mut rolling, applied.len()),
                _ => self.apply(kind, &mut prober, next_due, &over),
            };
            applied.push(change);
        }
        // A roll still going is followed until the load is over.
        while rolling.is_some() && !over() {
            self.follow(&mut rolling, &mut applied);
            std::thread::sleep(FOLLOW_EVERY);
        }
        if let Err(e) = self.changer.put_back() {
            if let Some(last) = applied.last_mut() {
                last.failed.get_or_insert(format!("put back: {e}"));
            }
        }
        applied
    }

    /// Begins a backend roll as change `index`.
    fn roll(&mut self, rolling: &mut Option<Rolling>, index: usize) -> Applied {
        let began_ms = now_ms();
        let began = Instant::now();
        let failed = |what: String, why: String| Applied {
            kind: ChangeKind::Backend,
            what,
            written_ms: began_ms,
            told_ms: ms(began.elapsed()),
            served_ms: None,
            failed: Some(why),
            probes: 0,
        };
        let Some(backend) = self.backend.as_mut() else {
            return failed("backend".into(), "the backend cannot be rolled here".into());
        };
        if rolling.is_some() {
            return failed("backend".into(), "the previous roll is not done".into());
        }
        match backend.begin() {
            Ok((what, written)) => {
                *rolling = Some(Rolling { index, written });
                Applied {
                    kind: ChangeKind::Backend,
                    what,
                    written_ms: began_ms + written.duration_since(began).as_millis() as u64,
                    told_ms: ms(written.elapsed()),
                    served_ms: None,
                    failed: None,
                    probes: 0,
                }
            }
            Err(why) => failed("backend".into(), why),
        }
    }

    /// Asks whether the roll under way is done; when it is (or cannot be asked), its change
    /// says so.
    fn follow(&mut self, rolling: &mut Option<Rolling>, applied: &mut [Applied]) {
        let (Some(r), Some(backend)) = (rolling.as_ref(), self.backend.as_mut()) else {
            return;
        };
        let Some(change) = applied.get_mut(r.index) else {
            return;
        };
        match backend.done() {
            Ok(false) if r.written.elapsed() < SERVED_WITHIN => return,
            Ok(false) => {}
            Ok(true) => change.served_ms = Some(ms(r.written.elapsed())),
            Err(why) => change.failed = Some(why),
        }
        *rolling = None;
    }

    /// One change: written, told, probed.
    fn apply(
        &mut self,
        kind: ChangeKind,
        prober: &mut Prober,
        next_due: Option<u64>,
        over: &dyn Fn() -> bool,
    ) -> Applied {
        let began_ms = now_ms();
        let began = Instant::now();
        let told = self.changer.apply(kind);
        // On the sampler's clock, the instant the gateway's configuration began to be written.
        let at = |written: Instant| began_ms + written.duration_since(began).as_millis() as u64;
        let (what, probe, written) = match told {
            Ok(t) => (t.what, t.probe, t.written),
            Err(e) => {
                let (written_ms, told_ms) = (began_ms, ms(began.elapsed()));
                return Applied {
                    kind,
                    what: kind.to_string(),
                    written_ms,
                    told_ms,
                    served_ms: None,
                    failed: Some(e.to_string()),
                    probes: 0,
                };
            }
        };
        let (written_ms, told_ms) = (at(written), ms(written.elapsed()));
        let within = written_ms + SERVED_WITHIN.as_millis() as u64;
        let until = next_due.map_or(within, |n| n.min(within));
        let (served, probes) = prober.until_served(&probe, until, over);
        let (served_ms, failed) = match served {
            Ok(served) => (served.then(|| ms(written.elapsed())), None),
            Err(why) => (None, Some(why)),
        };
        Applied {
            kind,
            what,
            written_ms,
            told_ms,
            served_ms,
            failed,
            probes,
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// How often a backend's roll is asked whether it is done.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);

/// Sleeps until `due` on the sampler's clock, calling `between` every [`FOLLOW_EVERY`] or so;
/// false when `over` came first.
fn wait_until(due: u64, over: &dyn Fn() -> bool, between: &mut dyn FnMut()) -> bool {
    let mut followed = Instant::now();
    loop {
        if over() {
            return false;
        }
        if followed.elapsed() >= FOLLOW_EVERY {
            between();
            followed = Instant::now();
        }
        let now = now_ms();
        if now >= due {
            return true;
        }
        std::thread::sleep(Duration::from_millis((due - now).min(50)));
    }
}

/// Waits until the window's start is known: its instant on the sampler's clock, or `None`
/// when `over` came first.
fn wait_for_start(start: &WindowStart, over: &dyn Fn() -> bool) -> Option<u64> {
    loop {
        if let Some(ms) = start.get() {
            return Some(ms);
        }
        if over() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asks what a change's [`Probe`] names: a route of the gateway, over TLS on a new connection
/// each time (a connection of its own, so that what it sees is what a new client would), or a
/// sidecar's clusters from its admin; from the load's network namespace, which it enters for
/// each probe alone (the change itself is told from here, where the API server and the
/// gateway's files are).
struct Prober {
    /// The network namespace the load leaves from; `None`: this one.
    netns: Option<String>,
    /// The TLS client of the last CA a gateway probe trusted.
    tls: Option<(std::path::PathBuf, Arc<rustls::ClientConfig>)>,
}

impl Prober {
    /// The TLS client that trusts `ca`, made once.
    fn tls(&mut self, ca: &std::path::Path) -> Result<Arc<rustls::ClientConfig>, String> {
        if let Some((made_for, tls)) = &self.tls {
            if made_for == ca {
                return Ok(Arc::clone(tls));
            }
        }
        let tls = client_config(&ClientTlsOptions {
            ca: Some(Roots::File(ca.to_path_buf())),
            ..ClientTlsOptions::default()
        })
        .map_err(|e| format!("the probe's TLS: {e}"))?;
        self.tls = Some((ca.to_path_buf(), Arc::clone(&tls)));
        Ok(tls)
    }

    /// Asks every [`PROBE_EVERY`] until the answer shows the change served (true), or until
    /// `until` on the sampler's clock or `over` (false); with the requests it sent through
    /// the gateway (an admin's read goes through no listener of the path). An error: the
    /// probe could not be made.
    fn until_served(
        &mut self,
        probe: &Probe,
        until: u64,
        over: &dyn Fn() -> bool,
    ) -> (Result<bool, String>, u64) {
        let inside = (self.netns.as_deref()).map(meshbench_lab::netns::Entered::new);
        let _inside = match inside {
            Some(Err(e)) => return (Err(format!("the probe's network namespace: {e}")), 0),
            Some(Ok(entered)) => Some(entered),
            None => None,
        };
        let tls = match probe {
            Probe::Gateway(g) => match self.tls(&g.ca) {
                Ok(tls) => Some(tls),
                Err(why) => return (Err(why), 0),
            },
            Probe::Holds { .. } => None,
        };
        let mut sent = 0;
        loop {
            let asked = Instant::now();
            let served = match (probe, &tls) {
                (Probe::Gateway(g), Some(tls)) => match (ask(g, tls, &mut sent), &g.served_when) {
                    (Some((status, _)), ServedWhen::Answers) => (200..300).contains(&status),
                    (Some((status, _)), ServedWhen::Stops) => !(200..300).contains(&status),
                    (Some((_, presented)), ServedWhen::Presents(new)) => presented == *new,
                    // No answer: neither served nor gone, ask again.
                    (None, _) => false,
                },
                (Probe::Holds { admin, cluster }, _) => holds(*admin, cluster),
                (Probe::Gateway(_), None) => false,
            };
            if served {
                return (Ok(true), sent);
            }
            if over() || now_ms() >= until {
                return (Ok(false), sent);
            }
            std::thread::sleep(PROBE_EVERY.saturating_sub(asked.elapsed()));
        }
    }
}

/// Whether the Envoy whose admin is at `admin` holds `cluster` (its `/clusters` lines are
/// `name::field::value`); no answer is not yet.
fn holds(admin: std::net::SocketAddr, cluster: &str) -> bool {
    let prefix = format!("{cluster}::");
    admin::clusters(admin).is_ok_and(|text| text.lines().any(|l| l.starts_with(&prefix)))
}

/// The status of one GET of the probe's route and the certificate the gateway presented
/// (DER), or `None` when no answer came; `sent` counts it once its request is written.
fn ask(
    probe: &GatewayProbe,
    tls: &Arc<rustls::ClientConfig>,
    sent: &mut u64,
) -> Option<(u16, Vec<u8>)> {
    let name = server_name(&probe.host)?;
    let tcp = TcpStream::connect_timeout(&probe.at, PROBE_WITHIN).ok()?;
    tcp.set_read_timeout(Some(PROBE_WITHIN)).ok()?;
    tcp.set_write_timeout(Some(PROBE_WITHIN)).ok()?;
    let conn = rustls::ClientConnection::new(Arc::clone(tls), name).ok()?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        probe.path, probe.host
    );
    tls.write_all(request.as_bytes()).ok()?;
    tls.flush().ok()?;
    *sent += 1;
    let mut head = [0u8; 16];
    let mut got = 0;
    while got < 12 {
        match tls.read(&mut head[got..]) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got += n,
        }
    }
    let status = std::str::from_utf8(&head[9..12]).ok()?.parse().ok()?;
    let presented = (tls.conn.peer_certificates())
        .and_then(|chain| chain.first())
        .map(|leaf| leaf.to_vec())
        .unwrap_or_default();
    Some((status, presented))
}

/// The first second of the window each change owns: the one it was written in, or the one
/// after the previous change's first when two were written in the same second, so that no
/// second is read for two changes.
fn first_seconds(written_ms: impl Iterator<Item = u64>, window_start_ms: u64) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for ms in written_ms {
        let second = (ms.saturating_sub(window_start_ms) / 1000) as u32;
        out.push(match out.last() {
            Some(&previous) => second.max(previous + 1),
            None => second,
        });
    }
    out
}

/// Each change's record: its seconds of the window (from its first, [`first_seconds`], at most
/// [`SECONDS_AFTER`], ending before the next change's), the requests, errors and tail there.
pub(crate) fn figures(
    told_by: String,
    applied: &[Applied],
    window_start_ms: u64,
    seconds: &[Interval],
) -> ChangeFigures {
    let firsts = first_seconds(applied.iter().map(|a| a.written_ms), window_start_ms);
    let changes = applied
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let first = firsts[i];
            // The window's last second, for a change no other follows.
            let end = seconds.iter().map(|s| s.second).max().unwrap_or(first);
            let last = match firsts.get(i + 1) {
                Some(next) => next.saturating_sub(1).max(first),
                None => end.max(first),
            }
            .min(first.saturating_add(owned_seconds(a.kind) - 1));
            let mut merged = Interval::new(first);
            for s in seconds
                .iter()
                .filter(|s| (first..=last).contains(&s.second))
            {
                merged += s;
            }
            ChangeRecord {
                kind: a.kind,
                what: a.what.clone(),
                written_ms: a.written_ms.saturating_sub(window_start_ms) as f64,
                told_ms: a.told_ms,
                served_ms: a.served_ms,
                failed: a.failed.clone(),
                seconds: (first, last),
                requests: merged.counts.total(),
                errors: errors_by_kind(&merged),
                p99_us: merged.latency.value_at_quantile(0.99),
                p999_us: merged.latency.value_at_quantile(0.999),
                max_us: merged.latency.max(),
                connections_opened: merged.opened,
                connections_failed: merged.failed_connections,
                probes: a.probes,
                gateway_cpu_peak_millicores: None,
                gateway_memory_peak_mib: None,
            }
        })
        .collect();
    ChangeFigures { told_by, changes }
}

/// How many seconds from its first a change owns, unless the next change's come first: the
/// [`SECONDS_AFTER`] a gateway's change is read over; a backend's roll, every one to the end of
/// the window: what a gateway makes of replicas that went away can outlast the roll (nginx,
/// by default, keeps an upstream that failed out for 10 s).
fn owned_seconds(kind: ChangeKind) -> u32 {
    match kind {
        ChangeKind::Backend => u32::MAX,
        _ => SECONDS_AFTER,
    }
}

/// The failed requests of some seconds by kind: the engine's kinds, and `http_<code>` per
/// failing status.
fn errors_by_kind(s: &Interval) -> ErrorsByKind {
    let mut out = ErrorsByKind::new();
    for kind in ErrorKind::ALL {
        let n = s.counts.errors(kind);
        if n > 0 {
            out.insert(kind.name().to_string(), n);
        }
    }
    for (code, n) in s.counts.status_codes() {
        if code >= 400 || code == 0 {
            out.insert(format!("http_{code}"), n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_second_is_read_for_two_changes() {
        // Changes at 2.0, 10.0 and 10.5 s, then 11.2 s, of a window opened at 1,000 ms.
        let firsts = first_seconds([3_000, 11_000, 11_500, 12_200].into_iter(), 1_000);
        assert_eq!(firsts, [2, 10, 11, 12]);
    }
}
