//! The results store: one SQLite file (embedded, no server) holding every experiment, its
//! steps with their parameters, load results (the full JSON, summary columns for queries,
//! encoded histograms, per-second series), each role's resource use and raw samples, a
//! control-plane step's figures (it has no load result), and the versions of meshbench and of
//! each program. Each step is written in one transaction and the journal is WAL, so a run
//! killed at any moment leaves a readable store with its finished steps.
//!
//! The API is typed ([`record`]): a [`StepRecord`] goes in, [`StoredStep`]s come out. The
//! schema is versioned ([`schema`]); older files are migrated when opened, newer ones are
//! refused with a line that names both versions.
//!
//! Faults are said in one line that names the file ([`StoreError`]): a file that is not SQLite,
//! one that is cut short (checked from its header before SQLite reads it) or damaged, a full
//! disk, a lock held too long. Several processes may write to one store at once: WAL lets
//! readers go on while one writes, every write transaction takes the write lock when it begins
//! (`BEGIN IMMEDIATE`, so none fails half-way for a lock), and a writer waits up to
//! [`BUSY_TIMEOUT`] for another's transaction, which lasts milliseconds (one step).

mod import;
pub mod record;
pub mod schema;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_results::{
    PlayedBy, Role, RoleUsage, RunResult, Sample, StepFailure, StepParams, Usage,
};
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use thiserror::Error;

pub use record::{
    topology_name, ExperimentRow, ExperimentStatus, NewExperiment, ResultSummary, StepRecord,
    StepStatus, StoredStep, UnknownWord,
};
pub use schema::VERSION;

/// How long a writer waits for another process's transaction before giving up. A step is
/// written in milliseconds; the wait only runs out if a process holds the lock and hangs.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// What went wrong with the store, in one line that names its file and says what to do.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The file or its folder could not be opened or created, or its schema is newer.
    #[error("cannot open the results store {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    /// Not an SQLite file at all: nothing is read from it or written to it.
    #[error(
        "{path} is not a results store (not an SQLite file); give another --store, or move the \
         file away and a new store is made there"
    )]
    NotAStore { path: PathBuf },
    /// An SQLite file cut short or overwritten.
    #[error(
        "the results store {path} is damaged ({detail}); give another --store, or move the file \
         away (`sqlite3 FILE .recover` may save the steps it still holds)"
    )]
    Damaged { path: PathBuf, detail: String },
    /// No room left on the disk holding the store (or its WAL file).
    #[error(
        "the results store {path} cannot grow: its disk is full; free space there or give \
         --store on another disk"
    )]
    Full { path: PathBuf },
    /// Another process held the write lock longer than [`BUSY_TIMEOUT`].
    #[error(
        "the results store {path} stayed locked by another process for {}s; try again once it \
         is done", BUSY_TIMEOUT.as_secs()
    )]
    Busy { path: PathBuf },
    /// Any other SQLite failure.
    #[error("results store {path}: {cause}")]
    Sql {
        path: PathBuf,
        cause: rusqlite::Error,
    },
    #[error("no experiment '{0}' in the store; `meshbench results list` shows them")]
    NotFound(String),
    #[error("results store {path}: step {step}: {reason}")]
    Corrupt {
        path: PathBuf,
        step: i64,
        reason: String,
    },
}

impl StoreError {
    /// An SQLite error in the store's words, naming its file.
    pub fn sqlite(path: &Path, e: rusqlite::Error) -> StoreError {
        use rusqlite::ErrorCode as C;
        let path = path.to_path_buf();
        match e.sqlite_error_code() {
            Some(C::DiskFull) => StoreError::Full { path },
            Some(C::NotADatabase) => StoreError::NotAStore { path },
            Some(C::DatabaseCorrupt) => StoreError::Damaged {
                path,
                detail: "SQLite finds it malformed: cut short or overwritten".into(),
            },
            Some(C::DatabaseBusy | C::DatabaseLocked) => StoreError::Busy { path },
            _ => StoreError::Sql { path, cause: e },
        }
    }

    /// The disk holding the store is full.
    pub fn disk_full(&self) -> bool {
        matches!(self, StoreError::Full { .. })
    }
}

/// Names the store's file on an SQLite error.
trait Named<T> {
    fn named(self, path: &Path) -> Result<T, StoreError>;
}

impl<T> Named<T> for rusqlite::Result<T> {
    fn named(self, path: &Path) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::sqlite(path, e))
    }
}

