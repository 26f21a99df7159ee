//! Where the latency goes, hop by hop: the engine's sampled requests joined with what each L7
//! proxy logged of them ([`join`]), each hop's share of p50, p90 and p99 ([`shares`]), and which
//! hop grew from one variant to another ([`grew`]).
//!
//! **The split.** For a request through logged proxies h1..hk (client side first), on one
//! clock: S the engine's send, A its last byte back (S + service time); for each hop its
//! downstream start `in`, upstream request out `out`, upstream response in `up`, downstream
//! response out `resp`. Then
//!
//! - link client <-> h1 = (in1 - S) + (A - resp1);
//! - hi (request) = out_i - in_i - its upstream connect, hi (upstream connect) apart;
//! - link hi <-> hi+1 = (in_i+1 - out_i) + (up_i - resp_i+1);
//! - backend (and its link) = up_k - out_k;
//! - hi (response) = resp_i - up_i;
//! - generator = the schedule lag (intended to actual send).
//!
//! Each part is the distance between two neighbouring instants of one ordered list, so the
//! parts add up to the engine's latency exactly (lag + service). A hop that logs nothing per
//! request (a tunnel, nginx) is inside the link around it.
//!
//! **Percentiles do not add.** A hop's share of p99 is its mean over the sampled requests
//! whose latency ranks within a band around the 99th percentile of the sample (± 0.5 % of
//! ranks at p99, ± 2.5 % at p50 and p90), with a 95 % interval of that mean; the residual is
//! the run's own percentile minus the sum of the means (the band is not exactly the
//! percentile, and the sample is not the whole run).

use std::collections::HashMap;

use meshbench_results::attribution::{
    Attribution, ClockOffset, HopSeen, Leg, Logged, Node, Part, Sent, Split, MAX_SPLITS,
};
use meshbench_results::{ChainRole, CpuAllotment, LoadPoint};
use meshbench_store::StoredStep;
use serde::Serialize;

/// How far a hop's start may lie outside its request's send and answer on the engine's clock:
/// the clocks of other machines (NTP keeps them within milliseconds). The same id's line of an
/// earlier load lies a whole load earlier.
const CLOCK_SLACK_NS: i64 = 1_000_000_000;

/// Each logging hop's lines by id, in path order. Ids restart with each load, so a log that
/// outlives one load (a cluster's pods, a rig measured twice) holds several lines per id: a
/// request's line is the one that began while the request was out.
pub struct LogIndex<'a> {
    hops: Vec<HashMap<u64, Vec<&'a Logged>>>,
}

impl<'a> LogIndex<'a> {
    pub fn new(logs: &'a [(ChainRole, Vec<Logged>)]) -> LogIndex<'a> {
        let hops = logs
            .iter()
            .map(|(_, lines)| {
                let mut by_id: HashMap<u64, Vec<&Logged>> = HashMap::with_capacity(lines.len());
                for l in lines {
                    by_id.entry(l.id).or_default().push(l);
                }
                by_id
            })
            .collect();
        LogIndex { hops }
    }

    /// Hop `hop`'s line of `s`: begun between its send and its answer (give or take
    /// [`CLOCK_SLACK_NS`]), the nearest its send.
    pub fn line(&self, hop: usize, s: &Sent) -> Option<&'a Logged> {
        let sent = s.sent_unix_ns as i64;
        let from = sent - CLOCK_SLACK_NS;
        let to = sent + s.service_ns as i64 + CLOCK_SLACK_NS;
        self.hops[hop]
            .get(&s.id)?
            .iter()
            .filter(|l| (from..=to).contains(&(l.start_unix_ns as i64)))
            .min_by_key(|l| (l.start_unix_ns as i64 - sent).unsigned_abs())
            .copied()
    }

