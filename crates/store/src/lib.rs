//! The results store: one SQLite file (embedded, no server) holding every experiment, its
//! steps with their parameters, load results (the full JSON, summary columns for queries,
//! encoded histograms, per-second series), each role's resource use and raw samples, and the
//! versions of meshbench and of each program. Each step is written in one transaction and the
//! journal is WAL, so a run killed at any moment leaves a readable store with its finished
//! steps.
//!
//! The API is typed ([`record`]): a [`StepRecord`] goes in, [`StoredStep`]s come out. The
//! schema is versioned ([`schema`]); older files are migrated when opened, newer ones are
//! refused with a line that names both versions.

pub mod record;
pub mod schema;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use meshbench_experiment::{CpuAllotment, StepParams};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use thiserror::Error;

pub use meshbench_lab::sampler::{RoleUsage, Sample, Usage};
pub use record::{
    topology_name, ExperimentRow, ExperimentStatus, LoadSummary, NewExperiment, StepRecord,
    StepStatus, StoredStep,
};
pub use schema::VERSION;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("cannot open the results store {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error("results store: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("no experiment '{0}' in the store; `meshbench results list` shows them")]
    NotFound(String),
    #[error("results store: step {step}: {reason}")]
    Corrupt { step: i64, reason: String },
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

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("store types serialise")
}

