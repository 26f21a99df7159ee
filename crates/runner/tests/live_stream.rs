//! The live stream adds up to the result: every second handed to the caller while a run goes,
//! summed, gives exactly the result's counts (by status and by kind of error), sends and
//! latency count, whatever the number of worker threads; and watching does not change what
//! is measured.

use std::net::SocketAddr;
use std::time::Duration;

use meshbench_backend::{Backend, BackendConfig};
use meshbench_engine::recorder::{Counts, ErrorKind};
use meshbench_engine::{Stop, StopAt};
use meshbench_results::histogram::new_histogram;
use meshbench_runner::{measure, LoadOptions, LoadSource, TargetSource};

#[test]
fn seconds_sum_to_the_result_exactly() {
    let cfg = BackendConfig {
        status: "500:10%,404:5%".parse().unwrap(),
        threads: 1,
        ..BackendConfig::default()
    };
    let backend = Backend::start(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    for threads in [1, 2] {
        let mut o = LoadOptions::new(TargetSource::Url(format!("http://{}/", backend.addr())));
        o.pace.rate_rps = Some(400.0);
        o.connections = 4;
        o.pace.threads = Some(threads);
        o.window.stop = StopAt::Duration(Duration::from_secs(3));
        o.window.warmup = Duration::from_millis(500);
        o.timeout = Duration::from_secs(2);
        let spec = o.resolve().unwrap();
        let mut counts = Counts::default();
        let mut sends = 0;
        let mut latency = new_histogram();
        let mut seconds = Vec::new();
        let m = measure(
            LoadSource::Local,
            &spec,
            Default::default(),
            Default::default(),
            Stop::new(),
            |live, _| {
                for s in live.seconds {
                    counts += &s.counts;
                    sends += s.sends;
                    latency.add(&s.latency).unwrap();
                    seconds.push(s.second);
                }
            },
        )
        .unwrap();
        let r = &m.result;
        assert_eq!(counts.total(), r.requests.total, "{threads} threads");
        assert_eq!(counts.failed(), r.requests.errors);
        assert_eq!(counts.ok(), r.requests.ok);
        assert!(counts.errors(ErrorKind::Timeout) == r.errors.timeout);
        let by_code: Vec<(String, u64)> = counts
            .status_codes()
            .map(|(c, n)| (c.to_string(), n))
            .collect();
        let stored: Vec<(String, u64)> = r
            .status_codes
            .iter()
            .map(|(c, n)| (c.clone(), *n))
            .collect();
        let mut by_code_sorted = by_code.clone();
        by_code_sorted.sort();
        assert_eq!(by_code_sorted, stored);
        assert!(by_code.iter().any(|(c, _)| c == "500"), "{by_code:?}");
        assert_eq!(latency.len(), r.latency_us.count);
        assert_eq!(latency.value_at_quantile(0.99), r.latency_us.p99);
        assert!(sends >= r.requests.total);
        // Each second once, in order.
        assert!(seconds.windows(2).all(|w| w[1] == w[0] + 1), "{seconds:?}");
        assert!(seconds.len() >= 3, "{seconds:?}");
    }
}