    /// Every hop's line of `s`, or None when a hop has none.
    pub fn lines(&self, s: &Sent) -> Option<Vec<&'a Logged>> {
        (0..self.hops.len()).map(|h| self.line(h, s)).collect()
    }

    /// Whether every request of `sent` has every hop's line (the logs are flushed).
    pub fn complete(&self, sent: &[Sent]) -> bool {
        sent.iter().all(|s| self.lines(s).is_some())
    }
}

/// Joins the engine's `sent` with each logging hop's lines (`logs`, in path order; hops of
/// `path` seen per request that have no entry in `logs` count as logging nothing).
pub fn join(
    sample_rate: f64,
    path: Vec<HopSeen>,
    sent: &[Sent],
    logs: &[(ChainRole, Vec<Logged>)],
) -> Attribution {
    let index = LogIndex::new(logs);
    let roles: Vec<ChainRole> = logs.iter().map(|(r, _)| *r).collect();
    let parts = parts_of(&roles);
    let mut a = Attribution {
        sample_rate,
        path,
        parts,
        ..Default::default()
    };
    for s in sent {
        a.sampled += 1;
        let Some(lines) = index.lines(s) else {
            a.unjoined += 1;
            continue;
        };
        if lines.iter().any(|l| l.attempts > 1) {
            a.retried += 1;
            continue;
        }
        match split(s, &lines) {
            Some(parts_ns) if a.requests.len() < MAX_SPLITS => a.requests.push(Split {
                latency_ns: s.lag_ns + s.service_ns,
                parts_ns,
            }),
            Some(_) => a.dropped += 1,
            None => a.unjoined += 1,
        }
    }
    a
}

/// The parts a request through the logging hops `roles` is split into, in path order.
fn parts_of(roles: &[ChainRole]) -> Vec<Part> {
    let mut parts = vec![Part::Generator];
    let Some(&last) = roles.last() else {
        parts.push(Part::Backend {
            after: Node::Client,
        });
        return parts;
    };
    let mut from = Node::Client;
    for &role in roles {
        parts.push(Part::Link {
            from,
            to: Node::Hop(role),
        });
        parts.push(Part::Proxy {
            role,
            leg: Leg::Request,
        });
        parts.push(Part::Connect { role });
        from = Node::Hop(role);
    }
    parts.push(Part::Backend {
        after: Node::Hop(last),
    });
    for &role in roles.iter().rev() {
        parts.push(Part::Proxy {
            role,
            leg: Leg::Response,
        });
    }
    parts
}

/// One request's parts (in [`parts_of`]'s order), or `None` when a hop lacks a point.
fn split(s: &Sent, lines: &[&Logged]) -> Option<Vec<i64>> {
    struct At {
        start: i64,
        out: i64,
        up: i64,
        resp: i64,
        connect: i64,
    }
    let sent = s.sent_unix_ns as i64;
    let back = sent + s.service_ns as i64;
    let mut parts = vec![s.lag_ns as i64];
    if lines.is_empty() {
        parts.push(back - sent);
        return Some(parts);
    }
    let hops: Vec<At> = lines
        .iter()
        .map(|l| {
            let start = l.start_unix_ns as i64;
            Some(At {
                start,
                out: start + l.upstream_sent_ns? as i64,
                up: start + l.upstream_answered_ns? as i64,
                resp: start + l.answered_ns? as i64,
                connect: l.connect.map_or(0, |(b, e)| e.saturating_sub(b) as i64),
            })
        })
        .collect::<Option<_>>()?;
    let k = hops.len();
    for i in 0..k {
        let link = if i == 0 {
            (hops[0].start - sent) + (back - hops[0].resp)
        } else {
            (hops[i].start - hops[i - 1].out) + (hops[i - 1].up - hops[i].resp)
        };
        parts.push(link);
        parts.push(hops[i].out - hops[i].start - hops[i].connect);
        parts.push(hops[i].connect);
    }
    parts.push(hops[k - 1].up - hops[k - 1].out);
    for h in hops.iter().rev() {
        parts.push(h.resp - h.up);
    }
    Some(parts)
}

