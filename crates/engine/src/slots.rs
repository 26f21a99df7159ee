//! Which slot a due request may take: the worker's slots, which are free and since when, which
//! connection each one is open to, the request held back for want of a suitable slot, and how
//! many requests are in flight against `--in-flight`.
//!
//! A connection offers *slots*: one for HTTP/1.1, `--streams` for HTTP/2 and HTTP/3; slot `s`
//! belongs to connection `s / streams` and carries one [`Request`] at a time. Free slots wait in
//! one queue, longest-free first, so that "waited for a connection" is judged fairly. A due
//! request takes the first free slot whose connection is open to its host, or, failing that, the
//! longest-free one whose connection is idle and may be re-aimed (closed and reopened to the new
//! host, which costs a `--connection-rate` token when that is set). With several hosts, every
//! freed slot whose connection is open is also filed under its host, so that a request finds one
//! in O(1); those entries are checked when taken (they go stale as connections change), and the
//! index is rebuilt when stale entries pile up. A request that finds no usable slot is *held*,
//! and goes before anything the pacer has since made due.
//!
//! Contract: pure bookkeeping, no sockets and no clock: connections are seen only through
//! [`ConnFacts`], time is a number handed in. Taking and releasing a slot allocate nothing (the
//! host index grows its lists to their high-water mark once); the worker owns one pool.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;

use crate::pacer::Pacer;
use crate::request::{Due, Request, SendTimes};

/// How many free slots a request looks through for a connection already open to its host.
const HOST_SCAN: usize = 64;
/// `--connection-rate` tokens older than this are dropped.
const TOKEN_LAPSE_NS: u64 = 100_000_000;

/// What the pool needs to know of a connection to hand out its slots.
pub trait ConnFacts {
    /// The host it is open (or was last aimed) to.
    fn host(&self) -> u32;
    /// It has a socket (connecting, shaking hands or ready).
    fn is_open(&self) -> bool;
    /// It takes new requests at `now`: not draining, not waiting out a connect back-off.
    fn accepts(&self, now: u64) -> bool;
    /// Nothing in flight or queued on it: it may be closed and re-aimed at another host.
    fn is_idle(&self) -> bool;
}

/// The slots of one worker and what decides who takes them.
pub struct SlotPool {
    /// Slots per connection (1 for HTTP/1.1).
    streams: usize,
    requests: Vec<Request>,
    /// Requests in flight at most (every slot unless `--in-flight` caps it), and now.
    max_in_flight: usize,
    in_flight: usize,
    /// Free slots, longest-free first. May hold stale entries (slots taken through `by_host`
    /// since), skipped when met; `free_count` is the true number of free slots.
    free: VecDeque<u32>,
    free_count: usize,
    /// The run has several hosts, so the host index is kept.
    many_hosts: bool,
    /// Per host, free slots whose connection was open to it when freed (checked when taken).
    by_host: HashMap<u32, Vec<u32>>,
    by_host_entries: usize,
    /// A due request waiting for a slot on a connection that suits it.
    held: Option<Due>,
}

impl SlotPool {
    /// `connections × streams` idle slots, none offered yet (see [`SlotPool::offer_all`]).
    pub fn new(connections: usize, streams: usize, max_in_flight: usize, many_hosts: bool) -> Self {
        let slots = connections * streams;
        SlotPool {
            streams,
            requests: vec![Request::default(); slots],
            max_in_flight,
            in_flight: 0,
            free: VecDeque::with_capacity(slots),
            free_count: 0,
            many_hosts,
            by_host: HashMap::new(),
            by_host_entries: 0,
            held: None,
        }
    }

