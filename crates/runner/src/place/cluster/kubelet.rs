//! A cluster step's roles read without Prometheus: from the kubelet of each node they run on,
//! through the API server's node proxy (`/api/v1/nodes/NODE/proxy/metrics/cadvisor`), the
//! same cAdvisor series a Prometheus would scrape, selected and summed here as the roles'
//! presets say ([`Summed`]), so that both readers give the same figures.
//!
//! A thread polls every node of the step once a second from before the load until after it.
//! cAdvisor stamps each series with the time it read the cgroup (its housekeeping, 10 s by
//! default, 1 s on the suite's node), so a point is kept only when its stamp is new, and the
//! resolution a step got is the spacing of those stamps. After the load each figure is taken at
//! the window's two ends by interpolating between the readings around them (the window is
//! fitted to the readings, not rounded to them), with every reading inside it between; a
//! counter that went down, or a series that does not span the window (a restarted container,
//! a replaced pod), makes its role missing, as the Prometheus reader says it.
//!
//! A node that does not answer for a while (the route to the API server cut) only leaves a
//! gap: the cumulative counters read after it still give the window's figures. A series is
//! known by its labels (cAdvisor's `id` is the container's cgroup path), so a container that two
//! kubelets reported would count once. (The suite's two nodes share one machine's cgroup tree,
//! yet each kubelet's cAdvisor names its own node's pods only, and the one series both report,
//! the machine's root `/`, has no pod label for a role to select: docs/kubernetes.md.)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use meshbench_engine::Stop;
use meshbench_experiment::external::promql::Matcher;
use meshbench_experiment::external::{ExternalRole, Summed};
use meshbench_k8s::BlockingClient;
use meshbench_lab::sampler;
use meshbench_results::{Figure, Sample};
use regex::Regex;

use crate::place::external::read::{Reading, RoleRead};

/// Between two polls of the same node.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// One poll of one node, answer included.
const POLL_WITHIN: Duration = Duration::from_secs(10);
/// The largest `/metrics/cadvisor` page read (a busy node's is a few MiB).
const MAX_PAGE_BYTES: usize = 64 << 20;
/// The figures a cAdvisor series can give.
const FIGURES: [Figure; 5] = [
    Figure::Cpu,
    Figure::Memory,
    Figure::Rss,
    Figure::Rx,
    Figure::Tx,
];

/// The page a kubelet serves its cAdvisor series on, through the API server.
pub fn cadvisor_path(node: &str) -> String {
    format!("/api/v1/nodes/{node}/proxy/metrics/cadvisor")
}

/// One figure of one role: the series it sums.
struct Selector {
    role: usize,
    figure: Figure,
    metric: String,
    /// Label -> its anchored expression (`=` as an escaped literal).
    matchers: Vec<(String, Regex)>,
    counter: bool,
}

impl Selector {
    fn new(role: usize, figure: Figure, s: &Summed) -> Option<Selector> {
        let matchers = s
            .matchers
            .iter()
            .map(|m: &Matcher| {
                let expr = match m.regex {
                    true => m.value.clone(),
                    false => regex::escape(&m.value),
                };
                Regex::new(&format!("^(?:{expr})$")).map(|r| (m.label.clone(), r))
            })
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        Some(Selector {
            role,
            figure,
            metric: s.metric.clone(),
            matchers,
            counter: s.counter,
        })
    }

    /// Whether a series of its metric with `labels` is one it sums (a label it names and the
    /// series lacks is the empty string, as in PromQL).
    fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matchers
            .iter()
            .all(|(k, r)| r.is_match(labels.get(k).map_or("", String::as_str)))
    }
}

/// One series' readings: (cAdvisor's stamp, ms; value), stamps rising.
type Points = Vec<(u64, f64)>;

/// What the poller gathered: per selector, each series (by its labels) with its points.
#[derive(Default)]
struct Gathered {
    series: BTreeMap<(usize, String), Points>,
    /// Polls that failed, and the latest reason.
    failed_polls: usize,
    last_error: Option<String>,
    polls: usize,
}

