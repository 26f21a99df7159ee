//! The `external` section of an experiment file: systems under test that meshbench does not
//! start. Each variant is a URL (the service directly, behind a sidecar, behind the ingress
//! gateway, through ambient...) that the file's load is driven at, and each of its roles is a
//! proxy (or any process) whose CPU, memory and network are read from Prometheus by PromQL:
//! a preset's queries ([`presets`]) over the series the role's `match` selects, or queries
//! written in the file. Pure: nothing here talks to Prometheus (that is the runner's); the
//! rules of the section are checked here with every mistake named at once.

pub mod presets;
pub mod promql;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use meshbench_results::{Figure, Role};
use serde::{Deserialize, Serialize};

pub use presets::{NoQuery, Preset, Queries, Query, Summed};

/// The `external` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct External {
    /// Prometheus' base URL (its HTTP API is below it, at `/api/v1/`).
    pub prometheus_url: String,
    /// How often Prometheus scrapes the roles' series. Rates are taken over 4 scrape
    /// intervals (at least one sample interval plus one scrape interval), so that a missed
    /// scrape still leaves two samples in every window.
    pub scrape_interval_secs: f64,
    /// The longest one query may take; a step's reading as a whole takes at most three times
    /// this.
    pub query_timeout_secs: f64,
    pub variants: Vec<Variant>,
}

impl Default for External {
    fn default() -> Self {
        External {
            prometheus_url: String::new(),
            scrape_interval_secs: 15.0,
            query_timeout_secs: 10.0,
            variants: Vec::new(),
        }
    }
}

/// One external system under test.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Variant {
    /// Its name in results (the step's variant); `baseline` is what the others are compared
    /// with.
    pub name: String,
    /// Where the load goes (http:// or https://).
    pub url: String,
    /// Extra request headers (`Host` for a gateway's virtual host).
    pub headers: BTreeMap<String, String>,
    /// https: do not verify the server's certificate.
    pub insecure: bool,
    /// gRPC: the service's `.proto` (a relative path is beside the experiment file); `body` is
    /// then JSON of the request message of the method the URL's path names.
    pub proto: Option<PathBuf>,
    /// The request body: with `proto`, the gRPC request message in JSON; over HTTP, sent with
    /// POST.
    pub body: Option<String>,
    /// The roles whose resources are read; none for a baseline without proxies.
    pub roles: Vec<ExternalRole>,
}

/// A role read from Prometheus.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ExternalRole {
    pub name: String,
    /// Which series to read; without it every figure is a query of the file's.
    pub preset: Option<Preset>,
    /// The preset's selector: label -> regular expression (PromQL `=~`, anchored), replacing
    /// the preset's defaults.
    #[serde(rename = "match")]
    pub matches: BTreeMap<String, String>,
    /// Cores (a preset's query replaced when given). `$window` is the rate window.
    pub cpu: Option<String>,
    /// Bytes: the working set, the memory the answers count.
    pub memory: Option<String>,
    /// Bytes: the resident set (counted when there is no working set).
    pub rss: Option<String>,
    /// Bytes per second received.
    pub rx: Option<String>,
    /// Bytes per second sent.
    pub tx: Option<String>,
    /// Open connections.
    pub connections: Option<String>,
}

impl ExternalRole {
    /// The query of each figure given in the file.
    pub fn given(&self) -> [(Figure, &Option<String>); 6] {
        [
            (Figure::Cpu, &self.cpu),
            (Figure::Memory, &self.memory),
            (Figure::Rss, &self.rss),
            (Figure::Rx, &self.rx),
            (Figure::Tx, &self.tx),
            (Figure::Connections, &self.connections),
        ]
    }

    /// Its `program` in results: the preset's name, or `promql`.
    pub fn program(&self) -> &'static str {
        self.preset.map_or("promql", Preset::name)
    }

    /// Every figure's query (the preset's, replaced by the file's where given), `$window`
    /// left in.
    pub fn queries(&self) -> Queries {
        let mut q = match self.preset {
            Some(p) => p.queries(&self.matches),
            None => Queries::default(),
        };
        for (f, given) in self.given() {
            if let Some(expr) = given {
                q.set(f, Query::given(expr));
            }
        }
        q
    }
}

