//! `meshbench experiment FILE`: reads and checks the file (every mistake at once), prints the
//! plan with `--dry-run`, else runs each step: start the rig under its limits, drive the load
//! (the same engine and flags as `meshbench run`), sample every role over the same time, keep
//! the steady window, store the step in one transaction, stop the rig, cool down. A role that
//! dies fails its step with the tail of its output and the experiment goes on; Ctrl-C and
//! SIGTERM store the step in progress as partial and stop.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use clap::Parser;
use meshbench_engine::RunResult;
use meshbench_experiment::config::{Experiment, HttpVersion, LoopMode};
use meshbench_experiment::{Plan, Step};
use meshbench_lab::cgroup::Limits;
use meshbench_lab::program::{CommandTemplate, ProgramSpec};
use meshbench_lab::rig::{self, GatewaySpec, Rig, RigSpec};
use meshbench_lab::sampler::{self, Sampler};
use meshbench_lab::{Class, Topology};
use meshbench_store::{
    LoadSummary, NewExperiment, SampleRow, SeriesRow, StepRecord, Store, UsageRow,
};

use super::results::{table, TableRow};
use crate::cli::{Cli, Command, ExperimentArgs};
use crate::{exit, usage};

pub fn execute(args: ExperimentArgs) -> Result<u8> {
    let e =
        meshbench_experiment::load(&args.file, &args.set).map_err(|err| usage(err.to_string()))?;
    if args.dry_run {
        print!("{}", describe_plan(&e, &Plan::compile(&e)));
        return Ok(exit::OK);
    }
    let thresholds = super::answers::parse_thresholds(&args.thresholds)?;
    let store_path = args
        .store
        .clone()
        .unwrap_or_else(meshbench_store::default_path);
    let done = run(&e, &store_path, args.quiet)?;
    let store = Store::open(&store_path)?;
    let h = super::answers::headline(&store, done.id)?;
    print!("{}", meshbench_report::answers::headline_text(&h));
    let passed = super::answers::check_headline(&thresholds, &h);
    let _ = std::io::stdout().flush();
    Ok(match done.exit_code {
        exit::OK if !passed => exit::FAILED,
        code => code,
    })
}

/// What a finished (or interrupted) experiment left.
pub struct Finished {
    pub id: i64,
    pub steps: Vec<StepRecord>,
    pub exit_code: u8,
}

/// An experiment being written to the store: steps are added one by one (by a plan, or by a
/// search that picks each step from the last), each in its own transaction.
pub struct Session {
    pub store: Store,
    pub id: i64,
    pub signals: super::signals::Signals,
    pub rows: Vec<StepRecord>,
    pub live: bool,
    failed: usize,
    started: Instant,
}

impl Session {
    pub fn begin(
        store_path: &std::path::Path,
        new: &NewExperiment,
        quiet: bool,
    ) -> Result<Session> {
        let store = Store::open(store_path)?;
        let signals = super::signals::Signals::install()?;
        let id = store.begin_experiment(new)?;
        Ok(Session {
            store,
            id,
            signals,
            rows: Vec::new(),
            live: !quiet && std::io::stderr().is_terminal(),
            failed: 0,
            started: Instant::now(),
        })
    }

    /// Stores a step (saying so on stderr when it failed).
    pub fn record(&mut self, record: StepRecord, what: &str) -> Result<()> {
        if record.status == "failed" {
            self.failed += 1;
            eprintln!(
                "step {what} failed: {}",
                record.error.as_deref().unwrap_or("unknown")
            );
        }
        self.store.add_step(self.id, &record)?;
        self.rows.push(record);
        Ok(())
    }

    pub fn stopped(&self) -> bool {
        self.signals.stop.load(Ordering::Relaxed)
    }

    /// Marks the experiment done or interrupted and prints the step table.
    pub fn finish(self) -> Result<Finished> {
        let status = if self.stopped() {
            "interrupted"
        } else {
            "done"
        };
        self.store
            .finish_experiment(self.id, status, &now_rfc3339())?;
        let view: Vec<TableRow> = self
            .rows
            .iter()
            .map(|r| TableRow {
                seq: r.seq,
                variant: &r.variant,
                params: serde_json::from_str(&r.params_json).unwrap_or_default(),
                summary: r.summary.as_ref(),
                error: r.error.as_deref(),
                usage: &r.usage,
            })
            .collect();
        print!("{}", table(&view));
        let _ = std::io::stdout().flush();
        eprintln!(
            "experiment {} {status} in {}: {} steps stored, {} failed; `meshbench results show {}`",
            self.id,
            human_secs(self.started.elapsed().as_secs_f64()),
            self.rows.len(),
            self.failed,
            self.id
        );
        let exit_code = self.signals.exit_code().unwrap_or(if self.failed > 0 {
            exit::FAILED
        } else {
            exit::OK
        });
        Ok(Finished {
            id: self.id,
            steps: self.rows,
            exit_code,
        })
    }
}