/// How far apart the clocks of neighbouring logged points are (see [`ClockOffset`]), for
/// every pair of neighbours whose clocks `clock` names (a point and a request id: its clock,
/// `None` when unknown): the client and the first logging hop, then each logging hop and the
/// next, over every sampled request that has all of their lines. A pair of points whose
/// requests sit on different pairs of clocks (agents on several nodes) gets one estimate per
/// pair of clocks.
pub fn clock_offsets(
    sent: &[Sent],
    logs: &[(ChainRole, Vec<Logged>)],
    clock: &dyn Fn(Node, u64) -> Option<String>,
) -> Vec<ClockOffset> {
    let index = LogIndex::new(logs);
    /// What the requests across one link say of its two clocks: each request bounds the far
    /// clock's lead to `[t3 - t4, t2 - t1]` (neither crossing takes less than no time), so
    /// all of them to the intersection; and the request with the shortest round trip, should
    /// the intersection be empty (a clock stepped during the load).
    struct Across {
        lowest: i64,
        highest: i64,
        shortest: (i64, i64),
        requests: u64,
    }
    type Key = (Node, Node, String, String);
    let mut links: Vec<(Key, Across)> = Vec::new();
    for s in sent {
        let Some(lines) = index.lines(s) else {
            continue;
        };
        let mut near = Node::Client;
        let sent_at = s.sent_unix_ns as i64;
        // The near side's (send, arrival back) of the link to the next point.
        let mut near_times = Some((sent_at, sent_at + s.service_ns as i64));
        for ((role, _), line) in logs.iter().zip(&lines) {
            let far = Node::Hop(*role);
            let start = line.start_unix_ns as i64;
            let far_times = line.answered_ns.map(|a| (start, start + a as i64));
            if let (Some((t1, t4)), Some((t2, t3)), Some(a), Some(b)) =
                (near_times, far_times, clock(near, s.id), clock(far, s.id))
            {
                let round_trip = (t4 - t1) - (t3 - t2);
                let offset = ((t2 - t1) + (t3 - t4)) / 2;
                let key = (near, far, a, b);
                let at = match links.iter().position(|(k, _)| *k == key) {
                    Some(at) => at,
                    None => {
                        links.push((
                            key,
                            Across {
                                lowest: i64::MIN,
                                highest: i64::MAX,
                                shortest: (i64::MAX, 0),
                                requests: 0,
                            },
                        ));
                        links.len() - 1
                    }
                };
                let x = &mut links[at].1;
                x.requests += 1;
                if round_trip >= 0 {
                    x.lowest = x.lowest.max(t3 - t4);
                    x.highest = x.highest.min(t2 - t1);
                    if round_trip < x.shortest.0 {
                        x.shortest = (round_trip, offset);
                    }
                }
            }
            near = far;
            near_times = line
                .upstream_sent_ns
                .zip(line.upstream_answered_ns)
                .map(|(out, up)| (start + out as i64, start + up as i64));
        }
    }
    links
        .into_iter()
        .filter(|(_, x)| x.shortest.0 != i64::MAX)
        .map(|((from, to, from_clock, to_clock), x)| {
            let (offset_ns, bound_ns) = if x.lowest <= x.highest {
                (
                    x.lowest + (x.highest - x.lowest) / 2,
                    (x.highest - x.lowest).unsigned_abs().div_ceil(2),
                )
            } else {
                (x.shortest.1, x.shortest.0.unsigned_abs().div_ceil(2))
            };
            ClockOffset {
                from,
                to,
                from_clock,
                to_clock,
                offset_ns,
                bound_ns,
                requests: x.requests,
            }
        })
        .collect()
}

/// One part's mean around a percentile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartShare {
    pub part: Part,
    pub mean_us: f64,
    /// Half the 95 % interval of the mean (`None`: fewer than two requests in the band).
    pub half_width_us: Option<f64>,
}