/// Why a file's first 100 bytes and length show it cannot be a store, before SQLite reads it.
#[derive(Debug, PartialEq)]
pub enum FileProblem {
    /// It does not start as an SQLite file does.
    NotSqlite,
    /// An SQLite file shorter than its header says it is.
    CutShort { len: u64, expected: u64 },
}

/// Checks an SQLite file's header against its length (`head`: its first bytes, up to 100).
/// An empty file is fine: SQLite makes a new database in it.
pub fn file_problem(head: &[u8], len: u64) -> Option<FileProblem> {
    const MAGIC: &[u8] = b"SQLite format 3\0";
    if len == 0 {
        return None;
    }
    if !head.starts_with(MAGIC) && !MAGIC.starts_with(head) {
        return Some(FileProblem::NotSqlite);
    }
    if head.len() < 100 {
        return Some(FileProblem::CutShort { len, expected: 100 });
    }
    let be32 = |at: usize| u32::from_be_bytes(head[at..at + 4].try_into().expect("4 bytes"));
    let page_size = match u16::from_be_bytes([head[16], head[17]]) {
        1 => 65_536,
        n => u64::from(n),
    };
    // The page count at 28 is only valid when the "version valid for" number at 92 equals the
    // change counter at 24 (SQLite's file format, section 1.3.7); every SQLite since 3.7.0
    // keeps it so.
    let pages = u64::from(be32(28));
    if be32(92) == be32(24) && pages > 0 {
        let expected = pages * page_size;
        if len < expected {
            return Some(FileProblem::CutShort { len, expected });
        }
    }
    None
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
    /// The file, for the errors that name it.
    path: PathBuf,
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
        check_file(path)?;
        let mut conn = Connection::open(path).map_err(|e| StoreError::sqlite(path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT).named(path)?;
        wal(&conn).named(path)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .named(path)?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .named(path)?;
        if version < VERSION {
            migrate(&mut conn, path)?;
        } else if version > VERSION {
            return Err(newer(path, version));
        }
        Ok(Store {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
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
        )
        .named(&self.path)?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn finish_experiment(
        &self,
        id: i64,
        status: ExperimentStatus,
        at: &str,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE experiments SET status = ?2, finished_at = ?3 WHERE id = ?1",
                params![id, status.as_str(), at],
            )
            .named(&self.path)?;
        Ok(())
    }

    /// Writes a step and everything measured in it, in one transaction: all of it or, on
    /// any failure (a full disk), none of it.
    pub fn add_step(&mut self, experiment: i64, s: &StepRecord) -> Result<i64, StoreError> {
        write_step(&mut self.conn, experiment, s).named(&self.path)
    }

    /// Every experiment, newest first.
    pub fn experiments(&self) -> Result<Vec<ExperimentRow>, StoreError> {
        read_experiments(&self.conn).named(&self.path)
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
        let raw = read_raw_steps(&self.conn, experiment).named(&self.path)?;
        let mut steps = Vec::with_capacity(raw.len());
        for r in raw {
            let id = r.id;
            let mut step = r.typed(&self.path)?;
            step.usage = read_usage(&self.conn, id).named(&self.path)?;
            steps.push(StoredStep { id, step });
        }
        Ok(steps)
    }

    /// The raw samples of a step, per role, in time order.
    pub fn samples(&self, step: i64) -> Result<BTreeMap<Role, Vec<Sample>>, StoreError> {
        read_samples(&self.conn, step).named(&self.path)
    }

    /// A step's encoded histogram by name (HdrHistogram V2 + DEFLATE, base64).
    pub fn histogram(&self, step: i64, name: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row(
                "SELECT encoded FROM histograms WHERE step_id = ?1 AND name = ?2",
                params![step, name],
                |r| r.get(0),
            )
            .optional()
            .named(&self.path)
    }
}

fn read_experiments(conn: &Connection) -> rusqlite::Result<Vec<ExperimentRow>> {
    let mut q = conn.prepare(
        "SELECT e.id, e.name, e.description, e.labels, e.config, e.started_at, e.finished_at,
                e.status, e.meshbench_version, (SELECT COUNT(*) FROM steps s WHERE s.experiment_id = e.id),
                (SELECT COUNT(*) FROM steps s WHERE s.experiment_id = e.id AND s.status = ?1),
                (SELECT COUNT(*) FROM steps s WHERE s.experiment_id = e.id AND s.status = ?2),
                (SELECT MIN(s.seq) + 1 FROM steps s WHERE s.experiment_id = e.id AND s.status = ?1)
         FROM experiments e ORDER BY e.id DESC",
    )?;
    let failed = StepStatus::Failed.as_str();
    let partial = StepStatus::Partial.as_str();
    let rows = q.query_map(params![failed, partial], |r| {
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
            failed_steps: r.get(10)?,
            partial_steps: r.get(11)?,
            first_failed_step: r.get(12)?,
        })
    })?;
    rows.collect()
}

