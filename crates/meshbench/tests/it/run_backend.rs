//! Black-box tests of `meshbench run` against the real backend, started as its own process.
//! The engine's cases run as a protocol matrix: HTTP/1.1, HTTP/1.1 over TLS, h2c and HTTP/2
//! over TLS, each case asserting the same figures for every protocol.

use crate::common;

use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn closed_loop_counts_every_request_exactly() {
    for proto in Proto::ALL {
        let backend = ProtoBackend::start(proto, &[]);
        let (out, r) = run_json_owned(
            &format!("closed-{proto:?}"),
            &backend.args("/", &["-n", "3000", "-c", "8"]),
            LIMIT,
        );
        assert!(out.status.success(), "{proto:?}: {}", stderr(&out));
        assert_eq!(u(&r, "/requests/total"), 3000, "{proto:?}: {}", r["errors"]);
        assert_eq!(u(&r, "/requests/ok"), 3000, "{proto:?}");
        assert_eq!(u(&r, "/requests/errors"), 0, "{proto:?}");
        assert_eq!(u(&r, "/status_codes/200"), 3000, "{proto:?}");
        assert_eq!(u(&r, "/latency_us/count"), 3000, "{proto:?}");
        assert_eq!(r["settings"]["mode"], "closed");
        assert_eq!(r["settings"]["tls"], proto.tls(), "{proto:?}");
        let want = if proto.h2() { "h2" } else { "http/1.1" };
        assert_eq!(r["settings"]["protocol"], want, "{proto:?}");
        assert!(r["schedule_lag_us"].is_null());
        assert!(
            u(&r, "/bytes/received") >= 3000 * 1024,
            "{proto:?}: 1 KiB bodies plus heads"
        );
        // HPACK shrinks repeated HTTP/2 request heads to a few bytes.
        let per_request = if proto.h2() { 10 } else { 30 };
        assert!(u(&r, "/bytes/sent") >= 3000 * per_request, "{proto:?}");
        let timeline_total: u64 = r["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["requests"].as_u64().unwrap())
            .sum();
        assert_eq!(
            timeline_total, 3000,
            "{proto:?}: the timeline accounts for every request"
        );
        // The encoded histogram decodes to the same counts: results of several processes merge.
        let h = meshbench_results::histogram::decode_histogram(
            r["histogram"]["latency_us"].as_str().unwrap(),
        )
        .unwrap();
        assert_eq!(h.len(), 3000);
        assert_eq!(h.value_at_quantile(0.99), u(&r, "/latency_us/p99"));
        assert!(stdout(&out).contains("3,000 total"), "{}", stdout(&out));
        // Every connection was opened before the clock started: none in the window.
        assert_eq!(u(&r, "/connections/opened"), 0, "{proto:?}");
        if proto.tls() {
            assert!(r["histogram"]["tls_handshake_us"].is_string(), "{proto:?}");
        } else {
            assert!(r["connections"]["tls_handshake_us"].is_null(), "{proto:?}");
        }
    }
}

#[test]
fn open_loop_holds_the_asked_rate() {
    for proto in Proto::ALL {
        let backend = ProtoBackend::start(proto, &[]);
        let (out, r) = run_json_owned(
            &format!("open-{proto:?}"),
            &backend.args("/", &["-r", "2000", "-d", "3s", "-c", "8"]),
            LIMIT,
        );
        assert!(out.status.success(), "{proto:?}: {}", stderr(&out));
        let total = u(&r, "/requests/total") as f64;
        let due = total + u(&r, "/requests/unfinished") as f64;
        assert!(
            (due - 6000.0).abs() <= 30.0,
            "{proto:?}: scheduled {due}, want 6000 ± 0.5 %"
        );
        assert!(
            total >= 6000.0 * 0.97,
            "{proto:?}: answered {total} of 6000"
        );
        let rps = f(&r, "/throughput_rps");
        assert!(
            (rps - 2000.0).abs() < 2000.0 * 0.03,
            "{proto:?}: throughput {rps}"
        );
        assert_eq!(r["settings"]["arrival"], "uniform");
        let sends = u(&r, "/schedule_lag_us/count") as f64;
        assert!(
            sends >= total && sends <= total + 8.0,
            "{proto:?}: one lag sample per send: {sends} vs {total}"
        );
        assert!(r["histogram"]["schedule_lag_us"].is_string());
        assert!(
            u(&r, "/latency_us/p50") >= u(&r, "/service_time_us/p50"),
            "{proto:?}: latency includes any lag"
        );
    }
}

#[test]
fn poisson_arrivals_average_to_the_rate() {
    let backend = BackendProc::start(&[]);
    let (_, r) = run_json(
        "poisson",
        &[
            &backend.url("/"),
            "-r",
            "1000",
            "--arrival",
            "poisson",
            "-d",
            "3s",
        ],
        LIMIT,
    );
    let total = u(&r, "/requests/total") as f64;
    assert!(
        (total - 3000.0).abs() < 3000.0 * 0.08,
        "total {total}, want about 3000"
    );
    assert_eq!(r["settings"]["arrival"], "poisson");
}

#[test]
fn warmup_is_excluded_from_the_results() {
    for proto in Proto::ALL {
        let backend = ProtoBackend::start(proto, &[]);
        let (_, r) = run_json_owned(
            &format!("warmup-{proto:?}"),
            &backend.args("/", &["-r", "1000", "-d", "1s", "--warmup", "1s"]),
            LIMIT,
        );
        let total = u(&r, "/requests/total");
        let due = total + u(&r, "/requests/unfinished");
        assert!(
            (995..=1005).contains(&due),
            "{proto:?}: only the measured second counts: {due}"
        );
        assert!(total >= 950, "{proto:?}: {total}");
        assert!((f(&r, "/duration_secs") - 1.0).abs() < 0.1, "{proto:?}");
        assert_eq!(f(&r, "/settings/warmup_secs"), 1.0);
    }
}

#[test]
fn injected_errors_are_counted_by_status() {
    for proto in Proto::ALL {
        let backend = ProtoBackend::start(proto, &["--status", "503:20%"]);
        let (_, r) = run_json_owned(
            &format!("status-{proto:?}"),
            &backend.args("/", &["-n", "5000", "-c", "4"]),
            LIMIT,
        );
        let s503 = u(&r, "/status_codes/503");
        let s200 = u(&r, "/status_codes/200");
        assert_eq!(s503 + s200, 5000, "{proto:?}: {}", r["errors"]);
        assert!(
            (s503 as f64 / 5000.0 - 0.2).abs() < 0.03,
            "{proto:?}: 503 share {s503}"
        );
        assert_eq!(u(&r, "/errors/http_status"), s503);
        assert_eq!(u(&r, "/requests/errors"), s503);
        assert_eq!(u(&r, "/requests/ok"), s200);
    }
}

#[test]
fn open_loop_latency_includes_queueing_when_the_target_is_slow() {
    for proto in Proto::ALL {
        // One connection (one stream), 10 ms per answer: the target does 100 req/s, asked 200.
        let backend = ProtoBackend::start(proto, &["--delay", "10ms"]);
        let (out, r) = run_json_owned(
            &format!("co-{proto:?}"),
            &backend.args("/", &["-r", "200", "-d", "2s", "-c", "1"]),
            LIMIT,
        );
        let latency = u(&r, "/latency_us/p99");
        let service = u(&r, "/service_time_us/p50");
        assert!(
            (10_000..100_000).contains(&service),
            "{proto:?}: service p50 {service}"
        );
        assert!(
            latency > 5 * service,
            "{proto:?}: coordinated omission corrected: latency p99 {latency} vs service p50 {service}"
        );
        assert!(u(&r, "/generator/queued_sends") > 0, "{proto:?}");
        assert_eq!(
            r["generator"]["saturated"], false,
            "{proto:?}: a slow target is not a saturated generator"
        );
        // 200 req/s at 10 ms keeps 2 connections busy: one is too few, and the check says so.
        let findings = r["generator"]["check"]["findings"].as_array().unwrap();
        let causes: Vec<&str> = findings
            .iter()
            .map(|f| f["cause"].as_str().unwrap())
            .collect();
        assert!(
            causes.contains(&"too_few_connections"),
            "{proto:?}: {findings:?}"
        );
        assert_eq!(r["generator"]["check"]["valid"], false, "{proto:?}");
        let invalid = common::findings(&stdout(&out));
        let invalid: Vec<&String> = invalid
            .iter()
            .filter(|f| f.starts_with("INVALID: too few connections"))
            .collect();
        assert_eq!(invalid.len(), 1, "one finding says why: {}", stdout(&out));
        assert!(invalid[0].contains("raise -c"), "{}", invalid[0]);
        assert!(
            u(&r, "/requests/unfinished") > 0,
            "{proto:?}: requests due but never sent are reported"
        );
    }
}

#[test]
fn the_idle_strategy_is_kept_and_reported() {
    let backend = BackendProc::start(&[]);
    let url = backend.url("/");
    for (idle, spins) in [("sleep", false), ("spin", true), ("auto", false)] {
        let (out, r) = run_json(
            &format!("idle-{idle}"),
            &[
                &url,
                "-r",
                "200",
                "-d",
                "1s",
                "-c",
                "4",
                "--idle-strategy",
                idle,
            ],
            LIMIT,
        );
        assert!(out.status.success(), "{idle}: {}", stderr(&out));
        assert_eq!(r["settings"]["idle_strategy"], idle);
        assert!(u(&r, "/requests/ok") >= 190, "{idle}");
        let spun = f(&r, "/generator/spin_secs");
        if spins {
            // Spinning between sends all the second long, apart from reading and sending.
            assert!(spun > 0.3, "{idle}: spun {spun} s");
            assert!(u(&r, "/schedule_lag_us/p50") < 1_000, "{idle}");
        } else if idle == "sleep" {
            assert_eq!(spun, 0.0, "{idle}");
        }
        assert!(
            u(&r, "/generator/wakeup_error_us/count") > 0 || spins,
            "{idle}: the wake-up error is measured"
        );
        assert!(stdout(&out).contains("pacing"), "{}", stdout(&out));
        assert!(r["generator"]["check"]["valid"].is_boolean());
    }
}

/// The pacing budget: a given slack is kept and sends due within it share a wake-up (each still
/// timed from its own instant, so the schedule lag stays within the budget plus the clock's
/// lateness); auto chooses one from the clock; --send-early sends ahead instead of behind.
#[test]
fn the_pacing_slack_batches_sends_within_the_budget() {
    let backend = BackendProc::start(&[]);
    let url = backend.url("/");
    let run = |name: &str, extra: &[&str]| {
        let mut args = vec![
            url.as_str(),
            "-r",
            "4000",
            "-d",
            "2s",
            "-c",
            "16",
            "-t",
            "1",
        ];
        args.extend_from_slice(extra);
        let (out, r) = run_json(name, &args, LIMIT);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        assert!(u(&r, "/requests/ok") >= 7_600, "{name}: {}", r["requests"]);
        r
    };
    // A budget of 5 ms: wider than this clock's p99 lateness, which is 1-3 ms on a slow VM
    // (a sleeping loop cannot batch within a budget its clock already spends).
    let wide = run(
        "slack-5ms",
        &["--pacing-slack", "5ms", "--idle-strategy", "sleep"],
    );
    assert_eq!(u(&wide, "/settings/pacing_slack_us"), 5_000);
    let pacing = &wide["generator"]["pacing"];
    assert_eq!(pacing["slack_us"], 5_000);
    assert_eq!(pacing["slack_auto"], false);
    // 4,000 req/s is a send every 250 µs: the budget left after the clock's lateness carries
    // several per wake-up.
    let per_wake = f(&wide, "/generator/pacing/sends_per_wake/mean");
    assert!(per_wake >= 3.0, "sends per wake-up {per_wake}");
    // (The mean is rounded to two decimals.)
    let wakes = u(&wide, "/generator/pacing/sends_per_wake/count") as f64;
    let total = u(&wide, "/requests/total") as f64;
    assert!(
        (wakes * per_wake - total).abs() <= wakes * 0.005 + 1.0,
        "every measured send is in one wake-up: {wakes} x {per_wake} vs {total}"
    );
    // Sent late by design, but no later than the budget at the median.
    let lag_p50 = u(&wide, "/schedule_lag_us/p50");
    assert!((200..=5_000).contains(&lag_p50), "lag p50 {lag_p50} µs");
    // Late beyond the budget only where a wake-up is later than the clock's p99: a wake-up in
    // a hundred, and the sends it carries.
    let late = u(&wide, "/generator/late_sends") as f64;
    assert!(
        late < total / 50.0,
        "{late} of {total} late: within the budget is not late"
    );

    let auto = run("slack-auto", &[]);
    assert!(auto["settings"]["pacing_slack_us"].is_null());
    let slack = u(&auto, "/generator/pacing/slack_us");
    // Leading, the slack is only the bar for calling a send late: the clock's p99 lateness,
    // within 20-200 µs.
    assert!((20..=200).contains(&slack), "auto slack {slack} µs");
    assert_eq!(auto["generator"]["pacing"]["slack_auto"], true);
    assert!(f(&auto, "/generator/pacing/wake_cost_us") > 0.0);
    assert!(
        f(&auto, "/generator/pacing/sends_per_wake/mean") < per_wake,
        "a narrower budget, fewer sends per wake-up"
    );
    // The default leads: it wakes ahead of a send by the clock's p99 lateness and sends with it
    // what falls due within 0.75 ms after it (three sends or more at 250 µs apart), so the
    // median send leaves on time or early, and a send leaves at most the lateness and the
    // window ahead (1-3 ms on a slow VM).
    let ahead = u(&auto, "/generator/pacing/ahead_us");
    assert!((750..=10_000).contains(&ahead), "ahead {ahead} µs");
    let auto_per_wake = f(&auto, "/generator/pacing/sends_per_wake/mean");
    assert!(auto_per_wake >= 3.0, "sends per wake-up {auto_per_wake}");
    let auto_lag_p50 = u(&auto, "/schedule_lag_us/p50");
    assert!(
        auto_lag_p50 < lag_p50,
        "leading lag p50 {auto_lag_p50} µs vs {lag_p50}"
    );
    assert!(
        wide["generator"]["pacing"]["ahead_us"].is_null(),
        "a given slack sends nothing early"
    );

    let early = run(
        "slack-early",
        &[
            "--pacing-slack",
            "5ms",
            "--send-early",
            "--idle-strategy",
            "sleep",
        ],
    );
    assert_eq!(early["settings"]["send_early"], true);
    // Sent ahead: their lag is 0, so at least the median is under the late run's.
    let early_p50 = u(&early, "/schedule_lag_us/p50");
    assert!(
        early_p50 < lag_p50,
        "early lag p50 {early_p50} µs vs {lag_p50}"
    );
}

#[test]
fn the_pacing_slack_is_refused_where_it_cannot_apply() {
    for (args, says) in [
        (vec!["-c", "2", "--pacing-slack", "1ms"], "open loop only"),
        (vec!["-r", "100", "--pacing-slack", "50ms"], "at most 10 ms"),
        (
            vec!["-r", "100", "--pacing-slack", "soon"],
            "not a duration",
        ),
        (vec!["-c", "2", "--send-early"], "open loop only"),
    ] {
        let mut all = vec!["run", "http://127.0.0.1:9/", "-d", "1s"];
        all.extend(args.iter());
        let out = meshbench(&all, LIMIT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    }
}

#[test]
fn per_request_size_and_request_bodies() {
    for proto in Proto::ALL {
        let backend = ProtoBackend::start(proto, &[]);
        let (_, r) = run_json_owned(
            &format!("size-{proto:?}"),
            &backend.args("/?size=10000", &["-n", "100", "-c", "1"]),
            LIMIT,
        );
        let per = u(&r, "/bytes/received") / 100;
        assert!(
            (10_000..10_400).contains(&per),
            "{proto:?}: {per} bytes per response"
        );
        let (_, r) = run_json_owned(
            &format!("post-{proto:?}"),
            &backend.args(
                "/",
                &[
                    "-n",
                    "100",
                    "-c",
                    "2",
                    "-m",
                    "POST",
                    "--body-size",
                    "5000",
                    "-H",
                    "X-Test: 1",
                ],
            ),
            LIMIT,
        );
        assert_eq!(u(&r, "/requests/ok"), 100, "{proto:?}: {}", r["errors"]);
        assert!(u(&r, "/bytes/sent") >= 100 * 5000, "{proto:?}");
        assert_eq!(u(&r, "/settings/body_bytes"), 5000);
        assert_eq!(r["settings"]["headers"][0][0], "X-Test");
        // Echo: the body comes back, so both directions carry it.
        let (_, r) = run_json_owned(
            &format!("echo-{proto:?}"),
            &backend.args(
                "/?echo",
                &["-n", "50", "-c", "2", "-m", "POST", "--body-size", "20000"],
            ),
            LIMIT,
        );
        assert_eq!(u(&r, "/requests/ok"), 50, "{proto:?}: {}", r["errors"]);
        assert!(u(&r, "/bytes/received") >= 50 * 20_000, "{proto:?}");
    }
}

#[test]
fn ten_thousand_connections_from_one_process() {
    let backend = BackendProc::start(&["--threads", "2"]);
    let (out, r) = run_json(
        "c10k",
        &[
            &backend.url("/"),
            "-c",
            "10000",
            "-n",
            "20000",
            "--timeout",
            "20s",
        ],
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(u(&r, "/requests/ok"), 20000, "{}", r["errors"]);
    assert_eq!(u(&r, "/settings/connections"), 10000);
}

fn interrupt(signal: i32, code: i32) {
    let backend = BackendProc::start(&[]);
    let path = temp_json(&format!("signal-{signal}"));
    let _ = std::fs::remove_file(&path);
    let mut child = spawn_meshbench(&[
        "run",
        "-q",
        &backend.url("/"),
        "-r",
        "500",
        "-d",
        "60s",
        "--json",
        path.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
    let started = std::time::Instant::now();
    let out = wait_with_limit(&mut child, Duration::from_secs(10));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped promptly"
    );
    assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("partial JSON written"))
            .unwrap();
    assert_valid(&r);
    assert_eq!(r["partial"], true);
    let total = u(&r, "/requests/total");
    assert!(
        (400..=1000).contains(&total),
        "about 1.5 s at 500 req/s measured: {total}"
    );
    assert!(stdout(&out).contains("PARTIAL"), "{}", stdout(&out));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn ctrl_c_writes_the_partial_result() {
    interrupt(libc::SIGINT, 130);
}

#[test]
fn sigterm_writes_the_partial_result() {
    interrupt(libc::SIGTERM, 143);
}

#[test]
fn localhost_finds_the_address_that_listens() {
    // The backend listens on 127.0.0.1 only; `localhost` may resolve to ::1 first.
    let backend = BackendProc::start(&[]);
    let url = format!("http://localhost:{}/", backend.addr.port());
    let (_, r) = run_json("localhost", &[&url, "-n", "200"], LIMIT);
    assert_eq!(u(&r, "/requests/ok"), 200, "{}", r["errors"]);
}

#[test]
fn large_bodies_both_ways_in_an_open_loop() {
    for proto in Proto::ALL {
        let backend = ProtoBackend::start(proto, &[]);
        let (out, r) = run_json_owned(
            &format!("large-{proto:?}"),
            &backend.args(
                "/?size=1048576",
                &[
                    "-r",
                    "100",
                    "-d",
                    "2s",
                    "-c",
                    "4",
                    "-m",
                    "POST",
                    "--body-size",
                    "262144",
                ],
            ),
            LIMIT,
        );
        assert!(out.status.success(), "{proto:?}: {}", stderr(&out));
        assert_eq!(u(&r, "/requests/ok"), 200, "{proto:?}: {}", r["errors"]);
        assert!(u(&r, "/bytes/received") >= 200 * 1_048_576, "{proto:?}");
        assert!(u(&r, "/bytes/sent") >= 200 * 262_144, "{proto:?}");
        let p50 = u(&r, "/service_time_us/p50");
        assert!(
            p50 < 40_000,
            "{proto:?}: a 1 MiB response on loopback takes well under 40 ms: {p50} µs"
        );
    }
}

#[test]
fn sleeping_through_arrivals_does_not_add_to_latency() {
    // At 100 req/s the loop sleeps up to 1 ms between looks at its sockets; the kernel's receive
    // timestamps must keep that out of the figures (regression: a build without them reported
    // service times of about 1 ms here).
    let backend = BackendProc::start(&[]);
    let (_, r) = run_json(
        "lazy",
        &[
            &backend.url("/"),
            "-r",
            "100",
            "-d",
            "2s",
            "-c",
            "2",
            "-t",
            "1",
        ],
        LIMIT,
    );
    assert_eq!(u(&r, "/requests/ok"), 200);
    let p50 = u(&r, "/service_time_us/p50");
    assert!(p50 < 700, "service p50 {p50} µs on loopback");
}

#[test]
fn progress_line_only_on_a_terminal() {
    let backend = BackendProc::start(&[]);
    // Not a terminal: stderr stays empty.
    let out = meshbench(&["run", &backend.url("/"), "-r", "200", "-d", "1s"], LIMIT);
    assert!(out.status.success());
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    // A terminal (util-linux `script` gives the command a pty): the live line appears.
    let cmd = format!("{} run {} -r 200 -d 2s", bin(), backend.url("/"));
    let tty = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("`script` from util-linux");
    let text = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{text}");
    assert!(
        text.contains("\r\x1b[2K["),
        "a redrawn progress line: {text:?}"
    );
    assert!(text.contains("req/s") && text.contains("p99"), "{text:?}");
}

#[test]
fn a_slow_open_loop_measures_its_whole_duration() {
    // Regression: at 2 req/s the last request is due at 1.5 s; the window must still be 2 s,
    // or the throughput reads 2.67 req/s instead of 2.
    let backend = BackendProc::start(&[]);
    let (_, r) = run_json(
        "slow-window",
        &[&backend.url("/"), "-r", "2", "-d", "2s", "-c", "1"],
        LIMIT,
    );
    assert_eq!(u(&r, "/requests/ok"), 4);
    assert!(
        (f(&r, "/duration_secs") - 2.0).abs() < 0.05,
        "{}",
        r["duration_secs"]
    );
    assert!(
        (f(&r, "/throughput_rps") - 2.0).abs() < 0.05,
        "{}",
        r["throughput_rps"]
    );
}
