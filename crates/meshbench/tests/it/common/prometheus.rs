//! A real Prometheus (Debian's, installed by scripts/install-deps.sh) for the tests: its own
//! directory and storage, loopback only, scraping what a test names every second and/or taking
//! remote write; killed and removed when dropped, failing test included.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::free_addr;

/// What the Prometheus of a test does.
#[derive(Debug, Clone, Default)]
pub struct PrometheusOptions {
    /// Targets scraped every second (job `meshbench`, the targets' own labels kept), each a
    /// `HOST:PORT` serving /metrics.
    pub scrape: Vec<SocketAddr>,
    /// Takes remote write at /api/v1/write.
    pub remote_write_receiver: bool,
    /// `--enable-feature=native-histograms`.
    pub native_histograms: bool,
    /// A kubelet on 127.0.0.1 at this port, whose `/metrics/cadvisor` is scraped every second
    /// (job `kubelet-cadvisor`, HTTPS with the kubelet's self-signed certificate, read
    /// anonymously), as a cluster's Prometheus scrapes every node's.
    pub kubelet_cadvisor: Option<u16>,
}

pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    pub fn start(o: &PrometheusOptions) -> Prometheus {
        let dir = std::env::temp_dir().join(format!(
            "meshbench-test-prometheus-{}-{}",
            std::process::id(),
            free_addr().port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        let mut yml = String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n");
        if !o.scrape.is_empty() || o.kubelet_cadvisor.is_some() {
            yml.push_str("scrape_configs:\n");
        }
        if !o.scrape.is_empty() {
            let targets: Vec<String> = o.scrape.iter().map(|t| format!("'{t}'")).collect();
            yml.push_str(&format!(
                "  - job_name: meshbench\n    honor_labels: true\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ));
        }
        if let Some(port) = o.kubelet_cadvisor {
            yml.push_str(&format!(
                "  - job_name: kubelet-cadvisor\n    scheme: https\n    metrics_path: /metrics/cadvisor\n    tls_config:\n      insecure_skip_verify: true\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
            ));
        }
        std::fs::write(&config, yml).unwrap();
        let addr = free_addr();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if o.remote_write_receiver {
            cmd.arg("--web.enable-remote-write-receiver");
        }
        if o.native_histograms {
            cmd.arg("--enable-feature=native-histograms");
        }
        let child = cmd
            .spawn()
            .expect("prometheus runs (scripts/install-deps.sh installs it)");
        let mut p = Prometheus { child, addr, dir };
        let t = Instant::now();
        while get(addr, "/-/ready").map(|(s, _)| s) != Some(200) {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("prometheus exited ({status}): {}", p.log());
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "prometheus not ready in 30 s: {}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    pub fn write_url(&self) -> String {
        format!("http://{}/api/v1/write", self.addr)
    }

    /// The last lines of its log.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// An API call's `data`.
    pub fn api(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let query: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params)
            .finish();
        let (status, body) = get(self.addr, &format!("{path}?{query}"))
            .unwrap_or_else(|| panic!("{path}: prometheus does not answer"));
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        assert_eq!(status, 200, "{path} {params:?}: {v}");
        v["data"].clone()
    }

    /// An instant query at `time` (Unix seconds): the result vector.
    pub fn query(&self, q: &str, time: f64) -> Vec<Value> {
        let t = format!("{time:.3}");
        let data = self.api("/api/v1/query", &[("query", q), ("time", &t)]);
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// An instant query now: the result vector.
    pub fn query_now(&self, q: &str) -> Vec<Value> {
        let data = self.api("/api/v1/query", &[("query", q)]);
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// The one float a query gives at `time`.
    pub fn scalar(&self, q: &str, time: f64) -> f64 {
        let r = self.query(q, time);
        assert_eq!(r.len(), 1, "{q} at {time}: {r:?}");
        value(&r[0])
    }

    /// The health of the first target (`up`, `down`, `unknown`: not scraped yet).
    pub fn target_health(&self) -> String {
        let data = self.api("/api/v1/targets", &[]);
        data["activeTargets"][0]["health"]
            .as_str()
            .unwrap_or("unknown")
            .to_string()
    }

    /// Waits for the first scrape of the targets (failed: nothing listens yet). Prometheus
    /// applies its targets some seconds after it is ready; a run started before would miss
    /// its first seconds.
    pub fn wait_first_scrape(&self) {
        let t = Instant::now();
        while self.target_health() == "unknown" {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "prometheus never scraped: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A sample's value (`[time, "value"]`).
pub fn value(sample: &Value) -> f64 {
    sample["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no value in {sample}"))
}

/// A GET over plain HTTP/1.0 on loopback: status and body.
pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}
