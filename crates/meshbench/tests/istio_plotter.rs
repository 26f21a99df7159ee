//! The Istio CSV taken by Istio's own tool: a short experiment (baseline and both sidecars,
//! real nginx, two rates), exported with `results export --format csv`, then drawn by istio/tools'
//! graph_plotter (vendored unchanged in third_party/istio-graph-plotter, run through
//! scripts/istio-plotter-points.py, which records the series it plots). Every latency graph
//! has a point at every rate for both modes, and the sidecars' CPU and memory graphs have
//! meshbench's figures for the client and server proxies at every rate. Needs Python 3.10+ with
//! pandas and matplotlib (scripts/install-istio-plotter.sh); skipped with a printed reason
//! without them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A Python that has pandas and matplotlib: `$MESHBENCH_PLOTTER_PYTHON`, else the environment
/// scripts/install-istio-plotter.sh makes.
fn plotter_python() -> Result<PathBuf, String> {
    let python = match std::env::var_os("MESHBENCH_PLOTTER_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = std::env::var_os("MESHBENCH_PLOTTER_VENV")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .map(|h| PathBuf::from(h).join(".cache/meshbench/istio-plotter"))
                })
                .ok_or("no HOME")?;
            venv.join("bin/python")
        }
    };
    let ok = Command::new(&python)
        .args(["-c", "import pandas, matplotlib"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(python)
    } else {
        Err(format!("{} has no pandas and matplotlib", python.display()))
    }
}

#[test]
fn istios_graph_plotter_draws_every_point_from_the_exported_csv() {
    let python = match plotter_python() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}; scripts/install-istio-plotter.sh installs them");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("meshbench-istioplot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ip.yaml");
    std::fs::write(
        &file,
        "name: ip\ntopologies: [baseline, both]\nduration_secs: 0.6\nwarmup_secs: 0.2\n\
         cooldown_secs: 0\nsample_interval_ms: 100\nload:\n  qps: [100, 200]\n  \
         connections: [2]\nproxy:\n  type: nginx\n",
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
    let csv = dir.join("benchmark.csv").display().to_string();
    let out = meshbench(
        &[
            "results", "export", "ip", "--format", "csv", "--out", &csv, "--store", &store,
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
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // meshbench's own figure for a role at a rate, as the CSV writes it (3 decimals).
    let figure = |role: &str, qps: u64, key: &str| -> f64 {
        let step = doc["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["topology"] == "both" && s["params"]["qps"].as_f64() == Some(qps as f64))
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

    let pngs = dir.join("plots");
    let out = Command::new(&python)
        .arg(repo().join("scripts/istio-plotter-points.py"))
        .arg(repo().join("crates/meshbench/tests/third_party/istio-graph-plotter/graph_plotter.py"))
        .arg(&csv)
        .arg(&pngs)
        .args([
            "--modes",
            "no_istio,both",
            "--qps",
            "100,200",
            "--conns",
            "2",
        ])
        .env("MPLBACKEND", "Agg")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let series: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // 8 graph types against QPS, 2 against connections at each of 2 rates; 2 modes each.
    assert_eq!(series.len(), (8 + 2 * 2) * 2, "{}", stdout(&out));
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
            assert_eq!(x, [100, 200], "{what}");
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
    assert_eq!(drawn, 8 + 2 * 2, "one PNG per graph");
    let _ = std::fs::remove_dir_all(&dir);
}