fn read_raw_steps(conn: &Connection, experiment: i64) -> rusqlite::Result<Vec<RawStep>> {
    let mut q = conn.prepare(
        "SELECT id, seq, repeat, topology, variant, label, params, started_at, status, error,
                versions, result, attribution, control_plane, usage_source, changes
         FROM steps WHERE experiment_id = ?1 ORDER BY seq",
    )?;
    let rows = q.query_map([experiment], |r| {
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
            attribution: r.get(12)?,
            control_plane: r.get(13)?,
            usage_source: r.get(14)?,
            changes: r.get(15)?,
        })
    })?;
    rows.collect()
}

/// A step's usage rows, their roles and programs read from their words ([`Role::from_word`],
/// [`PlayedBy::from_word`]).
fn read_usage(conn: &Connection, step: i64) -> rusqlite::Result<Vec<RoleUsage>> {
    let mut q = conn.prepare_cached(
        "SELECT role, program, workers, cpu_limit, samples, cpu_millicores_avg, cpu_millicores_max,
                rss_mib_avg, rss_mib_max, working_set_mib_avg, working_set_mib_max,
                rx_bytes_per_sec, tx_bytes_per_sec, connections_avg, connections_max, missing, proxy
         FROM usage WHERE step_id = ?1 ORDER BY rowid",
    )?;
    let rows = q.query_map([step], |r| {
        Ok(RoleUsage {
            role: Role::from_word(&r.get::<_, String>(0)?),
            program: PlayedBy::from_word(&r.get::<_, String>(1)?),
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
            missing: match r.get::<_, Option<String>>(15)? {
                Some(text) => serde_json::from_str(&text).map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(
                        15,
                        rusqlite::types::Type::Text,
                        Box::new(e),
                    )
                })?,
                None => BTreeMap::new(),
            },
            proxy: match r.get::<_, Option<String>>(16)? {
                Some(text) => Some(serde_json::from_str(&text).map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(
                        16,
                        rusqlite::types::Type::Text,
                        Box::new(e),
                    )
                })?),
                None => None,
            },
        })
    })?;
    rows.collect()
}

fn read_samples(conn: &Connection, step: i64) -> rusqlite::Result<BTreeMap<Role, Vec<Sample>>> {
    let mut q = conn.prepare(
        "SELECT role, t_ms, cpu_ns, rss_bytes, working_set_bytes, rx_bytes, tx_bytes, connections
         FROM samples WHERE step_id = ?1 ORDER BY rowid",
    )?;
    let mut out: BTreeMap<Role, Vec<Sample>> = BTreeMap::new();
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
        out.entry(Role::from_word(&role)).or_default().push(s);
    }
    Ok(out)
}

/// A step in one `BEGIN IMMEDIATE` transaction (the write lock taken first, so a writer waits
/// for another at the start instead of failing half-way).
fn write_step(conn: &mut Connection, experiment: i64, s: &StepRecord) -> rusqlite::Result<i64> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let sum = s.summary();
    tx.execute(
        "INSERT INTO steps (experiment_id, seq, repeat, topology, variant, label, params, started_at,
           status, error, versions, duration_secs, requests, errors, throughput_rps,
           p50_us, p90_us, p99_us, p999_us, result, attribution, control_plane, usage_source, changes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)",
        params![
            experiment,
            s.seq,
            s.repeat,
            topology_name::text(s.kind),
            s.variant,
            s.label,
            to_json(&s.params),
            s.started_at,
            s.status.as_str(),
            s.error.as_ref().map(StepFailure::to_string),
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
            s.attribution.as_ref().map(to_json),
            s.control_plane.as_ref().map(to_json),
            s.usage_source.as_ref().map(to_json),
            s.changes.as_ref().map(to_json),
        ],
    )?;
    let step = tx.last_insert_rowid();
    if let Some(r) = &s.result {
        write_run_rows(&tx, step, r)?;
    }
    write_usage_rows(&tx, step, s)?;
    tx.commit()?;
    Ok(step)
}