/// Each part's share of one percentile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Share {
    /// 50, 90, 99.
    pub percentile: f64,
    /// The run's own percentile (or the sample's, when the run's is not given), µs.
    pub at_us: f64,
    /// Sampled requests in the band around it.
    pub band: usize,
    pub parts: Vec<PartShare>,
    /// `at_us` minus the sum of the parts' means.
    pub residual_us: f64,
}

/// The percentiles attribution answers.
pub const PERCENTILES: [f64; 3] = [50.0, 90.0, 99.0];

/// Each part's share of p50, p90 and p99. `run_percentile_us` gives the run's own percentile
/// (from its full histogram); the parts' means come from the band of sampled requests around
/// the same rank. Empty when nothing was split.
pub fn shares(a: &Attribution, run_percentile_us: impl Fn(f64) -> Option<f64>) -> Vec<Share> {
    if a.requests.is_empty() {
        return Vec::new();
    }
    let mut order: Vec<&Split> = a.requests.iter().collect();
    order.sort_by_key(|s| s.latency_ns);
    let n = order.len();
    PERCENTILES
        .iter()
        .map(|&p| {
            let q = p / 100.0;
            let half = (1.0 - q).min(0.05) / 2.0;
            let rank = |x: f64| ((x * n as f64).ceil() as usize).clamp(1, n) - 1;
            let (lo, hi) = (rank(q - half), rank(q + half));
            let band = &order[lo..=hi.max(lo)];
            let at_us =
                run_percentile_us(p).unwrap_or_else(|| order[rank(q)].latency_ns as f64 / 1000.0);
            let parts: Vec<PartShare> = a
                .parts
                .iter()
                .enumerate()
                .map(|(i, &part)| {
                    let xs: Vec<f64> = band.iter().map(|s| s.parts_ns[i] as f64 / 1000.0).collect();
                    let (mean_us, half_width_us) = mean_interval(&xs);
                    PartShare {
                        part,
                        mean_us,
                        half_width_us,
                    }
                })
                .collect();
            let residual_us = at_us - parts.iter().map(|s| s.mean_us).sum::<f64>();
            Share {
                percentile: p,
                at_us,
                band: band.len(),
                parts,
                residual_us,
            }
        })
        .collect()
}

/// The mean and half its 95 % interval (normal approximation).
fn mean_interval(xs: &[f64]) -> (f64, Option<f64>) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n.max(1.0);
    if xs.len() < 2 {
        return (mean, None);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, Some(1.96 * (var / n).sqrt()))
}

/// Each hop's share (a proxy's legs and connect added; intervals combined as independent),
/// for the short view and the chart.
pub fn by_hop(share: &Share) -> Vec<PartShare> {
    let mut hops: Vec<PartShare> = Vec::new();
    for s in &share.parts {
        let hop = s.part.hop();
        match hops.iter_mut().find(|h| h.part == hop) {
            Some(h) => {
                h.mean_us += s.mean_us;
                h.half_width_us = match (h.half_width_us, s.half_width_us) {
                    (Some(a), Some(b)) => Some(a.hypot(b)),
                    _ => None,
                };
            }
            None => hops.push(PartShare {
                part: hop,
                ..s.clone()
            }),
        }
    }
    hops
}

/// What changed for one hop from one variant to another at one percentile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Growth {
    pub percentile: f64,
    pub part: Part,
    pub from_us: f64,
    pub to_us: f64,
    /// Half the 95 % interval of the difference (`None`: not known).
    pub half_width_us: Option<f64>,
}

impl Growth {
    pub fn delta_us(&self) -> f64 {
        self.to_us - self.from_us
    }

    /// The growth is larger than its interval.
    pub fn is_clear(&self) -> bool {
        self.half_width_us
            .is_some_and(|h| self.delta_us().abs() > h)
    }
}

