//! The control plane's steps as `results show` and `meshbench experiment` print them: one row
//! per `control_plane` step, after the load table (which leaves them out: they send no load,
//! and a row of request figures would be zeros standing for nothing). A row is the step, its
//! mesh (`MeshScale`'s text) and, each labelled, istiod's CPU and memory (its usage row, role
//! `istiod`), how long the simulated proxies took to converge, per xDS type the p50/p99 of a
//! change's propagation with the (change, proxy) pairs that never arrived, istiod's pushes, the
//! xDS bytes received per second, and whether a simulated proxy was sent what the real Envoy
//! of its node ACKed. The same figure of every row starts in the same column, so that the
//! cells of a matrix read down. The same figures ([`figures`]) make the HTML report's table of
//! these steps ([`report_table`]), one column each.

use meshbench_results::{ControlPlaneFigures, Role, RoleUsage, XdsType};
use meshbench_store::{StepRecord, StepStatus};

use crate::answers::{beside, wrap, Table};
use crate::thousands;

/// The table of the `control_plane` steps among `steps` (those with a mesh), in their order;
/// empty when there is none.
pub fn table(all: &[&StepRecord]) -> String {
    let rows = steps(all.iter().copied());
    if rows.is_empty() {
        return String::new();
    }
    let meshes: Vec<String> = rows
        .iter()
        .map(|s| s.params.mesh.map(|m| m.to_string()).unwrap_or_default())
        .collect();
    let vw = width(rows.iter().map(|s| s.variant.as_str()), "variant");
    let mw = width(meshes.iter().map(String::as_str), "mesh");
    let figures: Vec<Option<Vec<String>>> = rows
        .iter()
        .map(|s| {
            s.control_plane.as_ref().map(|f| {
                figures(f, istiod(&s.usage))
                    .iter()
                    .map(Figure::cell)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    // Each figure padded to its widest over the rows, so that every row breaks at the same
    // place and a figure starts in the same column on every row.
    let mut widths: Vec<usize> = Vec::new();
    for cells in figures.iter().flatten() {
        widths.resize(widths.len().max(cells.len()), 0);
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = wrap(
        "Control plane: istiod millicores/MiB; per xDS type, p50/p99 ms from a change written \
         to the API server to each proxy's ACK, and the (change, proxy) pairs never ACKed; \
         whether a simulated proxy got what the real Envoy ACKed",
        "",
        "  ",
    );
    out.push_str(&format!("{:>4} {:<vw$} mesh\n", "step", "variant"));
    for ((s, mesh), cells) in rows.iter().zip(&meshes).zip(&figures) {
        let head = format!("{:>4} {:<vw$} {:<mw$}", s.seq + 1, s.variant, mesh);
        match cells {
            Some(cells) => {
                let items: Vec<String> = cells
                    .iter()
                    .zip(&widths)
                    // Two spaces between figures (`beside` puts one).
                    .map(|(c, w)| format!("{c:<w$} "))
                    .chain(mark(s).map(|m| format!(" {m}")))
                    .collect();
                out.push_str(&beside(&head, &items));
            }
            None => {
                // No figures: why, never a row of zeros.
                let why = match mark(s) {
                    Some(m) if s.failed() => m,
                    Some(m) => format!("{m}; {NO_FIGURES}"),
                    None => NO_FIGURES.to_string(),
                };
                out.push_str(&wrap(&why, &format!("{head} "), "       "));
            }
        }
    }
    out
}

/// The `control_plane` steps among `all` (those with a mesh), in their order.
pub fn steps<'a>(all: impl IntoIterator<Item = &'a StepRecord>) -> Vec<&'a StepRecord> {
    all.into_iter()
        .filter(|s| s.params.mesh.is_some())
        .collect()
}

/// What a row without figures says after why (if it knows why).
const NO_FIGURES: &str = "no control-plane figures stored";

/// What the load table marks a step with too: failed (with why), or interrupted.
fn mark(s: &StepRecord) -> Option<String> {
    match (&s.error, s.status) {
        (Some(e), _) => Some(format!("FAILED: {e}")),
        (None, StepStatus::Failed) => Some("FAILED".to_string()),
        (None, StepStatus::Partial) => Some("PARTIAL (interrupted)".to_string()),
        (None, StepStatus::Ok) => None,
    }
}

/// The widest of `words` and the column's `title`.
fn width<'a>(words: impl Iterator<Item = &'a str>, title: &str) -> usize {
    words
        .map(|w| w.chars().count())
        .chain([title.len()])
        .max()
        .unwrap_or(0)
}

/// istiod's usage row, if the step has one.
fn istiod(usage: &[RoleUsage]) -> Option<&RoleUsage> {
    usage.iter().find(|u| u.role == Role::Istiod)
}

/// One figure of a row: its value, the word the text row says before it, and the report
/// table's heading of its column.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// `pushes` in `pushes 6,402`; none for the agreement, which reads alone (`agrees`).
    pub name: Option<String>,
    pub value: String,
    pub heading: String,
}

impl Figure {
    fn named(name: impl Into<String>, heading: impl Into<String>, value: String) -> Figure {
        Figure {
            name: Some(name.into()),
            value,
            heading: heading.into(),
        }
    }

    /// The figure as a text row shows it.
    pub fn cell(&self) -> String {
        match &self.name {
            Some(name) => format!("{name} {}", self.value),
            None => self.value.clone(),
        }
    }
}

/// A row's figures: istiod's `412m/180.3` (millicores/MiB), `converged 4.2 s`, per xDS type
/// `cds 35/120 ms` (`, 3 missed` when pairs never arrived; `-` for a type not measured or with
/// no pair ACKed), `pushes 6,402`, `xDS 1.00 MB/s`, and `agrees` or `N differences` (`20+`
/// when the agreement kept as many as it keeps). A figure not measured is `-`, as in the load
/// table.
pub fn figures(f: &ControlPlaneFigures, istiod: Option<&RoleUsage>) -> Vec<Figure> {
    let cpu = istiod
        .and_then(RoleUsage::cpu_millicores)
        .map_or("-".into(), |c| format!("{c:.0}m"));
    let mem = istiod
        .and_then(RoleUsage::memory_mib)
        .map_or("-".into(), |m| format!("{m:.1}"));
    let mut figures = vec![
        Figure::named("istiod", "istiod millicores/MiB", format!("{cpu}/{mem}")),
        Figure::named(
            "converged",
            "converged",
            format!("{:.1} s", f.converged_secs),
        ),
    ];
    for xds in XdsType::ALL {
        let value = match f.propagation(xds) {
            None => "-".to_string(),
            Some(p) => {
                let figures = if p.acked == 0 {
                    "-".to_string()
                } else {
                    format!("{}/{} ms", ms(p.p50_ms), ms(p.p99_ms))
                };
                match p.missed() {
                    0 => figures,
                    n => format!("{figures}, {} missed", thousands(n)),
                }
            }
        };
        figures.push(Figure::named(
            xds.to_string(),
            format!("{xds} p50/p99"),
            value,
        ));
    }
    figures.push(Figure::named(
        "pushes",
        "istiod's pushes",
        thousands(f.pushes.values().sum::<u64>()),
    ));
    figures.push(Figure::named(
        "xDS",
        "xDS received",
        format!("{:.2} MB/s", f.xds_bytes_per_sec / 1e6),
    ));
    figures.push(Figure {
        name: None,
        heading: "the real Envoy".into(),
        value: match f.agreement.differences.len() {
            0 => "agrees".to_string(),
            1 => "1 difference".to_string(),
            n if n >= DIFFERENCES_KEPT => format!("{n}+ differences"),
            n => format!("{n} differences"),
        },
    });
    figures
}

/// The `control_plane` steps among `steps` as a report table: a heading row (step, variant,
/// mesh, then one column per figure: istiod's millicores/MiB, convergence, p50/p99 per xDS
/// type, pushes, xDS bytes, the real Envoy's agreement) and a row per step; a step without
/// figures says why in the first figure's column. `None` when there is no such step.
pub fn report_table<'a>(all: impl IntoIterator<Item = &'a StepRecord>) -> Option<Table> {
    let rows = steps(all);
    if rows.is_empty() {
        return None;
    }
    let mut heading: Vec<String> = ["step", "variant", "mesh"].map(String::from).to_vec();
    let figured = rows.iter().find_map(|s| {
        s.control_plane
            .as_ref()
            .map(|f| figures(f, istiod(&s.usage)))
    });
    heading.extend(figured.into_iter().flatten().map(|f| f.heading));
    // A figured step that was interrupted says so in a column of its own.
    if rows
        .iter()
        .any(|s| s.control_plane.is_some() && mark(s).is_some())
    {
        heading.push("note".into());
    }
    let mut table = vec![heading];
    for s in rows {
        let mut row = vec![
            (s.seq + 1).to_string(),
            s.variant.clone(),
            s.params.mesh.map(|m| m.to_string()).unwrap_or_default(),
        ];
        match (&s.control_plane, mark(s)) {
            (Some(f), m) => {
                row.extend(figures(f, istiod(&s.usage)).into_iter().map(|f| f.value));
                row.extend(m);
            }
            (None, Some(m)) if s.failed() => row.push(m),
            (None, Some(m)) => row.push(format!("{m}; {NO_FIGURES}")),
            (None, None) => row.push(NO_FIGURES.into()),
        }
        table.push(row);
    }
    Some(table)
}

