//! The board as the page reads it: `GET /api/board?since=SEQ` answers one [`BoardView`].
//!
//! The view is cut from the board under its lock (a copy of the steps' figures and of the
//! frames newer than `since`, nothing else) and serialized after the lock is let go, so a page
//! that asks for ten minutes of history does not hold up the runner. Times left are computed
//! here, against the server's clock, and `now_ms` is sent along so that the page can count them
//! down between answers without trusting the browser's clock.

use serde::Serialize;

use crate::{Board, Frame, Scope, StepState};

/// What `/api/board` answers.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BoardView {
    /// The board's sequence number: ask again with `since=seq` for what comes next.
    pub seq: u64,
    /// The server's wall clock, ms since the Unix epoch.
    pub now_ms: u64,
    /// The step whose load is running now (none between steps and after the end).
    pub current: Option<StepView>,
    /// Every step still on the board, oldest first (the current one last).
    pub steps: Vec<StepView>,
    /// Seconds left in the whole run: the current step's and every step after it (0 once done).
    pub left_in_all_secs: f64,
    /// Frames newer than `since`, oldest first.
    pub frames: Vec<Frame>,
    /// The oldest frame the board still holds: a page whose `since` is older than this has
    /// missed frames (they left the history) and should start over.
    pub first_seq: Option<u64>,
    /// Set once the run is over.
    pub done: Option<DoneView>,
}

/// A step, with its running totals.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StepView {
    pub scope: Scope,
    /// 1-based, as people count: `step 2/6`.
    pub number: u32,
    pub steps: usize,
    pub load: String,
    pub target_rps: Option<f64>,
    pub step_secs: f64,
    pub started_ms: u64,
    pub finished: bool,
    /// Seconds of this step's load still to run (0 once it finished).
    pub left_in_step_secs: f64,
    /// Seconds the steps after this one take.
    pub left_after_secs: f64,
    /// Measured seconds so far.
    pub seconds: u32,
    pub requests: u64,
    pub errors: u64,
    pub sends: u64,
    /// Over the step's measured window so far (0 before the first response).
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
}

/// How the run ended.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DoneView {
    pub outcome: String,
    /// Where the page links the report (`/report`), when one was written.
    pub report_url: Option<String>,
    /// The report's file, for people who open it later.
    pub report_path: Option<String>,
}

/// The route that serves the report.
pub const REPORT_URL: &str = "/report";

fn step_view(s: &StepState, now_ms: u64) -> StepView {
    let end_ms = s.info.started_ms + (s.info.step_secs.max(0.0) * 1000.0) as u64;
    let left_in_step_secs = if s.finished {
        0.0
    } else {
        end_ms.saturating_sub(now_ms) as f64 / 1000.0
    };
    let t = &s.totals;
    StepView {
        scope: s.info.scope.clone(),
        number: s.info.scope.step + 1,
        steps: s.info.steps,
        load: s.info.load.clone(),
        target_rps: s.info.target_rps,
        step_secs: s.info.step_secs,
        started_ms: s.info.started_ms,
        finished: s.finished,
        left_in_step_secs,
        left_after_secs: s.info.left_after_secs,
        seconds: t.seconds,
        requests: t.counts.total(),
        errors: t.counts.failed(),
        sends: t.sends,
        p50_us: t.latency.value_at_quantile(0.5),
        p99_us: t.latency.value_at_quantile(0.99),
        p999_us: t.latency.value_at_quantile(0.999),
    }
}

