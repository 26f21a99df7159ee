//! Bad input gets one line and exit code 2; a misbehaving target is counted data, never a crash
//! (and a run in which every request failed measured nothing: exit 1).

use crate::common;

use std::time::Duration;

use common::*;

#[test]
fn bad_flags_get_one_line_and_exit_code_2() {
    let body_missing = "@/nonexistent/meshbench-body";
    let cases: &[(&str, &[&str], &str)] = &[
        ("not a URL", &["run", "not a url"], "invalid URL"),
        ("relative URL", &["run", "/just/a/path"], "invalid URL"),
        (
            "unsupported scheme",
            &["run", "ftp://127.0.0.1/"],
            "unsupported scheme",
        ),
        (
            "https with a CA file that is missing",
            &[
                "run",
                "https://127.0.0.1:1/",
                "--cacert",
                "/nonexistent/ca.pem",
            ],
            "cannot read /nonexistent/ca.pem",
        ),
        (
            "TLS flags on a plain URL",
            &["run", "http://127.0.0.1:1/", "--insecure"],
            "https:// URLs only",
        ),
        (
            "a client certificate without its key",
            &["run", "https://127.0.0.1:1/", "--cert", "/tmp/c.pem"],
            "--key",
        ),
        (
            "streams without HTTP/2",
            &["run", "http://127.0.0.1:1/", "--streams", "4"],
            "add --http2",
        ),
        (
            "requests in flight above the connections",
            &["run", "http://127.0.0.1:1/", "-c", "4", "--in-flight", "8"],
            "raise --connections",
        ),
        (
            "requests in flight with an open loop",
            &["run", "http://127.0.0.1:1/", "-r", "10", "--in-flight", "2"],
            "closed loop",
        ),
        (
            "zero in flight",
            &["run", "http://127.0.0.1:1/", "--in-flight", "0"],
            "--in-flight 0",
        ),
        (
            "zero streams",
            &["run", "http://127.0.0.1:1/", "--http2", "--streams", "0"],
            "--streams",
        ),
        (
            "zero requests per connection",
            &[
                "run",
                "http://127.0.0.1:1/",
                "--requests-per-connection",
                "0",
            ],
            "--requests-per-connection",
        ),
        (
            "a source address that is not one",
            &[
                "run",
                "http://127.0.0.1:1/",
                "--source-address",
                "127.0.0.1,10.0.0.300",
            ],
            "--source-address '10.0.0.300': not an IP address",
        ),
        (
            "a source address this machine does not have",
            &[
                "run",
                "http://127.0.0.1:1/",
                "--source-address",
                "192.0.2.9",
            ],
            "not an address of this machine",
        ),
        (
            "the client closing first without churn",
            &["run", "http://127.0.0.1:1/", "--close-first", "client"],
            "add it",
        ),
        (
            "negative connection rate",
            &["run", "http://127.0.0.1:1/", "--connection-rate", "-1"],
            "--connection-rate",
        ),
        (
            "malformed --connect-to",
            &["run", "http://a.example/", "--connect-to", "a.example:80"],
            "HOST:PORT:ADDR:PORT",
        ),
        (
            "unclosed template brace",
            &["run", "http://127.0.0.1:1/get/{1..3"],
            "column 24",
        ),
        (
            "backwards template range",
            &["run", "http://127.0.0.1:1/get/{9..3}"],
            "ends before it starts",
        ),
        (
            "mixed schemes in one target list",
            &["run", "{http,https}://127.0.0.1:1/"],
            "one run uses one scheme",
        ),
        (
            "a name that does not resolve, with a hint",
            &["run", "https://workspace-1-domain-1.com/"],
            "--connect-to",
        ),
        (
            "a targets file that does not exist",
            &["run", "--targets", "/nonexistent/targets.txt"],
            "cannot read the file",
        ),
        (
            "a URL and a targets file",
            &["run", "http://127.0.0.1:1/", "--targets", "/tmp/t.txt"],
            "cannot be used with",
        ),
        ("no URL and no targets file", &["run"], "missing <URL>"),
        (
            "gen gateway without a backend",
            &["gen", "gateway", "--for", "nginx", "--out", "/tmp/x"],
            "--backend",
        ),
        (
            "gen gateway with zero domains",
            &[
                "gen",
                "gateway",
                "--for",
                "nginx",
                "--domains",
                "0",
                "--backend",
                "127.0.0.1:1",
                "--out",
                "/tmp/x",
            ],
            "--domains 0",
        ),
        (
            "gen gateway with a bad backend address",
            &[
                "gen",
                "gateway",
                "--for",
                "haproxy",
                "--backend",
                "somewhere",
                "--out",
                "/tmp/x",
            ],
            "--backend 'somewhere'",
        ),
        (
            "gen gateway for an unknown gateway",
            &[
                "gen",
                "gateway",
                "--for",
                "apache",
                "--backend",
                "127.0.0.1:1",
                "--out",
                "/tmp/x",
            ],
            "apache",
        ),
        (
            "backend TLS flags without --tls",
            &["backend", "--mtls"],
            "need --tls",
        ),
        (
            "unresolvable host",
            &["run", "http://no-such-host.invalid/"],
            "cannot resolve host",
        ),
        (
            "zero connections",
            &["run", "http://127.0.0.1:1/", "-c", "0"],
            "--connections",
        ),
        (
            "negative connections",
            &["run", "http://127.0.0.1:1/", "-c", "-3"],
            "-3",
        ),
        (
            "zero rate",
            &["run", "http://127.0.0.1:1/", "-r", "0"],
            "--rate",
        ),
        (
            "negative rate",
            &["run", "http://127.0.0.1:1/", "-r", "-5"],
            "--rate",
        ),
        (
            "zero duration",
            &["run", "http://127.0.0.1:1/", "-d", "0s"],
            "--duration",
        ),
        (
            "negative duration",
            &["run", "http://127.0.0.1:1/", "-d", "-5s"],
            "--duration",
        ),
        (
            "bad duration",
            &["run", "http://127.0.0.1:1/", "-d", "soon"],
            "not a duration",
        ),
        (
            "zero requests",
            &["run", "http://127.0.0.1:1/", "-n", "0"],
            "--requests",
        ),
        (
            "negative requests",
            &["run", "http://127.0.0.1:1/", "-n", "-1"],
            "--requests",
        ),
        (
            "duration and requests",
            &["run", "http://127.0.0.1:1/", "-d", "1s", "-n", "5"],
            "cannot be used with",
        ),
        (
            "arrival without rate",
            &["run", "http://127.0.0.1:1/", "--arrival", "poisson"],
            "--arrival",
        ),
        (
            "idle strategy without rate",
            &["run", "http://127.0.0.1:1/", "--idle-strategy", "spin"],
            "--idle-strategy applies to an open loop only",
        ),
        (
            "unknown idle strategy",
            &[
                "run",
                "http://127.0.0.1:1/",
                "-r",
                "10",
                "--idle-strategy",
                "nap",
            ],
            "invalid value 'nap'",
        ),
        (
            "body and body size",
            &[
                "run",
                "http://127.0.0.1:1/",
                "--body",
                "x",
                "--body-size",
                "3",
            ],
            "cannot be used with",
        ),
        (
            "negative body size",
            &["run", "http://127.0.0.1:1/", "--body-size", "-3"],
            "--body-size",
        ),
        (
            "missing body file",
            &["run", "http://127.0.0.1:1/", "--body", body_missing],
            "cannot read",
        ),
        (
            "bad header",
            &["run", "http://127.0.0.1:1/", "-H", "no colon"],
            "Name: value",
        ),
        (
            "zero timeout",
            &["run", "http://127.0.0.1:1/", "--timeout", "0"],
            "--timeout",
        ),
        (
            "zero threads",
            &["run", "http://127.0.0.1:1/", "-t", "0"],
            "--threads",
        ),
        (
            "bad method",
            &["run", "http://127.0.0.1:1/", "-m", "GE T"],
            "--method",
        ),
        (
            "unknown flag",
            &["run", "http://127.0.0.1:1/", "--frobnicate"],
            "frobnicate",
        ),
        (
            "backend bad delay",
            &["backend", "--delay", "soon"],
            "--delay",
        ),
        (
            "backend bad status",
            &["backend", "--status", "503"],
            "--status",
        ),
        (
            "backend spun delay over TLS",
            &["backend", "--delay-mode", "spin", "--tls"],
            "--delay-mode spin is served by the plain HTTP/1.1 server only",
        ),
        (
            "backend certificate file missing",
            &[
                "backend",
                "--tls",
                "--cert",
                "/nonexistent/c.pem",
                "--key",
                "/nonexistent/k.pem",
            ],
            "--cert: cannot read",
        ),
        (
            "backend bad address",
            &["backend", "--listen", "nowhere"],
            "--listen",
        ),
        (
            "a metrics address that is not one",
            &[
                "run",
                "http://127.0.0.1:1/",
                "--metrics-listen",
                "localhost",
            ],
            "--metrics-listen: 'localhost' is not a listen address",
        ),
        (
            "a web address that is not one",
            &["run", "http://127.0.0.1:1/", "--web", "12.3"],
            "--web: '12.3' is not a listen address",
        ),
        (
            "a remote-write header without remote write",
            &[
                "run",
                "http://127.0.0.1:1/",
                "--prometheus-remote-write-header",
                "Authorization: Bearer x",
            ],
            "needs --prometheus-remote-write",
        ),
        (
            "a metrics linger that is not a duration",
            &[
                "run",
                "http://127.0.0.1:1/",
                "--metrics-listen",
                "0",
                "--metrics-linger",
                "soon",
            ],
            "--metrics-linger soon: not a duration",
        ),
        (
            "a metrics linger without /metrics",
            &["run", "http://127.0.0.1:1/", "--metrics-linger", "5s"],
            "--metrics-linger needs --metrics-listen",
        ),
    ];
    for (name, args, needle) in cases {
        let out = meshbench(args, Duration::from_secs(20));
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{name}: exit code; stderr: {err}"
        );
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{name}: one line, got {err:?}"
        );
        assert!(err.starts_with("meshbench: "), "{name}: {err}");
        assert!(
            err.trim_end().chars().count() <= 120,
            "{name}: within 120 columns: {err:?}"
        );
        assert!(
            err.contains(needle),
            "{name}: expected {needle:?} in {err:?}"
        );
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert!(stdout(&out).is_empty(), "{name}: nothing on stdout");
    }
}

