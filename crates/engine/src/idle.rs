//! How a worker waits for its next send: a budget of precision, spent as cheaply as this
//! machine's clock allows.
//!
//! The budget is the *slack* (`--pacing-slack`): the most a send may leave after its intended
//! instant (the default instead leads, below). Latency is always measured from the intended instant, so the slack changes what the
//! target sees (how even the arrivals are), never a figure's truth; the schedule lag shows what
//! was spent.
//!
//! A sleep ends late by the machine's wake-up error: a few µs on bare metal, 30-120 µs on a
//! nested virtual machine, where a wake-up also costs 20-40 µs of CPU. The worker learns the
//! error's 99th percentile `L` from its own sleeps (a ring of the last [`RING`], recomputed every
//! [`UPDATE_EVERY`]) and aims each sleep at `due + slack − L`, so that at the 99th percentile it
//! wakes within the budget:
//!
//! - **slack ≥ L**: the aim is past the due instant. The sends falling due meanwhile ride the
//!   same wake-up: at rates whose gap is under the slack one wake-up carries several sends, and
//!   an even schedule costs a wake-up per slack, not per send.
//! - **slack < L**: the aim is before the due instant, and the rest (`L − slack`, the *margin*)
//!   must be spun on the clock (or, when the loop must watch its sockets, busy-polled). The idle
//!   strategy says how much of that it may spend:
//!
//! | strategy | margin spun at most |
//! | --- | --- |
//! | `sleep` | none: sends are late by the clock's error beyond the slack |
//! | `auto` with a given slack | ¼ of the gap between the worker's sends; none under a CPU quota, none in a second after one in which other processes held the CPU |
//! | `hybrid` | ½ of the gap (and not stopped by a quota or contention) |
//! | `spin` | unbounded: never sleeps while a send is pending, a full core |
//!
//! Every margin is also capped at [`MAX_MARGIN_NS`]: on a machine so loaded that sleeps end
//! milliseconds late, spinning would only take CPU from the processes that delay it. Under a
//! CPU quota (a pod's limit) a spin spends the quota the sends need, so `auto` never spins there.
//!
//! **`auto` leads** (the default: `auto` strategy, `auto` slack). It never spins and never aims
//! late: it sleeps to `due − L`, so that at the 99th percentile it is awake by the instant, and
//! the send woken for leaves at the wake-up with those falling due within [`LEAD_WINDOW_NS`]
//! after it, early, each timed from its real send (an early send has no lag to correct for;
//! [`Idle::horizon`]). So lag is near zero, a send leaves at most `L` and the window ahead of
//! its instant, and at rates whose gap is under the window one wake-up carries several sends:
//! an even schedule costs at most a wake-up per window, not per send (at 5,000 rps four sends a
//! wake-up, where a slack of 200 µs had carried one). The target sees the sends of a wake-up
//! together, so the window is the evenness given up: 0.75 ms keeps the target's gap p99 about
//! 1.5 times under the most even peer's at 1,000 and 5,000 rps (0.5 ms cost 8 % more CPU at
//! 5,000 rps, 1 ms came within 20 % of that peer's gaps; bench/pacer.sh, docs/benchmarks.md).
//! The window is counted from the send woken for, not from the wake-up: on a VM whose sleeps
//! end 1-3 ms late at p99 but 0.15 ms at the median, a window counted from the wake-up was
//! spent by the lead itself, and a wake-up carried 1.5 sends at 4,000 rps instead of 4 (twice
//! the CPU). A wake-up that is not the one aimed at the next send (an arrival's) carries the
//! window after itself.
//!
//! Leading, the slack is only the bar for calling a send late: the clock's error `L`, within
//! [`AUTO_SLACK_MIN_NS`] and [`AUTO_SLACK_MAX_NS`]. With `hybrid` or `sleep`, the **auto** slack
//! is chosen from the clock the worker measured before the start and keeps
//! learning: the 99th percentile of its sleeps' error (what a sleeping loop is late by anyway,
//! so batching within it costs no evenness the clock had not already lost), and at least
//! [`WAKE_COST_SHARE`] times the CPU of one wake-up (so that wake-ups take at most that share of
//! the thread however high the rate), within [`AUTO_SLACK_MIN_NS`] and [`AUTO_SLACK_MAX_NS`]
//! (a clock worse than that at p99 is a machine where evenness is bought by spinning: `auto`
//! spins the difference where the table above lets it).
//!
//! A long sleep ends later than a short one on a virtual machine: an idle vCPU is descheduled
//! by its host and takes longer to come back (here p99 of 0.9 ms after 5 ms asleep, 0.1 ms after
//! 1 ms). So `auto` and `hybrid` approach a send that is far off in two stages: a long sleep to
//! [`STAGE_NS`] before the aim, then a short one. The second wake-up costs CPU only at rates
//! below about 700 per worker per second, and the error is learnt from the short sleeps alone,
//! which are the ones the aim has to cover. (Were it learnt from the long ones, the slack
//! would follow their tail: 0.25 ms at p99 here after 5 ms asleep against 0.05 ms after 1 ms.)
//!
//! This module only does arithmetic on times it is given (unit-tested with plain numbers); the
//! driver does the sleeping and spinning.

