//! The store's contract, read back whole: typed steps in and out, v1 files migrated, files
//! that are not stores or are newer refused in one line.

use std::collections::BTreeMap;

use meshbench_engine::Protocol;
use meshbench_engine::RunResult;
use meshbench_experiment::config::LoopMode;
use meshbench_experiment::{CpuAllotment, StepParams};
use meshbench_lab::sampler::{RoleUsage, Sample, Usage};
use meshbench_lab::{Class, Topology};

use super::*;

fn result() -> RunResult {
    serde_json::from_str(include_str!("../../analysis/src/fixture-run.json")).unwrap()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mb-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn step(seq: u32) -> StepRecord {
    let params = StepParams {
        qps: Some(100.0),
        connections: 4,
        response_bytes: 1024,
        request_bytes: 0,
        jitter: false,
        mode: LoopMode::Open,
        protocol: Protocol::Http1,
        cpu: Some(CpuAllotment {
            role: Class::Proxy,
            cores: 0.5,
        }),
    };
    let mut s = StepRecord::new(seq, params);
    s.topology = Some(Topology::Both);
    s.variant = "both proxy=0.5cpu".into();
    s.label = format!("t_qps_100_c_4_1024_default_both_{seq}");
    s.started_at = "2026-11-22T00:00:00Z".into();
    s.versions = BTreeMap::from([("nginx".to_string(), "nginx/1.22.1".to_string())]);
    s.set_result(result());
    s.usage = vec![RoleUsage {
        role: "server_proxy".into(),
        program: "nginx".into(),
        workers: 2,
        cpu_limit: Some(0.5),
        usage: Usage {
            samples: 3,
            cpu_millicores_avg: 120.5,
            cpu_millicores_max: 130.0,
            rss_mib_avg: 10.0,
            rss_mib_max: 11.0,
            working_set_mib_avg: None,
            working_set_mib_max: None,
            rx_bytes_per_sec: 1e5,
            tx_bytes_per_sec: 2e5,
            connections_avg: 4.0,
            connections_max: 4,
        },
    }];
    s.samples = BTreeMap::from([(
        "server_proxy".to_string(),
        vec![Sample {
            t_ms: 1,
            cpu_ns: 2,
            rss_bytes: 3,
            working_set_bytes: Some(4),
            rx_bytes: 5,
            tx_bytes: 6,
            connections: 7,
        }],
    )]);
    s
}

fn new_experiment() -> NewExperiment {
    NewExperiment {
        name: "t".into(),
        description: String::new(),
        labels: BTreeMap::from([("k".to_string(), "v".to_string())]),
        config: serde_json::json!({}),
        started_at: "2026-11-22T00:00:00Z".into(),
        meshbench_version: "0.1.0".into(),
    }
}

#[test]
fn steps_are_written_and_read_back_whole_and_typed() {
    let d = dir("roundtrip");
    let path = d.join("nested/results.db");
    let mut s = Store::open(&path).unwrap();
    let id = s.begin_experiment(&new_experiment()).unwrap();
    let step_id = s.add_step(id, &step(0)).unwrap();
    let mut failed = StepRecord::new(1, step(1).params);
    failed.fail("the rig did not start: nginx rejected its configuration");
    s.add_step(id, &failed).unwrap();
    s.finish_experiment(id, ExperimentStatus::Done, "2026-11-22T00:01:00Z")
        .unwrap();
    drop(s);
    // Reopened: the schema is not created twice and everything is there, typed.
    let s = Store::open(&path).unwrap();
    let e = s.experiment("t").unwrap();
    assert_eq!((e.id, e.steps, e.status), (id, 2, ExperimentStatus::Done));
    assert_eq!(e.labels["k"], "v");
    assert_eq!(s.experiment("latest").unwrap().id, id);
    assert!(matches!(s.experiment("nope"), Err(StoreError::NotFound(_))));
    let steps = s.steps(id).unwrap();
    assert_eq!(steps.len(), 2);
    let (a, b) = (&steps[0], &steps[1]);
    assert_eq!(a.step.params, step(0).params);
    assert_eq!(a.step.topology, Some(Topology::Both));
    assert_eq!(a.step.status, StepStatus::Ok);
    assert_eq!(a.step.summary(), step(0).summary());
    assert_eq!(a.step.usage, step(0).usage);
    assert_eq!(a.step.versions["nginx"], "nginx/1.22.1");
    assert_eq!(
        a.step.result.as_ref().unwrap().requests.total,
        result().requests.total
    );
    assert!(b.step.failed() && b.step.summary().is_none() && b.step.result.is_none());
    assert_eq!(b.step.topology, None);
    assert_eq!(s.samples(step_id).unwrap(), step(0).samples);
    assert_eq!(
        s.histogram(step_id, "latency_us").unwrap(),
        Some(result().histogram.latency_us)
    );
    // The exported JSON keeps the v1 shape: status and topology as words, params an object.
    let json = serde_json::to_value(a).unwrap();
    assert_eq!(json["status"], "ok");
    assert_eq!(json["summary"]["requests"], result().requests.total);
    assert_eq!(json["topology"], "both");
    assert_eq!(json["params"]["cpu"]["role"], "proxy");
    assert_eq!(json["usage"][0]["cpu_millicores_avg"], 120.5);
    assert_eq!(serde_json::to_value(b).unwrap()["topology"], "url");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_v1_store_is_migrated_with_every_step_it_had() {
    let d = dir("v1");
    let path = d.join("old.db");
    {
        // A store as v1 wrote it: loose params (a capacity step had no protocol or cpu).
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(schema::SCHEMA_V1).unwrap();
        c.execute_batch(
            "PRAGMA user_version = 1;
             INSERT INTO experiments VALUES (1, 'capacity', '', '{}', '{}', '2026-01-01T00:00:00Z', NULL, 'done', '0.1.0');
             INSERT INTO steps (experiment_id, seq, repeat, topology, variant, label, params, started_at, status, versions)
               VALUES (1, 0, 0, 'capacity', 'capacity', 'capacity_qps_100_c_64',
                 '{\"qps\":100.0,\"connections\":64,\"response_bytes\":0,\"jitter\":false,\"mode\":\"open\"}',
                 '2026-01-01T00:00:00Z', 'partial', '{}');
             INSERT INTO steps (experiment_id, seq, repeat, topology, variant, label, params, started_at, status, versions)
               VALUES (1, 1, 0, 'serveronly', 'serveronly proxy=0.5cpu', 'x',
                 '{\"qps\":null,\"connections\":8,\"response_bytes\":1024,\"request_bytes\":0,\"jitter\":false,\"mode\":\"closed\",\"protocol\":\"http2\",\"cpu\":{\"role\":\"proxy\",\"cores\":0.5}}',
                 '2026-01-01T00:00:00Z', 'failed', '{}');",
        )
        .unwrap();
    }
    let s = Store::open(&path).unwrap();
    let steps = s.steps(1).unwrap();
    assert_eq!(steps.len(), 2);
    let capacity = &steps[0].step;
    assert_eq!(capacity.topology, None);
    assert_eq!(capacity.status, StepStatus::Partial);
    assert_eq!(
        capacity.params,
        StepParams::open(100.0, 64, Protocol::Http1)
    );
    let swept = &steps[1].step;
    assert_eq!(swept.topology, Some(Topology::Serveronly));
    assert_eq!(
        (swept.params.mode, swept.params.protocol),
        (LoopMode::Closed, Protocol::Http2)
    );
    assert_eq!(swept.params.cpu.map(|c| c.cores), Some(0.5));
    let version: i64 = s
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, VERSION);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn files_that_cannot_be_used_are_refused_in_one_line() {
    let d = dir("bad");
    let text = d.join("x.db");
    std::fs::write(
        &text,
        "this is not sqlite, just text that is long enough to matter",
    )
    .unwrap();
    let newer = d.join("newer.db");
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute_batch("PRAGMA user_version = 99;")
        .unwrap();
    for (path, needle) in [
        (&text, "cannot open the results store"),
        (
            &newer,
            "schema version 99 is newer than this meshbench understands (2)",
        ),
    ] {
        let err = Store::open(path).err().unwrap().to_string();
        assert!(err.contains(needle), "{err}");
        assert!(
            err.contains(&path.display().to_string()),
            "names the file: {err}"
        );
        assert!(!err.contains('\n'));
    }
    std::fs::remove_dir_all(d).unwrap();
}