#[test]
fn misbehaving_targets_are_counted_by_kind() {
    let cases = [
        (Misbehaviour::Reset, "reset"),
        (Misbehaviour::CloseEarly, "reset"),
        (Misbehaviour::CloseSilently, "reset"),
        (Misbehaviour::Garbage, "protocol"),
        (Misbehaviour::HugeHeader, "protocol"),
    ];
    for (how, kind) in cases {
        let server = BadServer::start(how);
        let name = format!("{how:?}");
        let (out, r) = run_json(
            &name,
            &[&server.url(), "-n", "50", "-c", "2", "--timeout", "3s"],
            Duration::from_secs(60),
        );
        assert_eq!(
            out.status.code(),
            Some(1),
            "{name}: a failing target is data, and nothing but failures measured nothing; {}",
            stderr(&out)
        );
        assert_eq!(
            u(&r, "/requests/total"),
            50,
            "{name}: every request finished: {}",
            r["errors"]
        );
        assert_eq!(
            u(&r, &format!("/errors/{kind}")),
            50,
            "{name}: {}",
            r["errors"]
        );
        assert_eq!(u(&r, "/requests/ok"), 0);
        assert!(!stderr(&out).contains("panicked"));
        assert!(stdout(&out).contains("errors"), "{name}: summary printed");
    }
}