/// A step's roles, read from their nodes' kubelets while the step runs.
pub struct KubeletReader {
    roles: Vec<ExternalRole>,
    selectors: Arc<Vec<Selector>>,
    gathered: Arc<Mutex<Gathered>>,
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl KubeletReader {
    /// Starts polling `nodes` for `roles` with a client of its own.
    pub fn start(
        client: &BlockingClient,
        nodes: Vec<String>,
        roles: Vec<ExternalRole>,
    ) -> Result<KubeletReader, meshbench_k8s::ApiError> {
        let mut selectors = Vec::new();
        for (i, role) in roles.iter().enumerate() {
            let queries = role.queries();
            for f in FIGURES {
                if let Ok(q) = queries.query(f) {
                    if let Some(s) = q.summed.as_ref().and_then(|s| Selector::new(i, f, s)) {
                        selectors.push(s);
                    }
                }
            }
        }
        let selectors = Arc::new(selectors);
        let gathered = Arc::new(Mutex::new(Gathered::default()));
        let done = Arc::new(AtomicBool::new(false));
        let poller = client.another()?;
        let thread = {
            let (selectors, gathered, done) = (selectors.clone(), gathered.clone(), done.clone());
            std::thread::Builder::new()
                .name("kubelet reader".into())
                .spawn(move || poll(&poller, &nodes, &selectors, &gathered, &done))
                .map_err(meshbench_k8s::ApiError::Runtime)?
        };
        Ok(KubeletReader {
            roles,
            selectors,
            gathered,
            done,
            thread: Some(thread),
        })
    }

    /// The roles that have no reading yet of a figure they read, one line each.
    pub fn waiting(&self) -> Vec<String> {
        let g = self.gathered.lock().unwrap_or_else(PoisonError::into_inner);
        let seen: BTreeSet<usize> = g.series.keys().map(|(s, _)| *s).collect();
        let mut out = Vec::new();
        for (i, s) in self.selectors.iter().enumerate() {
            if !seen.contains(&i) {
                out.push(format!(
                    "{}: no {} series yet",
                    self.roles[s.role].name, s.metric
                ));
            }
        }
        if let Some(e) = &g.last_error {
            out.push(format!("the latest poll: {e}"));
        }
        out
    }

    /// Waits until every series has a reading stamped at or after `to_ms` (so the window's
    /// end is between two readings), at most `limit`, or until a stop.
    pub fn wait_past(&self, to_ms: u64, limit: Duration, stop: &Stop) {
        let began = Instant::now();
        while began.elapsed() < limit {
            let past = {
                let g = self.gathered.lock().unwrap_or_else(PoisonError::into_inner);
                !g.series.is_empty()
                    && g.series
                        .values()
                        .all(|p| p.last().is_some_and(|l| l.0 >= to_ms))
            };
            if past || !stop.sleep(Duration::from_millis(250)) {
                return;
            }
        }
    }

    /// The median spacing of the kubelets' own stamps, ms.
    pub fn every_ms(&self) -> Option<u64> {
        let g = self.gathered.lock().unwrap_or_else(PoisonError::into_inner);
        median_spacing(g.series.values())
    }

    /// Stops polling and reads every role over `[from_ms, to_ms]`.
    pub fn read(&mut self, (from_ms, to_ms): (u64, u64)) -> Reading {
        self.stop();
        if to_ms <= from_ms {
            return unread(&self.roles, "the step measured no window of load");
        }
        let g = self.gathered.lock().unwrap_or_else(PoisonError::into_inner);
        let mut reading = Reading::default();
        if g.polls > 0 && g.failed_polls == g.polls {
            reading.warnings.push(format!(
                "no kubelet answered through the API server ({}); the roles' resources are marked missing (the load's figures are kept)",
                g.last_error.as_deref().unwrap_or("no answer")
            ));
        }
        for (i, role) in self.roles.iter().enumerate() {
            let mut read = BTreeMap::new();
            let mut missing = BTreeMap::new();
            let queries = role.queries();
            for f in Figure::ALL {
                match queries.query(f) {
                    Err(why) => {
                        missing.insert(f, why.to_string());
                    }
                    Ok(q) if q.summed.is_none() => {
                        missing.insert(
                            f,
                            "a query of the file's own is read from Prometheus only; give cluster.prometheus_url or cluster.prometheus".into(),
                        );
                    }
                    Ok(_) => {}
                }
            }
            let mut problems = Vec::new();
            for (k, s) in self
                .selectors
                .iter()
                .enumerate()
                .filter(|(_, s)| s.role == i)
            {
                let series: Vec<&Points> = g
                    .series
                    .range((k, String::new())..(k + 1, String::new()))
                    .map(|(_, p)| p)
                    .collect();
                match over_window(&series, s.counter, from_ms, to_ms) {
                    Ok(points) => {
                        read.insert(s.figure, points);
                    }
                    Err(why) => {
                        problems.push(format!("{}: {why}", s.figure.name()));
                        missing.insert(s.figure, why);
                    }
                }
            }
            // A counter that restarted makes the whole role a non-steady state.
            if let Some(restart) = problems.iter().find(|p| p.contains("went down")) {
                let restart = restart.clone();
                for f in read.keys() {
                    missing.insert(*f, restart.clone());
                }
                read.clear();
            }
            if !problems.is_empty() {
                reading.warnings.push(format!(
                    "role {} ({}): {}; what is not read is marked missing",
                    role.name,
                    role.program(),
                    problems.join("; ")
                ));
            }
            let samples = to_samples(&read);
            reading
                .roles
                .push(RoleRead::of(role, samples, missing, (from_ms, to_ms)));
        }
        reading
    }

    fn stop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for KubeletReader {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Every role of `roles` with every figure missing, for `why`.
pub fn unread(roles: &[ExternalRole], why: &str) -> Reading {
    let missing = || Figure::ALL.iter().map(|f| (*f, why.to_string())).collect();
    Reading {
        roles: roles
            .iter()
            .map(|role| RoleRead::of(role, Vec::new(), missing(), (0, 0)))
            .collect(),
        warnings: Vec::new(),
    }
}

/// The poller's loop: every node once a second until `done`.
fn poll(
    client: &BlockingClient,
    nodes: &[String],
    selectors: &[Selector],
    gathered: &Mutex<Gathered>,
    done: &AtomicBool,
) {
    let metrics: BTreeSet<&str> = selectors.iter().map(|s| s.metric.as_str()).collect();
    while !done.load(Ordering::Relaxed) {
        let began = Instant::now();
        for node in nodes {
            let what = format!("node {node}'s /metrics/cadvisor");
            let answer =
                client.get_through(&cadvisor_path(node), &what, POLL_WITHIN, MAX_PAGE_BYTES);
            let polled_at = sampler::now_ms();
            let mut g = gathered.lock().unwrap_or_else(PoisonError::into_inner);
            g.polls += 1;
            match answer {
                Ok(page) if page.status == 200 => {
                    for line in page.text.lines() {
                        let Some(series) = parse_line(line, &metrics) else {
                            continue;
                        };
                        let t = series.stamp_ms.unwrap_or(polled_at);
                        for (k, s) in selectors.iter().enumerate() {
                            if s.metric == series.metric && s.selects(&series.labels) {
                                // Keyed by its labels alone (cAdvisor's `id` is the cgroup's
                                // path): a container two kubelets both report is one series.
                                let key = (k, series.labels_text());
                                let points = g.series.entry(key).or_default();
                                if points.last().is_none_or(|l| t > l.0) {
                                    points.push((t, series.value));
                                }
                            }
                        }
                    }
                }
                Ok(page) => {
                    g.failed_polls += 1;
                    let head: String = page.text.chars().take(120).collect();
                    g.last_error = Some(format!("{what}: HTTP {}: {}", page.status, head.trim()));
                }
                Err(e) => {
                    g.failed_polls += 1;
                    g.last_error = Some(e.to_string());
                }
            }
        }
        let rest = POLL_EVERY.saturating_sub(began.elapsed());
        let until = Instant::now() + rest;
        while Instant::now() < until && !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50).min(rest));
        }
    }
}

