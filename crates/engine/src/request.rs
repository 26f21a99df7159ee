//! One request's life on a slot, and the times it is measured by.
//!
//! A slot holds at most one [`Request`] at a time. It goes
//! idle → sending (taken by a due request; bytes or an HTTP/2 stream on their way) → awaiting
//! the response (all of it on the wire) → idle again, answered or failed. Its times are the
//! whole of what the recorder learns about it:
//!
//! - *intended*: when the pacer said it was due (closed loop: when it was taken);
//! - *sent*: when the loop actually started it;
//! - *arrived*: when the last byte of the response arrived (the kernel's receive stamp, placed
//!   on the run clock; see [`arrival`]).
//!
//! Latency runs from intended to arrived (the coordinated-omission correction), service time from
//! sent to arrived, and the schedule lag from intended to sent. A send is *queued* when the slot
//! came free only after the intended time (the target was slow), and *late* when the slot was
//! free but the generator still sent more than [`LATE_NS`] after the intended time.
//!
//! Contract: plain data and arithmetic on the run clock (nanoseconds), no I/O, no allocation;
//! the worker owns one per slot and calls it on the hot path.

/// A send later than this while its slot was free means the generator fell behind.
pub const LATE_NS: u64 = 1_000_000;

/// A request taken from the pacer that has not found a slot yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Intended send time (run clock, ns).
    pub intended: u64,
    /// In the measured window (not the warm-up): its outcome is recorded.
    pub measured: bool,
    /// Index into the target list.
    pub target: u32,
}

/// Where a slot's request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No request; the slot may be taken.
    Idle,
    /// Taken: the request is queued on its connection or partly written.
    Sending,
    /// Wholly on the wire; waiting for the response.
    Awaiting,
}

/// How a send went against its schedule (recorded for measured requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendTimes {
    /// Intended to actual send, ns.
    pub lag_ns: u64,
    /// More than [`LATE_NS`] late on a slot that was free in time: the generator's delay.
    pub late: bool,
    /// The slot came free only after the intended time: the request waited for a connection.
    pub queued: bool,
}

/// A request that got its whole response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    pub due: Due,
    /// Intended send to the last byte, ns.
    pub latency_ns: u64,
    /// Actual send to the last byte, ns.
    pub service_ns: u64,
}

/// The request on one slot, or its absence.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    phase: Phase,
    /// The request taken last (still readable once idle again).
    due: Due,
    /// Actual send time.
    sent: u64,
    /// When the slot last became idle (to tell generator lag from queueing).
    idle_since: u64,
}

impl Default for Request {
    fn default() -> Self {
        Request {
            phase: Phase::Idle,
            due: Due {
                intended: 0,
                measured: false,
                target: 0,
            },
            sent: 0,
            idle_since: 0,
        }
    }
}

impl Request {
    #[inline]
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// A request is on this slot (sending or awaiting its response).
    #[inline]
    pub fn is_busy(&self) -> bool {
        self.phase != Phase::Idle
    }

    /// The target of the current (or last) request.
    #[inline]
    pub fn target(&self) -> u32 {
        self.due.target
    }

    /// In flight for longer than `timeout_ns` at `now`.
    #[inline]
    pub fn is_overdue(&self, now: u64, timeout_ns: u64) -> bool {
        self.is_busy() && now - self.sent > timeout_ns
    }

    /// The run clock moved: an idle slot counts as free from `t` (the start of the run).
    pub fn idle_from(&mut self, t: u64) {
        self.idle_since = t;
    }

    /// Idle → sending: `due` starts at `now`.
    #[inline]
    pub fn start(&mut self, due: Due, now: u64) -> SendTimes {
        debug_assert!(!self.is_busy(), "a slot carries one request at a time");
        self.phase = Phase::Sending;
        self.due = due;
        self.sent = now;
        let lag_ns = now - due.intended;
        let queued = self.idle_since > due.intended;
        SendTimes {
            lag_ns,
            late: lag_ns > LATE_NS && !queued,
            queued,
        }
    }

    /// Sending → awaiting: the whole request is on the wire.
    #[inline]
    pub fn on_wire(&mut self) {
        if self.phase == Phase::Sending {
            self.phase = Phase::Awaiting;
        }
    }

    /// → idle: the whole response arrived at `arrived` (moved to the send time if a clock put
    /// it before).
    #[inline]
    pub fn answer(&mut self, arrived: u64) -> Answered {
        debug_assert!(self.is_busy(), "only a request in flight is answered");
        let arrived = arrived.max(self.sent);
        self.phase = Phase::Idle;
        self.idle_since = arrived;
        Answered {
            due: self.due,
            latency_ns: arrived - self.due.intended,
            service_ns: arrived - self.sent,
        }
    }

    /// → idle: the request failed at `now` (its kind is the caller's to record).
    #[inline]
    pub fn fail(&mut self, now: u64) -> Due {
        debug_assert!(self.is_busy(), "only a request in flight fails");
        self.phase = Phase::Idle;
        self.idle_since = now;
        self.due
    }
}