/// The rows of step `step`'s run: its histograms (encoded) and its timeline's seconds.
fn write_run_rows(tx: &Connection, step: i64, r: &RunResult) -> rusqlite::Result<()> {
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
    Ok(())
}

/// The rows of step `step`'s roles: each role's usage, and each role's samples.
fn write_usage_rows(tx: &Connection, step: i64, s: &StepRecord) -> rusqlite::Result<()> {
    let mut q = tx.prepare(
        "INSERT INTO usage VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
    )?;
    for r in &s.usage {
        let u = &r.usage;
        q.execute(params![
            step,
            r.role.name(),
            r.program.name(),
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
            (!r.missing.is_empty()).then(|| to_json(&r.missing)),
            r.proxy.as_ref().map(to_json),
        ])?;
    }
    let mut q = tx.prepare("INSERT INTO samples VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")?;
    for (role, samples) in &s.samples {
        for m in samples {
            q.execute(params![
                step,
                role.name(),
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
    Ok(())
}

/// Puts the store in WAL mode. Switching needs the file to itself and SQLite does not wait for
/// it with the busy handler: two processes creating one store at the same moment see `BUSY`
/// at once, so the switch is retried here for as long as a writer would wait.
fn wal(conn: &Connection) -> rusqlite::Result<()> {
    let started = std::time::Instant::now();
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && started.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            done => return done,
        }
    }
}

/// Brings a store below [`VERSION`] up to it, one version per transaction. The version is read
/// again inside each (`BEGIN IMMEDIATE`): another process opening the same new file at the
/// same moment may have migrated it meanwhile.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .named(path)?;
        let version: i64 = tx
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .named(path)?;
        match version {
            VERSION => return Ok(()),
            0 => tx.execute_batch(schema::SCHEMA_V1).named(path)?,
            1 => migrate_v1_to_v2(&tx).map_err(|e| StoreError::Open {
                path: path.to_path_buf(),
                reason: format!("cannot migrate it from schema version 1 to 2: {e}"),
            })?,
            2 => tx.execute_batch(schema::MIGRATE_V2_TO_V3).named(path)?,
            3 => tx.execute_batch(schema::MIGRATE_V3_TO_V4).named(path)?,
            4 => tx.execute_batch(schema::MIGRATE_V4_TO_V5).named(path)?,
            5 => tx.execute_batch(schema::MIGRATE_V5_TO_V6).named(path)?,
            6 => tx.execute_batch(schema::MIGRATE_V6_TO_V7).named(path)?,
            7 => tx.execute_batch(schema::MIGRATE_V7_TO_V8).named(path)?,
            v if v > VERSION => return Err(newer(path, v)),
            v => unreachable!("schema version {v}: every version below VERSION has a migration"),
        }
        tx.pragma_update(None, "user_version", version + 1)
            .named(path)?;
        tx.commit().named(path)?;
    }
}

fn newer(path: &Path, version: i64) -> StoreError {
    StoreError::Open {
        path: path.to_path_buf(),
        reason: format!(
            "schema version {version} is newer than this meshbench understands ({VERSION}); upgrade meshbench"
        ),
    }
}