#[test]
fn a_silent_target_times_out() {
    let server = BadServer::start(Misbehaviour::Silent);
    let (out, r) = run_json(
        "silent",
        &[&server.url(), "-d", "1s", "-c", "2", "--timeout", "200ms"],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1), "nothing measured");
    assert!(u(&r, "/errors/timeout") >= 4, "{}", r["errors"]);
    assert_eq!(u(&r, "/requests/ok"), 0);
}

#[test]
fn every_connection_refused_is_nothing_measured_and_exit_1() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/");
    for mode in [&["-c", "2"][..], &["-c", "2", "-r", "100"][..]] {
        let mut args = vec![url.as_str(), "-d", "1s"];
        args.extend_from_slice(mode);
        let (out, r) = run_json("refused", &args, Duration::from_secs(30));
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{mode:?}: {text}");
        let refused = u(&r, "/errors/connect");
        assert!(refused > 0, "{}", r["errors"]);
        assert_eq!(u(&r, "/requests/ok"), 0);
        // Back-off keeps a dead target from becoming a busy loop.
        assert!(refused < 5_000, "{}", r["errors"]);
        // One line says so; no latency is printed from zero samples.
        let said: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("nothing measured"))
            .collect();
        assert_eq!(said.len(), 1, "{mode:?}: {text}");
        assert!(
            said[0].contains(&format!("{refused} of {refused} requests"))
                && said[0].contains("refused"),
            "{mode:?}: {}",
            said[0]
        );
        assert!(!text.contains("latency    p50"), "{mode:?}: {text}");
        assert!(!text.contains("connect p50 0.000"), "{mode:?}: {text}");
    }
}

