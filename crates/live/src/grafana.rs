//! The Grafana dashboard of the live stream (`meshbench gen grafana`): one JSON model whose
//! queries are the series `/metrics` and remote write carry, so that a Prometheus fed either
//! way shows a run as it goes.
//!
//! Template variables pick the data source (`datasource`, any Prometheus), the `experiment`,
//! and its `step`s and `variant`s (multi-select, all by default), each from `label_values`
//! of the requests counter. Every panel draws one line per step (and per kind or role), so a
//! step is always told apart from the next.
//!
//! Every metric and label name comes from [`names`](crate::names); the panels are declared
//! once ([`panels`]) and both [`dashboard`] and [`queries`] are read from them, so a test can
//! run every query against a real Prometheus. The JSON is checked against Grafana's own types
//! (`@grafana/schema`, pinned in the test's package.json) by `tests/it/grafana.rs`.

use serde_json::{json, Value};

use crate::names::*;
use crate::LiveError;

/// The dashboard model version written: `defaultDashboard.schemaVersion` of @grafana/schema
/// 13.2.3 (the test compares them).
pub const SCHEMA_VERSION: u32 = 42;
/// The dashboard's uid: importing it again replaces it instead of adding a copy.
pub const UID: &str = "meshbench-live";
/// The variable panels and variables take their data source from.
const DATASOURCE_VAR: &str = "${datasource}";

/// One query of a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// `A`, `B`, ...: names the query inside its panel.
    pub ref_id: &'static str,
    /// PromQL, with the dashboard's variables (`$experiment`, `$step`, `$variant`,
    /// `$__rate_interval`) left in.
    pub expr: String,
    /// The series' name in the legend.
    pub legend: String,
}

/// One time-series panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: &'static str,
    pub description: &'static str,
    /// Grafana's unit id (`reqps`, `s`, `bytes`, `none`).
    pub unit: &'static str,
    /// The y axis' label, where the unit does not say it.
    pub axis_label: Option<&'static str>,
    /// Draw the y axis on a log scale (latency: a p99.9 spike would flatten the p50).
    pub log_scale: bool,
    pub queries: Vec<Query>,
    /// Queries (by ref id) drawn dashed: a target, not a measurement.
    pub dashed: Vec<&'static str>,
}

/// The selector every query carries: the chosen experiment, steps and variants.
fn selector(extra: &str) -> String {
    let mut s = format!("{EXPERIMENT}=\"$experiment\", {STEP}=~\"$step\", {VARIANT}=~\"$variant\"");
    if !extra.is_empty() {
        s.push_str(", ");
        s.push_str(extra);
    }
    format!("{{{s}}}")
}

/// `rate(NAME{selector}[$__rate_interval])`.
fn rate(name: &str, extra: &str) -> String {
    format!("rate({name}{}[$__rate_interval])", selector(extra))
}

/// Grouping of the per-step series.
fn by(extra: &[&str]) -> String {
    let mut labels = vec![STEP, VARIANT];
    labels.extend_from_slice(extra);
    labels.join(", ")
}

fn quantile(q: f64, histogram: &str) -> String {
    format!(
        "histogram_quantile({q}, sum by ({}) ({}))",
        by(&["le"]),
        rate(&format!("{histogram}_bucket"), "")
    )
}

fn legend(prefix: &str) -> String {
    let step = format!("step {{{{{STEP}}}}} · {{{{{VARIANT}}}}}");
    if prefix.is_empty() {
        step
    } else {
        format!("{prefix} · {step}")
    }
}

fn query(ref_id: &'static str, expr: String, legend: String) -> Query {
    Query {
        ref_id,
        expr,
        legend,
    }
}

/// The dashboard's panels, in order (two to a row).
pub fn panels() -> Vec<Panel> {
    let mut panels = load_panels();
    panels.extend(role_panels());
    panels
}

/// A panel of the default look: linear axis, labelled by its unit, nothing dashed.
fn panel(
    title: &'static str,
    description: &'static str,
    unit: &'static str,
    queries: Vec<Query>,
) -> Panel {
    Panel {
        title,
        description,
        unit,
        axis_label: None,
        log_scale: false,
        queries,
        dashed: Vec::new(),
    }
}

