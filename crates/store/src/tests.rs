//! The store's contract, read back whole: typed steps in and out (a control-plane step with
//! its figures and no load result among them), v1 files migrated, files that are not stores,
//! are cut short, damaged or newer refused in one line naming them; writers in parallel; a
//! full database keeps every step written before it filled.

use std::collections::BTreeMap;

use meshbench_results::control_plane::{Agreement, Propagation};
use meshbench_results::{
    ChainRole, Class, ControlPlaneFigures, CpuAllotment, Figure, MeshScale, Offer, PlayedBy,
    Program, Protocol, ProxyCounters, ProxyKind, ProxyRequests, Role, RoleUsage, RunResult, Sample,
    StepFailure, StepKind, StepParams, Topology, UpstreamFailures, Usage, XdsType,
};

use super::*;

fn result() -> RunResult {
    meshbench_results::fixtures::run_result()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mb-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn step(seq: u32) -> StepRecord {
    let params = StepParams {
        offer: Offer::open(100.0),
        in_flight: None,
        connections: 4,
        response_bytes: 1024,
        request_bytes: 0,
        protocol: Protocol::Http1,
        cpu: Some(CpuAllotment {
            role: Class::Proxy,
            cores: 0.5,
        }),
        mesh: None,
    };
    let mut s = StepRecord::new(seq, params);
    s.kind = Some(StepKind::Chain(Topology::Both));
    s.variant = "both proxy=0.5cpu".into();
    s.label = format!("t_qps_100_c_4_1024_default_both_{seq}");
    s.started_at = "2026-11-22T00:00:00Z".into();
    s.versions = BTreeMap::from([("nginx".to_string(), "nginx/1.22.1".to_string())]);
    s.set_result(result());
    s.usage = vec![
        RoleUsage {
            role: Role::Chain(ChainRole::ServerProxy),
            program: PlayedBy::Proxy(Program::Nginx),
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
            missing: BTreeMap::new(),
            proxy: None,
        },
        RoleUsage {
            role: Role::External("edge".into()),
            program: PlayedBy::External("process".into()),
            workers: 0,
            cpu_limit: None,
            usage: Usage {
                samples: 5,
                cpu_millicores_avg: 250.0,
                cpu_millicores_max: 260.0,
                rss_mib_avg: 8.0,
                rss_mib_max: 8.5,
                ..Usage::default()
            },
            missing: BTreeMap::from([
                (
                    Figure::Rx,
                    "process-exporter has no network series".to_string(),
                ),
                (
                    Figure::Tx,
                    "process-exporter has no network series".to_string(),
                ),
            ]),
            proxy: None,
        },
        RoleUsage {
            role: Role::Chain(ChainRole::Gateway),
            program: PlayedBy::Proxy(Program::Envoy),
            workers: 2,
            cpu_limit: None,
            usage: Usage {
                samples: 3,
                ..Usage::default()
            },
            missing: BTreeMap::new(),
            proxy: Some(ProxyCounters {
                requests: Some(ProxyRequests {
                    total: 1200,
                    status_2xx: 1199,
                    status_5xx: 1,
                    ..ProxyRequests::default()
                }),
                upstream_failures: UpstreamFailures {
                    connect_fail: 1,
                    ..UpstreamFailures::default()
                },
                connections_active: 4,
                tunnel_connections: None,
                memory_allocated_bytes: 6 << 20,
                memory_heap_size_bytes: 10 << 20,
                pods: None,
            }),
        },
    ];
    s.samples = BTreeMap::from([(
        Role::Chain(ChainRole::ServerProxy),
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

/// A `control_plane` step as the runner stores it: no load result, status ok, istiod's usage
/// as a role and the figures beside it.
fn control_plane_step(seq: u32) -> StepRecord {
    let scale = MeshScale {
        kind: ProxyKind::Sidecar,
        proxies: 200,
        services: 100,
        istio_objects: 20,
        endpoint_churn_per_s: 1.0,
        config_churn_per_s: 0.2,
    };
    let mut s = StepRecord::new(seq, StepParams::control_plane(scale));
    s.kind = Some(StepKind::ControlPlane);
    s.variant = "control_plane".into();
    s.label = format!("control_plane_200_sidecars_{seq}");
    s.started_at = "2026-11-28T00:00:00Z".into();
    s.status = StepStatus::Ok;
    s.usage = vec![RoleUsage {
        role: Role::Istiod,
        program: PlayedBy::Proxy(Program::Istio),
        workers: 0,
        cpu_limit: Some(2.0),
        usage: Usage {
            samples: 30,
            cpu_millicores_avg: 412.0,
            cpu_millicores_max: 900.0,
            rss_mib_avg: 170.0,
            rss_mib_max: 190.0,
            working_set_mib_avg: Some(180.25),
            working_set_mib_max: Some(200.0),
            ..Usage::default()
        },
        missing: BTreeMap::new(),
        proxy: None,
    }];
    let mut cds: Vec<f64> = (1..=200).map(f64::from).collect();
    s.control_plane = Some(ControlPlaneFigures {
        connected: 200,
        real_proxies: 1,
        services: 101,
        endpoints: 300,
        virtual_services: 10,
        destination_rules: 10,
        converged_secs: 4.25,
        propagation: vec![Propagation::of(
            XdsType::Cds,
            1,
            201,
            &mut cds,
            &mut [180.0],
        )],
        pushes: BTreeMap::from([("cds".to_string(), 402), ("eds".to_string(), 6000)]),
        xds_bytes: 30_000_000,
        xds_bytes_per_sec: 1_000_000.0,
        clients_cpu_millicores: 150.0,
        agreement: Agreement {
            node: "sidecar~10.0.0.1~sim-0.default~default.svc.cluster.local".into(),
            resources: BTreeMap::from([("cds".to_string(), 104)]),
            differences: vec![],
        },
    });
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
    failed.fail(StepFailure::RigDidNotStart(
        "nginx rejected its configuration".into(),
    ));
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
    assert_eq!(a.step.kind, Some(StepKind::Chain(Topology::Both)));
    assert_eq!(a.step.status, StepStatus::Ok);
    assert_eq!(a.step.summary(), step(0).summary());
    assert_eq!(a.step.usage, step(0).usage);
    assert_eq!(a.step.versions["nginx"], "nginx/1.22.1");
    assert_eq!(
        a.step.result.as_ref().unwrap().requests.total,
        result().requests.total
    );
    assert!(b.step.failed() && b.step.summary().is_none() && b.step.result.is_none());
    // A failure is stored as its line and read back as that line.
    assert_eq!(
        b.step.error,
        Some(StepFailure::Recorded(
            "the rig did not start: nginx rejected its configuration".into()
        ))
    );
    assert_eq!(b.step.kind, None);
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
    assert_eq!(
        (&json["usage"][0]["role"], &json["usage"][0]["program"]),
        (&"server_proxy".into(), &"nginx".into())
    );
    assert_eq!(
        (&json["usage"][1]["role"], &json["usage"][1]["program"]),
        (&"edge".into(), &"process".into())
    );
    // A role whose figures were all measured says nothing of `missing`; one that lacks some
    // names them with why.
    assert!(json["usage"][0].get("missing").is_none());
    assert_eq!(
        json["usage"][1]["missing"]["rx"],
        "process-exporter has no network series"
    );
    assert_eq!(a.step.usage[1].bytes_per_sec(), None);
    assert_eq!(a.step.usage[1].memory_mib(), Some(8.0));
    assert_eq!(serde_json::to_value(b).unwrap()["topology"], "url");
    // An Envoy role's own counts ride along under its role; other roles have no `proxy`.
    assert!(json["usage"][0].get("proxy").is_none());
    assert_eq!(json["usage"][2]["proxy"]["requests"]["status_2xx"], 1199);
    assert_eq!(
        json["usage"][2]["proxy"]["memory_heap_size_bytes"],
        10 << 20
    );
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_control_plane_step_reads_back_with_its_figures_and_no_load_result() {
    let d = dir("control-plane");
    let path = d.join("results.db");
    let mut s = Store::open(&path).unwrap();
    let id = s.begin_experiment(&new_experiment()).unwrap();
    let written = control_plane_step(0);
    let step_id = s.add_step(id, &written).unwrap();
    s.add_step(id, &step(1)).unwrap();
    s.finish_experiment(id, ExperimentStatus::Done, "2026-11-28T00:01:00Z")
        .unwrap();
    drop(s);
    let s = Store::open(&path).unwrap();
    // No load result and status ok: a good step, listed as one.
    assert_eq!(s.experiment("t").unwrap().outcome(), "done");
    let steps = s.steps(id).unwrap();
    let (cp, load) = (&steps[0].step, &steps[1].step);
    assert_eq!(cp.status, StepStatus::Ok);
    assert!(cp.result.is_none() && cp.summary().is_none() && !cp.failed());
    assert_eq!(cp.kind, Some(StepKind::ControlPlane));
    assert_eq!(cp.params, written.params);
    assert_eq!(cp.control_plane, written.control_plane);
    assert_eq!(cp.usage, written.usage);
    assert_eq!(cp.usage[0].role, Role::Istiod);
    assert_eq!(cp.usage[0].memory_mib(), Some(180.25));
    assert!(load.control_plane.is_none());
    // Nothing of a load is stored for it: no histogram, no summary columns.
    assert_eq!(s.histogram(step_id, "latency_us").unwrap(), None);
    let requests: Option<i64> = s
        .conn
        .query_row("SELECT requests FROM steps WHERE id = ?1", [step_id], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(requests, None);
    // Exported with its figures, `summary` null; a load step has no `control_plane` key.
    let json = serde_json::to_value(&steps[0]).unwrap();
    assert_eq!(json["topology"], "control_plane");
    assert!(json["summary"].is_null() && json["result"].is_null());
    assert_eq!(json["params"]["mesh"]["proxies"], 200);
    assert_eq!(json["usage"][0]["role"], "istiod");
    assert_eq!(json["usage"][0]["program"], "istio");
    assert_eq!(json["control_plane"]["propagation"][0]["xds"], "cds");
    assert_eq!(
        json["control_plane"]["propagation"][0]["to_90_percent_ms"],
        180.0
    );
    assert!(serde_json::to_value(&steps[1])
        .unwrap()
        .get("control_plane")
        .is_none());
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn control_plane_figures_that_do_not_parse_are_named_with_their_step() {
    let d = dir("control-plane-corrupt");
    let path = d.join("results.db");
    let mut s = Store::open(&path).unwrap();
    let id = s.begin_experiment(&new_experiment()).unwrap();
    let step_id = s.add_step(id, &control_plane_step(0)).unwrap();
    s.conn
        .execute(
            "UPDATE steps SET control_plane = '{\"connected\": ' WHERE id = ?1",
            [step_id],
        )
        .unwrap();
    let err = s.steps(id).unwrap_err();
    let text = one_line(&err, &path);
    assert!(
        matches!(err, StoreError::Corrupt { step, .. } if step == step_id),
        "{text}"
    );
    assert!(text.contains("control_plane: "), "{text}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_v5_store_is_migrated_and_its_steps_have_no_control_plane_figures() {
    let d = dir("v5");
    let path = d.join("v5.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(schema::SCHEMA_V1).unwrap();
        for m in [
            schema::MIGRATE_V2_TO_V3,
            schema::MIGRATE_V3_TO_V4,
            schema::MIGRATE_V4_TO_V5,
        ] {
            c.execute_batch(m).unwrap();
        }
        c.execute_batch(
            "PRAGMA user_version = 5;
             INSERT INTO experiments VALUES (1, 't', '', '{}', '{}', '2026-01-01T00:00:00Z', NULL, 'done', '0.1.0');
             INSERT INTO steps (experiment_id, seq, repeat, topology, variant, label, params, started_at, status, versions)
               VALUES (1, 0, 0, 'serveronly', 'serveronly', 'x',
                 '{\"qps\":100.0,\"connections\":4,\"response_bytes\":0,\"request_bytes\":0,\"jitter\":false,\"mode\":\"open\",\"protocol\":\"http1\",\"cpu\":null}',
                 '2026-01-01T00:00:00Z', 'ok', '{}');",
        )
        .unwrap();
    }
    let s = Store::open(&path).unwrap();
    let steps = s.steps(1).unwrap();
    assert!(steps[0].step.control_plane.is_none());
    let version: i64 = s
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, VERSION);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn an_external_steps_roles_read_back_as_the_words_it_gave_them() {
    let d = dir("external-roles");
    let mut s = Store::open(&d.join("results.db")).unwrap();
    let id = s.begin_experiment(&new_experiment()).unwrap();
    let mut st = step(0);
    st.kind = Some(StepKind::External);
    st.variant = "ingress".into();
    // Named like the chain's gateway, it stands for it (Istio's CSV columns read it so); any
    // other name is the file's own.
    st.usage[0].role = Role::Chain(ChainRole::Gateway);
    st.usage[0].program = PlayedBy::External("istio-ingressgateway".into());
    st.usage[2].role = Role::External("mesh".into());
    st.usage[2].program = PlayedBy::External("promql".into());
    st.samples = BTreeMap::from([(
        Role::External("mesh".into()),
        step(0).samples.into_values().next().unwrap(),
    )]);
    let step_id = s.add_step(id, &st).unwrap();
    let back = &s.steps(id).unwrap()[0].step;
    assert_eq!(back.usage, st.usage);
    assert_eq!(s.samples(step_id).unwrap(), st.samples);
}

#[test]
fn a_v3_store_is_migrated_and_its_roles_have_no_proxy_counts() {
    let d = dir("v3");
    let path = d.join("v3.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(schema::SCHEMA_V1).unwrap();
        c.execute_batch(schema::MIGRATE_V2_TO_V3).unwrap();
        c.execute_batch(
            "PRAGMA user_version = 3;
             INSERT INTO experiments VALUES (1, 't', '', '{}', '{}', '2026-01-01T00:00:00Z', NULL, 'done', '0.1.0');
             INSERT INTO steps (experiment_id, seq, repeat, topology, variant, label, params, started_at, status, versions)
               VALUES (1, 0, 0, 'serveronly', 'serveronly', 'x',
                 '{\"qps\":100.0,\"connections\":4,\"response_bytes\":0,\"request_bytes\":0,\"jitter\":false,\"mode\":\"open\",\"protocol\":\"http1\",\"cpu\":null}',
                 '2026-01-01T00:00:00Z', 'ok', '{}');
             INSERT INTO usage VALUES (1, 'server_proxy', 'envoy', 2, NULL, 3, 1.0, 2.0, 3.0, 4.0, NULL, NULL, 5.0, 6.0, 7.0, 8, NULL);",
        )
        .unwrap();
    }
    let s = Store::open(&path).unwrap();
    let steps = s.steps(1).unwrap();
    let role = &steps[0].step.usage[0];
    assert_eq!(
        (&role.role, &role.program, role.proxy.as_ref()),
        (
            &Role::Chain(ChainRole::ServerProxy),
            &PlayedBy::Proxy(Program::Envoy),
            None
        )
    );
    assert!(serde_json::to_value(role).unwrap().get("proxy").is_none());
    let version: i64 = s
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, VERSION);
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
    // Its list line says what its steps were, from the rows it had.
    assert_eq!(
        s.experiments().unwrap()[0].outcome(),
        "partial 0/2: failed at step 2"
    );
    let capacity = &steps[0].step;
    assert_eq!(capacity.kind, None);
    assert_eq!(capacity.status, StepStatus::Partial);
    assert_eq!(
        capacity.params,
        StepParams::open(100.0, 64, Protocol::Http1)
    );
    let swept = &steps[1].step;
    assert_eq!(swept.kind, Some(StepKind::Chain(Topology::Serveronly)));
    assert_eq!(
        (swept.params.offer, swept.params.protocol),
        (Offer::Closed, Protocol::Http2)
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
fn an_experiment_with_a_failed_step_is_listed_as_partial_not_done() {
    // Issue 24: Envoy missing at step 2 of 3; the run went on and was marked done, and
    // `results list` said `done` with no sign of the failed step.
    let d = dir("outcome");
    let path = d.join("s.db");
    let mut s = Store::open(&path).unwrap();
    let listed = |s: &Store, id: i64| {
        s.experiments()
            .unwrap()
            .into_iter()
            .find(|e| e.id == id)
            .unwrap()
    };
    let good = s.begin_experiment(&new_experiment()).unwrap();
    let mixed = s.begin_experiment(&new_experiment()).unwrap();
    let broken = s.begin_experiment(&new_experiment()).unwrap();
    let stopped = s.begin_experiment(&new_experiment()).unwrap();
    for seq in 0..3 {
        s.add_step(good, &step(seq)).unwrap();
        let mut st = step(seq);
        if seq > 0 {
            st.fail(StepFailure::RigDidNotStart("envoy is not available".into()));
        }
        s.add_step(mixed, &st).unwrap();
    }
    for seq in 0..2 {
        let mut st = step(seq);
        st.fail(StepFailure::Recorded("the rig did not start".into()));
        s.add_step(broken, &st).unwrap();
    }
    let mut cut = step(1);
    cut.status = StepStatus::Partial;
    s.add_step(stopped, &step(0)).unwrap();
    s.add_step(stopped, &cut).unwrap();
    for id in [good, mixed, broken] {
        s.finish_experiment(id, ExperimentStatus::Done, "2026-11-22T00:01:00Z")
            .unwrap();
    }
    s.finish_experiment(
        stopped,
        ExperimentStatus::Interrupted,
        "2026-11-22T00:01:00Z",
    )
    .unwrap();
    let e = listed(&s, mixed);
    assert_eq!((e.steps, e.failed_steps, e.partial_steps), (3, 2, 0));
    assert_eq!(e.first_failed_step, Some(2));
    assert_eq!(e.outcome(), "partial 1/3: failed at step 2");
    assert_eq!(listed(&s, good).outcome(), "done");
    assert_eq!(listed(&s, broken).outcome(), "failed at step 1: 0/2 ok");
    assert_eq!(listed(&s, stopped).outcome(), "interrupted 1/2");
    std::fs::remove_dir_all(d).unwrap();
}

/// A store with `n` steps of one experiment, closed (its WAL folded into the file).
fn store_with_steps(path: &Path, n: u32) -> i64 {
    let mut s = Store::open(path).unwrap();
    let id = s.begin_experiment(&new_experiment()).unwrap();
    for seq in 0..n {
        s.add_step(id, &step(seq)).unwrap();
    }
    id
}

fn one_line(err: &StoreError, path: &Path) -> String {
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "names the file: {text}"
    );
    assert!(!text.contains('\n'), "{text}");
    text
}

#[test]
fn a_file_header_says_whether_it_can_be_a_store() {
    let d = dir("header");
    let path = d.join("real.db");
    store_with_steps(&path, 3);
    let real = std::fs::read(&path).unwrap();
    let len = real.len() as u64;
    let head = &real[..100];
    for (what, head, len, want) in [
        ("empty: SQLite makes a store in it", &b""[..], 0, None),
        ("a whole store", head, len, None),
        (
            "a store grown past its header (WAL)",
            head,
            len + 4096,
            None,
        ),
        (
            "a store cut in half",
            head,
            len / 2,
            Some(FileProblem::CutShort {
                len: len / 2,
                expected: len,
            }),
        ),
        (
            "only the start of the magic",
            &real[..10],
            10,
            Some(FileProblem::CutShort {
                len: 10,
                expected: 100,
            }),
        ),
        (
            "text",
            &b"name,qps\n1,2\n"[..],
            12,
            Some(FileProblem::NotSqlite),
        ),
        (
            "random bytes",
            &[0x9d, 0x17, 0xee, 0x02, 0x55, 0x00, 0xff, 0x31][..],
            8192,
            Some(FileProblem::NotSqlite),
        ),
    ] {
        assert_eq!(file_problem(head, len), want, "{what}");
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn files_that_cannot_be_used_are_refused_in_one_line() {
    let d = dir("bad");
    let real = d.join("real.db");
    store_with_steps(&real, 6);
    let bytes = std::fs::read(&real).unwrap();
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "text.db",
            b"this is not sqlite, just text that is long enough to matter".to_vec(),
            "is not a results store (not an SQLite file)".into(),
        ),
        (
            "random.db",
            (0..8192u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
            "is not a results store (not an SQLite file)".into(),
        ),
        (
            "half.db",
            bytes[..bytes.len() / 2].to_vec(),
            format!(
                "is damaged (cut short: {} bytes where its header says {})",
                bytes.len() / 2,
                bytes.len()
            ),
        ),
        (
            "head.db",
            bytes[..60].to_vec(),
            "is damaged (cut short: 60 bytes where its header says 100)".into(),
        ),
    ];
    for (name, content, needle) in &cases {
        let path = d.join(name);
        std::fs::write(&path, content).unwrap();
        let err = Store::open(&path).err().unwrap();
        let text = one_line(&err, &path);
        assert!(text.contains(needle.as_str()), "{name}: {text}");
        assert!(text.contains("give another --store"), "{name}: {text}");
        assert_eq!(
            &std::fs::read(&path).unwrap(),
            content,
            "{name}: left as it was"
        );
        assert!(!d.join(format!("{name}-wal")).exists(), "{name}");
    }
    let newer = d.join("newer.db");
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute_batch("PRAGMA user_version = 99;")
        .unwrap();
    let err = Store::open(&newer).err().unwrap();
    let text = one_line(&err, &newer);
    assert!(
        text.contains(&format!(
            "schema version 99 is newer than this meshbench understands ({VERSION})"
        )),
        "{text}"
    );
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_store_damaged_inside_is_named_when_read() {
    let d = dir("damaged");
    let path = d.join("results.db");
    let id = store_with_steps(&path, 8);
    // The header and the schema page intact, every page after them overwritten.
    let mut bytes = std::fs::read(&path).unwrap();
    let page = u16::from_be_bytes([bytes[16], bytes[17]]) as usize;
    for (i, b) in bytes.iter_mut().enumerate().skip(page) {
        *b = (i % 251) as u8;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = Store::open(&path)
        .and_then(|s| s.experiment("latest").map(|_| s))
        .and_then(|s| s.steps(id))
        .expect_err("a damaged store is not read as if whole");
    let text = one_line(&err, &path);
    assert!(matches!(err, StoreError::Damaged { .. }), "{text}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn writers_in_parallel_lose_no_step() {
    // Four connections (SQLite locks the same way across processes), one new file, opened
    // at the same moment: the schema is made once and every step of every writer is kept.
    let d = dir("parallel");
    let path = d.join("results.db");
    let (writers, steps) = (4, 25);
    let start = std::sync::Arc::new(std::sync::Barrier::new(writers));
    let handles: Vec<_> = (0..writers)
        .map(|_| {
            let (path, start) = (path.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut s = Store::open(&path).unwrap();
                let id = s.begin_experiment(&new_experiment()).unwrap();
                for seq in 0..steps {
                    s.add_step(id, &step(seq)).unwrap();
                }
                s.finish_experiment(id, ExperimentStatus::Done, "2026-11-22T00:01:00Z")
                    .unwrap();
                id
            })
        })
        .collect();
    let mut ids: Vec<i64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3, 4]);
    let s = Store::open(&path).unwrap();
    for id in ids {
        let stored = s.steps(id).unwrap();
        let seqs: Vec<u32> = stored.iter().map(|x| x.step.seq).collect();
        assert_eq!(seqs, (0..steps).collect::<Vec<_>>(), "experiment {id}");
        assert_eq!(
            s.experiment(&id.to_string()).unwrap().status,
            ExperimentStatus::Done
        );
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_full_store_keeps_every_step_written_before_it_filled() {
    // SQLite's own page limit fills the database the way a full disk does (SQLITE_FULL); the
    // black-box test does it with a small tmpfs.
    let d = dir("full");
    let path = d.join("results.db");
    let mut s = Store::open(&path).unwrap();
    let id = s.begin_experiment(&new_experiment()).unwrap();
    let pages: i64 = s
        .conn
        .pragma_query_value(None, "page_count", |r| r.get(0))
        .unwrap();
    s.conn
        .pragma_update(None, "max_page_count", pages + 12)
        .unwrap();
    let mut stored = 0;
    let err = loop {
        match s.add_step(id, &step(stored)) {
            Ok(_) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 1000, "never filled");
    };
    assert!(stored >= 1, "some steps fit before it filled");
    assert!(err.disk_full(), "{err}");
    let text = one_line(&err, &path);
    assert!(text.contains("its disk is full"), "{text}");
    drop(s);
    let s = Store::open(&path).unwrap();
    let steps = s.steps(id).unwrap();
    assert_eq!(steps.len() as u32, stored);
    for (seq, st) in steps.iter().enumerate() {
        assert_eq!(st.step.seq, seq as u32);
        assert_eq!(st.step.summary(), step(0).summary(), "read back whole");
        assert_eq!(s.samples(st.id).unwrap(), step(0).samples);
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn an_imported_store_reads_back_as_its_own_steps_under_new_ids() {
    let d = dir("import");
    // Theirs: one experiment of two steps (one failed), with samples and histograms.
    let theirs_path = d.join("theirs.db");
    let mut theirs = Store::open(&theirs_path).unwrap();
    let id = theirs.begin_experiment(&new_experiment()).unwrap();
    let first = theirs.add_step(id, &step(0)).unwrap();
    let mut failed = StepRecord::new(1, step(1).params);
    failed.fail(StepFailure::RigDidNotStart("no".into()));
    theirs.add_step(id, &failed).unwrap();
    theirs
        .finish_experiment(id, ExperimentStatus::Done, "2026-12-02T00:01:00Z")
        .unwrap();
    drop(theirs);
    // Ours already has a run, so every id moves.
    let ours_path = d.join("ours.db");
    let mut ours = Store::open(&ours_path).unwrap();
    let before = ours.begin_experiment(&new_experiment()).unwrap();
    ours.add_step(before, &step(0)).unwrap();
    let imported = ours.import(&theirs_path).unwrap();
    assert_eq!(imported.len(), 1);
    assert_ne!(imported[0], id);
    let theirs = Store::open(&theirs_path).unwrap();
    let (want, got) = (theirs.steps(id).unwrap(), ours.steps(imported[0]).unwrap());
    assert_eq!(want.len(), got.len());
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(w.step.params, g.step.params);
        assert_eq!(w.step.status, g.step.status);
        assert_eq!(w.step.error, g.step.error);
        assert_eq!(
            serde_json::to_value(&w.step.result).unwrap(),
            serde_json::to_value(&g.step.result).unwrap()
        );
        assert_eq!(w.step.usage, g.step.usage);
        assert_eq!(ours.samples(g.id).unwrap(), theirs.samples(w.id).unwrap());
    }
    assert_eq!(
        ours.histogram(got[0].id, "latency_us").unwrap(),
        theirs.histogram(first, "latency_us").unwrap()
    );
    let row = ours.experiment(&imported[0].to_string()).unwrap();
    assert_eq!((row.steps, row.status), (2, ExperimentStatus::Done));
    // A file that is not a store is refused whole: nothing is added.
    std::fs::write(
        d.join("not.db"),
        b"hello, this is not sqlite at all, not one bit",
    )
    .unwrap();
    assert!(ours.import(&d.join("not.db")).is_err());
    assert_eq!(ours.experiments().unwrap().len(), 2);
}

/// A store written before the load's words were settled (schema v6, params with `qps` and
/// `jitter`, kept in tests/fixtures as it was found) opens, migrates and reads back the
/// figures it holds, its loads named in today's words.
#[test]
fn a_store_in_the_first_words_reads_back_unchanged() {
    let d = dir("first-words");
    let path = d.join("results.db");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/v6-first-words.db"
        ),
        &path,
    )
    .unwrap();
    let store = Store::open(&path).unwrap();
    let experiments = store.experiments().unwrap();
    assert_eq!(experiments.len(), 2);
    assert_eq!(experiments[0].name, "sidecar-overhead-demo");
    let steps = store.steps(experiments[0].id).unwrap();
    assert_eq!(steps.len(), 1);
    let s = &steps[0].step;
    assert_eq!(
        s.params,
        StepParams {
            offer: Offer::open(500.0),
            connections: 16,
            in_flight: None,
            response_bytes: 1024,
            request_bytes: 0,
            protocol: Protocol::Http1,
            cpu: None,
            mesh: None,
        }
    );
    assert_eq!(s.load_point().to_string(), "500 rps x 16 conns");
    assert!(s.result.as_ref().is_some_and(|r| r.requests.total > 0));
    let _ = std::fs::remove_dir_all(&d);
}
