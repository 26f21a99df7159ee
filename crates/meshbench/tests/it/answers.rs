//! The answers end to end, against real processes: the capacity search against the backend
//! with a known service time, an experiment through a real nginx turned into the headline,
//! thresholds, a comparison, a sizing and the HTML report (its outline checked against a golden
//! file, the page rendered in headless Chromium with a screenshot).
//!
//! Golden files: `UPDATE_GOLDEN=1 cargo test --test answers` rewrites them.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(120);

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mb-answers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn capacity_search_finds_the_rate_a_known_service_time_allows() {
    // One thread spending 2 ms of CPU per request: at most 500 requests per second. It has
    // CPU 1 and the generator CPU 0: on two cores, a backend spending a core otherwise takes
    // the generator's CPU now and then, and the search rightly refuses contended steps. The
    // generator spins the last part of each wait (`-- --idle-strategy hybrid`, its own check's
    // advice for a late timer): on a VM whose sleeps end 1-3 ms late at p99, a generator that
    // only sleeps sends over 1 % of its requests late now and then, and the search refuses a
    // rate limited twice. (Spinning all the time, `spin`, made its thread wait for the CPU
    // whenever anything else ran there: contention in half the steps.)
    let backend = BackendProc::start_on_cpu(1, &["--work", "2ms", "--threads", "1"]);
    let d = dir("capacity");
    // On a busy machine the generator's own check marks steps INVALID (another process took
    // its CPU, its timer woke late), and the search refuses a rate limited twice: the machine,
    // not the target, answered. A search that misses its answer with the check saying so is run
    // again, up to three in all, each into a store of its own; a miss with every step valid
    // fails at once.
    let mut attempts = Vec::new();
    let store = loop {
        let store = d.join(format!("results-{}.db", attempts.len()));
        let out = search_capacity(&backend, &store);
        let text = format!("{}\n{}", stdout(&out), stderr(&out));
        let Err(miss) = about_500(&out) else {
            break store;
        };
        let disturbed = [
            "INVALID: cpu_contention",
            "INVALID: timer_lateness",
            "capacity: refused",
        ]
        .iter()
        .any(|w| text.contains(w));
        attempts.push(format!("{miss}\n{text}"));
        assert!(
            disturbed && attempts.len() < 3,
            "{}",
            attempts.join("\n---- the next search ----\n")
        );
    };
    for (n, text) in attempts.iter().enumerate() {
        eprintln!(
            "search {} missed with the generator's check against it:\n{text}",
            n + 1
        );
    }
    // Every step, the confirmation included, is stored as an experiment.
    let shown = meshbench(
        &["results", "show", "capacity", "--store", s(&store)],
        LIMIT,
    );
    let steps = stdout(&shown)
        .lines()
        .filter(|l| {
            let mut words = l.split_whitespace();
            words.next().is_some_and(|w| w.parse::<u32>().is_ok())
                && words.next() == Some("capacity")
        })
        .count();
    assert!((6..=20).contains(&steps), "{}", stdout(&shown));
    // The same rate offered with no SLO to meet: doubling stops at the ceiling.
    let out = meshbench(
        &[
            "capacity",
            &backend.url("/"),
            "--slo",
            "errors<50%",
            "--start",
            "50",
            "--max-rps",
            "100",
            "--step-duration",
            "0.5s",
            "--warmup",
            "0s",
            "--store",
            s(&store),
            "-q",
        ],
        LIMIT,
    );
    assert!(
        stdout(&out).contains("every rate up to --max-rps 100 req/s meets errors<50%"),
        "{}",
        stdout(&out)
    );
    std::fs::remove_dir_all(d).unwrap();
}