    /// Every slot joins the free queue, in order (once the connections are opened).
    pub fn offer_all<C: ConnFacts>(&mut self, conns: &[C]) {
        for s in 0..self.requests.len() as u32 {
            self.free_count += 1;
            self.free.push_back(s);
            self.index_by_host(s, conns);
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Slots per connection.
    #[inline]
    pub fn streams(&self) -> usize {
        self.streams
    }

    /// The connection slot `s` belongs to.
    #[inline]
    pub fn conn_of(&self, s: u32) -> u32 {
        s / self.streams as u32
    }

    /// The slots of connection `c`.
    #[inline]
    pub fn slots_of(&self, c: u32) -> Range<u32> {
        let first = c * self.streams as u32;
        first..first + self.streams as u32
    }

    #[inline]
    pub fn request(&self, s: u32) -> &Request {
        &self.requests[s as usize]
    }

    #[inline]
    pub fn request_mut(&mut self, s: u32) -> &mut Request {
        &mut self.requests[s as usize]
    }

    /// Requests on the wire or queued on a connection.
    #[inline]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Slots free now.
    #[inline]
    pub fn free(&self) -> usize {
        self.free_count
    }

    #[inline]
    pub fn has_free(&self) -> bool {
        self.free_count > 0
    }

    /// Another request may start: a slot is free and the cap on requests in flight allows it.
    #[inline]
    pub fn may_start(&self) -> bool {
        self.free_count > 0 && self.in_flight < self.max_in_flight
    }

    /// A due request is waiting for a slot that suits it.
    #[inline]
    pub fn is_holding(&self) -> bool {
        self.held.is_some()
    }

    /// The held request, which goes before any newer one.
    #[inline]
    pub fn take_held(&mut self) -> Option<Due> {
        self.held.take()
    }

    /// The run clock starts at `t`: every slot counts as free from then.
    pub fn idle_from(&mut self, t: u64) {
        for r in &mut self.requests {
            r.idle_from(t);
        }
    }

    /// Gives `due` (to `host`) a slot and starts it there at `now`, or holds it when no free
    /// slot suits. `tokens` paces connections to be re-aimed (`--connection-rate`).
    #[inline]
    pub fn assign<C: ConnFacts>(
        &mut self,
        due: Due,
        host: u32,
        now: u64,
        conns: &[C],
        tokens: Option<&mut Pacer>,
    ) -> Option<(u32, SendTimes)> {
        let Some(s) = self.pick(host, now, conns, tokens) else {
            self.held = Some(due);
            return None;
        };
        self.free_count -= 1;
        self.in_flight += 1;
        Some((s, self.requests[s as usize].start(due, now)))
    }

    /// The free slot a request for `host` should take: one whose connection is open to that
    /// host (by the host index, or among the longest-free), else the longest-free one whose
    /// connection is idle and may be re-aimed, if a connection token allows.
    fn pick<C: ConnFacts>(
        &mut self,
        host: u32,
        now: u64,
        conns: &[C],
        tokens: Option<&mut Pacer>,
    ) -> Option<u32> {
        let indexed = if self.by_host.is_empty() {
            None
        } else {
            self.by_host.get_mut(&host)
        };
        if let Some(list) = indexed {
            while let Some(s) = list.pop() {
                self.by_host_entries -= 1;
                let conn = &conns[s as usize / self.streams];
                let usable = !self.requests[s as usize].is_busy()
                    && conn.host() == host
                    && conn.is_open()
                    && conn.accepts(now);
                if usable {
                    // Its entry in `free` is now stale and will be skipped.
                    return Some(s);
                }
            }
        }
        // Drop stale entries at the front, then look at the longest-free slots.
        while self
            .free
            .front()
            .is_some_and(|&s| self.requests[s as usize].is_busy())
        {
            self.free.pop_front();
        }
        let mut reusable = None;
        for (pos, &s) in self.free.iter().take(HOST_SCAN).enumerate() {
            if self.requests[s as usize].is_busy() {
                continue;
            }
            let conn = &conns[s as usize / self.streams];
            if !conn.accepts(now) {
                continue;
            }
            if conn.host() == host && conn.is_open() {
                return self.free.remove(pos);
            }
            if reusable.is_none() && conn.is_idle() {
                reusable = Some(pos);
            }
        }
        let pos = reusable?;
        if let Some(p) = tokens {
            take_token(p, now)?;
        }
        self.free.remove(pos)
    }

    /// Slot `s`, whose request is over (answered or failed), joins the queue: the loop hands
    /// out what is due once the events of this wake-up are handled, longest-free slot first
    /// (so failures never recurse into new sends). Call it after closing or re-aiming the
    /// slot's connection, so that the slot is filed under the right host.
    pub fn release<C: ConnFacts>(&mut self, s: u32, conns: &[C]) {
        debug_assert!(!self.requests[s as usize].is_busy(), "release an idle slot");
        self.in_flight -= 1;
        self.free_count += 1;
        if self.free.len() > 2 * self.requests.len() + 64 {
            // Entries left behind by slots taken through the host index.
            let requests = &self.requests;
            let mut seen = vec![false; requests.len()];
            self.free.retain(|&f| {
                let keep = !requests[f as usize].is_busy() && !seen[f as usize];
                seen[f as usize] = true;
                keep
            });
        }
        self.free.push_back(s);
        self.index_by_host(s, conns);
    }

    /// Files free slot `s` under its connection's host, if the connection is open.
    fn index_by_host<C: ConnFacts>(&mut self, s: u32, conns: &[C]) {
        if !self.many_hosts {
            return;
        }
        let conn = &conns[s as usize / self.streams];
        if !conn.is_open() {
            return;
        }
        self.by_host.entry(conn.host()).or_default().push(s);
        self.by_host_entries += 1;
        if self.by_host_entries > 4 * self.requests.len() + 64 {
            // Stale entries of hosts seldom asked for: rebuild from the free slots.
            self.by_host.clear();
            self.by_host_entries = 0;
            for slot in 0..self.requests.len() {
                let conn = &conns[slot / self.streams];
                if !self.requests[slot].is_busy() && conn.is_open() {
                    self.by_host
                        .entry(conn.host())
                        .or_default()
                        .push(slot as u32);
                    self.by_host_entries += 1;
                }
            }
        }
    }
}

/// Takes a connection token at `now`. Tokens left unused while no connection was needed lapse
/// after 100 ms, so that a quiet spell cannot turn into a burst of new connections.
fn take_token(tokens: &mut Pacer, now: u64) -> Option<u64> {
    let oldest = now.saturating_sub(TOKEN_LAPSE_NS);
    while tokens.wake_at().is_some_and(|t| t < oldest) {
        tokens.due(now);
    }
    tokens.due(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacer::Schedule;
    use meshbench_results::Arrival;

    const MS: u64 = 1_000_000;

    /// A connection as the pool sees it.
    #[derive(Debug, Clone, Copy)]
    struct Fake {
        host: u32,
        open: bool,
        accepts: bool,
        idle: bool,
    }

    impl ConnFacts for Fake {
        fn host(&self) -> u32 {
            self.host
        }
        fn is_open(&self) -> bool {
            self.open
        }
        fn accepts(&self, _now: u64) -> bool {
            self.accepts
        }
        fn is_idle(&self) -> bool {
            self.idle
        }
    }

    /// Open to `host`, taking requests, nothing in flight.
    fn open_to(host: u32) -> Fake {
        Fake {
            host,
            open: true,
            accepts: true,
            idle: true,
        }
    }

    /// A connection written as a word: its state and then its host. `open3`: open to host 3,
    /// idle; `busy3`: open, a request on it; `closed3`: no socket, last aimed at 3;
    /// `draining3`: open but taking no more requests (or backing off).
    fn conn(word: &str) -> Fake {
        let digits = word
            .find(|c: char| c.is_ascii_digit())
            .expect("a host number");
        let host = word[digits..].parse().expect("a host number");
        let open = open_to(host);
        match &word[..digits] {
            "open" => open,
            "busy" => Fake {
                idle: false,
                ..open
            },
            "closed" => Fake {
                open: false,
                ..open
            },
            "draining" => Fake {
                accepts: false,
                ..open
            },
            other => panic!("no connection state {other:?}"),
        }
    }

    /// Plays `steps` on a pool of `conns` (words for [`conn`]) with `streams` slots each, and
    /// returns what happened. Steps: `due<host>`: the pacer makes a request to that host due;
    /// `answer<slot>`: the request on that slot is answered and the slot released;
    /// `conn<c>=<word>`: connection `c` changes as the worker would change it. After each step
    /// the due requests are handed out as the worker's `dispatch` does (a held request first),
    /// writing `s<slot>` per start, then `held` or `full` if some are still due.
    fn play(streams: usize, max_in_flight: usize, conns: &str, steps: &str) -> String {
        let mut conns: Vec<Fake> = conns.split_whitespace().map(conn).collect();
        let steps: Vec<&str> = steps.split_whitespace().collect();
        let first = conns[0].host;
        let asked = steps
            .iter()
            .filter_map(|step| step.strip_prefix("due")?.parse::<u32>().ok());
        let many_hosts = conns
            .iter()
            .map(|c| c.host)
            .chain(asked)
            .any(|h| h != first);
        let mut pool = SlotPool::new(conns.len(), streams, max_in_flight, many_hosts);
        pool.offer_all(&conns);
        let mut backlog = VecDeque::new();
        let mut trace = Vec::new();
        for (t, step) in steps.into_iter().enumerate() {
            let now = t as u64 * MS;
            if let Some(host) = step.strip_prefix("due") {
                let target = host.parse().expect("due<host>");
                backlog.push_back(Due {
                    intended: now,
                    measured: true,
                    target,
                });
            } else if let Some(slot) = step.strip_prefix("answer") {
                let s = slot.parse().expect("answer<slot>");
                pool.request_mut(s).answer(now);
                pool.release(s, &conns);
            } else if let Some((c, word)) =
                step.strip_prefix("conn").and_then(|x| x.split_once('='))
            {
                conns[c.parse::<usize>().expect("conn<c>=<word>")] = conn(word);
            } else {
                panic!("no step {step:?}");
            }
            while pool.may_start() {
                let Some(due) = pool.take_held().or_else(|| backlog.pop_front()) else {
                    break;
                };
                // Each request's target is its host.
                match pool.assign(due, due.target, now, &conns, None) {
                    Some((s, _)) => trace.push(format!("s{s}")),
                    None => break,
                }
            }
            if pool.is_holding() {
                trace.push("held".to_string());
            } else if !backlog.is_empty() {
                trace.push("full".to_string());
            }
        }
        trace.join(" ")
    }

    #[test]
    fn slot_accounting_table() {
        // (case, streams, max in flight, connections, steps, what happened)
        let cases = [
            (
                "closed loop, 2 in flight of 4 slots: the third waits for an answer",
                1,
                2,
                "open0 open0 open0 open0",
                "due0 due0 due0 answer0",
                "s0 s1 full s2",
            ),
            (
                "open loop, every slot busy: due requests wait, take slots as they free",
                1,
                2,
                "open0 open0",
                "due0 due0 due0 due0 answer1 answer0",
                "s0 s1 full full s1 full s0",
            ),
            (
                "many hosts: a slot open to the request's host beats the longest-free",
                1,
                3,
                "open0 open1 open2",
                "due2 due1 due0",
                "s2 s1 s0",
            ),
            (
                "none open to the host: the longest-free idle one is re-aimed, not a busy one",
                1,
                3,
                "busy0 closed1 open1",
                "due5 due5",
                "s1 s2",
            ),
            (
                "held: only a busy connection to another host is free; goes first once one frees",
                2,
                4,
                "busy0 open1",
                "due1 due1 due0 due1 due0 answer2",
                "s3 s2 s1 held held s2 s0",
            ),
            (
                "a draining connection (or one backing off) is passed over",
                1,
                2,
                "draining0 open0",
                "due0 due0",
                "s1 held",
            ),
            (
                "stale host index: a slot filed under host 0, its connection gone elsewhere",
                1,
                2,
                "open0 busy1",
                "conn0=busy3 due0 conn0=open0",
                "held s0",
            ),
            (
                "HTTP/2: slots 0-2 are connection 0, 3-5 connection 1",
                3,
                6,
                "busy0 open1",
                "due1 due1 due1 due0 due1",
                "s5 s4 s3 s2 held",
            ),
        ];
        for (case, streams, max_in_flight, conns, steps, want) in cases {
            assert_eq!(play(streams, max_in_flight, conns, steps), want, "{case}");
        }
    }

    #[test]
    fn connection_tokens_pace_re_aiming_and_lapse() {
        // One token every 10 ms from 0: (case, now, a re-aim is allowed)
        let cases = [
            ("the first token", 0, true),
            ("no new token yet", 5 * MS, false),
            ("the next token", 10 * MS, true),
            (
                "tokens unused for long lapse but for those of the last 100 ms",
                500 * MS,
                true,
            ),
        ];
        let mut tokens = Pacer::Open(Schedule::new(
            100.0,
            0,
            Arrival::Uniform,
            1,
            crate::spec::Segment::WHOLE,
        ));
        let mut granted = 0;
        for (case, now, want) in cases {
            let mut pool = SlotPool::new(1, 1, 1, false);
            let idle = conn("closed0");
            pool.offer_all(&[idle]);
            let due = Due {
                intended: now,
                measured: true,
                target: 0,
            };
            let got = pool
                .assign(due, 1, now, &[idle], Some(&mut tokens))
                .is_some();
            assert_eq!(got, want, "{case}");
            assert_eq!(pool.is_holding(), !want, "{case}");
            granted += got as u32;
        }
        // At 500 ms the tokens from 0 to 390 ms lapsed: the next is from 400 ms, not 20 ms.
        assert_eq!(granted, 3);
        assert_eq!(tokens.wake_at(), Some(410 * MS));
    }

    #[test]
    fn in_flight_and_free_counts_follow_take_and_release() {
        let conns = [open_to(0); 3];
        let mut pool = SlotPool::new(3, 1, 3, false);
        assert!(
            !pool.may_start(),
            "nothing is offered before the connections are opened"
        );
        pool.offer_all(&conns);
        let due = Due {
            intended: 0,
            measured: false,
            target: 0,
        };
        for want_in_flight in 1..=3 {
            assert!(pool.assign(due, 0, 0, &conns, None).is_some());
            assert_eq!(pool.in_flight(), want_in_flight);
        }
        assert!(!pool.has_free() && !pool.may_start());
        pool.request_mut(1).fail(MS);
        pool.release(1, &conns);
        assert_eq!((pool.in_flight(), pool.has_free()), (2, true));
        assert_eq!(
            pool.assign(due, 0, MS, &conns, None).map(|(s, _)| s),
            Some(1)
        );
    }

    #[test]
    fn stale_entries_are_compacted_and_the_host_index_rebuilt() {
        let conns = [open_to(0)];
        let mut pool = SlotPool::new(1, 1, 1, true);
        pool.offer_all(&conns);
        for round in 0..1_000u64 {
            // Even rounds take the slot through the host index (its queue entry goes stale),
            // odd ones re-aim it at host 7 through the queue (its index entry goes stale).
            let host = if round % 2 == 0 { 0 } else { 7 };
            let due = Due {
                intended: round,
                measured: false,
                target: host,
            };
            let taken = pool.assign(due, host, round, &conns, None).map(|(s, _)| s);
            assert_eq!(taken, Some(0), "round {round}");
            pool.request_mut(0).answer(round);
            pool.release(0, &conns);
            assert!(pool.free.len() <= 2 * pool.len() + 65, "round {round}");
            assert!(pool.by_host_entries <= 4 * pool.len() + 65, "round {round}");
        }
        assert_eq!((pool.in_flight(), pool.has_free()), (0, true));
    }

    #[test]
    fn slots_belong_to_connection_s_div_streams() {
        let pool = SlotPool::new(3, 4, 12, false);
        assert_eq!(pool.len(), 12);
        // (slot, its connection)
        for (s, c) in [(0, 0), (3, 0), (4, 1), (11, 2)] {
            assert_eq!(pool.conn_of(s), c, "slot {s}");
            assert!(pool.slots_of(c).contains(&s), "slot {s}");
        }
    }
}