/// Cuts the view from `board`: everything but the frames at or before `since`.
pub fn view(board: &Board, since: u64, now_ms: u64) -> BoardView {
    let steps: Vec<StepView> = board.steps.iter().map(|s| step_view(s, now_ms)).collect();
    let current = board.current().map(|s| step_view(s, now_ms));
    let left_in_all_secs = if board.done.is_some() {
        0.0
    } else if let Some(c) = &current {
        c.left_in_step_secs + c.left_after_secs
    } else {
        // Between steps: what the steps after the last one take.
        steps.last().map_or(0.0, |s| s.left_after_secs)
    };
    BoardView {
        seq: board.seq,
        now_ms,
        current,
        steps,
        left_in_all_secs,
        frames: board
            .frames
            .iter()
            .filter(|f| f.seq > since)
            .cloned()
            .collect(),
        first_seq: board.frames.front().map(|f| f.seq),
        done: board.done.as_ref().map(|d| DoneView {
            outcome: d.outcome.clone(),
            report_url: d.report.as_ref().map(|_| REPORT_URL.to_string()),
            report_path: d.report.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Done, Hub, StepInfo};
    use meshbench_engine::recorder::Interval;

    fn info(step: u32, started_ms: u64) -> StepInfo {
        StepInfo {
            scope: Scope {
                experiment: "e".into(),
                step,
                variant: "baseline".into(),
            },
            load: "100 rps x 2 conn".into(),
            target_rps: Some(100.0),
            steps: 3,
            step_secs: 10.0,
            left_after_secs: 20.0,
            started_ms,
        }
    }

    fn second(n: u32, latency_us: u64) -> Interval {
        let mut iv = Interval::new(n);
        for _ in 0..100 {
            iv.counts.response(200);
            iv.latency.record(latency_us).unwrap();
        }
        iv.sends = 100;
        iv
    }

    #[test]
    fn frames_since_and_times_left() {
        let hub = Hub::new();
        hub.step_started(info(0, 1_000_000));
        let scope = info(0, 0).scope;
        hub.second(&scope, &second(0, 500), &[], 1_001_000);
        let seen = hub.board().seq;
        hub.second(&scope, &second(1, 700), &[], 1_002_000);

        let v = view(&hub.board(), 0, 1_004_000);
        assert_eq!(v.frames.len(), 2);
        assert_eq!(v.first_seq, Some(v.frames[0].seq));
        let c = v.current.as_ref().expect("a running step");
        assert_eq!((c.number, c.steps), (1, 3));
        assert_eq!(c.requests, 200);
        assert!((c.left_in_step_secs - 6.0).abs() < 1e-9);
        assert!((v.left_in_all_secs - 26.0).abs() < 1e-9);

        // Only what came after `seen`.
        let v = view(&hub.board(), seen, 1_004_000);
        assert_eq!(v.frames.len(), 1);
        assert_eq!(v.frames[0].p99_us, 700);

        // Between steps: no current step, the time of the steps after the last one.
        hub.step_finished(&scope);
        let v = view(&hub.board(), seen, 1_004_000);
        assert!(v.current.is_none());
        assert_eq!(v.steps[0].left_in_step_secs, 0.0);
        assert_eq!(v.left_in_all_secs, 20.0);

        hub.finished(Done {
            report: Some("/tmp/r/report.html".into()),
            outcome: "done".into(),
        });
        let v = view(&hub.board(), 0, 1_004_000);
        assert_eq!(v.left_in_all_secs, 0.0);
        let done = v.done.expect("done");
        assert_eq!(done.report_url.as_deref(), Some(REPORT_URL));
        assert_eq!(done.report_path.as_deref(), Some("/tmp/r/report.html"));
    }

    #[test]
    fn the_view_serializes_with_the_fields_the_page_reads() {
        let hub = Hub::new();
        hub.step_started(info(2, 0));
        hub.second(&info(2, 0).scope, &second(0, 900), &[], 1_000);
        let json = serde_json::to_value(view(&hub.board(), 0, 2_000)).unwrap();
        for path in [
            "/seq",
            "/now_ms",
            "/current/number",
            "/current/load",
            "/current/left_in_step_secs",
            "/left_in_all_secs",
            "/frames/0/requests",
            "/frames/0/sends",
            "/frames/0/p99_us",
            "/frames/0/errors_by_kind",
            "/frames/0/roles",
            "/frames/0/scope/step",
        ] {
            assert!(json.pointer(path).is_some(), "no {path} in {json}");
        }
        assert_eq!(json["current"]["number"], 3);
        assert!(json["done"].is_null());
    }
}
