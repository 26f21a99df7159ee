//! Every panel of `meshbench gen grafana` runs against a real Prometheus and finds data: a
//! Prometheus (Debian's, started here) scrapes `/metrics` of a plain run against the backend
//! with a share of 503s (so the error panels have something) and of a lab experiment with an
//! nginx sidecar (so the role panels do), and each panel's query, its variables filled in as
//! Grafana would, returns a non-empty result for one of them.

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::prometheus::{Prometheus, PrometheusOptions};
use common::*;

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn every_panel_query_finds_data_in_a_real_prometheus() {
    let (run_addr, lab_addr) = (free_addr(), free_addr());
    let prom = Prometheus::start(&PrometheusOptions {
        scrape: vec![run_addr, lab_addr],
        ..PrometheusOptions::default()
    });
    prom.wait_first_scrape();

    let backend = BackendProc::start(&["--status", "503:5%"]);
    let run = meshbench(
        &[
            "run",
            &backend.url("/"),
            "-q",
            "--rate",
            "300",
            "-d",
            "4s",
            "--metrics-listen",
            &run_addr.to_string(),
            "--metrics-linger",
            "5s",
        ],
        Duration::from_secs(40),
    );
    assert!(run.status.success(), "{}", stderr(&run));
    let run_end = now_secs();

    let dir = std::env::temp_dir().join(format!("meshbench-grafana-panels-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("panels.yaml");
    std::fs::write(
        &file,
        "name: panels\ntopologies: [serveronly]\nduration_secs: 4\nwarmup_secs: 0.5\n\
         cooldown_secs: 0\nsample_interval_ms: 250\nload:\n  rate_rps: [300]\n  connections: [4]\n",
    )
    .unwrap();
    let store = dir.join("results.db");
    let lab = meshbench(
        &[
            "experiment",
            file.to_str().unwrap(),
            "-q",
            "--store",
            store.to_str().unwrap(),
            "--metrics-listen",
            &lab_addr.to_string(),
            "--metrics-linger",
            "5s",
        ],
        Duration::from_secs(90),
    );
    assert!(lab.status.success(), "{}", stderr(&lab));
    let lab_end = now_secs();

    let queries = meshbench_live::grafana::queries();
    assert!(queries.len() >= 7, "{queries:?}");
    let mut empty = Vec::new();
    for (panel, expr) in &queries {
        let found: Vec<&str> = [("run", run_end), ("panels", lab_end)]
            .into_iter()
            .filter(|(experiment, at)| {
                let q = meshbench_live::grafana::substitute(expr, experiment, "30s");
                !prom.query(&q, *at).is_empty()
            })
            .map(|(e, _)| e)
            .collect();
        eprintln!("{panel}: {expr}\n  data for {found:?}");
        if found.is_empty() {
            empty.push(format!("{panel}: {expr}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        empty.is_empty(),
        "queries with no data: {empty:#?}\n{}",
        prom.log()
    );
}