/// When the latest bytes arrived, on the run clock: the kernel's receive stamp
/// (`CLOCK_REALTIME` ns, if the socket gave one) moved by `realtime_offset` (realtime minus run
/// clock at the last wake-up), never after `now`; `now` without a stamp.
#[inline]
pub fn arrival(stamp: Option<u64>, realtime_offset: i64, now: u64) -> u64 {
    stamp.map_or(now, |t| {
        ((t as i64 - realtime_offset).max(0) as u64).min(now)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn due(intended: u64) -> Due {
        Due {
            intended,
            measured: true,
            target: 7,
        }
    }

    /// Starts a request due at `intended` on a slot idle since `idle_since`, at `sent`.
    fn started(idle_since: u64, intended: u64, sent: u64) -> (Request, SendTimes) {
        let mut r = Request::default();
        r.idle_from(idle_since);
        let times = r.start(due(intended), sent);
        (r, times)
    }

    #[test]
    fn send_times_table() {
        // (case, idle since, intended, sent, lag, late, queued)
        let cases = [
            (
                "closed loop: sent when due",
                0,
                5 * MS,
                5 * MS,
                0,
                false,
                false,
            ),
            (
                "on time within the 1 ms grace",
                0,
                5 * MS,
                6 * MS,
                MS,
                false,
                false,
            ),
            (
                "free slot, sent late: the generator's fault",
                0,
                5 * MS,
                9 * MS,
                4 * MS,
                true,
                false,
            ),
            (
                "slot freed after the intended time: queued",
                7 * MS,
                5 * MS,
                9 * MS,
                4 * MS,
                false,
                true,
            ),
            (
                "slot freed exactly at the intended time: not queued",
                5 * MS,
                5 * MS,
                5 * MS,
                0,
                false,
                false,
            ),
        ];
        for (case, idle_since, intended, sent, lag_ns, late, queued) in cases {
            let (_, times) = started(idle_since, intended, sent);
            assert_eq!(
                times,
                SendTimes {
                    lag_ns,
                    late,
                    queued
                },
                "{case}"
            );
        }
    }

    #[test]
    fn answer_times_table() {
        // (case, intended, sent, arrived as reported, latency, service, idle since afterwards)
        let cases = [
            (
                "closed loop: latency is service time",
                10,
                10,
                110,
                100,
                100,
                110,
            ),
            (
                "open loop: latency counts from the intended time",
                10,
                40,
                110,
                100,
                70,
                110,
            ),
            (
                "a stamp before the send is moved to the send",
                10,
                40,
                30,
                30,
                0,
                40,
            ),
        ];
        for (case, intended, sent, arrived, latency_ns, service_ns, idle_since) in cases {
            let (mut r, _) = started(0, intended, sent);
            let answered = r.answer(arrived);
            assert_eq!(
                answered,
                Answered {
                    due: due(intended),
                    latency_ns,
                    service_ns
                },
                "{case}"
            );
            assert_eq!(r.idle_since, idle_since, "{case}");
        }
    }

    #[test]
    fn phases_table() {
        type Step = fn(&mut Request);
        let start: Step = |r| {
            r.start(due(0), 1);
        };
        let on_wire: Step = |r| r.on_wire();
        let answer: Step = |r| {
            r.answer(5);
        };
        let fail: Step = |r| {
            r.fail(5);
        };
        let cases: [(&str, Vec<Step>, Phase); 6] = [
            ("new slot", vec![], Phase::Idle),
            ("taken", vec![start], Phase::Sending),
            ("written", vec![start, on_wire], Phase::Awaiting),
            ("answered", vec![start, on_wire, answer], Phase::Idle),
            (
                "answered while still sending (early response)",
                vec![start, answer],
                Phase::Idle,
            ),
            (
                "failed while queued on its connection",
                vec![start, fail],
                Phase::Idle,
            ),
        ];
        for (case, steps, want) in cases {
            let mut r = Request::default();
            for step in steps {
                step(&mut r);
            }
            assert_eq!(r.phase(), want, "{case}");
            assert_eq!(r.is_busy(), want != Phase::Idle, "{case}");
        }
    }

    #[test]
    fn a_failure_frees_the_slot_from_its_time_and_keeps_the_request() {
        let (mut r, _) = started(0, 3 * MS, 4 * MS);
        assert_eq!(r.fail(20 * MS), due(3 * MS));
        assert_eq!(r.target(), 7);
        // The next request, due before the failure, waited for this slot.
        assert!(r.start(due(10 * MS), 20 * MS).queued);
    }

    #[test]
    fn overdue_only_in_flight_and_past_the_timeout() {
        // (case, start the request?, now, overdue)
        let cases = [
            ("idle slot", false, 100 * MS, false),
            ("in flight exactly the timeout", true, 11 * MS, false),
            ("in flight past the timeout", true, 11 * MS + 1, true),
        ];
        for (case, busy, now, want) in cases {
            let mut r = Request::default();
            if busy {
                r.start(due(0), MS);
            }
            assert_eq!(r.is_overdue(now, 10 * MS), want, "{case}");
        }
    }

    #[test]
    fn arrival_table() {
        // Realtime runs 1,000 ns ahead of the run clock.
        let offset = 1_000;
        // (case, stamp, now, arrival on the run clock)
        let cases = [
            ("no stamp: the loop's own clock", None, 500, 500),
            ("a stamp is moved onto the run clock", Some(1_300), 500, 300),
            ("a stamp after now is now", Some(1_900), 500, 500),
            (
                "a stamp before the run clock's zero is zero",
                Some(200),
                500,
                0,
            ),
        ];
        for (case, stamp, now, want) in cases {
            assert_eq!(arrival(stamp, offset, now), want, "{case}");
        }
    }
}
