//! Issue 58, item 6: answers carry their doubts. An experiment (a baseline, then nginx and
//! haproxy as the gateway) runs with the generator pinned to CPU 0 and the gateways and the
//! backend on CPU 1; while nginx's step runs, a busy loop spins on CPU 0 beside the generator,
//! so that its own check calls that step INVALID (`cpu_contention`). `meshbench report` then
//! marks that step's figures (the latency, cost and ranking rows, the charts' points, its
//! timeline) and every answer built on it (the latency it adds over the baseline, the order of
//! the gateways) with `INVALID: cpu_contention`, and `results show`'s headline does too. The
//! other steps run on a quiet CPU 0, but a busy machine may upset them too: every mark is
//! checked against the self-check's own verdict as the JSON export stores it, never against a
//! guess. Needs nginx and haproxy (scripts/install-deps.sh) and two CPUs.

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{meshbench, spawn_meshbench, stderr, stdout, wait_with_limit};

const LIMIT: Duration = Duration::from_secs(240);

/// A thread spinning on one CPU until dropped.
struct BusyLoop {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BusyLoop {
    fn on(cpu: usize) -> BusyLoop {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and sched_setaffinity only
            // read and write the set given, for this thread (pid 0).
            let pinned = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
            };
            assert_eq!(pinned, 0, "the busy loop is pinned to CPU {cpu}");
            while !flag.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        BusyLoop {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for BusyLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How many steps the experiment in `store` has stored so far (0 while the store is not
/// there yet).
fn stored_steps(store: &Path) -> usize {
    if !store.exists() {
        return 0;
    }
    let Ok(s) = meshbench_store::Store::open(store) else {
        return 0;
    };
    s.experiments()
        .ok()
        .and_then(|e| e.first().map(|e| e.id))
        .and_then(|id| s.steps(id).ok())
        .map_or(0, |steps| steps.len())
}

/// The cells of each row of the HTML table whose caption starts with `caption`, their tags
/// taken out (a cell's smaller second line joined with a space).
fn html_rows(html: &str, caption: &str) -> Vec<Vec<String>> {
    let at = html
        .find(&format!(">{caption}"))
        .unwrap_or_else(|| panic!("no table {caption}"));
    let table = &html[at..at + html[at..].find("</table>").unwrap()];
    table
        .split("<tr")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let inner = &cell[cell.find('>').unwrap() + 1..cell.find("</td>").unwrap()];
                    let mut text = String::new();
                    let mut tag = false;
                    for ch in inner.chars() {
                        match ch {
                            '<' => {
                                tag = true;
                                text.push(' ');
                            }
                            '>' => tag = false,
                            c if !tag => text.push(c),
                            _ => {}
                        }
                    }
                    text.split_whitespace().collect::<Vec<_>>().join(" ")
                })
                .collect::<Vec<String>>()
        })
        .filter(|cells| !cells.is_empty())
        .collect()
}

/// The row of `rows` whose first cell is `first`.
fn row<'a>(rows: &'a [Vec<String>], first: &str) -> &'a [String] {
    rows.iter()
        .find(|r| r[0] == first)
        .unwrap_or_else(|| panic!("no row {first} in {rows:?}"))
}

/// The figure (chart) `id` of the report: its inline SVG and its caption.
fn figure<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!("<figure id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no chart {id}"));
    &html[at..at + html[at..].find("</figure>").unwrap()]
}