#[test]
fn a_malformed_targets_file_names_line_and_column() {
    let path =
        std::env::temp_dir().join(format!("meshbench-bad-targets-{}.txt", std::process::id()));
    let cases: &[(&str, &str)] = &[
        (
            "GET http://127.0.0.1:1/\nX-Ok: 1\n  not a header\n",
            "line 3, column 3",
        ),
        ("GET http://127.0.0.1:1/{1..\n", "line 1: invalid template"),
        ("# nothing\n", "holds no request"),
        ("X-Early: 1\nGET http://127.0.0.1:1/\n", "line 1, column 1"),
    ];
    for (text, needle) in cases {
        std::fs::write(&path, text).unwrap();
        let out = meshbench(
            &["run", "--targets", path.to_str().unwrap()],
            Duration::from_secs(20),
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{text:?}: {err}");
        assert!(err.contains(needle), "{text:?}: want {needle:?} in {err}");
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_reader_that_goes_away_is_no_panic() {
    // `meshbench ... | head`: the reader closes the pipe before the output is written.
    let mut child = std::process::Command::new(bin())
        .args(["experiment", "examples/sidecar-overhead.yaml", "--dry-run"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

/// The flags a help text defines (`  -c, --connections <N>`, `      --rate <RPS>`).
fn defined_flags(help: &str) -> Vec<String> {
    help.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = match l.strip_prefix('-') {
                Some(rest) if !rest.starts_with('-') => rest.split_once(", ")?.1,
                _ => l,
            };
            let name = l.strip_prefix("--")?;
            let end = name
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(name.len());
            Some(format!("--{}", &name[..end]))
        })
        .collect()
}

/// Every `--flag` a help text mentions anywhere.
fn mentioned_flags(help: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = help;
    while let Some(at) = rest.find("--") {
        let after = &rest[at + 2..];
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(after.len());
        if end > 0 && after.as_bytes()[0].is_ascii_alphabetic() {
            found.push(format!("--{}", &after[..end]));
        }
        rest = &after[end..];
    }
    found
}

#[test]
fn every_flag_a_help_text_names_exists() {
    let commands: &[&[&str]] = &[
        &["run"],
        &["backend"],
        &["demo"],
        &["gen", "gateway"],
        &["gen", "certs"],
        &["gen", "grafana"],
        &["experiment"],
        &["results", "show"],
        &["results", "export"],
        &["compare"],
        &["capacity"],
        &["size"],
        &["report"],
        &["agent"],
    ];
    let helps: Vec<(String, String)> = commands
        .iter()
        .map(|c| {
            let mut args = c.to_vec();
            args.push("--help");
            let out = meshbench(&args, Duration::from_secs(20));
            assert!(out.status.success(), "{c:?}: {}", stderr(&out));
            (c.join(" "), stdout(&out))
        })
        .collect();
    let defined: Vec<String> = helps.iter().flat_map(|(_, h)| defined_flags(h)).collect();
    assert!(defined.contains(&"--rate".to_string()), "{defined:?}");
    for (command, help) in &helps {
        for flag in mentioned_flags(help) {
            assert!(
                defined.contains(&flag),
                "`meshbench {command} --help` names {flag}, which no command has"
            );
        }
    }
}

#[test]
fn an_unknown_flag_gets_a_suggestion_and_its_commands_help() {
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &["run", "--rat", "5", "http://127.0.0.1:1/"],
            "--rate",
            "`meshbench run --help`",
        ),
        (
            &["results", "show", "--stor", "x.db"],
            "--store",
            "`meshbench results show --help`",
        ),
        (
            &["run", "--arrival", "unifrom", "http://127.0.0.1:1/"],
            "uniform",
            "`meshbench run --help`",
        ),
        (&["resluts", "list"], "results", "`meshbench --help`"),
    ];
    for (args, suggested, help) in cases {
        let out = meshbench(args, Duration::from_secs(20));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.trim_end().chars().count() <= 120, "{args:?}: {err}");
        assert!(err.contains(&format!("'{suggested}'")), "{args:?}: {err}");
        assert!(err.contains(help), "{args:?}: {err}");
    }
}

#[test]
fn bare_meshbench_prints_the_usage_and_exits_2() {
    let out = meshbench(&[], Duration::from_secs(20));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("Usage: meshbench <COMMAND>"), "{err}");
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
}