/// Names of variants and roles: what a table, a label and a CSV column can carry.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl External {
    /// The rate window in milliseconds: 4 scrape intervals, and at least one sample
    /// interval plus one scrape interval (Grafana's `$__rate_interval`).
    pub fn window_ms(&self, sample_interval_ms: u64) -> u64 {
        // Saturating: a file that says 1e300 is refused by `validate`, which asks this first.
        let scrape = (self.scrape_interval_secs * 1000.0).round() as u64;
        scrape
            .saturating_mul(4)
            .max(sample_interval_ms.saturating_add(scrape))
    }

    /// Relative `proto` paths made relative to `dir` (the experiment file's directory), so
    /// that a file means the same wherever meshbench is started.
    pub fn resolve_paths(&mut self, dir: &Path) {
        for v in &mut self.variants {
            if let Some(p) = v.proto.as_mut().filter(|p| p.is_relative()) {
                *p = dir.join(&*p);
            }
        }
    }

    /// The variant called `name`.
    pub fn variant(&self, name: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// Every problem of the section (`warmup_secs` and `sample_interval_ms` decide whether
    /// its rate windows fit the load).
    pub fn validate(&self, warmup_secs: f64, sample_interval_ms: u64, p: &mut Vec<String>) {
        // Every key, so that a new one does not compile until its checks are decided.
        let External {
            prometheus_url: _,
            scrape_interval_secs: _,
            query_timeout_secs: _,
            variants: _,
        } = self;
        let u = self.prometheus_url.trim();
        if u.is_empty() {
            p.push("external.prometheus_url: required, e.g. http://127.0.0.1:9090".into());
        } else if !is_http_url(u) {
            p.push(format!(
                "external.prometheus_url: '{u}' is not an http:// or https:// URL"
            ));
        }
        let s = self.scrape_interval_secs;
        if !(s.is_finite() && s > 0.0 && s <= 3600.0) {
            p.push(format!(
                "external.scrape_interval_secs: expected a number above 0 and at most 3600, found {s}"
            ));
        }
        let t = self.query_timeout_secs;
        if !(t.is_finite() && t > 0.0 && t <= 300.0) {
            p.push(format!(
                "external.query_timeout_secs: expected a number above 0 and at most 300, found {t}"
            ));
        }
        if self.variants.is_empty() {
            p.push("external.variants: expected at least one (name, url, roles)".into());
        }
        let mut names = BTreeSet::new();
        for (i, v) in self.variants.iter().enumerate() {
            let at = format!("external.variants[{i}]");
            let Variant {
                name: _,
                url: _,
                headers: _, // any text; a Host header picks a virtual host
                insecure: _,
                proto: _, // Experiment::validate_requests
                body: _,  // Experiment::validate_requests
                roles: _,
            } = v;
            if !is_name(&v.name) {
                p.push(format!(
                    "{at}.name: '{}' must be 1 to 64 letters, digits, '-', '_' or '.'",
                    v.name
                ));
            } else if !names.insert(v.name.as_str()) {
                p.push(format!("{at}.name: '{}' is given twice", v.name));
            }
            if !is_http_url(v.url.trim()) {
                p.push(format!(
                    "{at}.url: '{}' is not an http:// or https:// URL",
                    v.url
                ));
            }
            let mut roles = BTreeSet::new();
            for (j, r) in v.roles.iter().enumerate() {
                let at = format!("{at}.roles[{j}]");
                if !is_name(&r.name) {
                    p.push(format!(
                        "{at}.name: '{}' must be 1 to 64 letters, digits, '-', '_' or '.'",
                        r.name
                    ));
                } else if matches!(Role::from_word(&r.name), Role::Sampler) {
                    p.push(format!(
                        "{at}.name: 'sampler' is the name of meshbench's own sampler; pick another"
                    ));
                } else if !roles.insert(r.name.as_str()) {
                    p.push(format!("{at}.name: '{}' is given twice", r.name));
                }
                validate_role(r, &at, p);
            }
        }
        let window = self.window_ms(sample_interval_ms);
        let any_roles = self.variants.iter().any(|v| !v.roles.is_empty());
        if any_roles && s.is_finite() && s > 0.0 && warmup_secs * 1000.0 < window as f64 {
            p.push(format!(
                "warmup_secs: the external roles' rates look back {}s (4 x external.scrape_interval_secs {s}); a warm-up of at least that keeps every rate inside the load: set warmup_secs to {} or more, or scrape more often",
                window as f64 / 1000.0,
                (window as f64 / 1000.0).ceil()
            ));
        }
    }
}