/// One series of an exposition page.
#[derive(Debug, PartialEq)]
struct Line {
    metric: String,
    labels: BTreeMap<String, String>,
    value: f64,
    stamp_ms: Option<u64>,
}

impl Line {
    fn labels_text(&self) -> String {
        let inner: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        format!("{{{}}}", inner.join(","))
    }
}

/// A line of Prometheus' text format, if it is a sample of one of `metrics`:
/// `name{a="x",b="y"} value [timestamp_ms]`, label values with `\\`, `\"` and `\n` escaped.
fn parse_line(line: &str, metrics: &BTreeSet<&str>) -> Option<Line> {
    if line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let metric = &line[..name_end];
    if !metrics.contains(metric) {
        return None;
    }
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        let mut end = None;
        loop {
            // A label: name="value", then ',' or '}'.
            while chars.peek().is_some_and(|(_, c)| *c == ',' || *c == ' ') {
                chars.next();
            }
            match chars.peek() {
                Some((i, '}')) => {
                    end = Some(*i);
                    break;
                }
                None => break,
                _ => {}
            }
            let mut name = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                name.push(c);
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return None;
            }
            let mut value = String::new();
            let mut closed = false;
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => value.push(c),
                }
            }
            if !closed {
                return None;
            }
            labels.insert(name.trim().to_string(), value);
        }
        rest = &inner[end? + 1..];
    }
    let mut fields = rest.split_whitespace();
    let value: f64 = match fields.next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    if !value.is_finite() {
        return None;
    }
    let stamp_ms = fields
        .next()
        .and_then(|t| t.parse::<i64>().ok())
        .map(|t| t.max(0) as u64);
    Some(Line {
        metric: metric.to_string(),
        labels,
        value,
        stamp_ms,
    })
}