/// The panels of the load: its rates, latency, errors and schedule lag.
fn load_panels() -> Vec<Panel> {
    let percentiles = [
        ("A", 0.5, "p50"),
        ("B", 0.9, "p90"),
        ("C", 0.99, "p99"),
        ("D", 0.999, "p99.9"),
    ];
    vec![
        panel(
            "Requests per second",
            "Finished requests (responses and failures) per second, per step.",
            "reqps",
            vec![query(
                "A",
                format!("sum by ({}) ({})", by(&[]), rate(REQUESTS, "")),
                legend(""),
            )],
        ),
        Panel {
            dashed: vec!["B"],
            ..panel(
                "Achieved vs target rate",
                "Requests put on the wire per second against the open loop's asked rate \
                 (dashed); a closed loop has no target.",
                "reqps",
                vec![
                    query(
                        "A",
                        format!("sum by ({}) ({})", by(&[]), rate(SENDS, "")),
                        legend("sent"),
                    ),
                    query(
                        "B",
                        format!("max by ({}) ({TARGET_RPS}{})", by(&[]), selector("")),
                        legend("target"),
                    ),
                ],
            )
        },
        Panel {
            log_scale: true,
            ..panel(
                "Latency percentiles",
                "Latency from the intended send (coordinated-omission corrected): p50, p90, \
                 p99 and p99.9 over the rate window, from the latency histogram's buckets.",
                "s",
                percentiles
                    .iter()
                    .map(|&(id, q, name)| query(id, quantile(q, LATENCY), legend(name)))
                    .collect(),
            )
        },
        panel(
            "Errors per second by kind",
            "Requests that failed without a response, by kind, and responses with a status \
             of 400 or more, by code.",
            "reqps",
            vec![
                query(
                    "A",
                    format!("sum by ({}) ({})", by(&[KIND]), rate(TRANSPORT_ERRORS, "")),
                    legend(&format!("{{{{{KIND}}}}}")),
                ),
                query(
                    "B",
                    format!(
                        "sum by ({}) ({})",
                        by(&[CODE]),
                        rate(RESPONSES, &format!("{CODE}=~\"[4-9][0-9][0-9]\""))
                    ),
                    legend(&format!("HTTP {{{{{CODE}}}}}")),
                ),
            ],
        ),
        panel(
            "Schedule lag p99",
            "How late the open loop's sends went out against their schedule (p99 over the \
             rate window). A closed loop has no schedule.",
            "s",
            vec![query("A", quantile(0.99, SCHEDULE_LAG), legend("lag p99"))],
        ),
    ]
}

/// The panels of the roles under test: CPU and memory.
fn role_panels() -> Vec<Panel> {
    vec![
        Panel {
            axis_label: Some("millicores"),
            ..panel(
                "CPU per role",
                "CPU each role of the system under test used, in millicores (1000 = one core).",
                "none",
                vec![query(
                    "A",
                    format!("1000 * sum by ({}) ({})", by(&[ROLE]), rate(ROLE_CPU, "")),
                    legend(&format!("{{{{{ROLE}}}}}")),
                )],
            )
        },
        panel(
            "Memory per role",
            "Each role's memory: its cgroup's working set where it has one, else its RSS.",
            "bytes",
            vec![query(
                "A",
                format!("max by ({}) ({ROLE_MEMORY}{})", by(&[ROLE]), selector("")),
                legend(&format!("{{{{{ROLE}}}}}")),
            )],
        ),
    ]
}

/// Every panel's queries as (panel title, PromQL), in the dashboard's order.
pub fn queries() -> Vec<(String, String)> {
    panels()
        .into_iter()
        .flat_map(|p| {
            p.queries
                .into_iter()
                .map(move |q| (p.title.to_string(), q.expr))
        })
        .collect()
}

/// A query as Grafana would send it with `experiment` chosen, every step and variant, and
/// `window` for `$__rate_interval` (e.g. `30s`): for running the queries outside Grafana.
pub fn substitute(expr: &str, experiment: &str, window: &str) -> String {
    let quoted = experiment.replace('\\', "\\\\").replace('"', "\\\"");
    expr.replace("$__rate_interval", window)
        .replace("$step", ".*")
        .replace("$variant", ".*")
        .replace("$experiment", &quoted)
}

/// Grafana's data-source uids: letters, digits, `-` and `_`, at most 40.
fn check_uid(uid: &str) -> Result<(), LiveError> {
    if uid.is_empty()
        || uid.len() > 40
        || !uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(LiveError::Config(format!(
            "--datasource-uid '{uid}': a Grafana uid is 1 to 40 letters, digits, '-' or '_' \
             (see the data source's URL in Grafana: /connections/datasources/edit/UID)"
        )));
    }
    Ok(())
}

fn datasource() -> Value {
    json!({ "type": "prometheus", "uid": DATASOURCE_VAR })
}