fn validate_role(r: &ExternalRole, at: &str, p: &mut Vec<String>) {
    let ExternalRole {
        name: _, // External::validate
        preset: _,
        matches: _,
        // The queries, in `given` below.
        cpu: _,
        memory: _,
        rss: _,
        rx: _,
        tx: _,
        connections: _,
    } = r;
    let given: Vec<Figure> = r
        .given()
        .iter()
        .filter(|(_, q)| q.is_some())
        .map(|(f, _)| *f)
        .collect();
    for (f, q) in r.given() {
        if q.as_deref().is_some_and(|q| q.trim().is_empty()) {
            p.push(format!("{at}.{}: an empty query", f.name()));
        }
    }
    match r.preset {
        None => {
            if given.is_empty() {
                p.push(format!(
                    "{at}: give a preset ({}) or at least one query (cpu, memory, rss, rx, tx, connections)",
                    Preset::ALL.map(Preset::name).join(", ")
                ));
            }
            if !r.matches.is_empty() {
                p.push(format!(
                    "{at}.match: selects a preset's series; this role has no preset (write the selectors into its queries)"
                ));
            }
        }
        Some(preset) => {
            for label in preset.required() {
                if !r.matches.contains_key(*label) {
                    p.push(format!(
                        "{at}.match.{label}: the {preset} preset needs it (without it every {preset} Prometheus sees would count)"
                    ));
                }
            }
        }
    }
    for (label, value) in &r.matches {
        if !promql::is_label_name(label) {
            p.push(format!(
                "{at}.match.{label}: not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"
            ));
        }
        if value.is_empty() {
            p.push(format!(
                "{at}.match.{label}: an empty expression matches only series without the label; give a regular expression such as '.+'"
            ));
        }
    }
}

