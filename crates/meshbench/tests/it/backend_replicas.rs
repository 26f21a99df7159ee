//! Issue 49, item 2: `backend.replicas: N` puts N backend processes behind the gateway, each a
//! role of its own (`backend`, `backend_2`, ...) with its own usage, and the gateway balances
//! over them. Run as a user runs it (`meshbench experiment`) through every gateway the lab
//! renders itself, the real programs: nginx, haproxy, caddy (scripts/install-deps.sh) and
//! Envoy (scripts/install-envoy.sh). Each replica answered requests: its process used CPU
//! over the step (an idle backend uses none), and no request failed. Contour's and Istio's gateways balance over
//! the same replicas through an EndpointSlice and a ServiceEntry (tests/it/contour_gateway.rs,
//! tests/it/istio_gateway.rs).
//! Bad input: 0 replicas, and replicas for a topology with no gateway, are refused in one line.

use crate::common;

use std::time::Duration;

use common::{meshbench, stderr, u};

const LIMIT: Duration = Duration::from_secs(120);
const REPLICAS: usize = 3;

fn experiment(gateway: &str) -> String {
    // 300 req/s for 3 s over 2 domains x 2 paths: about 100 a second for each replica.
    format!(
        "name: replicas-{gateway}\ntopologies: [gateway]\nduration_secs: 3\nwarmup_secs: 0.5\n\
         cooldown_secs: 0\nsample_interval_ms: 250\nload:\n  rate_rps: [300]\n  connections: [6]\n\
         gateway:\n  type: {gateway}\n  domains: 2\n  paths: 2\nbackend:\n  replicas: {REPLICAS}\n"
    )
}

#[test]
fn every_gateway_balances_over_the_backends_replicas_each_a_role_with_its_own_usage() {
    let dir = common::scratch_dir("backend-replicas");
    for gateway in ["nginx", "haproxy", "caddy", "envoy"] {
        let file = dir.join(format!("{gateway}.yaml"));
        std::fs::write(&file, experiment(gateway)).unwrap();
        let store = dir.join(format!("{gateway}.db"));
        let out = meshbench(
            &[
                "experiment",
                &file.display().to_string(),
                "--store",
                &store.display().to_string(),
            ],
            LIMIT,
        );
        assert!(out.status.success(), "{gateway}: {}", stderr(&out));
        let export = common::export_json(&store);
        let step = &export["steps"][0];
        assert_eq!(step["status"], "ok", "{gateway}: {step}");
        assert!(
            !stderr(&out).contains("instead"),
            "{gateway} ran as asked, with no fallback: {}",
            stderr(&out)
        );
        let names = ["backend", "backend_2", "backend_3"];
        for name in names {
            let usage = common::usage_of(step, name);
            assert!(u(usage, "/samples") >= 2, "{gateway} {name}: {usage}");
            assert!(
                usage["cpu_millicores_avg"].as_f64().unwrap_or(0.0) > 0.0,
                "{gateway}: replica {name} answered nothing: {usage}"
            );
        }
        let summary = &step["summary"];
        assert!(u(summary, "/requests") > 500, "{gateway}: {summary}");
        assert_eq!(u(summary, "/errors"), 0, "{gateway}: {summary}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn replicas_where_nothing_balances_over_them_are_refused_in_one_line() {
    let dir = common::scratch_dir("backend-replicas-refused");
    common::assert_refused_in_one_line(
        &dir,
        &[
            (
                "zero.yaml",
                "name: x\ntopologies: [gateway]\nbackend:\n  replicas: 0\n",
                "backend.replicas: expected a whole number from 1 to 8, found 0",
            ),
            (
                "sidecars.yaml",
                "name: x\ntopologies: [gateway, both]\nbackend:\n  replicas: 2\n",
                "topology both runs one backend",
            ),
            (
                "baseline-only.yaml",
                "name: x\ntopologies: [baseline]\nbackend:\n  replicas: 2\n",
                "only the gateway topology balances over replicas",
            ),
        ],
    );
    let _ = std::fs::remove_dir_all(dir);
}