fn panel_json(id: usize, p: &Panel) -> Value {
    let mut custom = json!({
        "drawStyle": "line",
        "lineWidth": 1,
        "fillOpacity": 0,
        "showPoints": "never",
        "spanNulls": false,
    });
    if let Some(label) = p.axis_label {
        custom["axisLabel"] = json!(label);
    }
    if p.log_scale {
        custom["scaleDistribution"] = json!({ "type": "log", "log": 10 });
    }
    let mut defaults = json!({ "unit": p.unit, "custom": custom });
    if !p.log_scale {
        defaults["min"] = json!(0);
    }
    let overrides: Vec<Value> = p
        .dashed
        .iter()
        .map(|id| {
            json!({
                "matcher": { "id": "byFrameRefID", "options": id },
                "properties": [
                    { "id": "custom.lineStyle", "value": { "fill": "dash", "dash": [10, 10] } }
                ]
            })
        })
        .collect();
    let targets: Vec<Value> = p
        .queries
        .iter()
        .map(|q| {
            json!({
                "refId": q.ref_id,
                "datasource": datasource(),
                "expr": q.expr,
                "legendFormat": q.legend,
                "range": true,
                "instant": false,
                "editorMode": "code",
            })
        })
        .collect();
    json!({
        "id": id + 1,
        "type": "timeseries",
        "title": p.title,
        "description": p.description,
        "datasource": datasource(),
        "gridPos": { "h": 9, "w": 12, "x": (id % 2) * 12, "y": (id / 2) * 9 },
        "fieldConfig": { "defaults": defaults, "overrides": overrides },
        "options": {
            "legend": {
                "calcs": ["lastNotNull", "max"],
                "displayMode": "table",
                "placement": "bottom",
                "showLegend": true
            },
            "tooltip": { "mode": "multi", "sort": "desc" }
        },
        "targets": targets,
    })
}

/// A query variable over one label of the requests counter.
fn label_variable(name: &str, label: &str, query: &str, multi: bool) -> Value {
    let mut v = json!({
        "name": name,
        "label": label,
        "type": "query",
        "datasource": datasource(),
        "query": query,
        "refresh": 2,
        "sort": if multi { 3 } else { 1 },
        "multi": multi,
        "includeAll": multi,
    });
    if multi {
        v["allValue"] = json!(".*");
        v["current"] = json!({ "text": "All", "value": "$__all" });
    }
    v
}