use meshbench_results::load::{IdleStrategy, PacingSlack};

/// How far ahead of its instant a send may leave when `auto` leads (see the module header).
pub const LEAD_WINDOW_NS: u64 = 750_000;
/// The least slack `auto` chooses.
pub const AUTO_SLACK_MIN_NS: u64 = 20_000;
/// The most slack `auto` chooses: beyond it, the clock is helped by a spin where affordable.
pub const AUTO_SLACK_MAX_NS: u64 = 200_000;
/// `auto` chooses a slack of at least this many wake-ups' CPU: with one wake-up per slack at
/// most, wake-ups take at most 1/this of the thread at any rate.
pub const WAKE_COST_SHARE: u64 = 4;
/// The longest margin any strategy but `spin` spins (see the module header).
pub const MAX_MARGIN_NS: u64 = 500_000;
/// A send further off than this (and half again) is approached by a long sleep to this much
/// before the aim, then a short one.
pub const STAGE_NS: u64 = 1_000_000;
/// Wake-up errors remembered (the percentile is taken over these).
pub const RING: usize = 1024;
/// The error's percentile is recomputed after this many sleeps.
pub const UPDATE_EVERY: u32 = 64;
/// Sleeps a worker takes before the start to learn the clock (an estimate from the first sleeps
/// is taken as soon as this many are in).
pub const CALIBRATION: usize = 32;

/// One worker's idle policy and what it learnt of the clock.
#[derive(Debug, Clone)]
pub struct Idle {
    strategy: IdleStrategy,
    slack: PacingSlack,
    /// Recent wake-up errors in nanoseconds (saturated at u32::MAX).
    ring: Box<[u32; RING]>,
    /// Where the percentile is taken, so that no update allocates.
    scratch: Box<[u32; RING]>,
    filled: usize,
    next: usize,
    since_update: u32,
    /// The 99th percentile of the remembered errors.
    late_p99_ns: u64,
    /// CPU of one wake-up, measured before the start (0 until then).
    wake_cost_ns: u64,
    /// The most the margin may be (see the module header).
    cap_ns: u64,
    /// Other processes hold the CPU: spinning would only delay them, and so this thread.
    contended: bool,
    /// The process runs under a CPU quota: a spin spends what the sends need.
    under_quota: bool,
}

impl Idle {
    /// The policy for a worker whose sends are `gap_ns` apart on average.
    pub fn new(strategy: IdleStrategy, slack: PacingSlack, gap_ns: u64) -> Self {
        let cap_ns = match strategy {
            IdleStrategy::Auto => (gap_ns / 4).min(MAX_MARGIN_NS),
            IdleStrategy::Hybrid => (gap_ns / 2).min(MAX_MARGIN_NS),
            IdleStrategy::Sleep => 0,
            IdleStrategy::Spin => u64::MAX,
        };
        Idle {
            strategy,
            slack,
            ring: Box::new([0; RING]),
            scratch: Box::new([0; RING]),
            filled: 0,
            next: 0,
            since_update: 0,
            late_p99_ns: 0,
            wake_cost_ns: 0,
            cap_ns,
            contended: false,
            under_quota: false,
        }
    }

    pub fn strategy(&self) -> IdleStrategy {
        self.strategy
    }