#[test]
fn an_unknown_experiment_is_bad_input_in_every_command() {
    let dir = scratch_dir("unknown-experiment");
    let store = dir.join("results.db");
    meshbench_store::Store::open(&store).unwrap();
    let store = store.to_str().unwrap();
    let out_dir = dir.join("report");
    let cases: &[&[&str]] = &[
        &["results", "show", "nope"],
        &["results", "export", "nope"],
        &["size", "--experiment", "nope", "--target-rps", "1000"],
        &["report", "nope", "--out", out_dir.to_str().unwrap()],
        &["compare", "nope", "nope:baseline"],
    ];
    for args in cases {
        let mut all = args.to_vec();
        all.extend(["--store", store]);
        let out = meshbench(&all, Duration::from_secs(20));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("no experiment 'nope'"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_of_two_run_files_labels_no_response_size_they_did_not_record() {
    let backend = BackendProc::start(&[]);
    let dir = scratch_dir("compare-files");
    let files: Vec<String> = ["a", "b"]
        .iter()
        .map(|side| {
            let file = dir.join(format!("{side}.json"));
            let file = file.to_str().unwrap().to_string();
            let out = meshbench(
                &[
                    "run",
                    "-q",
                    &backend.url("/"),
                    "-n",
                    "400",
                    "-c",
                    "2",
                    "--json",
                    &file,
                ],
                Duration::from_secs(30),
            );
            assert!(out.status.success(), "{}", stderr(&out));
            file
        })
        .collect();
    let out = meshbench(&["compare", &files[0], &files[1]], Duration::from_secs(30));
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("conns"), "{text}");
    assert!(
        !text.contains(" 0 B"),
        "1 KiB responses labelled 0 B: {text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_backend_flag_is_in_the_cli_reference() {
    let out = meshbench(&["backend", "--help"], Duration::from_secs(20));
    assert!(out.status.success(), "{}", stderr(&out));
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md")).unwrap();
    let section = docs
        .split("## `meshbench backend`")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/cli.md has a backend section");
    for flag in defined_flags(&stdout(&out)) {
        if flag == "--help" {
            continue;
        }
        assert!(
            section.contains(&format!("`{flag}")) || section.contains(&format!(" {flag}")),
            "docs/cli.md's backend section does not describe {flag}"
        );
    }
}

/// Issue 49 item 5: what `gateway.type: contour` on a cluster cannot take is one line each and
/// exit 2, before any cluster is reached (the file's checks).
#[test]
fn contour_on_a_cluster_refuses_bad_input_in_one_line() {
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "sidecar topologies beside Contour",
            &[
                "topologies=[baseline, gateway, serveronly]",
                "proxy.type=istio",
            ],
            "topologies: gateway.type: contour on a cluster runs baseline and gateway only",
        ),
        (
            "a control-plane limit with no control plane",
            &["topologies=[baseline]"],
            "limits.control_plane: no control plane runs in this experiment",
        ),
        (
            "a control-plane limit on Istio's cluster",
            &["gateway.type=istio"],
            "limits.control_plane: on a cluster it limits the cluster's Contour",
        ),
        (
            "a bad Deployment name",
            &["cluster.contour.envoy=Envoy_Proxy"],
            "cluster.contour.envoy 'Envoy_Proxy': not a workload's name",
        ),
        (
            "a bad namespace",
            &["cluster.contour.namespace=-contour"],
            "cluster.contour.namespace '-contour': not a namespace name",
        ),
        (
            "Envoy as neither a Deployment nor a DaemonSet",
            &["cluster.contour.envoy_kind=StatefulSet"],
            "StatefulSet",
        ),
        (
            "a port 0",
            &["cluster.contour.stats_port=0"],
            "cluster.contour.stats_port: expected a port from 1 to 65535, found 0",
        ),
    ];
    let file = format!(
        "{}/../../examples/cluster-contour.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    for (name, sets, expected) in cases {
        let mut args = vec!["experiment", file.as_str(), "--dry-run"];
        for s in *sets {
            args.extend(["--set", s]);
        }
        let out = meshbench(&args, Duration::from_secs(20));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(expected), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
    }
}
