//! The results store: one SQLite file (embedded, no server) holding every experiment, its
//! steps with their parameters, load results (the full JSON, summary columns for queries,
//! encoded histograms, per-second series), each role's resource use and raw samples, and the
//! versions of meshbench and of each program. Each step is written in one transaction and the
//! journal is WAL, so a run killed at any moment leaves a readable store with its finished
//! steps. The schema is versioned with `PRAGMA user_version` (see [`SCHEMA`]).

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use thiserror::Error;

/// The schema, version 1. Later versions append migrations.
pub const SCHEMA: &str = "
CREATE TABLE experiments (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  description TEXT NOT NULL,
  labels TEXT NOT NULL,            -- JSON object
  config TEXT NOT NULL,            -- the experiment as run (JSON, overrides applied)
  started_at TEXT NOT NULL,        -- RFC 3339 UTC
  finished_at TEXT,
  status TEXT NOT NULL,            -- running | done | interrupted | failed
  meshbench_version TEXT NOT NULL
);
CREATE TABLE steps (
  id INTEGER PRIMARY KEY,
  experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  seq INTEGER NOT NULL,            -- position in the run order
  repeat INTEGER NOT NULL,
  topology TEXT NOT NULL,
  variant TEXT NOT NULL,
  label TEXT NOT NULL,             -- Istio perf/benchmark style
  params TEXT NOT NULL,            -- JSON: qps, connections, response_bytes, jitter, cpu
  started_at TEXT NOT NULL,
  status TEXT NOT NULL,            -- ok | failed | partial
  error TEXT,
  versions TEXT NOT NULL,          -- JSON: program -> version line
  duration_secs REAL,
  requests INTEGER,
  errors INTEGER,
  throughput_rps REAL,
  p50_us INTEGER, p90_us INTEGER, p99_us INTEGER, p999_us INTEGER,
  result TEXT                      -- the load result JSON (as `meshbench run --json` writes)
);
CREATE TABLE histograms (
  step_id INTEGER NOT NULL REFERENCES steps(id),
  name TEXT NOT NULL,              -- latency_us, service_time_us, ...
  encoded TEXT NOT NULL            -- HdrHistogram V2 + DEFLATE, base64
);
CREATE TABLE series (
  step_id INTEGER NOT NULL REFERENCES steps(id),
  second INTEGER NOT NULL,
  requests INTEGER NOT NULL,
  errors INTEGER NOT NULL,
  p50_us INTEGER NOT NULL,
  p99_us INTEGER NOT NULL
);
CREATE TABLE usage (
  step_id INTEGER NOT NULL REFERENCES steps(id),
  role TEXT NOT NULL,
  program TEXT NOT NULL,
  workers INTEGER NOT NULL,
  cpu_limit REAL,                  -- cores, when limited
  samples INTEGER NOT NULL,
  cpu_millicores_avg REAL NOT NULL,
  cpu_millicores_max REAL NOT NULL,
  rss_mib_avg REAL NOT NULL,
  rss_mib_max REAL NOT NULL,
  working_set_mib_avg REAL,
  working_set_mib_max REAL,
  rx_bytes_per_sec REAL NOT NULL,
  tx_bytes_per_sec REAL NOT NULL,
  connections_avg REAL NOT NULL,
  connections_max INTEGER NOT NULL
);
CREATE TABLE samples (
  step_id INTEGER NOT NULL REFERENCES steps(id),
  role TEXT NOT NULL,
  t_ms INTEGER NOT NULL,
  cpu_ns INTEGER NOT NULL,
  rss_bytes INTEGER NOT NULL,
  working_set_bytes INTEGER,
  rx_bytes INTEGER NOT NULL,
  tx_bytes INTEGER NOT NULL,
  connections INTEGER NOT NULL
);
CREATE INDEX steps_by_experiment ON steps(experiment_id, seq);
CREATE INDEX usage_by_step ON usage(step_id);
CREATE INDEX samples_by_step ON samples(step_id);
";

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("cannot open the results store {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error("results store: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("no experiment '{0}' in the store; `meshbench results list` shows them")]
    NotFound(String),
}

