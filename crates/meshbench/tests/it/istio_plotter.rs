//! The Istio CSV against what Istio's perf/benchmark graph plotter reads. A short experiment
//! (baseline and both sidecars, real nginx, two rates) is exported with `results export
//! --format csv`, then:
//!
//! - our own check: the columns the plotter reads are there, and for every mode, rate and
//!   connection count the rows it would select (`ActualQPS == rate`, `NumThreads ==
//!   connections`, `Labels` ending in the mode) are exactly one, with every figure the step
//!   measured (docs/cli.md, "The Istio CSV");
//! - Istio's own plotter: istio/tools' `perf/benchmark/graph_plotter/graph_plotter.py` at the
//!   version scripts/install-istio-plotter.sh pins (fetched from the Go module proxy with
//!   pandas and matplotlib at pinned versions, not kept in this repository), run through
//!   scripts/istio-plotter-points.py, which records the series it plots: every latency graph
//!   has a point at every rate for both modes, and the sidecars' CPU and memory graphs show
//!   meshbench's figures. That test needs the script's environment and fails saying so without
//!   it (scripts/install-deps.sh runs the script).
//!
//! Istio's plotter picks a row by its achieved rate rounded to an integer. A step's achieved
//! rate is its requests over its measured window, which ends at the last response; over a
//! 0.6 s window a few milliseconds of lateness made 100 qps read 99.4 (`ActualQPS` 99) and the
//! plotter found no point there (and crashed annotating the hole). The windows here are long
//! enough for that to need a stall of tens of milliseconds, and a step that still falls short
//! fails with that reason before the plotter is run.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(120);
/// The rates and the connection count of the experiment, as the plotter is asked for them.
const RATES: [u64; 2] = [10, 20];
const CONNECTIONS: u64 = 2;
/// The CSV's modes (the end of `Labels`) for the baseline and both sidecars.
const MODES: [&str; 2] = ["no_istio", "both"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// An experiment run and exported: the CSV's path and the experiment as JSON.
struct Exported {
    dir: PathBuf,
    csv: PathBuf,
    json: serde_json::Value,
}

impl Drop for Exported {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run_and_export(name: &str) -> Exported {
    let dir =
        std::env::temp_dir().join(format!("meshbench-istioplot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ip.yaml");
    let rates: Vec<String> = RATES.iter().map(u64::to_string).collect();
    std::fs::write(
        &file,
        format!(
            "name: ip\ntopologies: [baseline, both]\nduration_secs: 1\nwarmup_secs: 0.2\n\
             cooldown_secs: 0\nsample_interval_ms: 100\nload:\n  rate_rps: [{}]\n  \
             connections: [{CONNECTIONS}]\nproxy:\n  type: nginx\n",
            rates.join(", ")
        ),
    )
    .unwrap();
    let store = dir.join("results.db").display().to_string();
    let out = meshbench(
        &[
            "experiment",
            &file.display().to_string(),
            "--store",
            &store,
            "--quiet",
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = dir.join("benchmark.csv");
    let out = meshbench(
        &[
            "results",
            "export",
            "ip",
            "--format",
            "csv",
            "--out",
            &csv.display().to_string(),
            "--store",
            &store,
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = meshbench(
        &[
            "results", "export", "ip", "--format", "json", "--store", &store,
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let json = serde_json::from_slice(&out.stdout).unwrap();
    Exported { dir, csv, json }
}

/// The CSV's rows as maps from column to cell (no cell of this experiment holds a comma).
fn rows(csv: &Path) -> (Vec<String>, Vec<BTreeMap<String, String>>) {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            assert_eq!(cells.len(), header.len(), "a cell for every column: {l}");
            header
                .iter()
                .cloned()
                .zip(cells.into_iter().map(str::to_string))
                .collect()
        })
        .collect();
    (header, rows)
}

/// Every step reached its rate as Istio's plotter keys it (`ActualQPS`, the achieved rate
/// rounded, equal to `RequestedQPS`); else the plotter has no point there, and this says why.
fn assert_every_step_reached_its_rate(rows: &[BTreeMap<String, String>]) {
    for r in rows {
        assert_eq!(
            r["ActualQPS"], r["RequestedQPS"],
            "{} achieved {} requests/s over {} s, not its rate: Istio's plotter selects rows by \
             ActualQPS == rate, so it would have no point for this step (its last responses \
             came tens of milliseconds late: the machine was too busy for this test)",
            r["Labels"], r["meshbench_actual_qps"], r["meshbench_duration_secs"]
        );
    }
}

/// The columns graph_plotter.py reads: the keys it selects by, the latency percentiles, and
/// the client's and server's sidecars under their pods' names.
const PLOTTER_COLUMNS: [&str; 11] = [
    "ActualQPS",
    "NumThreads",
    "Labels",
    "p50",
    "p90",
    "p99",
    "p999",
    "cpu_mili_avg_istio_proxy_fortioclient",
    "cpu_mili_avg_istio_proxy_fortioserver",
    "mem_Mi_avg_istio_proxy_fortioclient",
    "mem_Mi_avg_istio_proxy_fortioserver",
];

/// Regression (issue 24): Istio's plotter found no `both` point at 100 qps in a CSV from a
/// 0.6 s experiment and crashed. Checked without Python: every (mode, rate, connections) the
/// plotter asks for selects exactly one row, with integer latencies and, where there are
/// sidecars, their CPU and memory; the baseline has empty sidecar cells (no point, not zero).
#[test]
fn every_point_istios_plotter_selects_is_one_row_with_every_figure() {
    let exported = run_and_export("columns");
    let (header, rows) = rows(&exported.csv);
    for column in PLOTTER_COLUMNS {
        assert!(
            header.iter().any(|h| h == column),
            "no {column}: {header:?}"
        );
    }
    assert_eq!(rows.len(), MODES.len() * RATES.len(), "one row per step");
    assert_every_step_reached_its_rate(&rows);
    for mode in MODES {
        for rate in RATES {
            let selected: Vec<&BTreeMap<String, String>> = rows
                .iter()
                .filter(|r| {
                    r["ActualQPS"] == rate.to_string()
                        && r["NumThreads"] == CONNECTIONS.to_string()
                        && r["Labels"].ends_with(&format!("_{mode}"))
                })
                .collect();
            assert_eq!(selected.len(), 1, "{mode} at {rate} qps: {rows:?}");
            let row = selected[0];
            // Istio's label: {name}_qps_{rate}_c_{connections}_{size}_{variant}_{mode}.
            assert_eq!(
                row["Labels"],
                format!("ip_qps_{rate}_c_{CONNECTIONS}_1024_default_{mode}")
            );
            for p in ["p50", "p90", "p99", "p999"] {
                let v: u64 = row[p]
                    .parse()
                    .unwrap_or_else(|_| panic!("{p} as an integer (µs): {row:?}"));
                assert!(v > 0, "{p}: {row:?}");
            }
            for column in &PLOTTER_COLUMNS[7..] {
                let cell = &row[*column];
                if mode == "both" {
                    let v: f64 = cell
                        .parse()
                        .unwrap_or_else(|_| panic!("{column} at {rate}: {row:?}"));
                    assert!(v > 0.0, "{column} at {rate}: {row:?}");
                } else {
                    assert_eq!(cell, "", "no sidecar, no figure: {column} {row:?}");
                }
            }
        }
    }
}

/// The environment scripts/install-istio-plotter.sh makes: its Python (pandas and matplotlib
/// at the pinned versions) and Istio's graph_plotter.py from istio.io/tools at the pinned
/// version.
fn plotter() -> (PathBuf, PathBuf) {
    let venv = std::env::var_os("MESHBENCH_PLOTTER_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/meshbench/istio-plotter"))
        })
        .expect("HOME or MESHBENCH_PLOTTER_VENV is set");
    let python = venv.join("bin/python");
    let script = venv.join("istio-tools/perf/benchmark/graph_plotter/graph_plotter.py");
    let ready = script.is_file()
        && Command::new(&python)
            .args(["-c", "import pandas, matplotlib"])
            .output()
            .is_ok_and(|o| o.status.success());
    assert!(
        ready,
        "no Istio plotter at {}: run scripts/install-istio-plotter.sh (pandas, matplotlib and \
         istio.io/tools at pinned versions; scripts/install-deps.sh runs it)",
        venv.display()
    );
    (python, script)
}

#[test]
fn istios_own_graph_plotter_draws_every_point_from_the_exported_csv() {
    let (python, script) = plotter();
    let exported = run_and_export("plotter");
    let (_, rows) = rows(&exported.csv);
    assert_every_step_reached_its_rate(&rows);
    let doc = &exported.json;
    // meshbench's own figure for a role at a rate, as the CSV writes it (3 decimals).
    let figure = |role: &str, qps: u64, key: &str| -> f64 {
        let step = doc["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["topology"] == "both" && s["params"]["rate_rps"].as_f64() == Some(qps as f64)
            })
            .unwrap();
        let u = step["usage"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["role"] == role)
            .unwrap();
        let v = if key == "mem" {
            u["working_set_mib_avg"]
                .as_f64()
                .unwrap_or_else(|| u["rss_mib_avg"].as_f64().unwrap())
        } else {
            u["cpu_millicores_avg"].as_f64().unwrap()
        };
        // Formatted as the CSV formats it: `{:.3}` rounds an exact tie (a working set of
        // 15.5625 MiB is one) to even, where `round()` would round it up.
        format!("{v:.3}").parse::<f64>().unwrap()
    };

    let pngs = exported.dir.join("plots");
    let rates: Vec<String> = RATES.iter().map(u64::to_string).collect();
    let out = Command::new(&python)
        .arg(repo().join("scripts/istio-plotter-points.py"))
        .arg(&script)
        .arg(&exported.csv)
        .arg(&pngs)
        .args(["--modes", &MODES.join(",")])
        .args(["--qps", &rates.join(",")])
        .args(["--conns", &CONNECTIONS.to_string()])
        .env("MPLBACKEND", "Agg")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let series: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // 8 graph types against QPS, 2 against connections at each rate; 2 modes each.
    assert_eq!(
        series.len(),
        (8 + 2 * RATES.len()) * MODES.len(),
        "{}",
        stdout(&out)
    );
    for s in &series {
        let (graph, mode) = (s["graph"].as_str().unwrap(), s["mode"].as_str().unwrap());
        let y: Vec<Option<f64>> = s["y"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64())
            .collect();
        let what = format!(
            "{graph} against {} ({}), {mode}: {s}",
            s["x_axis"], s["query_str"]
        );
        if graph.starts_with("latency") || mode == "both" {
            assert!(
                y.iter().all(|v| v.is_some_and(|v| v > 0.0)),
                "a point at every x: {what}"
            );
        } else {
            assert!(
                y.iter().all(Option::is_none),
                "no sidecar, no point: {what}"
            );
        }
        if mode == "both" && s["x_axis"] == "qps" && !graph.starts_with("latency") {
            let (kind, side) = graph.split_once('-').unwrap();
            let role = if side == "client" {
                "client_proxy"
            } else {
                "server_proxy"
            };
            let x: Vec<u64> = s["x"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            assert_eq!(x, RATES, "{what}");
            for (qps, got) in x.iter().zip(&y) {
                assert_eq!(
                    *got,
                    Some(figure(role, *qps, kind)),
                    "{role} at {qps}: {what}"
                );
            }
        }
    }
    let drawn = std::fs::read_dir(&pngs).unwrap().count();
    assert_eq!(drawn, 8 + 2 * RATES.len(), "one PNG per graph");
}
