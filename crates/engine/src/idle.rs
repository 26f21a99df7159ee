//! How a worker waits for its next send: the machine's clock decides how much to trust a sleep.
//!
//! A sleep ends late by the machine's wake-up error: a few µs on bare metal, 30-120 µs on a
//! nested virtual machine, where it also costs 20-40 µs of CPU. A send that waits on such a
//! sleep goes out late, and the lag goes into every corrected latency. So the worker sleeps
//! until a *margin* before the send is due, then spins on the clock (or, when it must watch its
//! sockets, busy-polls them) for the rest. The margin comes from the wake-up errors the worker
//! measures on itself as it runs: every sleep's lateness goes into a ring of the last
//! [`RING`] and, every [`UPDATE_EVERY`] sleeps, the margin becomes their 99th percentile less
//! what the strategy allows a send to be late:
//!
//! | strategy | margin | at most | cost |
//! | --- | --- | --- | --- |
//! | `sleep` | 0 | | one wake-up per send; late by the wake-up error |
//! | `auto` (default) | p99 error − 25 µs | ¼ of the gap | spins only where the clock is worse than 25 µs |
//! | `hybrid` | p99 error | ½ of the gap | on time for 99 % of sends; spins for the error's spread |
//! | `spin` | unbounded | | never sleeps while a send is pending: a full core, exact |
//!
//! So `auto` is a plain sleep on a machine whose wake-ups land on time and a hybrid on one whose
//! do not. The cap (a share of the mean gap between one worker's sends, and never more than
//! [`MAX_MARGIN_NS`]) bounds the CPU spent spinning to that share of the thread: on a machine
//! so loaded that sleeps end milliseconds late, spinning would only take CPU from the processes
//! that delay it. For the same reason `auto` and `hybrid` do not spin at all in a second after
//! one in which the thread waited a tenth of the time for a CPU other processes held (the
//! driver reads the kernel's run-queue delay once a second and says so with
//! [`Idle::contended`]). The JSON reports the wake-up error measured, the time spun and the
//! strategy.
//!
//! A long sleep ends later than a short one on a virtual machine: an idle vCPU is descheduled
//! by its host and takes longer to come back (here p99 of 0.9 ms after 5 ms asleep, 0.1 ms after
//! 1 ms). So `auto` and `hybrid` approach a send that is far off in two stages: a long sleep to
//! [`STAGE_NS`] before the margin, then a short one to the margin. The second wake-up costs
//! CPU only at rates below about 700 per worker per second, and the margin is learnt from the
//! short sleeps alone, which are the ones it has to cover.
//! This module only does arithmetic on times it is given (unit-tested with plain numbers); the
//! driver does the sleeping and spinning.

use meshbench_results::load::IdleStrategy;

/// How late `auto` lets a send be at the 99th percentile before it spends CPU on spinning.
pub const AUTO_ALLOWANCE_NS: u64 = 25_000;
/// The longest margin `auto` and `hybrid` spin: a clock whose p99 error is worse than this is
/// a machine too loaded (or too descheduled by its hypervisor) for spinning to buy more than
/// it costs.
pub const MAX_MARGIN_NS: u64 = 500_000;
/// A send further off than this (and half again) is approached by a long sleep to this much
/// before the margin, then a short one.
pub const STAGE_NS: u64 = 1_000_000;
/// Wake-up errors remembered (the percentile is taken over these).
pub const RING: usize = 1024;
/// The margin is recomputed after this many sleeps.
pub const UPDATE_EVERY: u32 = 64;

/// One worker's idle policy and what it learnt of the clock.
#[derive(Debug, Clone)]
pub struct Idle {
    strategy: IdleStrategy,
    /// Recent wake-up errors in nanoseconds (saturated at u32::MAX).
    ring: Box<[u32; RING]>,
    /// Where the percentile is taken, so that no update allocates.
    scratch: Box<[u32; RING]>,
    filled: usize,
    next: usize,
    since_update: u32,
    margin_ns: u64,
    /// The most the margin may be (see the module header).
    cap_ns: u64,
    /// Other processes hold the CPU: spinning would only delay them, and so this thread.
    contended: bool,
}

impl Idle {
    /// The policy for a worker whose sends are `gap_ns` apart on average.
    pub fn new(strategy: IdleStrategy, gap_ns: u64) -> Self {
        let cap_ns = match strategy {
            IdleStrategy::Auto => gap_ns / 4,
            IdleStrategy::Hybrid => gap_ns / 2,
            IdleStrategy::Sleep | IdleStrategy::Spin => 0,
        }
        .min(MAX_MARGIN_NS);
        Idle {
            strategy,
            ring: Box::new([0; RING]),
            scratch: Box::new([0; RING]),
            filled: 0,
            next: 0,
            since_update: 0,
            margin_ns: if strategy == IdleStrategy::Spin {
                u64::MAX
            } else {
                0
            },
            cap_ns,
            contended: false,
        }
    }

    pub fn strategy(&self) -> IdleStrategy {
        self.strategy
    }

    /// How long before a send the worker stops sleeping and spins.
    pub fn margin_ns(&self) -> u64 {
        if self.contended && self.strategy != IdleStrategy::Spin {
            0
        } else {
            self.margin_ns
        }
    }

