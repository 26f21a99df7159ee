//! The changes of a step, beside its load: a thread of their own applies each change at its
//! instant of the measured window (the gateway told its own way, `meshbench_lab::change`),
//! then probes it on a connection of its own every few milliseconds until it is served (a
//! route answers, or stops answering). Every instant is on the sampler's clock, so that the
//! engine's seconds and the roles' samples line up with it; what each change cost is read from
//! the engine's seconds afterwards ([`figures`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use meshbench_engine::recorder::{ErrorKind, Interval};
use meshbench_lab::change::{GatewayChanger, Probe, ServedWhen};
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

/// A gateway to change on a schedule, probed from where the load comes.
pub struct Changes {
    pub changer: GatewayChanger,
    /// Instants after the window opens, and what changes then.
    pub schedule: Vec<(Duration, ChangeKind)>,
    /// The network namespace the load (so the probe) leaves from; `None`: this one.
    pub netns: Option<String>,
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
    told_by: &'static str,
    window_start_ms: u64,
    load_over: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Applied>>>,
}

impl StepChanges {
    /// Starts applying them (the step with changes) for a window opening at `window_start_ms`
    /// on the sampler's clock.
    pub(crate) fn start(self, window_start_ms: u64, stop: Stop) -> Running {
        let load_over = Arc::new(AtomicBool::new(false));
        let (told_by, thread) = match self {
            StepChanges::Still { told_by } => (told_by, None),
            StepChanges::Apply(changes) => {
                let told_by = changes.changer.told_by();
                let over = Arc::clone(&load_over);
                let thread = std::thread::Builder::new()
                    .name("changes".into())
                    .spawn(move || changes.run(window_start_ms, &stop, &over))
                    .ok();
                (told_by, thread)
            }
        };
        Running {
            told_by,
            window_start_ms,
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
        figures(self.told_by, &applied, self.window_start_ms, seconds)
    }
}

impl Changes {
    /// Applies every change of the schedule at its instant (none after the load is over or a
    /// stop), each probed until served or until the next one is due.
    fn run(mut self, window_start_ms: u64, stop: &Stop, load_over: &AtomicBool) -> Vec<Applied> {
        let _inside = match self
            .netns
            .as_deref()
            .map(meshbench_lab::netns::Entered::new)
        {
            Some(Err(_)) => return Vec::new(),
            Some(Ok(entered)) => Some(entered),
            None => None,
        };
        let prober = Prober::new(self.changer.listen(), self.changer.ca_file());
        let over = || stop.requested() || load_over.load(Ordering::Relaxed);
        let mut applied = Vec::new();
        let schedule = std::mem::take(&mut self.schedule);
        for (i, &(at, kind)) in schedule.iter().enumerate() {
            let due = window_start_ms + at.as_millis() as u64;
            if !wait_until(due, &over) {
                break;
            }
            let next_due = schedule
                .get(i + 1)
                .map(|(t, _)| window_start_ms + t.as_millis() as u64);
            applied.push(self.apply(kind, &prober, next_due, &over));
        }
        applied
    }

    /// One change: written, told, probed.
    fn apply(
        &mut self,
        kind: ChangeKind,
        prober: &Result<Prober, String>,
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
        let (served_ms, probes) = match prober {
            Ok(prober) => {
                let until = next_due.map_or(written_ms + SERVED_WITHIN.as_millis() as u64, |n| {
                    n.min(written_ms + SERVED_WITHIN.as_millis() as u64)
                });
                let (served, probes) = prober.until_served(&probe, until, over);
                (served.then(|| ms(written.elapsed())), probes)
            }
            Err(_) => (None, 0),
        };
        Applied {
            kind,
            what,
            written_ms,
            told_ms,
            served_ms,
            failed: prober.as_ref().err().cloned(),
            probes,
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Sleeps until `due` on the sampler's clock; false when `over` came first.
fn wait_until(due: u64, over: &dyn Fn() -> bool) -> bool {
    loop {
        if over() {
            return false;
        }
        let now = now_ms();
        if now >= due {
            return true;
        }
        std::thread::sleep(Duration::from_millis((due - now).min(50)));
    }
}

/// Asks one route of the gateway, over TLS, on a new connection each time: a connection of
/// its own, so that what it sees is what a new client would.
struct Prober {
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
}

impl Prober {
    fn new(addr: SocketAddr, ca: std::path::PathBuf) -> Result<Prober, String> {
        let tls = client_config(&ClientTlsOptions {
            ca: Some(Roots::File(ca)),
            ..ClientTlsOptions::default()
        })
        .map_err(|e| format!("the probe's TLS: {e}"))?;
        Ok(Prober { addr, tls })
    }

    /// Asks every [`PROBE_EVERY`] until the answer shows the change served (true), or until
    /// `until` on the sampler's clock or `over` (false); with the requests it sent.
    fn until_served(&self, probe: &Probe, until: u64, over: &dyn Fn() -> bool) -> (bool, u64) {
        let mut sent = 0;
        loop {
            let asked = Instant::now();
            let answer = self.ask(probe, &mut sent);
            let served = match (answer, probe.served_when) {
                (Some(status), ServedWhen::Answers) => (200..300).contains(&status),
                (Some(status), ServedWhen::Stops) => !(200..300).contains(&status),
                // No answer: neither served nor gone, ask again.
                (None, _) => false,
            };
            if served {
                return (true, sent);
            }
            if over() || now_ms() >= until {
                return (false, sent);
            }
            std::thread::sleep(PROBE_EVERY.saturating_sub(asked.elapsed()));
        }
    }

    /// The status of one GET of the probe's route, or `None` when no answer came; `sent`
    /// counts it once its request is written.
    fn ask(&self, probe: &Probe, sent: &mut u64) -> Option<u16> {
        let name = server_name(&probe.host)?;
        let tcp = TcpStream::connect_timeout(&self.addr, PROBE_WITHIN).ok()?;
        tcp.set_read_timeout(Some(PROBE_WITHIN)).ok()?;
        tcp.set_write_timeout(Some(PROBE_WITHIN)).ok()?;
        let conn = rustls::ClientConnection::new(Arc::clone(&self.tls), name).ok()?;
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
        std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
    }
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
    told_by: &'static str,
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
            let last = match firsts.get(i + 1) {
                Some(next) => next.saturating_sub(1).max(first),
                None => first + SECONDS_AFTER - 1,
            }
            .min(first + SECONDS_AFTER - 1);
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
                probes: a.probes,
            }
        })
        .collect();
    ChangeFigures {
        told_by: told_by.to_string(),
        changes,
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