/// What every lab step of an experiment shares.
pub struct Lab {
    exe: PathBuf,
    versions: BTreeMap<String, String>,
}

impl Lab {
    pub fn new(e: &Experiment) -> Result<Lab> {
        rig::remove_stale();
        Ok(Lab {
            exe: std::env::current_exe().context("cannot find the meshbench binary")?,
            versions: program_versions(e),
        })
    }

    /// Runs `step` on a fresh rig, stores it and cools down; `left_after` is the time the
    /// remaining steps will take (for the progress line).
    pub fn step(
        &self,
        session: &mut Session,
        e: &Experiment,
        step: &Step,
        steps: usize,
        left_after: f64,
    ) -> Result<()> {
        let progress = Progress {
            live: session.live,
            step,
            steps,
            step_secs: e.warmup_secs + e.duration_secs,
            left_after,
        };
        let record = run_step(
            e,
            step,
            session.id,
            &self.exe,
            &self.versions,
            session.signals.stop.clone(),
            &progress,
        );
        let what = format!(
            "{}/{} ({}, {})",
            step.index + 1,
            steps,
            step.variant(),
            step.load_text()
        );
        session.record(record, &what)?;
        if !session.stopped() {
            cool_down(e, &session.signals.stop);
        }
        Ok(())
    }
}