#[test]
fn a_step_made_invalid_on_purpose_is_marked_beside_its_figures_and_every_answer_on_it() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        cpus >= 2,
        "two CPUs: the generator's own and the others' ({cpus} here)"
    );
    let dir = common::scratch_dir("invalid-report");
    let file = dir.join("invalid.yaml");
    std::fs::write(
        &file,
        "name: invalid-on-purpose\ntopologies: [baseline, gateway]\nduration_secs: 3\n\
         warmup_secs: 1\ncooldown_secs: 0\nsample_interval_ms: 250\n\
         load:\n  mode: closed\n  connections: [16]\n  threads: 1\n\
         gateway:\n  type: [nginx, haproxy]\n  domains: 2\n  paths: 2\n\
         limits:\n  client:\n    cpuset: 0\n  proxy:\n    cpuset: 1\n  backend:\n    cpuset: 1\n",
    )
    .unwrap();
    let store = dir.join("results.db");
    let (f, s) = (file.display().to_string(), store.display().to_string());
    let mut child = spawn_meshbench(&["experiment", &f, "--store", &s, "-q"]);
    let run = std::thread::spawn(move || wait_with_limit(&mut child, LIMIT));
    // Steps run baseline, gateway nginx, gateway haproxy: the busy loop spins from the end of
    // the first until the second is stored.
    let deadline = Instant::now() + LIMIT;
    let mut busy: Option<BusyLoop> = None;
    let mut spun = false;
    while !run.is_finished() && Instant::now() < deadline {
        match stored_steps(&store) {
            1 if !spun => {
                busy = Some(BusyLoop::on(0));
                spun = true;
            }
            n if n >= 2 => drop(busy.take()),
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(busy);
    let out = run.join().unwrap();
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert!(spun, "the busy loop ran beside the second step");

    // The self-check's verdict on each step, as stored.
    let export = common::export_json(&store);
    let steps = export["steps"].as_array().unwrap();
    let verdicts: Vec<(String, Option<String>)> = steps
        .iter()
        .map(|step| {
            let check = &step["result"]["generator"]["check"];
            let cause = check["findings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["cause"].as_str().unwrap())
                .find(|c| *c != "slow_target")
                .filter(|_| check["valid"] == false)
                .map(|c| format!("INVALID: {c}"));
            (step["variant"].as_str().unwrap().to_string(), cause)
        })
        .collect();
    let variants: Vec<&str> = verdicts.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(
        variants,
        ["baseline", "gateway nginx", "gateway haproxy"],
        "{export}"
    );
    assert_eq!(
        verdicts[1].1.as_deref(),
        Some("INVALID: cpu_contention"),
        "a busy loop beside the generator made nginx's step INVALID: {}",
        steps[1]["result"]["generator"]["check"]
    );
    let mark = |variant: &str| -> String {
        verdicts
            .iter()
            .find(|(v, _)| v == variant)
            .and_then(|(_, m)| m.clone())
            .unwrap_or_default()
    };
    eprintln!("the self-check's verdicts: {verdicts:?}");

    // The report.
    let out_dir = dir.join("report");
    let out = meshbench(
        &[
            "report",
            "latest",
            "--out",
            out_dir.to_str().unwrap(),
            "--store",
            &s,
        ],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    let invalid = verdicts.iter().filter(|(_, m)| m.is_some()).count();
    assert!(
        html.contains(&format!(
            "INVALID by the generator's own check: {invalid} of 3 steps"
        )),
        "the headline says first how many steps are INVALID"
    );
    // Every row of a step's figures carries its mark, as its last cell; a valid step's none.
    let latency = html_rows(&html, "Latency and throughput of every measurement");
    for (variant, _) in &verdicts {
        let r = row(&latency, variant);
        assert_eq!(r.last().unwrap(), &mark(variant), "{variant}: {r:?}");
    }
    let costs = html_rows(&html, "What each proxy costs");
    for variant in ["gateway nginx", "gateway haproxy"] {
        let r = row(&costs, variant);
        assert_eq!(r.last().unwrap(), &mark(variant), "{variant}: {r:?}");
    }
    // The latency a gateway adds rests on the baseline's step too.
    let added = html_rows(&html, "Latency added over the baseline");
    for variant in ["gateway nginx", "gateway haproxy"] {
        let r = row(&added, variant);
        let rests = [variant, "baseline"]
            .iter()
            .filter(|v| !mark(v).is_empty())
            .count();
        let said = r.last().unwrap();
        match rests {
            0 => assert_eq!(said, "", "{variant}: {r:?}"),
            n => assert!(
                said.starts_with("INVALID: ") && (n == 2 || said.ends_with(" in 1 of 2 runs")),
                "{variant} rests on {n} INVALID steps: {r:?}"
            ),
        }
    }
    assert!(row(&added, "gateway nginx")
        .last()
        .unwrap()
        .contains("cpu_contention"));
    // The ranking: a table in order, its rows marked, its caption saying what it rests on.
    let at = html
        .find(">Gateways from the least CPU per 1,000 RPS to the most")
        .unwrap();
    let caption = &html[at..at + html[at..].find("</caption>").unwrap()];
    assert!(
        caption.contains("; the order rests on INVALID: ") && caption.contains("nginx"),
        "{caption}"
    );
    let ranking = html_rows(
        &html,
        "Gateways from the least CPU per 1,000 RPS to the most",
    );
    assert_eq!(ranking.len(), 2, "{ranking:?}");
    let vcpu: Vec<f64> = ranking.iter().map(|r| r[2].parse().unwrap()).collect();
    assert!(vcpu[0] <= vcpu[1], "cheapest first: {ranking:?}");
    for r in &ranking {
        assert_eq!(r[4], mark(&format!("gateway {}", r[1])), "{r:?}");
    }
    assert!(
        !html.contains("least CPU per 1,000 RPS first:"),
        "no paragraph"
    );
    // The charts: nginx's bar ringed, the legend naming the ring, the sentence saying so.
    let chart = figure(&html, "gateways_cpu_1");
    assert!(chart.contains("stroke=\"#AA0000\""), "a ring: {chart}");
    assert!(
        chart.contains("Ringed: from a step the generator's self-check calls INVALID: ")
            && chart.contains("cpu_contention"),
        "{chart}"
    );
    // A chart with points from steps of several causes names them all after one INVALID.
    for id in ["latency_p99_by_variant", "proxy_cpu_by_variant"] {
        let drawn = figure(&html, id);
        assert!(
            drawn.contains("INVALID: ") && drawn.contains("cpu_contention"),
            "{id}: {drawn}"
        );
    }
    assert!(figure(&html, "timeline_002").contains("INVALID: cpu_contention"));
    // One note for the roles without a line, not one per role.
    assert_eq!(
        html.matches("not enough loads for a line").count(),
        1,
        "{html}"
    );

    // The terminal's answers mark the same rows.
    let shown = meshbench(&["results", "show", "latest", "--store", &s], LIMIT);
    let text = stdout(&shown);
    let headline = &text[text.find("Latency and throughput").unwrap()..];
    let nginx = headline
        .lines()
        .find(|l| l.trim_start().starts_with("gateway nginx ") && l.contains(" %"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(nginx.ends_with("  INVALID: cpu_contention"), "{text}");
    assert!(
        text.replace("\n  ", " ")
            .contains("the order rests on INVALID: "),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