/// The median spacing between successive stamps of any one series.
fn median_spacing<'a>(series: impl Iterator<Item = &'a Points>) -> Option<u64> {
    let mut gaps: Vec<u64> = series
        .flat_map(|p| p.windows(2).map(|w| w[1].0 - w[0].0))
        .collect();
    gaps.sort_unstable();
    gaps.get(gaps.len() / 2).copied()
}

/// A series' value at `t`, between the readings around it.
fn at(points: &Points, t: u64) -> Option<f64> {
    let after = points.iter().position(|p| p.0 >= t)?;
    let (t1, v1) = points[after];
    if t1 == t {
        return Some(v1);
    }
    let (t0, v0) = *points.get(after.checked_sub(1)?)?;
    Some(v0 + (v1 - v0) * (t - t0) as f64 / (t1 - t0) as f64)
}

/// A figure's sum over its series at the window's ends and at every reading inside it: (ms,
/// value) in time order. Each series must have readings on both sides of the window; a
/// counter must not go down.
fn over_window(
    series: &[&Points],
    counter: bool,
    from_ms: u64,
    to_ms: u64,
) -> Result<Vec<(u64, f64)>, String> {
    if series.is_empty() {
        return Err("the kubelets had no such series for the role's pods".into());
    }
    for p in series {
        if counter && p.windows(2).any(|w| w[1].1 < w[0].1) {
            return Err("a counter went down (a container restarted): not a steady state".into());
        }
        let spans =
            p.first().is_some_and(|f| f.0 <= from_ms) && p.last().is_some_and(|l| l.0 >= to_ms);
        if !spans {
            return Err(match (p.first(), p.last()) {
                (Some(f), _) if f.0 > from_ms => format!(
                    "a series began {:.1} s into the window (a pod that came during it, or no reading before it)",
                    (f.0 - from_ms) as f64 / 1000.0
                ),
                (_, Some(l)) => format!(
                    "a series' last reading is {:.1} s before the window's end (a pod that went, or the kubelet out of reach)",
                    (to_ms - l.0) as f64 / 1000.0
                ),
                _ => "a series with no reading".into(),
            });
        }
    }
    let mut instants: BTreeSet<u64> = BTreeSet::from([from_ms, to_ms]);
    for p in series {
        instants.extend(
            p.iter()
                .map(|(t, _)| *t)
                .filter(|t| *t > from_ms && *t < to_ms),
        );
    }
    Ok(instants
        .into_iter()
        .map(|t| (t, series.iter().filter_map(|p| at(p, t)).sum()))
        .collect())
}