/// Per percentile, the hop that grew most from `from` to `to` (hops present in both), with
/// the difference and its interval.
pub fn grew(from: &[Share], to: &[Share]) -> Vec<Growth> {
    from.iter()
        .zip(to)
        .filter_map(|(a, b)| {
            let (a_hops, b_hops) = (by_hop(a), by_hop(b));
            b_hops
                .iter()
                .map(|h| {
                    let before = a_hops.iter().find(|x| x.part == h.part);
                    Growth {
                        percentile: b.percentile,
                        part: h.part,
                        from_us: before.map_or(0.0, |x| x.mean_us),
                        to_us: h.mean_us,
                        half_width_us: match before {
                            Some(x) => x
                                .half_width_us
                                .zip(h.half_width_us)
                                .map(|(p, q)| p.hypot(q)),
                            // A hop the other variant does not have: all of it is new.
                            None => h.half_width_us,
                        },
                    }
                })
                .max_by(|x, y| x.delta_us().total_cmp(&y.delta_us()))
        })
        .collect()
}

/// One variant's attribution at one load (and CPU allotment): its repeats' splits together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attributed {
    pub variant: String,
    /// Written as its words (`1000 rps x 16 conns`).
    #[serde(serialize_with = "as_words")]
    pub load: LoadPoint,
    pub cpu: Option<CpuAllotment>,
    /// Steps whose splits are in it.
    pub steps: usize,
    pub sample_rate: f64,
    pub path: Vec<HopSeen>,
    pub sampled: u64,
    pub split: u64,
    pub retried: u64,
    pub unjoined: u64,
    pub shares: Vec<Share>,
    /// Per pair of clocks on the path, the estimate with the smallest bound over its steps.
    pub clocks: Vec<ClockOffset>,
}

fn as_words<S: serde::Serializer>(load: &LoadPoint, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(load)
}

