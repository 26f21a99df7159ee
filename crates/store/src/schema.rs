//! The SQL schema and its versions. `PRAGMA user_version` says which version a file has; a
//! store is brought up to [`VERSION`] when it is opened, one migration per version, each in
//! one transaction, so an old file opens with every step it had.
//!
//! - v1: the tables below.
//! - v2: every step's `params` rewritten as the typed `StepParams` (every key present, in one
//!   form), statuses checked against their enums, and `topology` 'capacity' (a step with no rig,
//!   as v1's capacity search wrote it) renamed 'url'. Nothing is dropped.
//! - v3: `usage.missing`, the figures of a role that were not measured and why (JSON object,
//!   `{"cpu": "..."}`; NULL when every figure was): an external role read from Prometheus can
//!   lack some. Rows from before read as complete, as they were.
//! - v4: `usage.proxy`, an Envoy role's own counts over the step from its admin endpoint
//!   (JSON object, the lab's `ProxyCounters`; NULL for every other role and every row from
//!   before).
//! - v5: `steps.attribution`, where the step's latency went hop by hop (JSON, the results'
//!   `Attribution`: the path as seen, the parts, each sampled request split; NULL when
//!   attribution was off and for every step from before).
//! - v6: `steps.control_plane`, what a `control_plane` step measured besides istiod's usage
//!   (JSON, the results' `ControlPlaneFigures`: propagation per xDS type, pushes, xDS bytes,
//!   convergence, agreement; NULL for every other step and every step from before).
//! - v7: `steps.usage_source`, who read the step's roles and how finely (JSON, the results'
//!   `UsageSource`: the lab's sampler, Prometheus, or the kubelets through the API server;
//!   NULL for a step with no role read and every step from before).
//! - v8: `steps.changes`, what a step of a changes pair measured of its gateway changes (JSON,
//!   the results' `ChangeFigures`: how they were told and each change's record; NULL for every
//!   other step and every step from before).

/// The schema as version 1 created it; [`MIGRATIONS`] bring it to [`VERSION`].
pub const SCHEMA_V1: &str = "
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
  topology TEXT NOT NULL,          -- a lab topology, or 'url' for a step with no rig
  variant TEXT NOT NULL,
  label TEXT NOT NULL,             -- Istio perf/benchmark style
  params TEXT NOT NULL,            -- JSON: StepParams (meshbench-experiment), canonical from v2
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

/// v2 -> v3: the figures of a role that were not measured.
pub const MIGRATE_V2_TO_V3: &str = "ALTER TABLE usage ADD COLUMN missing TEXT;";

/// v3 -> v4: an Envoy role's own counts.
pub const MIGRATE_V3_TO_V4: &str = "ALTER TABLE usage ADD COLUMN proxy TEXT;";

/// v4 -> v5: per-hop attribution.
pub const MIGRATE_V4_TO_V5: &str = "ALTER TABLE steps ADD COLUMN attribution TEXT;";

/// v5 -> v6: a control-plane step's figures.
pub const MIGRATE_V5_TO_V6: &str = "ALTER TABLE steps ADD COLUMN control_plane TEXT;";

/// v6 -> v7: who read a step's roles.
pub const MIGRATE_V6_TO_V7: &str = "ALTER TABLE steps ADD COLUMN usage_source TEXT;";

/// v7 -> v8: a step's gateway changes.
pub const MIGRATE_V7_TO_V8: &str = "ALTER TABLE steps ADD COLUMN changes TEXT;";

/// The version this meshbench writes.
pub const VERSION: i64 = 8;