/// The dashboard. With `datasource_uid`, the data-source variable starts on that Prometheus;
/// without, on Grafana's default one.
pub fn dashboard(datasource_uid: Option<&str>) -> Result<Value, LiveError> {
    if let Some(uid) = datasource_uid {
        check_uid(uid)?;
    }
    let mut ds_var = json!({
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "refresh": 1,
    });
    if let Some(uid) = datasource_uid {
        ds_var["current"] = json!({ "text": uid, "value": uid });
    }
    let of_experiment = format!("{REQUESTS}{{{EXPERIMENT}=\"$experiment\"}}");
    let variables = vec![
        ds_var,
        label_variable(
            "experiment",
            "experiment",
            &format!("label_values({REQUESTS}, {EXPERIMENT})"),
            false,
        ),
        label_variable(
            "step",
            "step",
            &format!("label_values({of_experiment}, {STEP})"),
            true,
        ),
        label_variable(
            "variant",
            "variant",
            &format!("label_values({of_experiment}, {VARIANT})"),
            true,
        ),
    ];
    let panels: Vec<Value> = panels()
        .iter()
        .enumerate()
        .map(|(i, p)| panel_json(i, p))
        .collect();
    Ok(json!({
        "uid": UID,
        "title": "meshbench live",
        "description": "A meshbench run or experiment as it goes, from the series of \
            --metrics-listen or --prometheus-remote-write (docs/live.md).",
        "tags": ["meshbench"],
        "editable": true,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "5s",
        "time": { "from": "now-15m", "to": "now" },
        "timezone": "browser",
        "templating": { "list": variables },
        "panels": panels,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric name that names.rs declares.
    const METRICS: &[&str] = &[
        REQUESTS,
        ERRORS,
        RESPONSES,
        TRANSPORT_ERRORS,
        SENDS,
        TARGET_RPS,
        LATENCY,
        SCHEDULE_LAG,
        STEP_REMAINING,
        ROLE_CPU,
        ROLE_MEMORY,
        ROLE_RX,
        ROLE_TX,
        ROLE_CONNECTIONS,
    ];
    const HISTOGRAMS: &[&str] = &[LATENCY, SCHEDULE_LAG];
    const LABELS: &[&str] = &[EXPERIMENT, STEP, VARIANT, ROLE, CODE, KIND, "le"];

    /// The `meshbench_...` words of a PromQL expression.
    fn metric_words(expr: &str) -> Vec<String> {
        let mut out = Vec::new();
        let bytes = expr.as_bytes();
        let mut i = 0;
        while let Some(at) = expr[i..].find("meshbench_") {
            let start = i + at;
            let mut end = start;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
                end += 1;
            }
            out.push(expr[start..end].to_string());
            i = end;
        }
        out
    }

    fn is_declared(word: &str) -> bool {
        METRICS.contains(&word)
            || HISTOGRAMS
                .iter()
                .any(|h| word.strip_prefix(h) == Some("_bucket"))
    }

    /// Every expression of the dashboard: panels' and variables'.
    fn all_exprs(d: &Value) -> Vec<String> {
        let mut exprs: Vec<String> = d["panels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["targets"].as_array().unwrap().clone())
            .map(|t| t["expr"].as_str().unwrap().to_string())
            .collect();
        for v in d["templating"]["list"].as_array().unwrap() {
            if v["type"] == "query" {
                exprs.push(v["query"].as_str().unwrap().to_string());
            }
        }
        exprs
    }

    #[test]
    fn every_metric_name_is_one_of_names_rs() {
        let d = dashboard(None).unwrap();
        let exprs = all_exprs(&d);
        assert!(exprs.len() >= 12, "{exprs:?}");
        let mut used = std::collections::BTreeSet::new();
        for e in &exprs {
            let words = metric_words(e);
            assert!(!words.is_empty(), "no metric in {e}");
            for w in words {
                assert!(is_declared(&w), "{w} (in {e}) is not a name from names.rs");
                used.insert(w);
            }
        }
        // What the panels promise to draw is there.
        for name in [
            REQUESTS,
            SENDS,
            TARGET_RPS,
            TRANSPORT_ERRORS,
            RESPONSES,
            ROLE_CPU,
            ROLE_MEMORY,
        ] {
            assert!(used.contains(name), "no panel queries {name}");
        }
        for h in HISTOGRAMS {
            assert!(
                used.contains(&format!("{h}_bucket")),
                "no panel queries {h}"
            );
        }
        // The checker itself tells a stray name from a declared one.
        assert!(!is_declared("meshbench_request_total"));
        assert!(!is_declared("meshbench_latency_seconds_count"));
    }

    #[test]
    fn every_query_is_per_step_and_uses_known_labels() {
        for (title, expr) in queries() {
            for var in ["$experiment", "$step", "$variant"] {
                assert!(
                    expr.contains(var),
                    "{title}: {expr} does not filter on {var}"
                );
            }
            // Each aggregation keeps the step and the variant apart.
            for group in expr.split("by (").skip(1) {
                let labels: Vec<&str> = group
                    .split(')')
                    .next()
                    .unwrap()
                    .split(',')
                    .map(str::trim)
                    .collect();
                assert!(
                    labels.contains(&STEP) && labels.contains(&VARIANT),
                    "{expr}"
                );
                for l in labels {
                    assert!(LABELS.contains(&l), "{title}: unknown label {l}");
                }
            }
            assert_eq!(
                expr.matches('(').count(),
                expr.matches(')').count(),
                "{expr}"
            );
        }
        let titles: Vec<String> = queries().into_iter().map(|(t, _)| t).collect();
        assert_eq!(
            titles
                .iter()
                .filter(|t| *t == "Latency percentiles")
                .count(),
            4,
            "p50, p90, p99, p99.9"
        );
    }

    #[test]
    fn the_dashboard_has_its_variables_and_panels() {
        let d = dashboard(Some("prom-1")).unwrap();
        let vars: Vec<&str> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(vars, ["datasource", "experiment", "step", "variant"]);
        assert_eq!(d["templating"]["list"][0]["current"]["value"], "prom-1");
        assert_eq!(d["schemaVersion"], SCHEMA_VERSION);
        let panels = d["panels"].as_array().unwrap();
        assert_eq!(panels.len(), super::panels().len());
        let ids: std::collections::BTreeSet<u64> =
            panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
        assert_eq!(ids.len(), panels.len(), "panel ids are unique");
        for p in panels {
            assert_eq!(p["datasource"]["uid"], DATASOURCE_VAR);
            assert!(!p["targets"].as_array().unwrap().is_empty());
        }
    }

    #[test]
    fn bad_uids_are_refused() {
        for bad in ["", "has space", "quote\"", &"x".repeat(41)] {
            let err = dashboard(Some(bad)).unwrap_err().to_string();
            assert!(err.contains("--datasource-uid"), "{err}");
        }
        assert!(dashboard(Some("P1809F7CD0C75ACF3")).is_ok());
    }

    #[test]
    fn substitution_makes_plain_promql() {
        let (_, expr) = queries().into_iter().next().unwrap();
        let plain = substitute(&expr, "my \"exp\"", "30s");
        assert!(!plain.contains('$'), "{plain}");
        assert!(plain.contains(r#"experiment="my \"exp\"""#), "{plain}");
        assert!(plain.contains("[30s]"), "{plain}");
    }
}