/// Every variant's attribution, per load, in the order the steps ran; steps that failed or
/// ran without attribution are left out. Each percentile's share uses the mean of the steps'
/// own percentiles of that variant and load.
pub fn by_variant(steps: &[StoredStep]) -> Vec<Attributed> {
    /// One variant at one load: its steps' splits pooled, and each step's own p50/p90/p99.
    struct Pool<'a> {
        first: &'a StoredStep,
        all: Attribution,
        runs: Vec<[f64; 3]>,
    }
    let mut pools: Vec<Pool> = Vec::new();
    for stored in steps {
        let s = &stored.step;
        let (Some(a), Some(result), false) = (&s.attribution, &s.result, s.failed()) else {
            continue;
        };
        let l = &result.latency_us;
        let run = [l.p50 as f64, l.p90 as f64, l.p99 as f64];
        let same = |p: &&mut Pool| {
            let f = &p.first.step;
            f.variant == s.variant
                && f.load_point() == s.load_point()
                && f.params.cpu == s.params.cpu
                && p.all.parts == a.parts
        };
        match pools.iter_mut().find(same) {
            Some(p) => {
                p.all.requests.extend(a.requests.iter().cloned());
                p.all.sampled += a.sampled;
                p.all.retried += a.retried;
                p.all.unjoined += a.unjoined;
                for c in &a.clocks {
                    let same_pair = |k: &&mut ClockOffset| {
                        (&k.from, &k.to, &k.from_clock, &k.to_clock)
                            == (&c.from, &c.to, &c.from_clock, &c.to_clock)
                    };
                    match p.all.clocks.iter_mut().find(same_pair) {
                        Some(k) if c.bound_ns < k.bound_ns => *k = c.clone(),
                        Some(_) => {}
                        None => p.all.clocks.push(c.clone()),
                    }
                }
                p.runs.push(run);
            }
            None => pools.push(Pool {
                first: stored,
                all: a.clone(),
                runs: vec![run],
            }),
        }
    }
    pools
        .into_iter()
        .map(|Pool { first, all, runs }| {
            let mean = |i: usize| runs.iter().map(|r| r[i]).sum::<f64>() / runs.len() as f64;
            Attributed {
                variant: first.step.variant.clone(),
                load: first.step.load_point(),
                cpu: first.step.params.cpu,
                steps: runs.len(),
                sample_rate: all.sample_rate,
                path: all.path.clone(),
                sampled: all.sampled,
                split: all.requests.len() as u64,
                retried: all.retried,
                unjoined: all.unjoined,
                shares: shares(&all, |p| PERCENTILES.iter().position(|&q| q == p).map(mean)),
                clocks: all.clocks.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshbench_results::attribution::Seen;
    use meshbench_results::PlayedBy;

    const T0: u64 = 1_795_000_000_000_000_000;

    fn sent(id: u64, lag: u64, service: u64) -> Sent {
        Sent {
            id,
            sent_unix_ns: T0 + id * 1_000_000,
            lag_ns: lag,
            service_ns: service,
            status: 200,
        }
    }

    /// A hop that began `start` after the send, sent upstream `out` later, got its answer
    /// `up` after its start and answered downstream at `resp`.
    fn logged(id: u64, start: u64, out: u64, up: u64, resp: u64) -> Logged {
        Logged {
            id,
            start_unix_ns: T0 + id * 1_000_000 + start,
            upstream_sent_ns: Some(out),
            upstream_answered_ns: Some(up),
            answered_ns: Some(resp),
            connect: None,
            attempts: 1,
            status: 200,
        }
    }

    fn hop(role: ChainRole) -> HopSeen {
        HopSeen {
            role,
            program: PlayedBy::Backend,
            seen: Seen::PerRequest,
        }
    }

    /// The server proxy's clock 5 ms ahead of the client's node: the link there takes 30 µs
    /// and back 25 µs in one request, 80 and 25 in another (a queue on the way there). The
    /// shortest round trip gives the offset within its bound; the split does not move.
    #[test]
    fn clocks_apart_are_estimated_from_the_shortest_round_trip_and_move_no_part() {
        let ahead: i64 = 5_000_000;
        let (cp, sp) = (ChainRole::ClientProxy, ChainRole::ServerProxy);
        let request = |id: u64, there: u64, back: u64, shift: i64| {
            let service = 10_000 + 20_000 + there + 555_000 + back + 5_000 + 12_000;
            let s = sent(id, 0, service);
            let up = 20_000 + there + 555_000 + back;
            let c = logged(id, 10_000, 20_000, up, up + 5_000);
            let mut v = logged(id, 10_000 + 20_000 + there, 40_000, 540_000, 555_000);
            v.start_unix_ns = (v.start_unix_ns as i64 + shift) as u64;
            (s, c, v)
        };
        let clock = |n: Node, _id: u64| -> Option<String> {
            Some(match n {
                Node::Hop(ChainRole::ServerProxy) => "node-b".into(),
                _ => "node-a".into(),
            })
        };
        let path = || vec![hop(cp), hop(sp)];
        let mut splits = Vec::new();
        for shift in [0, ahead] {
            let (s1, c1, v1) = request(1, 30_000, 25_000, shift);
            let (s2, c2, v2) = request(2, 80_000, 25_000, shift);
            let sent = [s1, s2];
            let logs = [(cp, vec![c1, c2]), (sp, vec![v1, v2])];
            let clocks = clock_offsets(&sent, &logs, &clock);
            assert_eq!(clocks.len(), 2, "{clocks:?}");
            let apart = clocks.iter().find(|c| c.to_clock == "node-b").unwrap();
            assert_eq!((apart.from, apart.to), (Node::Hop(cp), Node::Hop(sp)));
            assert_eq!(apart.requests, 2);
            // (30 - 25) / 2 = 2.5 µs off the true offset, within half the 55 µs round trip.
            assert_eq!(apart.offset_ns, shift + 2_500);
            assert_eq!(apart.bound_ns, 27_500);
            let same = clocks.iter().find(|c| c.to_clock == "node-a").unwrap();
            // One clock: 10 µs there and 12 back read as 1 µs apart, within 11.
            assert_eq!(
                (same.from, same.offset_ns, same.bound_ns),
                (Node::Client, -1_000, 11_000)
            );
            splits.push(join(1.0, path(), &sent, &logs).requests);
        }
        assert_eq!(splits[0], splits[1], "an offset moves no part");
        // A clock that is not known gives no estimate for the links it is on.
        let (s, c, v) = request(1, 30_000, 25_000, 0);
        let unknown = |n: Node, _: u64| (n == Node::Client).then(|| "node-a".to_string());
        assert!(clock_offsets(&[s], &[(cp, vec![c]), (sp, vec![v])], &unknown).is_empty());
    }

    /// A log that outlived a load holds the same id twice: the line of the request is the one
    /// that began while it was out, whichever comes first in the file.
    #[test]
    fn an_earlier_loads_line_with_the_same_id_is_not_this_requests() {
        let s = sent(1, 0, 100_000);
        let now = logged(1, 10_000, 20_000, 60_000, 80_000);
        let mut earlier = logged(1, 10_000, 1_000, 2_000, 3_000);
        earlier.start_unix_ns -= 10_000_000_000;
        for lines in [vec![earlier, now], vec![now, earlier]] {
            let logs = [(ChainRole::ClientProxy, lines)];
            let index = LogIndex::new(&logs);
            assert_eq!(index.line(0, &s), Some(&now));
            assert!(index.complete(&[s]));
            let a = join(1.0, vec![hop(ChainRole::ClientProxy)], &[s], &logs);
            assert_eq!((a.requests.len(), a.unjoined), (1, 0));
        }
        // Only the earlier load's line: this request has none yet (not flushed).
        let logs = [(ChainRole::ClientProxy, vec![earlier])];
        assert!(!LogIndex::new(&logs).complete(&[s]));
    }

    #[test]
    fn two_proxies_split_into_parts_that_add_up_to_the_latency() {
        // Client -> 10 µs -> CP (20 µs) -> 30 µs -> SP (40 µs) -> backend 500 µs -> SP (15)
        // -> 25 back -> CP (5) -> 12 to the client. Service = 10+20+30+40+500+15+25+5+12.
        let service = 657_000;
        let s = sent(1, 3_000, service);
        let sp_start = 10_000 + 20_000 + 30_000;
        let cp = logged(
            1,
            10_000,
            20_000,
            20_000 + 30_000 + 40_000 + 500_000 + 15_000 + 25_000,
            20_000 + 30_000 + 40_000 + 500_000 + 15_000 + 25_000 + 5_000,
        );
        let sp = logged(
            1,
            sp_start,
            40_000,
            40_000 + 500_000,
            40_000 + 500_000 + 15_000,
        );
        let a = join(
            1.0,
            vec![hop(ChainRole::ClientProxy), hop(ChainRole::ServerProxy)],
            &[s],
            &[
                (ChainRole::ClientProxy, vec![cp]),
                (ChainRole::ServerProxy, vec![sp]),
            ],
        );
        assert_eq!(a.requests.len(), 1);
        let by_part: HashMap<Part, i64> = a
            .parts
            .iter()
            .copied()
            .zip(a.requests[0].parts_ns.iter().copied())
            .collect();
        let cp_role = ChainRole::ClientProxy;
        let sp_role = ChainRole::ServerProxy;
        assert_eq!(by_part[&Part::Generator], 3_000);
        assert_eq!(
            by_part[&Part::Link {
                from: Node::Client,
                to: Node::Hop(cp_role)
            }],
            10_000 + 12_000
        );
        assert_eq!(
            by_part[&Part::Proxy {
                role: cp_role,
                leg: Leg::Request
            }],
            20_000
        );
        assert_eq!(
            by_part[&Part::Link {
                from: Node::Hop(cp_role),
                to: Node::Hop(sp_role)
            }],
            30_000 + 25_000
        );
        assert_eq!(
            by_part[&Part::Proxy {
                role: sp_role,
                leg: Leg::Request
            }],
            40_000
        );
        assert_eq!(
            by_part[&Part::Backend {
                after: Node::Hop(sp_role)
            }],
            500_000
        );
        assert_eq!(
            by_part[&Part::Proxy {
                role: sp_role,
                leg: Leg::Response
            }],
            15_000
        );
        assert_eq!(
            by_part[&Part::Proxy {
                role: cp_role,
                leg: Leg::Response
            }],
            5_000
        );
        let sum: i64 = a.requests[0].parts_ns.iter().sum();
        assert_eq!(sum as u64, a.requests[0].latency_ns);
    }

    #[test]
    fn retried_and_unlogged_requests_are_counted_not_split() {
        let mut retried = logged(2, 1, 2, 3, 4);
        retried.attempts = 2;
        let a = join(
            1.0,
            vec![hop(ChainRole::ServerProxy)],
            &[sent(1, 0, 100), sent(2, 0, 100), sent(3, 0, 100)],
            &[(ChainRole::ServerProxy, vec![logged(1, 1, 2, 3, 4), retried])],
        );
        assert_eq!(
            (a.sampled, a.requests.len(), a.retried, a.unjoined),
            (3, 1, 1, 1)
        );
    }

    #[test]
    fn with_no_logging_hop_the_service_time_is_the_backend_s() {
        let a = join(0.5, vec![], &[sent(1, 7, 900)], &[]);
        assert_eq!(
            a.parts,
            vec![
                Part::Generator,
                Part::Backend {
                    after: Node::Client
                }
            ]
        );
        assert_eq!(a.requests[0].parts_ns, vec![7, 900]);
    }

    #[test]
    fn a_percentile_s_share_is_the_mean_of_its_band_and_the_residual_closes_it() {
        // 1,000 requests: the backend's part grows with the rank, the link stays 100 µs.
        let sent: Vec<Sent> = (1..=1000)
            .map(|i| sent(i, 0, 100_000 + i * 1_000))
            .collect();
        let a = join(1.0, vec![], &sent, &[]);
        let s = shares(&a, |_| None);
        let p99 = &s[2];
        assert_eq!(p99.percentile, 99.0);
        assert!(p99.band >= 10, "{}", p99.band);
        let backend = &p99.parts[1];
        // The band is ranks 985..995: its mean is the 990th's service time.
        assert!(
            (backend.mean_us - 1090.0).abs() < 1.0,
            "{}",
            backend.mean_us
        );
        assert!(p99.residual_us.abs() < 1.0, "{}", p99.residual_us);
        assert!(backend.half_width_us.unwrap() < 5.0);
    }

    #[test]
    fn the_hop_that_grew_is_named_with_its_interval() {
        let with = |backend: u64| {
            let sent: Vec<Sent> = (1..=200)
                .map(|i| sent(i, 0, backend + (i % 7) * 1000))
                .collect();
            let cp: Vec<Logged> = (1..=200)
                .map(|i| logged(i, 1000, 2000, 2000 + backend, 2000 + backend + 1000))
                .collect();
            let a = join(
                1.0,
                vec![hop(ChainRole::ClientProxy)],
                &sent,
                &[(ChainRole::ClientProxy, cp)],
            );
            shares(&a, |_| None)
        };
        let g = grew(&with(100_000), &with(400_000));
        assert_eq!(g.len(), 3);
        // By hop, the backend is one, whichever hop is before it.
        assert_eq!(
            g[0].part,
            Part::Backend {
                after: Node::Client
            }
        );
        assert!((g[0].delta_us() - 300.0).abs() < 1.0, "{}", g[0].delta_us());
        assert!(g[0].is_clear());
    }
}
