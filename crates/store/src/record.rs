//! The store's contract, typed: what is written (an experiment's row, a [`StepRecord`]) and what
//! is read back ([`ExperimentRow`], [`StoredStep`]). Statuses are enums, a step's parameters are
//! [`StepParams`], its load result a [`RunResult`], its resource use [`RoleUsage`]s and a
//! control-plane step's figures [`ControlPlaneFigures`] (all the contracts of
//! `meshbench_results`): no reader looks up a key or compares a status string.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use meshbench_results::{
    Attribution, ChangeFigures, ControlPlaneFigures, LoadPoint, Role, RoleUsage, RunResult, Sample,
    StepFailure, StepKind, StepParams, UsageSource,
};
use serde::{Deserialize, Serialize};

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// Measured to its end.
    Ok,
    /// Interrupted (Ctrl-C, SIGTERM): what was measured until then.
    Partial,
    /// Nothing usable was measured, or a role died during it; `error` says why.
    Failed,
}

/// How an experiment ended (or that it is still running, or was killed while running).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExperimentStatus {
    Running,
    Done,
    Interrupted,
    Failed,
}

/// A stored word that names no value of its kind (a status, a topology): what kind, and
/// the word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{word}'")]
pub struct UnknownWord {
    pub what: &'static str,
    pub word: String,
}

macro_rules! text_enum {
    ($t:ty { $($v:ident => $s:literal),+ $(,)? }) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),+ }
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $t {
            type Err = UnknownWord;
            fn from_str(s: &str) -> Result<Self, UnknownWord> {
                match s {
                    $($s => Ok(Self::$v),)+
                    other => Err(UnknownWord {
                        what: stringify!($t),
                        word: other.to_string(),
                    }),
                }
            }
        }
    };
}

text_enum!(StepStatus { Ok => "ok", Partial => "partial", Failed => "failed" });
text_enum!(ExperimentStatus {
    Running => "running",
    Done => "done",
    Interrupted => "interrupted",
    Failed => "failed",
});

/// A new experiment's row.
#[derive(Debug, Clone)]
pub struct NewExperiment {
    pub name: String,
    pub description: String,
    /// Free-form labels (study, ticket, environment...).
    pub labels: BTreeMap<String, String>,
    /// What was run, as JSON: the experiment file with overrides applied, or a search's
    /// settings.
    pub config: serde_json::Value,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub meshbench_version: String,
}

/// An experiment as stored.
#[derive(Debug, Clone, Serialize)]
pub struct ExperimentRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub labels: BTreeMap<String, String>,
    pub config: serde_json::Value,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: ExperimentStatus,
    pub meshbench_version: String,
    /// Steps stored so far.
    pub steps: i64,
    /// Of those, the steps that failed (nothing usable measured, or a role died)...
    pub failed_steps: i64,
    /// ... and those interrupted before their end.
    pub partial_steps: i64,
    /// The first failed step's number as `results show` prints it (from 1).
    pub first_failed_step: Option<i64>,
}

impl ExperimentRow {
    /// How it ended, in a few words, for `results list`: the status when every step measured
    /// to its end, else how many did and where the first failed (`partial 2/3: failed at step
    /// 2`, `failed at step 1: 0/2 ok`, `interrupted 1/2`). A run that went through its plan
    /// is `done` only when every step is good.
    pub fn outcome(&self) -> String {
        let ok = self.steps - self.failed_steps - self.partial_steps;
        if ok == self.steps {
            return self.status.to_string();
        }
        let failed_at = self
            .first_failed_step
            .map(|n| format!("failed at step {n}"));
        match (self.status, failed_at) {
            (ExperimentStatus::Done, Some(at)) if ok == 0 && self.partial_steps == 0 => {
                format!("{at}: 0/{} ok", self.steps)
            }
            (ExperimentStatus::Done, Some(at)) => format!("partial {ok}/{}: {at}", self.steps),
            (status, Some(at)) => format!("{status} {ok}/{}: {at}", self.steps),
            (status, None) => format!("{status} {ok}/{}", self.steps),
        }
    }
}

/// A step, written whole in one transaction. `Default` is a step that has measured nothing.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    /// 0-based position in the run order.
    pub seq: u32,
    pub repeat: u32,
    /// What kind of step it was (a chain's topology, `external`, `control_plane`); `None` for
    /// a step against a URL (no rig), stored as `url`. Its column and key are `topology`.
    #[serde(rename = "topology", with = "topology_name")]
    pub kind: Option<StepKind>,
    /// Topology plus the swept CPU allotment, as tables show it.
    pub variant: String,
    /// Istio perf/benchmark's label.
    pub label: String,
    pub params: StepParams,
    pub started_at: String,
    pub status: StepStatus,
    /// Why it failed; stored as its line (read back as [`StepFailure::Recorded`]).
    pub error: Option<StepFailure>,
    /// Program -> its version line.
    pub versions: BTreeMap<String, String>,
    /// The load result (as `meshbench run --json` writes it); summary columns, histograms and
    /// per-second series are stored from it. `None` for a step that failed before measuring,
    /// and for a `control_plane` step, which sends no load (its figures are `control_plane`).
    pub result: Option<RunResult>,
    /// Each role's use over the steady window, and the sampler's own as role `sampler`.
    pub usage: Vec<RoleUsage>,
    /// Raw samples per role: written with the step, read back by [`crate::Store::samples`]
    /// only (a step's table and answers do not need them).
    #[serde(skip)]
    pub samples: BTreeMap<Role, Vec<Sample>>,
    /// Where the latency went, hop by hop, when attribution was on (`None`: it was off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<Attribution>,
    /// What a `control_plane` step measured besides istiod's usage (which is a usage row, role
    /// `istiod`): propagation per xDS type, pushes, xDS bytes, convergence, agreement. `None`
    /// for every other step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneFigures>,
    /// Who read the roles' figures and how finely (`None`: a step with no role read, and
    /// every step from before schema v7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_source: Option<UsageSource>,
    /// What a step of a changes pair measured of its gateway changes (`None` for every other
    /// step): the step with changes has each change's record, its pair none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangeFigures>,
}