/// The differences an `Agreement` keeps (its first 20): as many means perhaps more.
const DIFFERENCES_KEPT: usize = 20;

/// Milliseconds as a propagation cell shows them: a tenth below 10 ms, whole above.
fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A `control_plane` step as the runner stores it, for this crate's tests: no load result,
/// status ok, istiod's usage and the figures.
#[cfg(test)]
pub(crate) mod fixture {
    use std::collections::BTreeMap;

    use meshbench_results::control_plane::{Agreement, Propagation};
    use meshbench_results::{
        ControlPlaneFigures, MeshScale, PlayedBy, Program, ProxyKind, Role, RoleUsage, StepKind,
        StepParams, Usage, XdsType,
    };
    use meshbench_store::{StepRecord, StepStatus};

    /// 200 sidecars x 100 services with churn: cds p50/p99 50/99 ms, eds 5/9.9 ms, lds 38/130
    /// ms with 3 pairs missed; 6,402 pushes; 1 MB/s; the real Envoy agrees.
    pub fn step(seq: u32) -> StepRecord {
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
        s.label = format!("control_plane_{seq}");
        s.started_at = "2026-11-28T00:00:00Z".into();
        s.status = StepStatus::Ok;
        s.usage = vec![
            RoleUsage {
                role: Role::Istiod,
                program: PlayedBy::Proxy(Program::Istio),
                workers: 0,
                cpu_limit: None,
                usage: Usage {
                    samples: 30,
                    cpu_millicores_avg: 412.4,
                    cpu_millicores_max: 900.0,
                    rss_mib_avg: 170.0,
                    rss_mib_max: 190.0,
                    working_set_mib_avg: Some(180.3),
                    working_set_mib_max: Some(200.0),
                    ..Usage::default()
                },
                missing: BTreeMap::new(),
                proxy: None,
            },
            RoleUsage {
                role: Role::Sampler,
                program: PlayedBy::Meshbench,
                workers: 1,
                cpu_limit: None,
                usage: Usage {
                    samples: 30,
                    cpu_millicores_avg: 3.0,
                    rss_mib_avg: 4.0,
                    ..Usage::default()
                },
                missing: BTreeMap::new(),
                proxy: None,
            },
        ];
        let propagation = |xds, ms: f64, expected: u64, ninety: f64| {
            // 100 pairs from `ms` / 100 to `ms`: p50 half of it, p99 99 % of it.
            let mut lat: Vec<f64> = (1..=100).map(|i| f64::from(i) * ms / 100.0).collect();
            Propagation::of(xds, 2, expected, &mut lat, &mut [ninety])
        };
        let mut lds = propagation(XdsType::Lds, 130.0, 103, 120.4);
        lds.p50_ms = 38.0;
        lds.p99_ms = 130.0;
        s.control_plane = Some(ControlPlaneFigures {
            connected: 200,
            real_proxies: 1,
            services: 101,
            endpoints: 300,
            virtual_services: 10,
            destination_rules: 10,
            converged_secs: 4.3,
            propagation: vec![
                propagation(XdsType::Cds, 100.0, 100, 95.6),
                propagation(XdsType::Eds, 10.0, 100, 9.0),
                lds,
            ],
            pushes: BTreeMap::from([
                ("cds".to_string(), 400),
                ("eds".to_string(), 6000),
                ("lds".to_string(), 2),
            ]),
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
}

#[cfg(test)]
mod tests {
    use meshbench_results::{MeshScale, ProxyKind, StepFailure};

    use super::*;

    /// The column where `needle` starts in the line of `text` that has it after `after`.
    fn column(text: &str, after: &str, needle: &str) -> usize {
        let line = text
            .lines()
            .skip_while(|l| !l.contains(after))
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} after {after} in\n{text}"));
        line.find(needle).unwrap()
    }

    #[test]
    fn a_control_plane_row_says_its_mesh_and_every_figure_and_no_load() {
        let first = fixture::step(0);
        let mut second = fixture::step(1);
        second.params.mesh = Some(MeshScale {
            kind: ProxyKind::Gateway,
            proxies: 1000,
            services: 2000,
            istio_objects: 0,
            endpoint_churn_per_s: 0.0,
            config_churn_per_s: 0.0,
        });
        let f = second.control_plane.as_mut().unwrap();
        f.propagation.retain(|p| p.xds != XdsType::Lds);
        f.propagation[1].acked = 0;
        f.propagation[1].expected = 2000;
        f.agreement.differences = vec!["cds outbound|80||a: version 3 against 2".into(); 2];
        second.usage[0]
            .missing
            .insert(meshbench_results::Figure::Memory, "no series".to_string());
        second.usage[0]
            .missing
            .insert(meshbench_results::Figure::Rss, "no series".to_string());
        let mut failed = fixture::step(2);
        failed.control_plane = None;
        failed.fail(StepFailure::RigDidNotStart(
            "istiod exited: bad mesh config".into(),
        ));
        let mut load = fixture::step(3);
        load.params =
            meshbench_results::StepParams::open(100.0, 4, meshbench_results::Protocol::Http1);
        let text = table(&[&first, &second, &failed, &load]);
        println!("{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= crate::answers::WIDTH, "{line}");
        }
        assert!(
            text.starts_with("Control plane: istiod millicores/MiB; per xDS type, p50/p99 ms"),
            "{text}"
        );
        assert!(
            text.contains(
                "   1 control_plane 200 sidecars x 100 services, 20 objects, churn 1+0.2/s  istiod 412m/180.3"
            ),
            "{text}"
        );
        for figure in [
            "converged 4.3 s",
            "cds 50/99 ms",
            "eds 5.0/9.9 ms",
            "lds 38/130 ms, 3 missed",
            "pushes 6,402",
            "xDS 1.00 MB/s",
            "agrees",
        ] {
            assert!(text.contains(figure), "{figure} in\n{text}");
        }
        // Not measured is `-`: istiod's memory, a type with no pair ACKed, a type not carried.
        for figure in [
            "   2 control_plane 1000 gateways x 2000 services, 0 objects",
            "istiod 412m/-",
            "eds -, 2,000 missed",
            "lds -",
            "2 differences",
        ] {
            assert!(text.contains(figure), "{figure} in\n{text}");
        }
        assert!(
            text.contains("   3 control_plane 200 sidecars x 100 services, 20 objects, churn 1+0.2/s FAILED: the rig did not start: istiod exited"),
            "{text}"
        );
        // The load step is the load table's, and no load figure stands in the control plane's.
        assert!(!text.contains("   4 "), "{text}");
        for load_word in ["req/s", " rps", "p90"] {
            assert!(!text.contains(load_word), "{load_word} in\n{text}");
        }
        // The same figure starts in the same column on every row.
        assert_eq!(
            column(&text, "   1 ", "pushes"),
            column(&text, "   2 ", "pushes")
        );
        assert_eq!(
            column(&text, "   1 ", "istiod"),
            column(&text, "   2 ", "istiod")
        );
        assert_eq!(table(&[&load]), "");
        let mut many = fixture::step(0);
        many.control_plane.as_mut().unwrap().agreement.differences =
            vec!["lds: missing".into(); DIFFERENCES_KEPT];
        assert!(table(&[&many]).contains("20+ differences"));
    }

    /// An experiment of control-plane steps only, stored and read back, through every reader
    /// of a stored experiment: no run to answer from, no headline, no CSV row; its table and
    /// its SMP documents.
    #[test]
    fn an_experiment_of_control_plane_steps_only_reads_back_through_every_reader() {
        let dir = std::env::temp_dir().join(format!("mb-report-cp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut store = meshbench_store::Store::open(&dir.join("results.db")).unwrap();
        let id = store
            .begin_experiment(&meshbench_store::NewExperiment {
                name: "istiod-scale".into(),
                description: String::new(),
                labels: Default::default(),
                config: serde_json::json!({"duration_secs": 30.0}),
                started_at: "2026-11-28T00:00:00Z".into(),
                meshbench_version: "0.1.0".into(),
            })
            .unwrap();
        for seq in 0..2 {
            store.add_step(id, &fixture::step(seq)).unwrap();
        }
        store
            .finish_experiment(
                id,
                meshbench_store::ExperimentStatus::Done,
                "2026-11-28T00:01:00Z",
            )
            .unwrap();
        let e = store.experiment("istiod-scale").unwrap();
        assert_eq!(e.outcome(), "done");
        let steps = store.steps(id).unwrap();
        let runs: Vec<_> = steps
            .iter()
            .filter_map(meshbench_analysis::Run::from_step)
            .collect();
        assert!(runs.is_empty());
        let h = meshbench_analysis::Headline::of(meshbench_analysis::group(runs));
        assert_eq!(crate::answers::headline_text(&h), "");
        assert!(meshbench_analysis::attribution::by_variant(&steps).is_empty());
        assert!(crate::proxies::table(&steps).is_none());
        let records: Vec<&StepRecord> = steps.iter().map(|s| &s.step).collect();
        let text = table(&records);
        assert_eq!(text.matches("istiod 412m/180.3").count(), 2, "{text}");
        assert_eq!(crate::export::istio_csv(&steps).lines().count(), 1);
        let docs = crate::smp::smp(&e, &steps);
        assert_eq!(docs.as_array().unwrap().len(), 2);
        assert_eq!(
            docs[1]["serviceMeshConfig"]["meshControlPlane"]["sidecars"],
            201
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