/// Refuses a file that is not SQLite or is cut short, before SQLite reads it (a cut file may
/// otherwise open and fail at the first query that reaches past its end). With a WAL file
/// beside it, a short file is left for SQLite to judge: see below.
fn check_file(path: &Path) -> Result<(), StoreError> {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Ok(()); // missing: made; unreadable: SQLite says why
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut head = Vec::with_capacity(100);
    let _ = (&mut f).take(100).read_to_end(&mut head);
    let path = path.to_path_buf();
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    match file_problem(&head, len) {
        None => Ok(()),
        // Pages not yet copied from the WAL (a checkpoint the disk had no room for): the file
        // may be shorter than its header while the WAL holds the rest.
        Some(FileProblem::CutShort { .. }) if wal_len > 0 && head.len() == 100 => Ok(()),
        Some(FileProblem::NotSqlite) => Err(StoreError::NotAStore { path }),
        Some(FileProblem::CutShort { len, expected }) => Err(StoreError::Damaged {
            path,
            detail: format!("cut short: {len} bytes where its header says {expected}"),
        }),
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
    /// Why the step failed, as stored: its line.
    error: Option<String>,
    versions: String,
    result: Option<String>,
    attribution: Option<String>,
    control_plane: Option<String>,
    usage_source: Option<String>,
    changes: Option<String>,
}

impl RawStep {
    fn typed(self, path: &Path) -> Result<StepRecord, StoreError> {
        let id = self.id;
        let corrupt = |what: &str, e: String| StoreError::Corrupt {
            path: path.to_path_buf(),
            step: id,
            reason: format!("{what}: {e}"),
        };
        Ok(StepRecord {
            seq: self.seq,
            repeat: self.repeat,
            kind: topology_name::parse(&self.topology)
                .map_err(|e| corrupt("topology", e.to_string()))?,
            variant: self.variant,
            label: self.label,
            params: serde_json::from_str(&self.params)
                .map_err(|e| corrupt("params", e.to_string()))?,
            started_at: self.started_at,
            status: self
                .status
                .parse()
                .map_err(|e: UnknownWord| corrupt("status", e.to_string()))?,
            error: self.error.map(StepFailure::Recorded),
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
            attribution: match &self.attribution {
                Some(text) => Some(
                    serde_json::from_str(text)
                        .map_err(|e| corrupt("attribution", e.to_string()))?,
                ),
                None => None,
            },
            control_plane: match &self.control_plane {
                Some(text) => Some(
                    serde_json::from_str(text)
                        .map_err(|e| corrupt("control_plane", e.to_string()))?,
                ),
                None => None,
            },
            usage_source: match &self.usage_source {
                Some(text) => Some(
                    serde_json::from_str(text)
                        .map_err(|e| corrupt("usage_source", e.to_string()))?,
                ),
                None => None,
            },
            changes: match &self.changes {
                Some(text) => Some(
                    serde_json::from_str(text).map_err(|e| corrupt("changes", e.to_string()))?,
                ),
                None => None,
            },
        })
    }
}

/// Why a v1 store could not be migrated to v2.
#[derive(Debug, Error)]
enum MigrateError {
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
    #[error("step {id}: {source}")]
    StepStatus { id: i64, source: UnknownWord },
    #[error("step {id}: params: {source}")]
    Params { id: i64, source: serde_json::Error },
    #[error(transparent)]
    ExperimentStatus(#[from] UnknownWord),
}

/// v1 -> v2: every step's params in the typed form, statuses checked, 'capacity' -> 'url'.
fn migrate_v1_to_v2(tx: &Transaction) -> Result<(), MigrateError> {
    let rows: Vec<(i64, String, String)> = {
        let mut q = tx.prepare("SELECT id, params, status FROM steps")?;
        let rows = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        rows.collect::<Result<_, _>>()?
    };
    for (id, params, status) in rows {
        status
            .parse::<StepStatus>()
            .map_err(|source| MigrateError::StepStatus { id, source })?;
        let typed = v1_params(&params).map_err(|source| MigrateError::Params { id, source })?;
        tx.execute(
            "UPDATE steps SET params = ?2 WHERE id = ?1",
            params![id, to_json(&typed)],
        )?;
    }
    tx.execute(
        "UPDATE steps SET topology = ?1 WHERE topology = 'capacity'",
        [topology_name::URL],
    )?;
    let statuses: Vec<String> = {
        let mut q = tx.prepare("SELECT status FROM experiments")?;
        let rows = q.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    for s in statuses {
        s.parse::<ExperimentStatus>()?;
    }
    Ok(())
}

/// v1 wrote params as loose JSON: a capacity step had no `protocol`, `request_bytes` or `cpu`,
/// and no `mode` (it was open at its `qps`). The missing keys get those defaults, then the
/// params read as any stored params do.
fn v1_params(text: &str) -> Result<StepParams, serde_json::Error> {
    let v: serde_json::Value = serde_json::from_str(text)?;
    let or = |key: &str, default: serde_json::Value| match &v[key] {
        serde_json::Value::Null => default,
        given => given.clone(),
    };
    let mode = if v["qps"].is_null() { "closed" } else { "open" };
    let typed = serde_json::json!({
        "qps": v["qps"],
        "connections": or("connections", 0.into()),
        "response_bytes": or("response_bytes", 0.into()),
        "request_bytes": or("request_bytes", 0.into()),
        "jitter": or("jitter", false.into()),
        "mode": or("mode", mode.into()),
        "protocol": or("protocol", "http1".into()),
        "cpu": v["cpu"],
    });
    serde_json::from_value(typed)
}

#[cfg(test)]
mod tests;