/// The default store: `$XDG_DATA_HOME/meshbench/results.db`, else
/// `~/.local/share/meshbench/results.db`, else `./meshbench-results.db`.
pub fn default_path() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("meshbench/results.db");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h).join(".local/share/meshbench/results.db");
    }
    PathBuf::from("meshbench-results.db")
}

pub struct Store {
    conn: Connection,
}

/// A new experiment's row.
#[derive(Debug, Clone)]
pub struct NewExperiment {
    pub name: String,
    pub description: String,
    pub labels_json: String,
    pub config_json: String,
    pub started_at: String,
    pub meshbench_version: String,
}

/// An experiment as stored.
#[derive(Debug, Clone, Serialize)]
pub struct ExperimentRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub labels: serde_json::Value,
    pub config: serde_json::Value,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: String,
    pub meshbench_version: String,
    pub steps: i64,
}

/// One role's resource use over a step's steady window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UsageRow {
    pub role: String,
    pub program: String,
    pub workers: u32,
    pub cpu_limit: Option<f64>,
    pub samples: u32,
    pub cpu_millicores_avg: f64,
    pub cpu_millicores_max: f64,
    pub rss_mib_avg: f64,
    pub rss_mib_max: f64,
    pub working_set_mib_avg: Option<f64>,
    pub working_set_mib_max: Option<f64>,
    pub rx_bytes_per_sec: f64,
    pub tx_bytes_per_sec: f64,
    pub connections_avg: f64,
    pub connections_max: u64,
}

/// One raw sample.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SampleRow {
    pub role: String,
    pub t_ms: u64,
    pub cpu_ns: u64,
    pub rss_bytes: u64,
    pub working_set_bytes: Option<u64>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub connections: u64,
}

/// One second of the load.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SeriesRow {
    pub second: u32,
    pub requests: u64,
    pub errors: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

/// Summary columns of a step's load result.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LoadSummary {
    pub duration_secs: f64,
    pub requests: u64,
    pub errors: u64,
    pub throughput_rps: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
}

/// A step, written whole. `Default` is a step that has measured nothing yet.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepRecord {
    pub seq: u32,
    pub repeat: u32,
    pub topology: String,
    pub variant: String,
    pub label: String,
    pub params_json: String,
    pub started_at: String,
    /// ok | failed | partial
    pub status: String,
    pub error: Option<String>,
    pub versions_json: String,
    pub summary: Option<LoadSummary>,
    pub result_json: Option<String>,
    pub histograms: Vec<(String, String)>,
    pub series: Vec<SeriesRow>,
    pub usage: Vec<UsageRow>,
    pub samples: Vec<SampleRow>,
}

/// A step as read back (raw samples are read separately).
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    pub id: i64,
    pub seq: u32,
    pub repeat: u32,
    pub topology: String,
    pub variant: String,
    pub label: String,
    pub params: serde_json::Value,
    pub started_at: String,
    pub status: String,
    pub error: Option<String>,
    pub versions: serde_json::Value,
    pub summary: Option<LoadSummary>,
    pub result: Option<serde_json::Value>,
    pub usage: Vec<UsageRow>,
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
}

impl Store {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let fail = |reason: String| StoreError::Open {
            path: path.to_path_buf(),
            reason,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
        }
        let conn = Connection::open(path).map_err(|e| fail(e.to_string()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| fail(format!("{e} (is it an SQLite file?)")))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        match version {
            0 => {
                conn.execute_batch(&format!("BEGIN; {SCHEMA} PRAGMA user_version = 1; COMMIT;"))?;
            }
            1 => {}
            v => {
                return Err(fail(format!(
                    "schema version {v} is newer than this meshbench understands (1); upgrade meshbench"
                )))
            }
        }
        Ok(Store { conn })
    }

    pub fn begin_experiment(&self, e: &NewExperiment) -> Result<i64, StoreError> {
        self.conn.execute(
            "INSERT INTO experiments (name, description, labels, config, started_at, status, meshbench_version)
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6)",
            params![e.name, e.description, e.labels_json, e.config_json, e.started_at, e.meshbench_version],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn finish_experiment(&self, id: i64, status: &str, at: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE experiments SET status = ?2, finished_at = ?3 WHERE id = ?1",
            params![id, status, at],
        )?;
        Ok(())
    }