/// The search found about 500 req/s and confirmed it, or says why not.
fn about_500(out: &std::process::Output) -> Result<(), String> {
    let text = stdout(out);
    if !out.status.success() {
        return Err(format!("exit {:?}", out.status.code()));
    }
    let line = text
        .lines()
        .find(|l| l.starts_with("capacity: "))
        .ok_or("no answer line")?;
    let rate: f64 = line["capacity: ".len()..]
        .split(' ')
        .next()
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| format!("no rate: {line}"))?;
    // A queue builds slowly just above 500 req/s: within a one-second step it may stay
    // under the SLO, so the answer can pass 500 by the backlog one step holds (2-3 %). On a
    // busy machine the generator may saturate inside the bracket: the search then stops
    // refining and says where, and the capacity must lie between the answer and that rate.
    let stopped: Option<f64> = line
        .split_once("refined no further than ")
        .and_then(|(_, rest)| rest.split(' ').next()?.parse().ok());
    let within = match stopped {
        None => (425.0..=515.0).contains(&rate),
        Some(stopped) => rate <= 515.0 && stopped >= 425.0 && rate < stopped,
    };
    if !within {
        return Err(format!("500 req/s is not what the answer says: {line}"));
    }
    if !line.contains("confirmed by a second run") {
        return Err(format!("not confirmed: {line}"));
    }
    Ok(())
}

/// `meshbench capacity` of `backend` (2 ms of CPU a request, at most 500 a second) into
/// `store`, the generator on CPU 0.
fn search_capacity(backend: &BackendProc, store: &Path) -> std::process::Output {
    meshbench_on_cpu(
        0,
        &[
            "capacity",
            &backend.url("/"),
            "--slo",
            "p99<20ms,errors<0.1%",
            "--start",
            "100",
            "--step-duration",
            "1s",
            "--warmup",
            "0.3s",
            "--connections",
            "32",
            "--store",
            s(store),
            "--quiet",
            "--",
            "--idle-strategy",
            "hybrid",
        ],
        LIMIT,
    )
}