impl Store {
    /// Opens (creating if needed, migrating if older) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let fail = |reason: String| StoreError::Open {
            path: path.to_path_buf(),
            reason,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
        }
        let mut conn = Connection::open(path).map_err(|e| fail(e.to_string()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| fail(format!("{e} (is it an SQLite file?)")))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let mut version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > VERSION {
            return Err(fail(format!(
                "schema version {version} is newer than this meshbench understands ({VERSION}); upgrade meshbench"
            )));
        }
        while version < VERSION {
            let tx = conn.transaction()?;
            match version {
                0 => tx.execute_batch(schema::SCHEMA_V1)?,
                1 => migrate_v1_to_v2(&tx).map_err(|e| {
                    fail(format!("cannot migrate it from schema version 1 to 2: {e}"))
                })?,
                _ => unreachable!("every version below VERSION has a migration"),
            }
            version += 1;
            tx.pragma_update(None, "user_version", version)?;
            tx.commit()?;
        }
        Ok(Store { conn })
    }

    pub fn begin_experiment(&self, e: &NewExperiment) -> Result<i64, StoreError> {
        self.conn.execute(
            "INSERT INTO experiments (name, description, labels, config, started_at, status, meshbench_version)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                e.name,
                e.description,
                to_json(&e.labels),
                e.config.to_string(),
                e.started_at,
                ExperimentStatus::Running.as_str(),
                e.meshbench_version
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn finish_experiment(
        &self,
        id: i64,
        status: ExperimentStatus,
        at: &str,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE experiments SET status = ?2, finished_at = ?3 WHERE id = ?1",
            params![id, status.as_str(), at],
        )?;
        Ok(())
    }

    /// Writes a step and everything measured in it, in one transaction.
    pub fn add_step(&mut self, experiment: i64, s: &StepRecord) -> Result<i64, StoreError> {
        let tx = self.conn.transaction()?;
        let sum = s.summary();
        tx.execute(
            "INSERT INTO steps (experiment_id, seq, repeat, topology, variant, label, params, started_at,
               status, error, versions, duration_secs, requests, errors, throughput_rps,
               p50_us, p90_us, p99_us, p999_us, result)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
            params![
                experiment,
                s.seq,
                s.repeat,
                topology_name::text(s.topology),
                s.variant,
                s.label,
                to_json(&s.params),
                s.started_at,
                s.status.as_str(),
                s.error,
                to_json(&s.versions),
                sum.as_ref().map(|x| x.duration_secs),
                sum.as_ref().map(|x| x.requests as i64),
                sum.as_ref().map(|x| x.errors as i64),
                sum.as_ref().map(|x| x.throughput_rps),
                sum.as_ref().map(|x| x.p50_us as i64),
                sum.as_ref().map(|x| x.p90_us as i64),
                sum.as_ref().map(|x| x.p99_us as i64),
                sum.as_ref().map(|x| x.p999_us as i64),
                s.result.as_ref().map(to_json),
            ],
        )?;
        let step = tx.last_insert_rowid();
        {
            if let Some(r) = &s.result {
                let h = &r.histogram;
                let mut q = tx.prepare("INSERT INTO histograms VALUES (?1, ?2, ?3)")?;
                for (name, encoded) in [
                    ("latency_us", Some(&h.latency_us)),
                    ("service_time_us", Some(&h.service_time_us)),
                    ("schedule_lag_us", h.schedule_lag_us.as_ref()),
                    ("connect_us", Some(&h.connect_us)),
                    ("tls_handshake_us", h.tls_handshake_us.as_ref()),
                ] {
                    if let Some(encoded) = encoded {
                        q.execute(params![step, name, encoded])?;
                    }
                }
                let mut q = tx.prepare("INSERT INTO series VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
                for p in &r.timeline {
                    q.execute(params![
                        step,
                        p.second,
                        p.requests as i64,
                        p.errors as i64,
                        p.p50_us as i64,
                        p.p99_us as i64
                    ])?;
                }
            }
            let mut q = tx.prepare(
                "INSERT INTO usage VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            )?;
            for r in &s.usage {
                let u = &r.usage;
                q.execute(params![
                    step,
                    r.role,
                    r.program,
                    r.workers,
                    r.cpu_limit,
                    u.samples as i64,
                    u.cpu_millicores_avg,
                    u.cpu_millicores_max,
                    u.rss_mib_avg,
                    u.rss_mib_max,
                    u.working_set_mib_avg,
                    u.working_set_mib_max,
                    u.rx_bytes_per_sec,
                    u.tx_bytes_per_sec,
                    u.connections_avg,
                    u.connections_max as i64,
                ])?;
            }
            let mut q =
                tx.prepare("INSERT INTO samples VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")?;
            for (role, samples) in &s.samples {
                for m in samples {
                    q.execute(params![
                        step,
                        role,
                        m.t_ms as i64,
                        m.cpu_ns as i64,
                        m.rss_bytes as i64,
                        m.working_set_bytes.map(|b| b as i64),
                        m.rx_bytes as i64,
                        m.tx_bytes as i64,
                        m.connections as i64,
                    ])?;
                }
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
            let status: String = r.get(7)?;
            Ok(ExperimentRow {
                id: r.get(0)?,
                name: r.get(1)?,
                description: r.get(2)?,
                labels: serde_json::from_str(&r.get::<_, String>(3)?).unwrap_or_default(),
                config: serde_json::from_str(&r.get::<_, String>(4)?)
                    .unwrap_or(serde_json::Value::Null),
                started_at: r.get(5)?,
                finished_at: r.get(6)?,
                // v2 checked every status; a row another program wrote counts as failed.
                status: status.parse().unwrap_or(ExperimentStatus::Failed),
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

    /// The steps of an experiment in run order, with their result and resource use (not their
    /// raw samples: [`Store::samples`]).
    pub fn steps(&self, experiment: i64) -> Result<Vec<StoredStep>, StoreError> {
        let mut q = self.conn.prepare(
            "SELECT id, seq, repeat, topology, variant, label, params, started_at, status, error,
                    versions, result
             FROM steps WHERE experiment_id = ?1 ORDER BY seq",
        )?;
        let raw: Vec<RawStep> = q
            .query_map([experiment], |r| {
                Ok(RawStep {
                    id: r.get(0)?,
                    seq: r.get(1)?,
                    repeat: r.get(2)?,
                    topology: r.get(3)?,
                    variant: r.get(4)?,
                    label: r.get(5)?,
                    params: r.get(6)?,
                    started_at: r.get(7)?,
                    status: r.get(8)?,
                    error: r.get(9)?,
                    versions: r.get(10)?,
                    result: r.get(11)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        let mut u = self.conn.prepare(
            "SELECT role, program, workers, cpu_limit, samples, cpu_millicores_avg, cpu_millicores_max,
                    rss_mib_avg, rss_mib_max, working_set_mib_avg, working_set_mib_max,
                    rx_bytes_per_sec, tx_bytes_per_sec, connections_avg, connections_max
             FROM usage WHERE step_id = ?1 ORDER BY rowid",
        )?;
        let mut steps = Vec::with_capacity(raw.len());
        for r in raw {
            let id = r.id;
            let mut step = r.typed()?;
            step.usage = u
                .query_map([id], |r| {
                    Ok(RoleUsage {
                        role: r.get(0)?,
                        program: r.get(1)?,
                        workers: r.get(2)?,
                        cpu_limit: r.get(3)?,
                        usage: Usage {
                            samples: r.get::<_, i64>(4)? as usize,
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
                        },
                    })
                })?
                .collect::<Result<_, _>>()?;
            steps.push(StoredStep { id, step });
        }
        Ok(steps)
    }

    /// The raw samples of a step, per role, in time order.
    pub fn samples(&self, step: i64) -> Result<BTreeMap<String, Vec<Sample>>, StoreError> {
        let mut q = self.conn.prepare(
            "SELECT role, t_ms, cpu_ns, rss_bytes, working_set_bytes, rx_bytes, tx_bytes, connections
             FROM samples WHERE step_id = ?1 ORDER BY rowid",
        )?;
        let mut out: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
        let rows = q.query_map([step], |r| {
            Ok((
                r.get::<_, String>(0)?,
                Sample {
                    t_ms: r.get::<_, i64>(1)? as u64,
                    cpu_ns: r.get::<_, i64>(2)? as u64,
                    rss_bytes: r.get::<_, i64>(3)? as u64,
                    working_set_bytes: r.get::<_, Option<i64>>(4)?.map(|b| b as u64),
                    rx_bytes: r.get::<_, i64>(5)? as u64,
                    tx_bytes: r.get::<_, i64>(6)? as u64,
                    connections: r.get::<_, i64>(7)? as u64,
                },
            ))
        })?;
        for row in rows {
            let (role, s) = row?;
            out.entry(role).or_default().push(s);
        }
        Ok(out)
    }

    /// A step's encoded histogram by name (HdrHistogram V2 + DEFLATE, base64).
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

/// A step row's columns before they are read into types.
struct RawStep {
    id: i64,
    seq: u32,
    repeat: u32,
    topology: String,
    variant: String,
    label: String,
    params: String,
    started_at: String,
    status: String,
    error: Option<String>,
    versions: String,
    result: Option<String>,
}

impl RawStep {
    fn typed(self) -> Result<StepRecord, StoreError> {
        let id = self.id;
        let corrupt = |what: &str, e: String| StoreError::Corrupt {
            step: id,
            reason: format!("{what}: {e}"),
        };
        Ok(StepRecord {
            seq: self.seq,
            repeat: self.repeat,
            topology: topology_name::parse(&self.topology).map_err(|e| corrupt("topology", e))?,
            variant: self.variant,
            label: self.label,
            params: serde_json::from_str(&self.params)
                .map_err(|e| corrupt("params", e.to_string()))?,
            started_at: self.started_at,
            status: self.status.parse().map_err(|e| corrupt("status", e))?,
            error: self.error,
            versions: serde_json::from_str(&self.versions)
                .map_err(|e| corrupt("versions", e.to_string()))?,
            result: match &self.result {
                Some(text) => {
                    Some(serde_json::from_str(text).map_err(|e| corrupt("result", e.to_string()))?)
                }
                None => None,
            },
            usage: Vec::new(),
            samples: BTreeMap::new(),
        })
    }
}

/// v1 -> v2: every step's params in the typed form, statuses checked, 'capacity' -> 'url'.
fn migrate_v1_to_v2(tx: &Transaction) -> Result<(), String> {
    let rows: Vec<(i64, String, String)> = {
        let mut q = tx
            .prepare("SELECT id, params, status FROM steps")
            .map_err(|e| e.to_string())?;
        let rows = q
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| e.to_string())?;
        rows.collect::<Result<_, _>>().map_err(|e| e.to_string())?
    };
    for (id, params, status) in rows {
        status
            .parse::<StepStatus>()
            .map_err(|e| format!("step {id}: {e}"))?;
        let typed = v1_params(&params).map_err(|e| format!("step {id}: params: {e}"))?;
        tx.execute(
            "UPDATE steps SET params = ?2 WHERE id = ?1",
            params![id, to_json(&typed)],
        )
        .map_err(|e| e.to_string())?;
    }
    tx.execute(
        "UPDATE steps SET topology = ?1 WHERE topology = 'capacity'",
        [topology_name::URL],
    )
    .map_err(|e| e.to_string())?;
    let statuses: Vec<String> = {
        let mut q = tx
            .prepare("SELECT status FROM experiments")
            .map_err(|e| e.to_string())?;
        let rows = q.query_map([], |r| r.get(0)).map_err(|e| e.to_string())?;
        rows.collect::<Result<_, _>>().map_err(|e| e.to_string())?
    };
    for s in statuses {
        s.parse::<ExperimentStatus>()?;
    }
    Ok(())
}

/// v1 wrote params as loose JSON: a capacity step had no `protocol`, `request_bytes` or `cpu`.
fn v1_params(text: &str) -> Result<StepParams, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let qps = v["qps"].as_f64();
    let pick = |key: &str, default: &str| -> Result<serde_json::Value, String> {
        Ok(match &v[key] {
            serde_json::Value::Null => serde_json::Value::String(default.into()),
            other => other.clone(),
        })
    };
    let cpu = match &v["cpu"] {
        serde_json::Value::Null => None,
        c => Some(serde_json::from_value::<CpuAllotment>(c.clone()).map_err(|e| e.to_string())?),
    };
    Ok(StepParams {
        qps,
        connections: v["connections"].as_u64().unwrap_or(0) as u32,
        response_bytes: v["response_bytes"].as_u64().unwrap_or(0),
        request_bytes: v["request_bytes"].as_u64().unwrap_or(0),
        jitter: v["jitter"].as_bool().unwrap_or(false),
        mode: serde_json::from_value(pick("mode", if qps.is_some() { "open" } else { "closed" })?)
            .map_err(|e| e.to_string())?,
        protocol: serde_json::from_value(pick("protocol", "http1")?).map_err(|e| e.to_string())?,
        cpu,
    })
}

#[cfg(test)]
mod tests;