    /// Until when to sleep when the next thing due is a send at `send_at`.
    pub fn sleep_until(&self, send_at: u64) -> u64 {
        send_at.saturating_sub(self.margin_ns())
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
            self.update_margin();
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

    fn update_margin(&mut self) {
        let allowance = match self.strategy {
            IdleStrategy::Sleep | IdleStrategy::Spin => return,
            IdleStrategy::Auto => AUTO_ALLOWANCE_NS,
            IdleStrategy::Hybrid => 0,
        };
        self.margin_ns = self
            .p99_error_ns()
            .saturating_sub(allowance)
            .min(self.cap_ns);
    }
}

/// Sleeps a worker takes before the start to learn the clock (an estimate from the first sleeps
/// is taken as soon as this many are in).
pub const CALIBRATION: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    /// A gap that caps nothing in these tests (200 rps).
    const GAP: u64 = 5_000 * US;

    /// Feeds `n` sleeps with errors cycling through `errors_us` and returns the margin (µs).
    fn margin_after(strategy: IdleStrategy, errors_us: &[u64], n: usize) -> u64 {
        let mut idle = Idle::new(strategy, GAP);
        for i in 0..n {
            let asked = i as u64 * 1_000_000;
            idle.woke(asked, asked + errors_us[i % errors_us.len()] * US);
        }
        idle.margin_ns() / US
    }

    #[test]
    fn margin_by_strategy_and_clock() {
        // A slow clock: 97 sleeps in 100 end 40 µs late, three 300 µs late.
        let mut slow = vec![40; 97];
        slow.extend([300; 3]);
        // A good clock: 5 µs, and 20 µs three times in 100.
        let mut good = vec![5; 97];
        good.extend([20; 3]);
        let cases = [
            ("sleep never spins", IdleStrategy::Sleep, &slow, 0),
            (
                "hybrid covers the p99 error",
                IdleStrategy::Hybrid,
                &slow,
                300,
            ),
            ("auto allows 25 µs", IdleStrategy::Auto, &slow, 275),
            (
                "auto on a good clock only sleeps",
                IdleStrategy::Auto,
                &good,
                0,
            ),
            (
                "hybrid on a good clock spins a little",
                IdleStrategy::Hybrid,
                &good,
                20,
            ),
        ];
        for (name, strategy, errors, want) in cases {
            assert_eq!(margin_after(strategy, errors, 1000), want, "{name}");
        }
        assert_eq!(margin_after(IdleStrategy::Spin, &slow, 10), u64::MAX / US);
    }

    #[test]
    fn the_margin_is_capped_and_follows_the_clock() {
        // Sleeps 800 µs late at 1,000 rps: hybrid spins at most half the 1 ms gap.
        let mut half = Idle::new(IdleStrategy::Hybrid, 1_000 * US);
        for i in 0..200 {
            half.woke(i, i + 800 * US);
        }
        assert_eq!(half.margin_ns(), 500 * US);
        // At 5,000 rps (200 µs apart) auto spins at most 50 µs of each gap.
        let mut fast = Idle::new(IdleStrategy::Auto, 200 * US);
        for i in 0..200 {
            fast.woke(i, i + 300 * US);
        }
        assert_eq!(fast.margin_ns(), 50 * US);
        // At 1 rps the cap is MAX_MARGIN_NS.
        let mut slow = Idle::new(IdleStrategy::Hybrid, 1_000_000 * US);
        for i in 0..200 {
            slow.woke(i, i + 10_000 * US);
        }
        assert_eq!(slow.margin_ns(), MAX_MARGIN_NS);
        // The clock gets better: after a ring's worth of good sleeps the margin follows.
        let mut idle = Idle::new(IdleStrategy::Hybrid, GAP);
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
    fn a_contended_thread_does_not_spin_unless_told_to() {
        let mut slow = vec![40; 97];
        slow.extend([300; 3]);
        for (strategy, margin_us) in [(IdleStrategy::Hybrid, 0), (IdleStrategy::Spin, u64::MAX)] {
            let mut idle = Idle::new(strategy, GAP);
            for i in 0..200 {
                idle.woke(i, i + slow[i as usize % 100] * US);
            }
            idle.contended(true);
            assert_eq!(idle.margin_ns() / US, margin_us / US, "{strategy:?}");
            idle.contended(false);
            if strategy == IdleStrategy::Hybrid {
                assert_eq!(idle.margin_ns(), 300 * US);
            }
        }
    }

    #[test]
    fn far_sends_are_approached_in_two_stages() {
        let ms = 1_000 * US;
        let auto = Idle::new(IdleStrategy::Auto, GAP);
        assert_eq!(auto.stage_before(0, 5 * ms), Some(4 * ms));
        assert_eq!(auto.stage_before(0, ms + ms / 2), None, "near enough");
        assert_eq!(auto.stage_before(4 * ms, 5 * ms), None);
        assert_eq!(
            Idle::new(IdleStrategy::Sleep, GAP).stage_before(0, 5 * ms),
            None
        );
        let mut contended = Idle::new(IdleStrategy::Hybrid, GAP);
        contended.contended(true);
        assert_eq!(
            contended.stage_before(0, 5 * ms),
            None,
            "no spinning, no staging"
        );
    }

    #[test]
    fn calibration_sets_a_margin_before_the_first_update() {
        let mut idle = Idle::new(IdleStrategy::Hybrid, GAP);
        for i in 0..CALIBRATION as u64 {
            idle.woke(i, i + 100 * US);
        }
        assert_eq!(idle.margin_ns(), 100 * US);
        assert_eq!(idle.sleep_until(1_000 * US), 900 * US);
        assert_eq!(
            idle.sleep_until(50 * US),
            0,
            "never before the clock's start"
        );
        assert_eq!(idle.woke(10, 5), 0, "early is no error");
    }
}