fn is_http_url(u: &str) -> bool {
    ["http://", "https://"].iter().any(|s| {
        u.len() > s.len()
            && u.get(..s.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    const FILE: &str = "name: t
topologies: [external]
warmup_secs: 4
external:
  prometheus_url: http://127.0.0.1:9090
  scrape_interval_secs: 1
  variants:
    - name: baseline
      url: http://127.0.0.1:8080/echo
    - name: sidecar
      url: http://127.0.0.1:8081/echo
      headers: {Host: echo.bench}
      roles:
        - name: server-sidecar
          preset: istio-sidecar
          match: {namespace: bench, pod: 'fortioserver-.*'}
        - name: custom
          cpu: 'sum(rate(my_cpu_seconds_total[$window]))'
";

    #[test]
    fn a_file_with_external_variants_parses() {
        let e = parse("t.yaml", FILE, &[]).unwrap();
        let x = e.external.as_ref().unwrap();
        assert_eq!(x.variants.len(), 2);
        assert_eq!(x.window_ms(e.sample_interval_ms), 4000);
        let roles = &x.variants[1].roles;
        assert_eq!(roles[0].preset, Some(Preset::IstioSidecar));
        assert_eq!(roles[0].program(), "istio-sidecar");
        assert_eq!(roles[1].program(), "promql");
        let q = roles[1].queries();
        assert_eq!(
            q.query(Figure::Cpu).unwrap().expr,
            "sum(rate(my_cpu_seconds_total[$window]))"
        );
        assert!(q.query(Figure::Memory).is_err());
    }

    #[test]
    fn every_mistake_of_the_section_is_named_at_once() {
        let text = "name: t
topologies: [external]
external:
  prometheus_url: 9090
  scrape_intervall_secs: 1
  variants:
    - name: a
      url: http://x/
      roles:
        - name: r
          preset: istio-sidekar
        - name: s
          cpus: 'x'
    - name: b
      urls: http://y/
";
        let err = parse("bad.yaml", text, &[]).unwrap_err().to_string();
        for words in [
            "external.scrape_intervall_secs: unknown key",
            "external.variants[0].roles[0].preset: unknown variant `istio-sidekar`",
            "external.variants[0].roles[1].cpus: unknown key",
            "external.variants[1].urls: unknown key",
        ] {
            assert!(err.contains(words), "{words} in {err}");
        }
        // Rules that need the whole section, once its types are right.
        let text = "name: t
topologies: [external]
warmup_secs: 2
load:
  response_bytes: [10, 20]
external:
  prometheus_url: ftp://x
  variants:
    - name: a b
      url: x
      roles:
        - name: s
          preset: istio-sidecar
          match: {namespace: bench, 'bad-label': x}
        - name: s
        - name: sampler
          cpu: ''
    - name: c
      url: http://c/
      roles:
        - name: p
          match: {groupname: nginx}
          cpu: 'sum(x)'
";
        let err = parse("bad.yaml", text, &[]).unwrap_err().to_string();
        for words in [
            "external.prometheus_url: 'ftp://x' is not an http:// or https:// URL",
            "external.variants[0].name: 'a b' must be",
            "external.variants[0].url: 'x' is not",
            "external.variants[0].roles[0].match.pod: the istio-sidecar preset needs it",
            "external.variants[0].roles[0].match.bad-label: not a Prometheus label name",
            "external.variants[0].roles[1].name: 's' is given twice",
            "external.variants[0].roles[1]: give a preset",
            "external.variants[0].roles[2].name: 'sampler' is the name",
            "external.variants[0].roles[2].cpu: an empty query",
            "external.variants[1].roles[0].match: selects a preset's series",
            "warmup_secs: the external roles' rates look back 60s",
            "load.response_bytes: the external variants' servers",
        ] {
            assert!(err.contains(words), "{words} in {err}");
        }
    }

    /// Found by reading the checks as a fuzzer would: a URL whose fifth byte is inside a
    /// character, and a scrape interval no window holds.
    #[test]
    fn odd_values_are_refused_not_a_panic() {
        let text = FILE
            .replace("http://127.0.0.1:9090", "'httpé://x'")
            .replace("scrape_interval_secs: 1", "scrape_interval_secs: 1e300");
        let err = parse("t.yaml", &text, &[]).unwrap_err().to_string();
        assert!(err.contains("is not an http:// or https:// URL"), "{err}");
        assert!(
            err.contains("external.scrape_interval_secs: expected"),
            "{err}"
        );
    }

    #[test]
    fn the_section_and_the_topology_go_together() {
        let err = parse("t.yaml", "name: t\ntopologies: [external]\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("external: topologies lists external"), "{err}");
        let text = FILE.replace("topologies: [external]", "topologies: [baseline]");
        let err = parse("t.yaml", &text, &[]).unwrap_err().to_string();
        assert!(err.contains("external: given, but topologies"), "{err}");
        let text = format!("{FILE}limits:\n  proxy:\n    cpus: [0.5]\n");
        let err = parse("t.yaml", &text, &[]).unwrap_err().to_string();
        assert!(
            err.contains("limits.proxy: meshbench limits the roles it starts"),
            "{err}"
        );
    }

    #[test]
    fn a_variants_own_request_fits_the_load() {
        let with = |load: &str, variant: &str| {
            let text = FILE
                .replace(
                    "topologies: [external]",
                    &format!("topologies: [external]\nload:\n{load}"),
                )
                .replace(
                    "      url: http://127.0.0.1:8080/echo\n",
                    &format!("      url: http://127.0.0.1:8080/echo\n{variant}"),
                );
            parse("t.yaml", &text, &[]).map_err(|e| e.to_string())
        };
        let grpc = "  protocol: grpc\n";
        let e = with(grpc, "      proto: svc.proto\n      body: '{\"a\": 1}'\n").unwrap();
        let v = &e.external.as_ref().unwrap().variants[0];
        assert_eq!(v.proto.as_deref(), Some(Path::new("svc.proto")));
        assert_eq!(v.body.as_deref(), Some("{\"a\": 1}"));
        assert!(with("  protocol: http1\n", "      body: 'text'\n").is_ok());
        for (load, variant, says) in [
            (
                "  protocol: http2\n",
                "      proto: svc.proto\n",
                "external.variants[0].proto: a .proto describes gRPC calls",
            ),
            (
                grpc,
                "      body: '{}'\n",
                "external.variants[0].body: a gRPC body is JSON",
            ),
            (
                "  request_bytes: 10\n",
                "      body: 'x'\n",
                "load.request_bytes: external.variants[0] sends its own request",
            ),
        ] {
            let err = with(load, variant).unwrap_err();
            assert!(err.contains(says), "{says} in {err}");
        }
    }

    #[test]
    fn a_relative_proto_is_beside_the_experiment_file() {
        let dir = std::env::temp_dir().join(format!("meshbench-proto-path-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("e.yaml");
        let text = FILE
            .replace(
                "topologies: [external]",
                "topologies: [external]\nload:\n  protocol: grpc",
            )
            .replace(
                "      url: http://127.0.0.1:8080/echo\n",
                "      url: http://127.0.0.1:8080/echo\n      proto: svc.proto\n",
            )
            .replace(
                "      url: http://127.0.0.1:8081/echo\n",
                "      url: http://127.0.0.1:8081/echo\n      proto: /etc/svc.proto\n",
            );
        std::fs::write(&file, text).unwrap();
        let e = crate::load(&file, &[]).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let x = e.external.unwrap();
        assert_eq!(x.variants[0].proto, Some(dir.join("svc.proto")));
        assert_eq!(x.variants[1].proto, Some(PathBuf::from("/etc/svc.proto")));
    }
}
