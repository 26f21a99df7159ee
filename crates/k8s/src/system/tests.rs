//! The rendered system against its golden files, its types and what each step changes.

use super::*;

fn system() -> System {
    System {
        namespace: "bench".into(),
        image: "meshbench:1".into(),
        pull_policy: "IfNotPresent".into(),
        backend_args: vec!["--size".into(), "64".into()],
        server_sidecar: true,
        client_sidecar: true,
        gateway: true,
        waypoint: false,
        revision: None,
        node_selector: BTreeMap::from([("role".into(), "sut".into())]),
        tolerations: vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("sut".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }],
        coordinator_port: 7700,
        gateway_objects: Vec::new(),
        proxy_logging: None,
        contour: None,
    }
}

fn shape(cpu: f64) -> Shape {
    Shape {
        proxy: Resources {
            cpu_cores: Some(cpu),
            memory_mib: Some(256),
        },
        client_proxy: Resources {
            cpu_cores: Some(1.0),
            memory_mib: None,
        },
        control_plane: Resources::default(),
        backend: Resources::default(),
        ambient: false,
        use_waypoint: false,
        peer_authentication: Some("STRICT".into()),
    }
}

/// With the cluster's Contour as the gateway: its Secrets and HTTPProxies are rendered in the
/// run's namespace, no Istio gateway and no injection label; the step's limits go to Contour's
/// Envoy and Contour as whole `resources`, only those the file gives.
#[test]
fn contours_gateway_renders_its_objects_and_borrows_its_deployments_limits() {
    let contour = ContourInstall {
        namespace: "projectcontour".into(),
        deployment: "contour".into(),
        envoy: "envoy".into(),
        envoy_kind: crate::borrowed::WorkloadKind::Deployment,
        service: "envoy".into(),
    };
    let proxy = serde_json::json!({"apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
        "metadata": {"name": "d1", "namespace": "bench"}});
    let system = System {
        server_sidecar: false,
        client_sidecar: false,
        gateway: false,
        gateway_objects: vec![proxy.clone()],
        contour: Some(contour),
        ..system()
    };
    let objects = system.render(&shape(0.5));
    assert!(objects.contains(&proxy));
    assert!(!objects
        .iter()
        .any(|o| o["metadata"]["name"] == GATEWAY || o["kind"] == "PeerAuthentication"));
    assert!(!system
        .namespace_labels(&shape(0.5))
        .contains_key("istio-injection"));
    let limits = system.borrowed_limits(&shape(0.5));
    assert_eq!(limits.len(), 1, "no control-plane limit given: {limits:?}");
    assert_eq!(
        limits[0].container.to_string(),
        "Deployment projectcontour/envoy (container envoy)"
    );
    assert_eq!(
        limits[0].resources,
        serde_json::json!({"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "500m", "memory": "256Mi"}})
    );
    let mut both = shape(2.0);
    both.control_plane = Resources {
        cpu_cores: Some(1.0),
        memory_mib: None,
    };
    let limits = system.borrowed_limits(&both);
    assert_eq!(limits[1].container.container, CONTOUR);
    assert_eq!(
        limits[1].resources,
        serde_json::json!({"limits": {"cpu": "1000m"}, "requests": {"cpu": "1000m"}})
    );
    // Envoy as a DaemonSet: its template takes the proxy's limits; Contour stays a Deployment.
    let mut daemon_set = system.clone();
    if let Some(c) = daemon_set.contour.as_mut() {
        c.envoy_kind = crate::borrowed::WorkloadKind::DaemonSet;
    }
    let limits = daemon_set.borrowed_limits(&both);
    assert_eq!(
        limits
            .iter()
            .map(|l| l.container.to_string())
            .collect::<Vec<_>>(),
        [
            "DaemonSet projectcontour/envoy (container envoy)",
            "Deployment projectcontour/contour (container contour)"
        ]
    );
}

/// Three systems' objects as YAML, against the files under `testdata/` (written by the
/// json! renderer before the objects were typed: the typed ones must print the same).
/// `MESHBENCH_UPDATE_GOLDEN=1` writes them anew.
#[test]
fn the_rendered_yaml_is_the_golden_files() {
    let full = system();
    let mut ambient = system();
    ambient.waypoint = true;
    ambient.gateway = false;
    let mut ambient_shape = shape(1.0);
    ambient_shape.ambient = true;
    ambient_shape.use_waypoint = true;
    let plain = System {
        server_sidecar: false,
        client_sidecar: false,
        gateway: false,
        revision: Some("canary".into()),
        node_selector: BTreeMap::new(),
        tolerations: Vec::new(),
        ..system()
    };
    let plain_shape = Shape {
        backend: Resources {
            cpu_cores: Some(0.5),
            memory_mib: Some(128),
        },
        ..Shape::default()
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata");
    for (name, yaml) in [
        ("system-full.yaml", to_yaml(&full.render(&shape(1.5)))),
        (
            "system-ambient.yaml",
            to_yaml(&ambient.render(&ambient_shape)),
        ),
        ("system-plain.yaml", to_yaml(&plain.render(&plain_shape))),
    ] {
        let path = dir.join(name);
        if std::env::var_os("MESHBENCH_UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &yaml).unwrap();
        }
        let golden = std::fs::read_to_string(&path).unwrap();
        assert_eq!(yaml, golden, "{name}");
    }
}

/// Attribution adds its Telemetry to the namespace before any pod, and the flush to every
/// proxy's ProxyConfig (the agents keep being held until theirs is up); nothing else.
#[test]
fn attribution_adds_a_telemetry_before_the_pods_and_a_flush_to_each_proxy() {
    let mut plain = system();
    plain.waypoint = true;
    let logging = System {
        proxy_logging: Some(ProxyLogging {
            telemetry: Telemetry::access_log(
                ObjectMeta {
                    name: Some("meshbench-attribution".into()),
                    ..ObjectMeta::default()
                },
                "meshbench-attribution",
                "'x' in request.headers",
            ),
            flush_interval: "0.2s".into(),
        }),
        ..plain.clone()
    };
    let (before, after) = (plain.render(&shape(1.0)), logging.render(&shape(1.0)));
    let at = |objects: &[Value], kind: &str| objects.iter().position(|o| o["kind"] == kind);
    assert_eq!(at(&before, "Telemetry"), None);
    let telemetry = at(&after, "Telemetry").expect("a Telemetry");
    assert!(telemetry < at(&after, "Deployment").unwrap());
    let t = &after[telemetry];
    assert_eq!(t["apiVersion"], "telemetry.istio.io/v1");
    assert_eq!(t["metadata"]["namespace"], "bench");
    assert_eq!(
        t["spec"]["accessLogging"][0]["providers"][0]["name"],
        "meshbench-attribution"
    );
    assert_eq!(
        t["spec"]["accessLogging"][0]["filter"]["expression"],
        "'x' in request.headers"
    );
    let config = |o: &Value| -> Option<Value> {
        let a = o
            .pointer("/spec/template/metadata/annotations/proxy.istio.io~1config")
            .or_else(|| o.pointer("/spec/infrastructure/annotations/proxy.istio.io~1config"))?;
        serde_json::from_str(a.as_str()?).ok()
    };
    let flushed = |objects: &[Value]| -> Vec<String> {
        objects
            .iter()
            .filter(|o| config(o).is_some_and(|c| c["fileFlushInterval"] == "0.2s"))
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(flushed(&after), ["backend", "gateway", "waypoint"]);
    assert!(flushed(&before).is_empty());
    let (_, agents) = logging.agent_pod(&shape(1.0));
    let agents: Value = serde_json::from_str(&agents["proxy.istio.io/config"]).unwrap();
    assert_eq!(
        agents,
        serde_json::json!({"holdApplicationUntilProxyStarts": true, "fileFlushInterval": "0.2s"})
    );
    let (_, agents) = plain.agent_pod(&shape(1.0));
    assert_eq!(
        agents["proxy.istio.io/config"],
        r#"{"holdApplicationUntilProxyStarts":true}"#
    );
    // Everything else is as it was.
    let others = |objects: &[Value]| -> Vec<Value> {
        objects
            .iter()
            .filter(|o| o["kind"] != "Telemetry")
            .map(|o| {
                let mut o = o.clone();
                for (parent, key) in [
                    ("/spec/template/metadata", "annotations"),
                    ("/spec/infrastructure", "annotations"),
                ] {
                    if let Some(Value::Object(m)) = o.pointer_mut(parent) {
                        if let Some(Value::Object(a)) = m.get_mut(key) {
                            a.remove("proxy.istio.io/config");
                            // The waypoint's annotations were only the flush.
                            if a.is_empty() && parent == "/spec/infrastructure" {
                                m.remove(key);
                            }
                        }
                    }
                }
                o
            })
            .collect()
    };
    assert_eq!(others(&before), others(&after));
}

#[test]
fn every_object_is_its_kubernetes_type() {
    for o in system().render(&shape(1.5)) {
        let kind = o["kind"].as_str().unwrap();
        let ok = match kind {
            "Namespace" => serde_json::from_value::<Namespace>(o.clone()).is_ok(),
            "ServiceAccount" => serde_json::from_value::<ServiceAccount>(o.clone()).is_ok(),
            "Deployment" => serde_json::from_value::<Deployment>(o.clone()).is_ok(),
            "Service" => serde_json::from_value::<Service>(o.clone()).is_ok(),
            "Role" => serde_json::from_value::<k8s_openapi::api::rbac::v1::Role>(o.clone())
                .is_ok_and(|r| r.rules.unwrap()[0].resources == Some(vec!["secrets".into()])),
            "RoleBinding" => {
                serde_json::from_value::<k8s_openapi::api::rbac::v1::RoleBinding>(o.clone())
                    .is_ok_and(|b| b.subjects.unwrap()[0].name == "gateway")
            }
            "PeerAuthentication" => o["spec"]["mtls"]["mode"] == "STRICT",
            other => panic!("unexpected {other}"),
        };
        assert!(ok, "{o}");
    }
}

#[test]
fn the_service_maps_each_path_onto_the_captured_or_the_uncaptured_port() {
    let s = system();
    let svc: Service = s.backend_service();
    let ports = svc.spec.unwrap().ports.unwrap();
    let pairs: Vec<(i32, String)> = ports
        .iter()
        .map(|p| {
            (
                p.port,
                match p.target_port.clone().unwrap() {
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => {
                        i.to_string()
                    }
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
                },
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            (8077, "8077".to_string()),
            (8078, "8080".to_string()),
            (8079, "8077".to_string()),
            (8080, "8080".to_string())
        ]
    );
    // The client's capture skips the ports whose path has no client sidecar, and the
    // coordinator's; the server's skips its uncaptured port.
    let (labels, annotations) = s.agent_pod(&shape(1.0));
    assert_eq!(labels["sidecar.istio.io/inject"], "true");
    assert_eq!(
        annotations["traffic.sidecar.istio.io/excludeOutboundPorts"],
        "8077,8078,7700"
    );
    assert_eq!(annotations["sidecar.istio.io/proxyCPULimit"], "1000m");
    let backend: Deployment = s.backend(&shape(1.0));
    let meta = backend.spec.unwrap().template.metadata.unwrap();
    assert_eq!(
        meta.annotations.unwrap()["traffic.sidecar.istio.io/excludeInboundPorts"],
        "8077"
    );
}

#[test]
fn a_new_cpu_limit_changes_the_gateway_and_the_server_sidecar_and_nothing_else() {
    let s = system();
    let c = changes(&s.render(&shape(1.0)), &s.render(&shape(2.0)));
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(
        c[0].starts_with("Deployment bench/backend: annotations"),
        "{c:?}"
    );
    assert!(
        c[0].contains("\"sidecar.istio.io/proxyCPULimit\":\"2000m\""),
        "{c:?}"
    );
    assert!(c[0].ends_with(", then its rollout"), "{c:?}");
    assert!(
        c[1].starts_with(
            "Deployment bench/gateway: istio-proxy resources {\"limits\":{\"cpu\":\"2000m\""
        ),
        "{c:?}"
    );
    assert!(changes(&s.render(&shape(1.0)), &s.render(&shape(1.0))).is_empty());
}

#[test]
fn ambient_steps_label_the_namespace_and_the_waypoint_is_a_gateway_api_gateway() {
    let mut s = system();
    s.waypoint = true;
    let mut sh = shape(1.0);
    sh.ambient = true;
    sh.use_waypoint = true;
    let objects = s.render(&sh);
    let labels = &objects[0]["metadata"]["labels"];
    assert_eq!(labels["istio.io/dataplane-mode"], "ambient");
    assert_eq!(labels["istio.io/use-waypoint"], "waypoint");
    let w = objects.iter().find(|o| o["kind"] == "Gateway").unwrap();
    assert_eq!(w["spec"]["gatewayClassName"], "istio-waypoint");
    let plain = s.render(&shape(1.0));
    assert!(changes(&objects, &plain)[0].starts_with("Namespace bench: labels"));
}