/// The store row of an experiment file about to run.
pub fn new_experiment(e: &Experiment) -> Result<NewExperiment> {
    Ok(NewExperiment {
        name: e.name.clone(),
        description: e.description.clone(),
        labels_json: serde_json::to_string(&e.labels)?,
        config_json: serde_json::to_string(e)?,
        started_at: now_rfc3339(),
        meshbench_version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// Runs every step of `e`, storing each in `store_path`; prints the step table.
pub fn run(e: &Experiment, store_path: &std::path::Path, quiet: bool) -> Result<Finished> {
    let plan = Plan::compile(e);
    let mut session = Session::begin(store_path, &new_experiment(e)?, quiet)?;
    let lab = Lab::new(e)?;
    eprintln!(
        "experiment {} '{}': {} steps, about {}; results in {}",
        session.id,
        e.name,
        plan.steps.len(),
        human_secs(plan.total_secs(e)),
        store_path.display()
    );
    for step in &plan.steps {
        let left_after = (plan.steps.len() - step.index - 1) as f64 * plan.step_secs(e);
        lab.step(&mut session, e, step, plan.steps.len(), left_after)?;
        if session.stopped() {
            break;
        }
    }
    session.finish()
}

fn cool_down(e: &Experiment, stop: &AtomicBool) {
    let end = Instant::now() + Duration::from_secs_f64(e.cooldown_secs);
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What `--dry-run` prints.
pub fn describe_plan(e: &Experiment, plan: &Plan) -> String {
    let mut out = format!(
        "experiment '{}': {} steps x ({}s warm-up + {}s + {}s cool-down + ~{}s setup) = about {}\n",
        e.name,
        plan.steps.len(),
        e.warmup_secs,
        e.duration_secs,
        e.cooldown_secs,
        plan.setup_secs,
        human_secs(plan.total_secs(e))
    );
    for s in &plan.steps {
        out.push_str(&format!(
            "{:>4}  repeat {}  {:<28} {:<32} {}\n",
            s.index + 1,
            s.repeat + 1,
            s.variant(),
            s.load_text(),
            s.istio_label(&e.name, e.load.protocol)
        ));
    }
    out
}

fn human_secs(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// The program of a `proxy` or `tunnel` section, with its command template.
fn program_spec(p: &meshbench_experiment::config::Proxy) -> ProgramSpec {
    ProgramSpec {
        program: p.kind,
        command: CommandTemplate {
            argv: p.command.clone(),
            config: p.config_template.clone(),
        },
    }
}

/// The version line of each program the experiment starts.
fn program_versions(e: &Experiment) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    v.insert(
        "meshbench".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    );
    // The gateway's program is listed on its own.
    let proxies = e
        .topologies
        .iter()
        .any(|t| *t != Topology::Gateway && t.has(Class::Proxy));
    let tunnels = e.topologies.iter().any(|t| t.has(Class::Tunnel));
    if proxies {
        let p = program_spec(&e.proxy);
        v.insert(format!("proxy:{}", p.program), p.version());
    }
    if tunnels {
        let p = program_spec(&e.tunnel);
        v.insert(format!("tunnel:{}", p.program), p.version());
    }
    if e.topologies.contains(&Topology::Gateway) {
        let p = ProgramSpec::from(e.gateway.kind);
        v.insert(format!("gateway:{}", p.program), p.version());
    }
    v
}

fn limits(r: &meshbench_experiment::config::RoleLimits, swept: Option<f64>) -> Limits {
    Limits {
        cpus: swept.or_else(|| r.cpus.first().copied()),
        // The file was checked: its CPU lists parse.
        cpuset: r
            .cpuset
            .as_deref()
            .and_then(meshbench_experiment::config::parse_cpuset),
        memory_mib: r.memory_mib,
    }
}

/// The rig of one step.
pub fn rig_spec(e: &Experiment, step: &Step, id: i64, exe: PathBuf) -> RigSpec {
    let swept = |class: Class| step.cpu.filter(|(c, _)| *c == class).map(|(_, c)| c);
    let mut backend_args = vec![
        "--size".to_string(),
        step.load.response_bytes.to_string(),
        "--threads".to_string(),
        match e.backend.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n as usize,
        }
        .to_string(),
    ];
    if e.backend.delay_ms > 0 {
        backend_args.extend(["--delay".into(), format!("{}ms", e.backend.delay_ms)]);
    }
    RigSpec {
        topology: step.topology,
        proxy: program_spec(&e.proxy),
        proxy_workers: e.proxy.workers,
        proxy_mtls: e.proxy.mtls,
        tunnel: program_spec(&e.tunnel),
        tunnel_workers: e.tunnel.workers,
        tunnel_mtls: e.tunnel.mtls,
        gateway: GatewaySpec {
            program: e.gateway.kind,
            domains: e.gateway.domains as usize,
            paths: e.gateway.paths as usize,
            workers: e.gateway.workers,
        },
        backend_exe: exe,
        backend_args,
        proxy_limits: limits(&e.limits.proxy, swept(Class::Proxy)),
        tunnel_limits: limits(&e.limits.tunnel, swept(Class::Tunnel)),
        backend_limits: limits(&e.limits.backend, swept(Class::Backend)),
        http2: e.load.protocol == HttpVersion::Http2,
        netns: e.isolation == meshbench_experiment::config::Isolation::Netns,
        id: format!("{}-{id}-{}", std::process::id(), step.index),
        dir: std::env::temp_dir().join(format!(
            "meshbench-{}-{id}-{}",
            std::process::id(),
            step.index
        )),
    }
}

/// The `meshbench run` arguments of one step against a running rig.
pub fn run_args(e: &Experiment, step: &Step, rig: &Rig) -> Vec<String> {
    let mut a: Vec<String> = vec!["meshbench".into(), "run".into()];
    match &rig.gateway {
        Some(g) => {
            a.extend([
                "--targets".into(),
                g.targets.display().to_string(),
                "--target-order".into(),
                "random".into(),
                "--connect-to".into(),
                format!("::{}:{}", rig.entry.ip(), rig.entry.port()),
                "--cacert".into(),
                g.ca.display().to_string(),
            ]);
        }
        None => a.push(format!("http://{}/", rig.entry)),
    }
    a.extend([
        "--duration".into(),
        format!("{}s", e.duration_secs),
        "--warmup".into(),
        format!("{}s", e.warmup_secs),
        "--connections".into(),
        match e.load.connection_pool {
            0 => step.load.connections,
            pool => pool,
        }
        .to_string(),
        "--timeout".into(),
        format!("{}ms", e.load.timeout_ms),
        "--seed".into(),
        (step.index as u64 + 1).to_string(),
        "--quiet".into(),
    ]);
    if let Some(q) = step.load.qps {
        a.extend(["--rate".into(), q.to_string()]);
        if step.load.jitter {
            a.extend(["--arrival".into(), "poisson".into()]);
        }
    }
    if e.load.connection_pool > 0 {
        a.extend(["--concurrency".into(), step.load.connections.to_string()]);
    }
    if e.load.threads > 0 {
        a.extend(["--threads".into(), e.load.threads.to_string()]);
    }
    if e.load.protocol == HttpVersion::Http2 {
        a.push("--http2".into());
        if e.load.streams > 1 {
            a.extend(["--streams".into(), e.load.streams.to_string()]);
        }
    }
    if e.load.request_bytes > 0 {
        a.extend([
            "--method".into(),
            "POST".into(),
            "--body-size".into(),
            e.load.request_bytes.to_string(),
        ]);
    }
    a
}

struct Progress<'a> {
    live: bool,
    step: &'a Step,
    steps: usize,
    step_secs: f64,
    left_after: f64,
}

impl Progress<'_> {
    fn draw(&self, elapsed: f64, rps: u64) {
        if !self.live {
            return;
        }
        let left = (self.step_secs - elapsed).max(0.0);
        let done = (elapsed / self.step_secs).clamp(0.0, 1.0);
        let filled = (done * 20.0) as usize;
        eprint!(
            "\r\x1b[2K[{}{}] step {}/{} {} · {} · {} req/s · {} left in step, {} in all",
            "#".repeat(filled),
            ".".repeat(20 - filled),
            self.step.index + 1,
            self.steps,
            self.step.variant(),
            self.step.load_text(),
            meshbench_report::thousands(rps),
            human_secs(left),
            human_secs(left + self.left_after)
        );
    }

    fn clear(&self) {
        if self.live {
            eprint!("\r\x1b[2K");
        }
    }
}

fn base_record(e: &Experiment, step: &Step, versions: &BTreeMap<String, String>) -> StepRecord {
    StepRecord {
        seq: step.index as u32,
        repeat: step.repeat,
        topology: step.topology.to_string(),
        variant: step.variant(),
        label: step.istio_label(&e.name, e.load.protocol),
        params_json: serde_json::json!({
            "qps": step.load.qps,
            "connections": step.load.connections,
            "response_bytes": step.load.response_bytes,
            "request_bytes": e.load.request_bytes,
            "jitter": step.load.jitter,
            "mode": match e.load.mode { LoopMode::Open => "open", LoopMode::Closed => "closed" },
            "protocol": match e.load.protocol { HttpVersion::Http1 => "http1", HttpVersion::Http2 => "http2" },
            "cpu": step.cpu.map(|(r, c)| serde_json::json!({"role": r.name(), "cores": c})),
        })
        .to_string(),
        started_at: now_rfc3339(),
        status: "failed".into(),
        versions_json: serde_json::to_string(versions).unwrap_or_default(),
        ..StepRecord::default()
    }
}

/// Runs one step; every failure ends up in the record, never as an error.
fn run_step(
    e: &Experiment,
    step: &Step,
    id: i64,
    exe: &std::path::Path,
    versions: &BTreeMap<String, String>,
    stop: Arc<AtomicBool>,
    progress: &Progress,
) -> StepRecord {
    let mut record = base_record(e, step, versions);
    let spec = rig_spec(e, step, id, exe.to_path_buf());
    progress.draw(0.0, 0);
    let mut rig = match Rig::start(&spec) {
        Ok(r) => r,
        Err(err) => {
            progress.clear();
            record.error = Some(format!("the rig did not start: {err}"));
            return record;
        }
    };
    for w in &rig.warnings {
        progress.clear();
        eprintln!("warning: {w}");
    }
    let argv = run_args(e, step, &rig);
    let load = match Cli::try_parse_from(&argv) {
        Ok(Cli {
            command: Command::Run(a),
        }) => super::run::resolve(&a),
        Ok(_) => unreachable!("the arguments start with `run`"),
        Err(err) => Err(anyhow::anyhow!(
            "{}",
            err.to_string().lines().next().unwrap_or("")
        )),
    };
    let spec_load = match load {
        Ok(s) => s,
        Err(err) => {
            progress.clear();
            record.error = Some(format!("the load could not be set up: {err:#}"));
            return record;
        }
    };
    let sampler = Sampler::start(rig.watches(), Duration::from_millis(e.sample_interval_ms));
    let run_started_ms = sampler::now_ms();
    let restore = pin_client(e.limits.client.cpuset.as_deref());
    let mut last_draw = Instant::now();
    let result = meshbench_engine::run(&spec_load, stop, |l| {
        if last_draw.elapsed() >= Duration::from_millis(250) {
            last_draw = Instant::now();
            progress.draw(l.elapsed_secs, l.last_second_rps);
        }
    });
    restore_affinity(restore);
    let sampled = sampler.finish();
    progress.clear();
    let dead = rig.dead_role();
    let result: RunResult = match result {
        Ok(r) => r,
        Err(err) => {
            record.error = Some(format!("the load generator failed: {err}"));
            return record;
        }
    };
    // The steady window: after the warm-up, for as long as the load was measured.
    let from = run_started_ms + (e.warmup_secs * 1000.0) as u64;
    let to = from + (result.duration_secs * 1000.0) as u64;
    for role in &rig.roles {
        let samples = sampled.roles.get(&role.name).cloned().unwrap_or_default();
        let u = sampler::summarize(&samples, from, to);
        let cpu_limit = match role.class {
            Class::Proxy => spec.proxy_limits.cpus,
            Class::Tunnel => spec.tunnel_limits.cpus,
            Class::Backend => spec.backend_limits.cpus,
        };
        record.usage.push(UsageRow {
            role: role.name.clone(),
            program: role.program.clone(),
            workers: role.workers,
            cpu_limit,
            samples: u.samples as u32,
            cpu_millicores_avg: u.cpu_millicores_avg,
            cpu_millicores_max: u.cpu_millicores_max,
            rss_mib_avg: u.rss_mib_avg,
            rss_mib_max: u.rss_mib_max,
            working_set_mib_avg: u.working_set_mib_avg,
            working_set_mib_max: u.working_set_mib_max,
            rx_bytes_per_sec: u.rx_bytes_per_sec,
            tx_bytes_per_sec: u.tx_bytes_per_sec,
            connections_avg: u.connections_avg,
            connections_max: u.connections_max,
        });
        record.samples.extend(samples.iter().map(|s| SampleRow {
            role: role.name.clone(),
            t_ms: s.t_ms,
            cpu_ns: s.cpu_ns,
            rss_bytes: s.rss_bytes,
            working_set_bytes: s.working_set_bytes,
            rx_bytes: s.rx_bytes,
            tx_bytes: s.tx_bytes,
            connections: s.connections,
        }));
    }
    record.usage.push(sampler_usage(&sampled));
    fill_load(&mut record, &result);
    if let Some((role, tail)) = dead {
        record.status = "failed".into();
        record.error = Some(format!("{role} exited during the step ({tail})"));
    }
    record
}

/// Fills a step record's load columns, histograms and series from a run's result.
pub fn fill_load(record: &mut StepRecord, result: &RunResult) {
    let l = &result.latency_us;
    record.summary = Some(LoadSummary {
        duration_secs: result.duration_secs,
        requests: result.requests.total,
        errors: result.requests.errors,
        throughput_rps: result.throughput_rps,
        p50_us: l.p50,
        p90_us: l.p90,
        p99_us: l.p99,
        p999_us: l.p99_9,
    });
    let h = &result.histogram;
    record.histograms = [
        ("latency_us", Some(&h.latency_us)),
        ("service_time_us", Some(&h.service_time_us)),
        ("schedule_lag_us", h.schedule_lag_us.as_ref()),
        ("connect_us", Some(&h.connect_us)),
        ("tls_handshake_us", h.tls_handshake_us.as_ref()),
    ]
    .into_iter()
    .filter_map(|(n, v)| Some((n.to_string(), v?.clone())))
    .collect();
    record.series = result
        .timeline
        .iter()
        .map(|p| SeriesRow {
            second: p.second,
            requests: p.requests,
            errors: p.errors,
            p50_us: p.p50_us,
            p99_us: p.p99_us,
        })
        .collect();
    record.result_json = serde_json::to_string(&result).ok();
    record.status = if result.partial { "partial" } else { "ok" }.into();
}

/// The sampler's own cost, stored as a pseudo-role so that it can be checked.
fn sampler_usage(s: &sampler::Sampled) -> UsageRow {
    let mc = meshbench_lab::sample::millicores(0, s.own_cpu_ns, s.wall_ns);
    UsageRow {
        role: "sampler".into(),
        program: "meshbench".into(),
        workers: 1,
        cpu_limit: None,
        samples: s.roles.values().map(Vec::len).max().unwrap_or(0) as u32,
        cpu_millicores_avg: mc,
        cpu_millicores_max: mc,
        rss_mib_avg: 0.0,
        rss_mib_max: 0.0,
        working_set_mib_avg: None,
        working_set_mib_max: None,
        rx_bytes_per_sec: 0.0,
        tx_bytes_per_sec: 0.0,
        connections_avg: 0.0,
        connections_max: 0,
    }
}

/// Pins this thread (and so the engine's workers it starts) to `cpuset`; returns the old mask.
fn pin_client(cpuset: Option<&str>) -> Option<libc::cpu_set_t> {
    let cpus = meshbench_experiment::config::parse_cpuset(cpuset?)?;
    // SAFETY: plain bit sets and the calling thread's own affinity.
    unsafe {
        let mut old: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old);
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        Some(old)
    }
}

fn restore_affinity(old: Option<libc::cpu_set_t>) {
    if let Some(old) = old {
        // SAFETY: restoring the mask read above.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &old) };
    }
}