/// `--cpu-under 90` on a gateway limited to a quarter of a core: the answer is a rate at which
/// the gateway used under 90 % of its limit, and the search stopped where it reached it. Envoy
/// as the gateway (its bootstrap, TLS), the generator and the backend as the lab starts them.
#[test]
fn capacity_under_a_cpu_share_stops_where_the_gateway_nears_its_limit() {
    let d = dir("cpu-under");
    let file = d.join("gateway.yaml");
    std::fs::write(
        &file,
        "name: cpu-under\ntopologies: [gateway]\nduration_secs: 2\nwarmup_secs: 0.3\n\
         sample_interval_ms: 200\n\
         cooldown_secs: 0\nload:\n  mode: open\n  rate_rps: [100]\n  connections: [16]\n\
         gateway:\n  type: envoy\n  domains: 1\n  paths: 1\nlimits:\n  proxy:\n    cpus: [0.25]\n",
    )
    .unwrap();
    let store = d.join("results.db");
    let out = meshbench(
        &[
            "capacity",
            "--experiment",
            s(&file),
            "--cpu-under",
            "90",
            "--start",
            "200",
            "--precision",
            "10%",
            "--store",
            s(&store),
            "-q",
        ],
        Duration::from_secs(300),
    );
    let text = format!("{}\n{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}");
    let line = stdout(&out)
        .lines()
        .find(|l| l.starts_with("capacity: "))
        .map(str::to_string)
        .expect("an answer line");
    assert!(line.contains(" req/s meets proxy_cpu_share<90%"), "{line}");
    let rate: f64 = line["capacity: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // Every stored step: its offered rate and the gateway's share of its 0.25 cores.
    let doc = common::export_json(&store);
    let steps: Vec<(f64, f64)> = doc["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|st| {
            let offered = st["params"]["rate_rps"]
                .as_f64()
                .unwrap_or_else(|| panic!("an offered rate: {}", st["params"]));
            let gateway = common::usage_of(st, "gateway");
            assert_eq!(gateway["cpu_limit"].as_f64(), Some(0.25), "{gateway}");
            let mc = gateway["cpu_millicores_avg"].as_f64().expect("its CPU");
            (offered, mc / 250.0)
        })
        .collect();
    eprintln!("{line}\n(rate, gateway's share of its limit): {steps:.2?}");
    for &(offered, share) in &steps {
        if offered <= rate {
            assert!(
                share < 0.9,
                "{offered} req/s passed at {share:.2}: {steps:?}\n{text}"
            );
        }
    }
    // The search found the limit, not the ceiling: a rate above the answer failed, the
    // gateway at 90 % of its quarter core or more (or not carrying 95 % of the rate).
    assert!(
        steps.iter().any(|&(offered, _)| offered > rate),
        "no rate above the answer was tried: {steps:?}"
    );
    // An answer a quarter core can carry: Envoy serves TLS at thousands of req/s per core.
    assert!((100.0..20_000.0).contains(&rate), "{line}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn run_thresholds_pass_and_fail_with_a_line_each() {
    let backend = BackendProc::start(&[]);
    let out = meshbench(
        &[
            "run",
            &backend.url("/"),
            "-n",
            "2000",
            "-c",
            "4",
            "-q",
            "--threshold",
            "p99<10s",
            "--threshold",
            "errors<0.1%",
        ],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("PASS p99<10s: "), "{text}");
    assert!(text.contains("PASS errors<0.1%: 0.000 %"), "{text}");
    let out = meshbench(
        &[
            "run",
            &backend.url("/"),
            "-n",
            "500",
            "-q",
            "--threshold",
            "rps>1000000000",
            "--threshold",
            "p50<1s",
        ],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("FAIL rps>1000000000: "), "{text}");
    assert!(text.contains("PASS p50<1s"), "{text}");
}

#[test]
fn bad_answer_flags_get_one_line_and_exit_2() {
    let d = dir("bad");
    let store = d.join("none.db");
    let example = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples")
            .join(name)
            .to_string_lossy()
            .into_owned()
    };
    let (gateway, sidecars) = (
        example("gateway-cpu-sweep.yaml"),
        example("sidecar-overhead.yaml"),
    );
    let under_90 = ["capacity", "--experiment", &gateway, "--cpu-under", "90"];
    for args in [
        vec!["capacity", "http://127.0.0.1:9/", "--cpu-under", "90"],
        vec!["capacity", "--experiment", &gateway, "--cpu-under", "150"],
        vec!["capacity", "--experiment", &gateway, "--cpu-under", "0"],
        [&under_90[..], &["--set", "limits.proxy.cpus=[]"]].concat(),
        [&under_90[..], &["--set", "duration_secs=1"]].concat(),
        vec!["capacity", "--experiment", &sidecars, "--cpu-under", "90"],
        vec!["run", "http://127.0.0.1:9/", "--threshold", "p99<fast"],
        vec!["run", "http://127.0.0.1:9/", "--threshold", "latency<3ms"],
        vec!["capacity", "http://127.0.0.1:9/", "--slo", ""],
        vec![
            "capacity",
            "http://127.0.0.1:9/",
            "--slo",
            "p99<1ms",
            "--precision",
            "90%",
        ],
        vec![
            "size",
            "--target-rps",
            "100",
            "--headroom",
            "120%",
            "--rps-per-core",
            "10",
        ],
        vec!["size", "--target-rps", "100", "--store", s(&store)],
        vec!["report", "--out", s(&d), "--store", s(&store)],
        vec!["compare", "1", "2", "--store", s(&store)],
        vec!["compare", "/nonexistent/a.json", "b.json"],
        vec!["compare", "a.json", "b.json", "--margin", "fast"],
        vec!["compare", "a.json", "b.json", "--margin", "p42=5%"],
        vec!["compare", "a.json", "b.json", "--margin", "5%,10%"],
    ] {
        let out = meshbench(&args, LIMIT);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("meshbench: "), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn size_answers_the_readme_gateway_sweep_and_after_a_capacity_run() {
    // The README's `size --experiment gateway-cpu-sweep`, after that example at a small scale:
    // a closed loop through the gateway at 0.5 and 1 core, one load each. There is no line
    // over loads: the gateway at its limit says what a core carries, or, where this busy
    // machine's generator could not take it there, what its cores carried says at least that
    // (and the answer is the most replicas needed).
    let d = dir("readme-size");
    let store = d.join("results.db");
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway-cpu-sweep.yaml");
    let out = meshbench(
        &[
            "experiment",
            s(&example),
            "--set",
            "gateway.domains=10",
            "--set",
            "gateway.paths=10",
            "--set",
            "duration_secs=2",
            "--set",
            "warmup_secs=0.5",
            "--set",
            "cooldown_secs=0",
            "--store",
            s(&store),
            "-q",
        ],
        Duration::from_secs(180),
    );
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    let readme = [
        "size",
        "--target-rps",
        "25000",
        "--headroom",
        "30%",
        "--experiment",
        "gateway-cpu-sweep",
        "--store",
        s(&store),
    ];
    let out = meshbench(&readme, LIMIT);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(
        text.starts_with("sizing from experiment 1 'gateway-cpu-sweep'\n"),
        "{text}"
    );
    assert!(
        text.contains("gateway gateway: ") && text.contains(" replicas x 1 cores for 25,000 RPS"),
        "{text}"
    );
    let at_limit = text.contains(" at its CPU limit (");
    let bound = text.contains(": at most ") && text.contains("capacity is a lower bound");
    assert!(
        at_limit != bound,
        "measured at the limit or said to be a bound: {text}"
    );

    // A capacity search against a URL measures no proxy: plain `size` afterwards sizes from
    // the sweep and says so.
    let backend = BackendProc::start(&[]);
    let out = meshbench(
        &[
            "capacity",
            &backend.url("/"),
            "--slo",
            "errors<50%",
            "--start",
            "50",
            "--max-rps",
            "100",
            "--step-duration",
            "0.5s",
            "--warmup",
            "0s",
            "--store",
            s(&store),
            "-q",
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = meshbench(
        &["size", "--target-rps", "25000", "--store", s(&store)],
        LIMIT,
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(
        text.starts_with(
            "sizing from experiment 1 'gateway-cpu-sweep', the newest that size can use (experiment 2 'capacity' measured no proxy"
        ),
        "{text}"
    );
    assert!(text.contains("gateway gateway: "), "{text}");
    std::fs::remove_dir_all(d).unwrap();
}

/// One 8 s open-loop run at 100 req/s against `url`, written to `file`.
fn run_into(url: &str, file: &Path) {
    let out = meshbench(
        &[
            "run",
            "-q",
            url,
            "-r",
            "100",
            "-c",
            "4",
            "-d",
            "8s",
            "--warmup",
            "1s",
            "--json",
            s(file),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `meshbench compare A B` with the default margin: its verdict line for each percentile.
fn verdicts(a: &Path, b: &Path) -> (String, Vec<String>) {
    let out = meshbench(&["compare", s(a), s(b)], LIMIT);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    let lines = ["p50: ", "p90: ", "p99: ", "p99.9: "]
        .iter()
        .map(|p| {
            text.lines()
                .map(str::trim_start)
                .find(|l| l.starts_with(p))
                .unwrap_or_else(|| panic!("no {p}verdict in:\n{text}"))
                .to_string()
        })
        .collect();
    (text, lines)
}

/// Must hold (issue 24): two identical runs against one server spinning 2 ms per request are
/// no difference. Their seconds cannot show how much runs differ, so a 1 % drift between the
/// runs once read "B slower by 0.020 ms"; now a difference over seconds must clear the margin
/// identical runs differ by, and the comparison says which rule decided.
#[test]
fn compare_calls_two_identical_runs_no_difference() {
    let backend = BackendProc::start(&["--work", "2ms"]);
    let d = dir("identical");
    let (a, b) = (d.join("a.json"), d.join("b.json"));
    run_into(&backend.url("/"), &a);
    run_into(&backend.url("/"), &b);
    let (text, lines) = verdicts(&a, &b);
    for line in &lines {
        assert!(
            !line.contains(" slower by ") && !line.contains(" faster by "),
            "identical runs called different: {line}\n{text}"
        );
    }
    assert!(
        [
            "p50: no difference: ",
            "p50: not beyond the margin: ",
            "p50: within noise: "
        ]
        .iter()
        .any(|v| lines[0].starts_with(v)),
        "{text}"
    );
    assert!(
        text.contains("must clear the margin identical runs differ by, 5 % at p50"),
        "the rule that decided is said: {text}"
    );
    std::fs::remove_dir_all(d).unwrap();
}

/// Must hold (issue 24): the margin does not hide a real difference: a server answering after
/// 3 ms is slower than one answering after 2 ms, beyond the margin. (The delay is waited out
/// with `--delay-mode spin`, exact to microseconds: a server that spins all 2 ms of `--work`
/// is preempted for seconds at a time when the machine is busy, and its runs then differ by
/// more than 1 ms.)
#[test]
fn compare_still_calls_a_slower_server_slower() {
    let fast = BackendProc::start(&["--delay", "2ms", "--delay-mode", "spin"]);
    let slow = BackendProc::start(&["--delay", "3ms", "--delay-mode", "spin"]);
    let d = dir("slower");
    let (a, b) = (d.join("a.json"), d.join("b.json"));
    run_into(&fast.url("/"), &a);
    run_into(&slow.url("/"), &b);
    let (text, lines) = verdicts(&a, &b);
    assert!(
        lines[0].starts_with("p50: B slower by ") && lines[0].contains("beyond the margin of ±"),
        "{text}"
    );
    std::fs::remove_dir_all(d).unwrap();
}

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} is missing; run with UPDATE_GOLDEN=1", path.display()));
    assert_eq!(
        actual, want,
        "the report's structure changed; if intended, rerun with UPDATE_GOLDEN=1"
    );
}

#[test]
fn an_experiment_becomes_answers_a_report_a_comparison_and_a_sizing() {
    let d = dir("experiment");
    let store = d.join("results.db");
    let file = d.join("exp.yaml");
    std::fs::write(
        &file,
        "name: answers-test
topologies: [baseline, serveronly]
duration_secs: 2
warmup_secs: 0.5
cooldown_secs: 0
repeats: 2
load:
  mode: open
  rate_rps: [300, 600, 1200]
  connections: [8]
proxy:
  type: nginx
limits:
  proxy:
    cpus: [1]
",
    )
    .unwrap();
    let out = meshbench(
        &[
            "experiment",
            s(&file),
            "--store",
            s(&store),
            "-q",
            "--threshold",
            "p99<5s",
            "--threshold",
            "p50<0.001ms",
            "--threshold",
            "proxy_cpu_per_1k_rps<100",
        ],
        Duration::from_secs(180),
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", stderr(&out));
    assert!(text.contains("Latency added over the baseline"), "{text}");
    assert!(text.contains("What each proxy costs"), "{text}");
    assert!(
        text.contains("serveronly server_proxy: "),
        "a fitted line: {text}"
    );
    assert!(text.contains("PASS p99<5s: worst "), "{text}");
    assert!(text.contains("FAIL p50<0.001ms: worst "), "{text}");
    assert!(
        text.contains("PASS proxy_cpu_per_1k_rps<100: worst "),
        "{text}"
    );

    // Two variants of the same experiment, compared load by load.
    let out = meshbench(
        &[
            "compare",
            "answers-test:baseline",
            "answers-test:serveronly",
            "--store",
            s(&store),
        ],
        LIMIT,
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("B - A ms"), "{text}");
    // Three loads, four percentiles each, one verdict per line.
    let verdicts = text
        .lines()
        .filter(|l| l.trim_start().starts_with("p99: ") || l.trim_start().starts_with("p50: "))
        .count();
    assert_eq!(verdicts, 6, "{text}");
    // Two repeats a side are too few for a test over the runs: their seconds are tested.
    assert!(text.contains(" one-second intervals"), "{text}");
    assert!(!text.contains("no significant difference"), "{text}");
    let out = meshbench(
        &[
            "compare",
            "answers-test#1",
            "answers-test#2",
            "--store",
            s(&store),
            "--threshold",
            "delta_p99<10s",
        ],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // One 2 s step a side: too few seconds for any difference to show, and said so.
    assert!(
        stdout(&out).contains("p50: too short to tell: ")
            && stdout(&out).contains(" one-second intervals; run longer or repeat"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("PASS delta_p99<10s"),
        "{}",
        stdout(&out)
    );

    // Sizing from the proxy's CPU line over 300-1200 req/s: a core carries far more than
    // twice that, so the answer is refused with the load to measure, unless asked for.
    let size = |more: &[&str]| {
        let mut args = vec![
            "size",
            "--target-rps",
            "20000",
            "--headroom",
            "30%",
            "--experiment",
            "answers-test",
            "--store",
            s(&store),
        ];
        args.extend_from_slice(more);
        meshbench(&args, LIMIT)
    };
    let out = size(&[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", stderr(&out));
    assert!(
        text.contains("serveronly server_proxy: cannot size: one replica of 1 cores would carry "),
        "{text}"
    );
    assert!(
        text.contains("to the experiment's loads: --set 'load.rate_rps=[300,600,1200,"),
        "{text}"
    );
    let out = size(&["--extrapolate"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("serveronly server_proxy: "), "{text}");
    assert!(
        text.contains(" replicas x 1 cores for 20,000 RPS"),
        "{text}"
    );
    assert!(text.contains("headroom 30 %"), "{text}");
    assert!(text.contains("as --extrapolate asked"), "{text}");

    // The report: files, structure, and a real browser.
    let report_dir = d.join("report");
    let out = meshbench(
        &[
            "report",
            "answers-test",
            "--out",
            s(&report_dir),
            "--store",
            s(&store),
            "--slo-p99",
            "2ms",
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(report_dir.join("report.html")).unwrap();
    for id in [
        "latency_p99_vs_rate",
        "proxy_cpu_vs_rate",
        "latency_throughput",
        "percentile_spectrum",
        "timeline_012",
    ] {
        assert!(html.contains(&format!("<figure id=\"{id}\">")), "{id}");
        for ext in ["svg", "png"] {
            let p = report_dir.join(format!("plots/{id}.{ext}"));
            assert!(
                p.metadata().map(|m| m.len() > 1000).unwrap_or(false),
                "{}",
                p.display()
            );
        }
    }
    let png = std::fs::read(report_dir.join("plots/latency_throughput.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let headline_at = html.find("<h2>Headline</h2>").unwrap();
    assert!(
        headline_at < html.find("<figure").unwrap(),
        "the headline comes first"
    );

    let st = meshbench_store::Store::open(&store).unwrap();
    let e = st.experiment("answers-test").unwrap();
    let steps = st.steps(e.id).unwrap();
    let runs: Vec<_> = steps
        .iter()
        .filter_map(meshbench_analysis::Run::from_step)
        .collect();
    let h = meshbench_analysis::Headline::of(meshbench_analysis::group(runs));
    let report = meshbench_report::html::build(&meshbench_report::html::Input {
        name: &e.name,
        id: 0,
        started_at: "",
        status: "",
        headline: &h,
        warmup_secs: 0.5,
        slo_p99_ms: Some(2.0),
        failed: Vec::new(),
        steps: &steps,
    });
    golden(
        "report-outline.txt",
        &meshbench_report::html::outline(&report),
    );

    // Cargo's scratch directory for integration tests: it exists wherever the target directory
    // is (`CARGO_TARGET_DIR` included).
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshot.png");
    let check = std::process::Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/check-report.sh"))
        .arg(report_dir.join("report.html"))
        .arg(&shot)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(shot.metadata().unwrap().len() > 10_000);
    std::fs::remove_dir_all(d).unwrap();
}