/// The role's samples at the instants of its figures (each figure between its own readings).
fn to_samples(read: &BTreeMap<Figure, Vec<(u64, f64)>>) -> Vec<Sample> {
    let instants: BTreeSet<u64> = read.values().flatten().map(|(t, _)| *t).collect();
    let value = |f: Figure, t: u64| -> Option<f64> {
        let points = read.get(&f)?;
        let as_points: Points = points.clone();
        at(&as_points, t).or_else(|| points.last().map(|l| l.1))
    };
    instants
        .into_iter()
        .map(|t| Sample {
            t_ms: t,
            cpu_ns: (value(Figure::Cpu, t).unwrap_or(0.0).max(0.0) * 1e9).round() as u64,
            rss_bytes: value(Figure::Rss, t).unwrap_or(0.0).max(0.0).round() as u64,
            working_set_bytes: value(Figure::Memory, t).map(|v| v.max(0.0).round() as u64),
            rx_bytes: value(Figure::Rx, t).unwrap_or(0.0).max(0.0).round() as u64,
            tx_bytes: value(Figure::Tx, t).unwrap_or(0.0).max(0.0).round() as u64,
            connections: 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshbench_experiment::external::Preset;

    fn metrics() -> BTreeSet<&'static str> {
        BTreeSet::from([
            "container_cpu_usage_seconds_total",
            "container_memory_working_set_bytes",
        ])
    }

    #[test]
    fn a_cadvisor_line_gives_its_labels_value_and_stamp() {
        let line = r#"container_cpu_usage_seconds_total{container="istio-proxy",cpu="total",id="/kubepods/x",image="a\"b",name="c",namespace="bench",pod="backend-1"} 12.5 1764640000123"#;
        let l = parse_line(line, &metrics()).unwrap();
        assert_eq!(l.value, 12.5);
        assert_eq!(l.stamp_ms, Some(1_764_640_000_123));
        assert_eq!(l.labels["container"], "istio-proxy");
        assert_eq!(l.labels["image"], "a\"b");
        assert_eq!(l.labels["pod"], "backend-1");
        assert!(parse_line("# HELP container_cpu_usage_seconds_total x", &metrics()).is_none());
        assert!(parse_line("machine_cpu_cores 2", &metrics()).is_none());
        let bare = parse_line("container_memory_working_set_bytes 7", &metrics()).unwrap();
        assert_eq!(
            (bare.value, bare.stamp_ms, bare.labels.len()),
            (7.0, None, 0)
        );
    }

    #[test]
    fn a_role_selects_what_its_preset_would_in_promql() {
        let role = ExternalRole {
            name: "server_proxy".into(),
            preset: Some(Preset::IstioSidecar),
            matches: BTreeMap::from([
                ("namespace".to_string(), "bench".to_string()),
                ("pod".to_string(), "backend-7|backend-8".to_string()),
            ]),
            ..ExternalRole::default()
        };
        let q = role.queries();
        let cpu = Selector::new(
            0,
            Figure::Cpu,
            q.query(Figure::Cpu).unwrap().summed.as_ref().unwrap(),
        )
        .unwrap();
        let labels = |c: &str, p: &str| {
            BTreeMap::from([
                ("container".to_string(), c.to_string()),
                ("namespace".to_string(), "bench".to_string()),
                ("pod".to_string(), p.to_string()),
            ])
        };
        assert!(cpu.selects(&labels("istio-proxy", "backend-7")));
        assert!(!cpu.selects(&labels("backend", "backend-7")));
        // Anchored, as PromQL's =~ is.
        assert!(!cpu.selects(&labels("istio-proxy", "backend-77")));
        // Network is the pod's: any container label.
        let rx = Selector::new(
            0,
            Figure::Rx,
            q.query(Figure::Rx).unwrap().summed.as_ref().unwrap(),
        )
        .unwrap();
        assert!(rx.selects(&labels("", "backend-8")));
    }

    #[test]
    fn a_window_is_fitted_between_the_readings_around_it() {
        // One core busy, read every 10 s.
        let cpu: Points = vec![(0, 0.0), (10_000, 10.0), (20_000, 20.0), (30_000, 30.0)];
        let points = over_window(&[&cpu], true, 5_000, 25_000).unwrap();
        assert_eq!(
            points,
            vec![(5_000, 5.0), (10_000, 10.0), (20_000, 20.0), (25_000, 25.0)]
        );
        let samples = to_samples(&BTreeMap::from([(Figure::Cpu, points)]));
        let u = sampler::summarize(&samples, 5_000, 25_000);
        assert!((u.cpu_millicores_avg - 1000.0).abs() < 1e-6, "{u:?}");
        // Two replicas sum.
        let other: Points = vec![(2_000, 100.0), (12_000, 105.0), (27_000, 112.5)];
        let both = over_window(&[&cpu, &other], true, 5_000, 25_000).unwrap();
        assert_eq!(both.first(), Some(&(5_000, 5.0 + 101.5)));
        assert_eq!(both.last(), Some(&(25_000, 25.0 + 111.5)));
    }

    #[test]
    fn a_series_that_does_not_span_the_window_or_restarts_is_missing_with_why() {
        let late: Points = vec![(8_000, 1.0), (30_000, 2.0)];
        assert!(over_window(&[&late], true, 5_000, 25_000)
            .unwrap_err()
            .contains("began 3.0 s into"));
        let cut: Points = vec![(0, 1.0), (20_000, 2.0)];
        assert!(over_window(&[&cut], true, 5_000, 25_000)
            .unwrap_err()
            .contains("5.0 s before the window's end"));
        let reset: Points = vec![(0, 5.0), (10_000, 1.0), (30_000, 2.0)];
        assert!(over_window(&[&reset], true, 5_000, 25_000)
            .unwrap_err()
            .contains("went down"));
        // A gauge may go down.
        let memory: Points = vec![(0, 5.0), (10_000, 1.0), (30_000, 2.0)];
        assert!(over_window(&[&memory], false, 5_000, 25_000).is_ok());
        assert!(over_window(&[], true, 0, 1)
            .unwrap_err()
            .contains("no such series"));
    }

    #[test]
    fn the_resolution_is_the_median_spacing_of_the_kubelets_stamps() {
        let a: Points = vec![(0, 0.0), (10_000, 1.0), (20_000, 2.0)];
        let b: Points = vec![(0, 0.0), (11_000, 1.0)];
        assert_eq!(median_spacing([&a, &b].into_iter()), Some(10_000));
    }
}