    /// Whether this worker leads its sends: `auto` strategy and `auto` slack (see the module
    /// header).
    pub fn leads(&self) -> bool {
        self.strategy == IdleStrategy::Auto && self.slack == PacingSlack::Auto
    }

    /// The most a send may leave before its instant: leading, the clock's error (which the aim
    /// is ahead by) and the window after the send woken for; with `send_early`, the slack; else
    /// none.
    pub fn ahead_ns(&self, send_early: bool) -> u64 {
        if self.leads() {
            self.late_p99_ns + LEAD_WINDOW_NS
        } else if send_early {
            self.slack_ns()
        } else {
            0
        }
    }

    /// The latest instant a send may be due to leave at a wake-up at `now`, when the next send
    /// is due at `next_due`: they leave at it, early, and their latency counts from the real
    /// send. Leading, a wake-up aimed at the next send (it is due within the clock's error)
    /// carries the sends due within the window after that one, so that the batch spans the
    /// window however early the clock makes the loop wake; any other wake-up carries the window
    /// after itself. With `send_early`, the slack after the wake-up; else only what is due.
    pub fn horizon(&self, now: u64, next_due: Option<u64>, send_early: bool) -> u64 {
        if self.leads() {
            match next_due {
                Some(due) if due <= now + self.late_p99_ns => now.max(due) + LEAD_WINDOW_NS,
                _ => now + LEAD_WINDOW_NS,
            }
        } else if send_early {
            now + self.slack_ns()
        } else {
            now
        }
    }

    /// Whether the worker sleeps before sends at all (and so learns its clock).
    pub fn sleeps(&self) -> bool {
        self.strategy != IdleStrategy::Spin
    }

    /// The budget: the most a send may leave after its intended instant.
    pub fn slack_ns(&self) -> u64 {
        match self.slack {
            PacingSlack::Within { us } => us.saturating_mul(1_000),
            PacingSlack::Auto if self.leads() => {
                self.late_p99_ns.clamp(AUTO_SLACK_MIN_NS, AUTO_SLACK_MAX_NS)
            }
            PacingSlack::Auto => self
                .late_p99_ns
                .max(WAKE_COST_SHARE * self.wake_cost_ns)
                .clamp(AUTO_SLACK_MIN_NS, AUTO_SLACK_MAX_NS),
        }
    }

    /// What one wake-up cost before the start, in nanoseconds.
    pub fn wake_cost_ns(&self) -> u64 {
        self.wake_cost_ns
    }

    /// The calibration's wake-ups cost `cpu_ns` of CPU in all, `n` of them.
    pub fn calibrated(&mut self, cpu_ns: u64, n: u64) {
        self.wake_cost_ns = cpu_ns / n.max(1);
    }

    /// How long before a send the worker stops sleeping and spins.
    pub fn margin_ns(&self) -> u64 {
        if self.leads() {
            return 0;
        }
        let cap = match self.strategy {
            IdleStrategy::Auto if self.contended || self.under_quota => 0,
            IdleStrategy::Hybrid if self.contended => 0,
            _ => self.cap_ns,
        };
        if cap == u64::MAX {
            return u64::MAX;
        }
        self.late_p99_ns.saturating_sub(self.slack_ns()).min(cap)
    }

    /// Until when to sleep when the next thing due is a send at `send_at`: past it by what the
    /// slack leaves after the clock's error, or before it by the margin to spin.
    pub fn sleep_until(&self, send_at: u64) -> u64 {
        if self.leads() {
            return send_at.saturating_sub(self.late_p99_ns);
        }
        let margin = self.margin_ns();
        if margin > 0 {
            return send_at.saturating_sub(margin);
        }
        send_at + self.slack_ns().saturating_sub(self.late_p99_ns)
    }

    /// Where a sleep towards `sleep_to` should stop first, if the send is far enough off to be
    /// approached in two stages (see the module header).
    pub fn stage_before(&self, now: u64, sleep_to: u64) -> Option<u64> {
        (self.strategy.learns()
            && !self.contended
            && sleep_to.saturating_sub(now) > STAGE_NS + STAGE_NS / 2)
            .then(|| sleep_to - STAGE_NS)
    }

    /// Whether the thread shared its CPU with other processes in the last second.
    pub fn contended(&mut self, contended: bool) {
        self.contended = contended;
    }