    /// Writes a step and everything measured in it, in one transaction.
    pub fn add_step(&mut self, experiment: i64, s: &StepRecord) -> Result<i64, StoreError> {
        let tx = self.conn.transaction()?;
        let sum = s.summary.clone();
        tx.execute(
            "INSERT INTO steps (experiment_id, seq, repeat, topology, variant, label, params, started_at,
               status, error, versions, duration_secs, requests, errors, throughput_rps,
               p50_us, p90_us, p99_us, p999_us, result)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
            params![
                experiment,
                s.seq,
                s.repeat,
                s.topology,
                s.variant,
                s.label,
                s.params_json,
                s.started_at,
                s.status,
                s.error,
                s.versions_json,
                sum.as_ref().map(|x| x.duration_secs),
                sum.as_ref().map(|x| x.requests as i64),
                sum.as_ref().map(|x| x.errors as i64),
                sum.as_ref().map(|x| x.throughput_rps),
                sum.as_ref().map(|x| x.p50_us as i64),
                sum.as_ref().map(|x| x.p90_us as i64),
                sum.as_ref().map(|x| x.p99_us as i64),
                sum.as_ref().map(|x| x.p999_us as i64),
                s.result_json,
            ],
        )?;
        let step = tx.last_insert_rowid();
        {
            let mut h = tx.prepare("INSERT INTO histograms VALUES (?1, ?2, ?3)")?;
            for (name, encoded) in &s.histograms {
                h.execute(params![step, name, encoded])?;
            }
            let mut q = tx.prepare("INSERT INTO series VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
            for p in &s.series {
                q.execute(params![
                    step,
                    p.second,
                    p.requests as i64,
                    p.errors as i64,
                    p.p50_us as i64,
                    p.p99_us as i64
                ])?;
            }
            let mut u = tx.prepare(
                "INSERT INTO usage VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            )?;
            for r in &s.usage {
                u.execute(params![
                    step,
                    r.role,
                    r.program,
                    r.workers,
                    r.cpu_limit,
                    r.samples,
                    r.cpu_millicores_avg,
                    r.cpu_millicores_max,
                    r.rss_mib_avg,
                    r.rss_mib_max,
                    r.working_set_mib_avg,
                    r.working_set_mib_max,
                    r.rx_bytes_per_sec,
                    r.tx_bytes_per_sec,
                    r.connections_avg,
                    r.connections_max as i64,
                ])?;
            }
            let mut m =
                tx.prepare("INSERT INTO samples VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")?;
            for r in &s.samples {
                m.execute(params![
                    step,
                    r.role,
                    r.t_ms as i64,
                    r.cpu_ns as i64,
                    r.rss_bytes as i64,
                    r.working_set_bytes.map(|b| b as i64),
                    r.rx_bytes as i64,
                    r.tx_bytes as i64,
                    r.connections as i64,
                ])?;
            }
        }
        tx.commit()?;
        Ok(step)
    }

    /// Every experiment, newest first.
    pub fn experiments(&self) -> Result<Vec<ExperimentRow>, StoreError> {
        let mut q = self.conn.prepare(
            "SELECT e.id, e.name, e.description, e.labels, e.config, e.started_at, e.finished_at,
                    e.status, e.meshbench_version, (SELECT COUNT(*) FROM steps s WHERE s.experiment_id = e.id)
             FROM experiments e ORDER BY e.id DESC",
        )?;
        let rows = q.query_map([], |r| {
            Ok(ExperimentRow {
                id: r.get(0)?,
                name: r.get(1)?,
                description: r.get(2)?,
                labels: json(&r.get::<_, String>(3)?),
                config: json(&r.get::<_, String>(4)?),
                started_at: r.get(5)?,
                finished_at: r.get(6)?,
                status: r.get(7)?,
                meshbench_version: r.get(8)?,
                steps: r.get(9)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// An experiment by id, or the newest with this name; `latest` for the newest of all.
    pub fn experiment(&self, key: &str) -> Result<ExperimentRow, StoreError> {
        let all = self.experiments()?;
        let found = if key == "latest" {
            all.into_iter().next()
        } else if let Ok(id) = key.parse::<i64>() {
            all.into_iter().find(|e| e.id == id)
        } else {
            all.into_iter().find(|e| e.name == key)
        };
        found.ok_or_else(|| StoreError::NotFound(key.to_string()))
    }

    /// The steps of an experiment in run order, with their resource use.
    pub fn steps(&self, experiment: i64) -> Result<Vec<StepRow>, StoreError> {
        let mut q = self.conn.prepare(
            "SELECT id, seq, repeat, topology, variant, label, params, started_at, status, error, versions,
                    duration_secs, requests, errors, throughput_rps, p50_us, p90_us, p99_us, p999_us, result
             FROM steps WHERE experiment_id = ?1 ORDER BY seq",
        )?;
        let mut steps: Vec<StepRow> = q
            .query_map([experiment], |r| {
                let duration: Option<f64> = r.get(11)?;
                let summary = match duration {
                    Some(d) => Some(LoadSummary {
                        duration_secs: d,
                        requests: r.get::<_, i64>(12)? as u64,
                        errors: r.get::<_, i64>(13)? as u64,
                        throughput_rps: r.get(14)?,
                        p50_us: r.get::<_, i64>(15)? as u64,
                        p90_us: r.get::<_, i64>(16)? as u64,
                        p99_us: r.get::<_, i64>(17)? as u64,
                        p999_us: r.get::<_, i64>(18)? as u64,
                    }),
                    None => None,
                };
                Ok(StepRow {
                    id: r.get(0)?,
                    seq: r.get(1)?,
                    repeat: r.get(2)?,
                    topology: r.get(3)?,
                    variant: r.get(4)?,
                    label: r.get(5)?,
                    params: json(&r.get::<_, String>(6)?),
                    started_at: r.get(7)?,
                    status: r.get(8)?,
                    error: r.get(9)?,
                    versions: json(&r.get::<_, String>(10)?),
                    summary,
                    result: r.get::<_, Option<String>>(19)?.map(|t| json(&t)),
                    usage: Vec::new(),
                })
            })?
            .collect::<Result<_, _>>()?;
        let mut u = self.conn.prepare(
            "SELECT role, program, workers, cpu_limit, samples, cpu_millicores_avg, cpu_millicores_max,
                    rss_mib_avg, rss_mib_max, working_set_mib_avg, working_set_mib_max,
                    rx_bytes_per_sec, tx_bytes_per_sec, connections_avg, connections_max
             FROM usage WHERE step_id = ?1 ORDER BY rowid",
        )?;
        for s in &mut steps {
            s.usage = u
                .query_map([s.id], |r| {
                    Ok(UsageRow {
                        role: r.get(0)?,
                        program: r.get(1)?,
                        workers: r.get(2)?,
                        cpu_limit: r.get(3)?,
                        samples: r.get(4)?,
                        cpu_millicores_avg: r.get(5)?,
                        cpu_millicores_max: r.get(6)?,
                        rss_mib_avg: r.get(7)?,
                        rss_mib_max: r.get(8)?,
                        working_set_mib_avg: r.get(9)?,
                        working_set_mib_max: r.get(10)?,
                        rx_bytes_per_sec: r.get(11)?,
                        tx_bytes_per_sec: r.get(12)?,
                        connections_avg: r.get(13)?,
                        connections_max: r.get::<_, i64>(14)? as u64,
                    })
                })?
                .collect::<Result<_, _>>()?;
        }
        Ok(steps)
    }

    /// The raw samples of a step.
    pub fn samples(&self, step: i64) -> Result<Vec<SampleRow>, StoreError> {
        let mut q = self.conn.prepare(
            "SELECT role, t_ms, cpu_ns, rss_bytes, working_set_bytes, rx_bytes, tx_bytes, connections
             FROM samples WHERE step_id = ?1 ORDER BY rowid",
        )?;
        let rows = q.query_map([step], |r| {
            Ok(SampleRow {
                role: r.get(0)?,
                t_ms: r.get::<_, i64>(1)? as u64,
                cpu_ns: r.get::<_, i64>(2)? as u64,
                rss_bytes: r.get::<_, i64>(3)? as u64,
                working_set_bytes: r.get::<_, Option<i64>>(4)?.map(|b| b as u64),
                rx_bytes: r.get::<_, i64>(5)? as u64,
                tx_bytes: r.get::<_, i64>(6)? as u64,
                connections: r.get::<_, i64>(7)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A step's encoded histogram by name.
    pub fn histogram(&self, step: i64, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT encoded FROM histograms WHERE step_id = ?1 AND name = ?2",
                params![step, name],
                |r| r.get(0),
            )
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(seq: u32) -> StepRecord {
        StepRecord {
            seq,
            repeat: 0,
            topology: "both".into(),
            variant: "both".into(),
            label: format!("t_qps_100_c_4_1024_default_both_{seq}"),
            params_json: r#"{"qps":100}"#.into(),
            started_at: "2026-11-22T00:00:00Z".into(),
            status: "ok".into(),
            error: None,
            versions_json: r#"{"nginx":"nginx/1.22.1"}"#.into(),
            summary: Some(LoadSummary {
                duration_secs: 2.0,
                requests: 200,
                errors: 1,
                throughput_rps: 100.0,
                p50_us: 300,
                p90_us: 500,
                p99_us: 900,
                p999_us: 1500,
            }),
            result_json: Some(r#"{"requests":{"ok":199}}"#.into()),
            histograms: vec![("latency_us".into(), "HISTFAKE".into())],
            series: vec![SeriesRow {
                second: 0,
                requests: 100,
                errors: 0,
                p50_us: 300,
                p99_us: 800,
            }],
            usage: vec![UsageRow {
                role: "server_proxy".into(),
                program: "nginx".into(),
                workers: 2,
                cpu_limit: Some(0.5),
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
            }],
            samples: vec![SampleRow {
                role: "server_proxy".into(),
                t_ms: 1,
                cpu_ns: 2,
                rss_bytes: 3,
                working_set_bytes: Some(4),
                rx_bytes: 5,
                tx_bytes: 6,
                connections: 7,
            }],
        }
    }

    #[test]
    fn steps_are_written_and_read_back_whole() {
        let dir = std::env::temp_dir().join(format!("mb-store-{}", std::process::id()));
        let path = dir.join("nested/results.db");
        let mut s = Store::open(&path).unwrap();
        let id = s
            .begin_experiment(&NewExperiment {
                name: "t".into(),
                description: String::new(),
                labels_json: r#"{"k":"v"}"#.into(),
                config_json: "{}".into(),
                started_at: "2026-11-22T00:00:00Z".into(),
                meshbench_version: "0.1.0".into(),
            })
            .unwrap();
        let step_id = s.add_step(id, &step(0)).unwrap();
        s.add_step(id, &step(1)).unwrap();
        s.finish_experiment(id, "done", "2026-11-22T00:01:00Z")
            .unwrap();
        drop(s);
        // Reopened: the schema is not created twice and everything is there.
        let s = Store::open(&path).unwrap();
        let e = s.experiment("t").unwrap();
        assert_eq!((e.id, e.steps, e.status.as_str()), (id, 2, "done"));
        assert_eq!(e.labels["k"], "v");
        assert_eq!(s.experiment("latest").unwrap().id, id);
        assert!(matches!(s.experiment("nope"), Err(StoreError::NotFound(_))));
        let steps = s.steps(id).unwrap();
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].summary, step(0).summary);
        assert_eq!(steps[0].usage, step(0).usage);
        assert_eq!(steps[0].versions["nginx"], "nginx/1.22.1");
        assert_eq!(s.samples(step_id).unwrap(), step(0).samples);
        assert_eq!(
            s.histogram(step_id, "latency_us").unwrap().as_deref(),
            Some("HISTFAKE")
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_store_is_refused_in_one_line() {
        let dir = std::env::temp_dir().join(format!("mb-store-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.db");
        std::fs::write(
            &path,
            "this is not sqlite, just text that is long enough to matter",
        )
        .unwrap();
        let err = Store::open(&path).err().unwrap().to_string();
        assert!(err.starts_with("cannot open the results store"), "{err}");
        assert!(!err.contains('\n'));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