impl StepRecord {
    /// A step about to run: `failed` with no result until something is measured.
    pub fn new(seq: u32, params: StepParams) -> StepRecord {
        StepRecord {
            seq,
            repeat: 0,
            kind: None,
            variant: String::new(),
            label: String::new(),
            params,
            started_at: String::new(),
            status: StepStatus::Failed,
            error: None,
            versions: BTreeMap::new(),
            result: None,
            usage: Vec::new(),
            samples: BTreeMap::new(),
            attribution: None,
            control_plane: None,
            usage_source: None,
            changes: None,
        }
    }

    /// Takes a measured result: the status follows it (`partial` when interrupted).
    pub fn set_result(&mut self, result: RunResult) {
        self.status = if result.partial {
            StepStatus::Partial
        } else {
            StepStatus::Ok
        };
        self.result = Some(result);
    }

    /// Marks the step failed, saying why.
    pub fn fail(&mut self, why: StepFailure) {
        self.status = StepStatus::Failed;
        self.error = Some(why);
    }

    pub fn failed(&self) -> bool {
        self.status == StepStatus::Failed
    }

    /// Whether a stop caught the step while it was set up ([`StepFailure::StoppedBeforeLoad`],
    /// or its words as the store keeps them).
    pub fn stopped_before_load(&self) -> bool {
        match &self.error {
            Some(StepFailure::StoppedBeforeLoad) => true,
            Some(StepFailure::Recorded(line)) => {
                *line == StepFailure::StoppedBeforeLoad.to_string()
            }
            _ => false,
        }
    }

    /// Its load point, as tables name it and the analysis groups it: the response size is
    /// known for a rig's step only (a URL or an external server chooses its responses, and
    /// the stored 0 then means not known).
    pub fn load_point(&self) -> LoadPoint {
        let p = &self.params;
        LoadPoint {
            offer: p.offer,
            connections: p.connections,
            in_flight: p.in_flight,
            response_bytes: matches!(self.kind, Some(StepKind::Chain(_) | StepKind::ControlPlane))
                .then_some(p.response_bytes),
        }
    }

    /// The summary columns of its result.
    pub fn summary(&self) -> Option<ResultSummary> {
        self.result.as_ref().map(ResultSummary::of)
    }
}

/// A step as read back, with its id. Exported with its summary columns (`summary`), which
/// are computed from its result rather than kept beside it.
#[derive(Debug, Clone)]
pub struct StoredStep {
    pub id: i64,
    pub step: StepRecord,
}

impl Serialize for StoredStep {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Exported<'a> {
            id: i64,
            summary: Option<ResultSummary>,
            #[serde(flatten)]
            step: &'a StepRecord,
        }
        Exported {
            id: self.id,
            summary: self.step.summary(),
            step: &self.step,
        }
        .serialize(s)
    }
}

/// The summary columns of a step's result (for SQL queries and tables): its duration,
/// counts, throughput and latency percentiles.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ResultSummary {
    pub duration_secs: f64,
    pub requests: u64,
    pub errors: u64,
    pub throughput_rps: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
}

impl ResultSummary {
    pub fn of(r: &RunResult) -> ResultSummary {
        ResultSummary {
            duration_secs: r.duration_secs,
            requests: r.requests.total,
            errors: r.requests.errors,
            throughput_rps: r.throughput_rps,
            p50_us: r.latency_us.p50,
            p90_us: r.latency_us.p90,
            p99_us: r.latency_us.p99,
            p999_us: r.latency_us.p99_9,
        }
    }
}

/// A topology column: a step kind's word (a lab topology's name, `external`,
/// `control_plane`), or `url` for a step with no rig.
pub mod topology_name {
    use meshbench_results::StepKind;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::UnknownWord;

    pub const URL: &str = "url";

    pub fn text(t: Option<StepKind>) -> &'static str {
        t.map_or(URL, StepKind::name)
    }

    /// `None` for `url` and for what v1's capacity search wrote (`capacity`).
    pub fn parse(s: &str) -> Result<Option<StepKind>, UnknownWord> {
        match s {
            URL | "capacity" => Ok(None),
            _ => StepKind::from_word(s).map(Some).ok_or_else(|| UnknownWord {
                what: "topology",
                word: s.to_string(),
            }),
        }
    }

    pub fn serialize<S: Serializer>(t: &Option<StepKind>, s: S) -> Result<S::Ok, S::Error> {
        text(*t).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StepKind>, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(serde::de::Error::custom)
    }
}