    /// Whether the process runs under a CPU quota.
    pub fn under_quota(&mut self, under_quota: bool) {
        self.under_quota = under_quota;
    }

    /// A sleep asked to end at `asked` ended at `woke`: its error joins the estimate. Returns
    /// the error in nanoseconds (0 when early, which a woken poll can be).
    pub fn woke(&mut self, asked: u64, woke: u64) -> u64 {
        let error = woke.saturating_sub(asked);
        self.ring[self.next] = error.min(u32::MAX as u64) as u32;
        self.next = (self.next + 1) % RING;
        self.filled = (self.filled + 1).min(RING);
        self.since_update += 1;
        if self.since_update >= UPDATE_EVERY || self.filled == CALIBRATION {
            self.since_update = 0;
            self.late_p99_ns = self.p99_error_ns();
        }
        error
    }

    /// The 99th percentile of the remembered errors, in nanoseconds.
    pub fn p99_error_ns(&mut self) -> u64 {
        if self.filled == 0 {
            return 0;
        }
        let seen = &mut self.scratch[..self.filled];
        seen.copy_from_slice(&self.ring[..self.filled]);
        let k = (self.filled * 99).div_ceil(100) - 1;
        let (_, v, _) = seen.select_nth_unstable(k);
        *v as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    /// A gap that caps nothing in these tests (200 rps).
    const GAP: u64 = 5_000 * US;

    /// A slow clock: 97 sleeps in 100 end 40 µs late, three 300 µs late.
    fn slow() -> Vec<u64> {
        let mut errors = vec![40; 97];
        errors.extend([300; 3]);
        errors
    }

    /// A good clock: 5 µs, and 20 µs three times in 100.
    fn good() -> Vec<u64> {
        let mut errors = vec![5; 97];
        errors.extend([20; 3]);
        errors
    }

    /// A policy fed `n` sleeps with errors cycling through `errors_us`.
    fn learnt(strategy: IdleStrategy, slack: PacingSlack, errors_us: &[u64], n: usize) -> Idle {
        let mut idle = Idle::new(strategy, slack, GAP);
        for i in 0..n {
            let asked = i as u64 * 1_000_000;
            idle.woke(asked, asked + errors_us[i % errors_us.len()] * US);
        }
        idle
    }

    const AUTO: PacingSlack = PacingSlack::Auto;

    #[test]
    fn the_auto_slack_follows_the_clock_and_the_wake_cost() {
        // (case, errors, wake cost µs, slack µs)
        let cases = [
            ("a slow clock: capped at the max", slow(), 0, 200),
            ("a good clock: the minimum", good(), 0, 20),
            ("a good clock, costly wake-ups", good(), 21, 84),
            ("a clock 60 µs late at p99", vec![60; 100], 10, 60),
        ];
        for (case, errors, cost_us, want_us) in cases {
            let mut idle = learnt(IdleStrategy::Hybrid, AUTO, &errors, 1000);
            idle.calibrated(cost_us * US * 32, 32);
            assert_eq!(idle.slack_ns() / US, want_us, "{case}");
        }
        let given = learnt(
            IdleStrategy::Auto,
            PacingSlack::Within { us: 700 },
            &slow(),
            100,
        );
        assert_eq!(given.slack_ns(), 700 * US, "a given slack is kept");
    }

    #[test]
    fn the_margin_is_what_the_slack_leaves_of_the_clock_and_the_strategy_allows() {
        let tight = PacingSlack::Within { us: 0 };
        // (case, strategy, slack, errors, margin µs)
        let cases = [
            ("sleep never spins", IdleStrategy::Sleep, tight, slow(), 0),
            (
                "hybrid covers the p99 error",
                IdleStrategy::Hybrid,
                tight,
                slow(),
                300,
            ),
            (
                "auto, no slack: covers it too",
                IdleStrategy::Auto,
                tight,
                slow(),
                300,
            ),
            (
                "auto slack: 200 of 300 µs",
                IdleStrategy::Hybrid,
                AUTO,
                slow(),
                100,
            ),
            (
                "auto on a good clock only sleeps",
                IdleStrategy::Auto,
                AUTO,
                good(),
                0,
            ),
            (
                "a slack wider than the clock's error: no spin",
                IdleStrategy::Hybrid,
                PacingSlack::Within { us: 500 },
                slow(),
                0,
            ),
        ];
        for (case, strategy, slack, errors, want) in cases {
            assert_eq!(
                learnt(strategy, slack, &errors, 1000).margin_ns() / US,
                want,
                "{case}"
            );
        }
        assert_eq!(
            learnt(IdleStrategy::Spin, AUTO, &slow(), 10).margin_ns(),
            u64::MAX
        );
    }

    #[test]
    fn a_slack_wider_than_the_clock_aims_past_the_send() {
        // Error p99 40 µs, slack 1 ms: aim 960 µs past the send, so the sends due meanwhile
        // ride the same wake-up and the last lands within the budget at p99.
        let idle = learnt(
            IdleStrategy::Auto,
            PacingSlack::Within { us: 1_000 },
            &[40],
            100,
        );
        assert_eq!(idle.sleep_until(10_000 * US), 10_960 * US);
        // Error p99 300 µs, slack 200 µs: hybrid spins 100 µs before the send.
        let idle = learnt(IdleStrategy::Hybrid, AUTO, &slow(), 1000);
        assert_eq!(idle.sleep_until(10_000 * US), 9_900 * US);
        assert_eq!(
            idle.sleep_until(50 * US),
            0,
            "never before the clock's start"
        );
    }

    #[test]
    fn auto_leads_by_the_clock_error_and_sends_the_window_early() {
        // Error p99 300 µs: aim 300 µs before the send, spin nothing, send what falls due within
        // the window; the late bar is the clock's error (capped), not the wake-up cost.
        let mut idle = learnt(IdleStrategy::Auto, AUTO, &slow(), 1000);
        idle.calibrated(21 * US * 32, 32);
        assert!(idle.leads());
        assert_eq!(idle.sleep_until(10_000 * US), 9_700 * US);
        assert_eq!(idle.margin_ns(), 0, "leading never spins");
        assert_eq!(idle.ahead_ns(false), 300 * US + LEAD_WINDOW_NS);
        assert_eq!(idle.slack_ns(), AUTO_SLACK_MAX_NS);
        // Woken at the aim, or later: the window after the send woken for.
        let due = 10_000 * US;
        assert_eq!(
            idle.horizon(9_700 * US, Some(due), false),
            due + LEAD_WINDOW_NS
        );
        assert_eq!(
            idle.horizon(9_900 * US, Some(due), false),
            due + LEAD_WINDOW_NS
        );
        assert_eq!(
            idle.horizon(10_200 * US, Some(due), false),
            10_200 * US + LEAD_WINDOW_NS
        );
        // Woken before the aim (an arrival): the window after the wake-up.
        assert_eq!(
            idle.horizon(9_000 * US, Some(due), false),
            9_000 * US + LEAD_WINDOW_NS
        );
        assert_eq!(
            idle.horizon(9_000 * US, None, false),
            9_000 * US + LEAD_WINDOW_NS
        );
        let steady = learnt(IdleStrategy::Auto, AUTO, &good(), 1000);
        assert_eq!(steady.slack_ns(), AUTO_SLACK_MIN_NS);
        // A clock worse than the window (900 µs at p99, as on a slow VM): the loop wakes 900 µs
        // ahead and still carries a whole window, so a wake-up carries as many sends as on a
        // good clock; a send leaves at most the error and the window ahead.
        let awful = learnt(IdleStrategy::Auto, AUTO, &[900], 200);
        assert_eq!(awful.sleep_until(due), due - 900 * US);
        assert_eq!(
            awful.horizon(due - 850 * US, Some(due), false),
            due + LEAD_WINDOW_NS
        );
        assert_eq!(awful.ahead_ns(false), 900 * US + LEAD_WINDOW_NS);
        // A given slack, or another strategy, does not lead; --send-early sends its slack early.
        let given = learnt(
            IdleStrategy::Auto,
            PacingSlack::Within { us: 100 },
            &good(),
            1000,
        );
        assert!(!given.leads());
        assert_eq!(given.ahead_ns(false), 0);
        assert_eq!(given.ahead_ns(true), 100 * US);
        assert_eq!(
            given.horizon(due - 50 * US, Some(due), false),
            due - 50 * US
        );
        assert_eq!(given.horizon(due - 50 * US, Some(due), true), due + 50 * US);
        assert!(!learnt(IdleStrategy::Hybrid, AUTO, &good(), 100).leads());
    }

    #[test]
    fn the_margin_is_capped_and_follows_the_clock() {
        let tight = PacingSlack::Within { us: 0 };
        // Sleeps 800 µs late at 1,000 rps: hybrid spins at most half the 1 ms gap.
        let mut half = Idle::new(IdleStrategy::Hybrid, tight, 1_000 * US);
        for i in 0..200 {
            half.woke(i, i + 800 * US);
        }
        assert_eq!(half.margin_ns(), 500 * US);
        // At 5,000 rps (200 µs apart) auto spins at most 50 µs of each gap.
        let mut fast = Idle::new(IdleStrategy::Auto, tight, 200 * US);
        for i in 0..200 {
            fast.woke(i, i + 300 * US);
        }
        assert_eq!(fast.margin_ns(), 50 * US);
        // At 1 rps the cap is MAX_MARGIN_NS.
        let mut slow_rate = Idle::new(IdleStrategy::Hybrid, tight, 1_000_000 * US);
        for i in 0..200 {
            slow_rate.woke(i, i + 10_000 * US);
        }
        assert_eq!(slow_rate.margin_ns(), MAX_MARGIN_NS);
        // The clock gets better: after a ring's worth of good sleeps the margin follows.
        let mut idle = Idle::new(IdleStrategy::Hybrid, tight, GAP);
        for i in 0..RING as u64 {
            idle.woke(i, i + 200 * US);
        }
        assert_eq!(idle.margin_ns(), 200 * US);
        for i in 0..(RING + UPDATE_EVERY as usize) as u64 {
            idle.woke(i, i + 30 * US);
        }
        assert_eq!(idle.margin_ns(), 30 * US);
    }

    #[test]
    fn contention_and_a_quota_stop_the_spin_unless_told_to_spin() {
        let tight = PacingSlack::Within { us: 0 };
        // (strategy, contended, under a quota, margin µs)
        let cases = [
            (IdleStrategy::Auto, true, false, 0),
            (IdleStrategy::Auto, false, true, 0),
            (IdleStrategy::Auto, false, false, 300),
            (IdleStrategy::Hybrid, true, false, 0),
            (IdleStrategy::Hybrid, false, true, 300),
            (IdleStrategy::Spin, true, true, u64::MAX / US),
        ];
        for (strategy, contended, quota, want) in cases {
            let mut idle = learnt(strategy, tight, &slow(), 200);
            idle.contended(contended);
            idle.under_quota(quota);
            assert_eq!(
                idle.margin_ns() / US,
                want,
                "{strategy:?} contended {contended} quota {quota}"
            );
        }
    }

    #[test]
    fn far_sends_are_approached_in_two_stages_by_the_strategies_that_spin() {
        let ms = 1_000 * US;
        let tight = PacingSlack::Within { us: 0 };
        let auto = learnt(IdleStrategy::Auto, tight, &slow(), 200);
        assert_eq!(auto.stage_before(0, 5 * ms), Some(4 * ms));
        assert_eq!(auto.stage_before(0, ms + ms / 2), None, "near enough");
        assert_eq!(auto.stage_before(4 * ms, 5 * ms), None);
        let sleep = learnt(IdleStrategy::Sleep, tight, &slow(), 200);
        assert_eq!(sleep.stage_before(0, 5 * ms), None);
        let mut contended = learnt(IdleStrategy::Hybrid, tight, &slow(), 200);
        contended.contended(true);
        assert_eq!(
            contended.stage_before(0, 5 * ms),
            None,
            "no spinning, no staging"
        );
    }

    #[test]
    fn calibration_sets_an_estimate_before_the_first_update() {
        let mut idle = Idle::new(IdleStrategy::Hybrid, PacingSlack::Within { us: 0 }, GAP);
        for i in 0..CALIBRATION as u64 {
            idle.woke(i, i + 100 * US);
        }
        assert_eq!(idle.margin_ns(), 100 * US);
        assert_eq!(idle.sleep_until(1_000 * US), 900 * US);
        assert_eq!(idle.woke(10, 5), 0, "early is no error");
        idle.calibrated(640 * US, 32);
        assert_eq!(idle.wake_cost_ns(), 20 * US);
    }
}
