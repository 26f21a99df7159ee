//! `meshbench demo`: the README's first command, a short version of
//! `examples/sidecar-overhead.yaml` (embedded in the binary). The backend alone, behind a real
//! nginx sidecar, and behind a client and a server sidecar talking mutual TLS, at three rates;
//! then what the sidecars add per percentile and what they cost in CPU and memory. Results go to
//! a store and a CSV in `--out`.

use anyhow::{Context, Result};
use meshbench_store::StepRecord;

use crate::cli::DemoArgs;
use crate::usage;

/// The preset the demo shortens.
const PRESET: &str = include_str!("../../../../examples/sidecar-overhead.yaml");

/// What makes it short: 3 rates, 3 s each after a 1 s warm-up.
const SHORTER: &[&str] = &[
    "name=sidecar-overhead-demo",
    "duration_secs=3",
    "warmup_secs=1",
    "cooldown_secs=0.5",
    "load.qps=[500, 1000, 2000]",
];

pub fn execute(args: DemoArgs) -> Result<u8> {
    let mut overrides: Vec<String> = SHORTER.iter().map(|s| s.to_string()).collect();
    overrides.extend(args.set.iter().cloned());
    let e = meshbench_experiment::parse("sidecar-overhead.yaml (embedded)", PRESET, &overrides)
        .map_err(|err| usage(err.to_string()))?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let store_path = args.out.join("results.db");
    let done = super::experiment::run(&e, &store_path, args.quiet)?;
    print!("{}", overhead(&done.steps));
    let store = meshbench_store::Store::open(&store_path)?;
    let steps = store.steps(done.id)?;
    let csv = args.out.join("sidecar-overhead.csv");
    std::fs::write(&csv, meshbench_report::export::istio_csv(&steps))
        .with_context(|| format!("cannot write {}", csv.display()))?;
    println!(
        "\nstored in {} (experiment {}); Istio-style CSV in {}",
        store_path.display(),
        done.id,
        csv.display()
    );
    Ok(done.exit_code)
}

/// Added latency over the baseline at the same rate, and the sidecars' CPU per 1000 requests
/// per second and memory, one line per rate and topology.
pub fn overhead(steps: &[StepRecord]) -> String {
    let qps = |s: &StepRecord| {
        serde_json::from_str::<serde_json::Value>(&s.params_json).unwrap_or_default()["qps"]
            .as_f64()
            .unwrap_or(0.0)
    };
    let mut out = String::from(
        "\nwhat the sidecars add over the baseline (ms), and what they cost:\n   qps  topology      p50     p90     p99   p99.9   sidecar vCPU per 1000 rps   sidecar MiB\n",
    );
    for s in steps.iter().filter(|s| s.topology != "baseline") {
        let Some(base) = steps
            .iter()
            .find(|b| b.topology == "baseline" && qps(b) == qps(s) && b.repeat == s.repeat)
            .and_then(|b| b.summary.as_ref())
        else {
            continue;
        };
        let Some(m) = &s.summary else { continue };
        let d = |a: u64, b: u64| (a as f64 - b as f64) / 1000.0;
        let proxies: Vec<_> = s
            .usage
            .iter()
            .filter(|u| u.role.ends_with("proxy"))
            .collect();
        let cpu: f64 = proxies.iter().map(|u| u.cpu_millicores_avg).sum::<f64>() / 1000.0;
        let mib: f64 = proxies
            .iter()
            .map(|u| u.working_set_mib_avg.unwrap_or(u.rss_mib_avg))
            .sum();
        let per_1k = if m.throughput_rps > 0.0 {
            cpu / m.throughput_rps * 1000.0
        } else {
            0.0
        };
        out.push_str(&format!(
            "{:>6}  {:<10} {:>7.3} {:>7.3} {:>7.3} {:>7.3}   {:>25.3}   {:>11.1}\n",
            qps(s),
            s.topology,
            d(m.p50_us, base.p50_us),
            d(m.p90_us, base.p90_us),
            d(m.p99_us, base.p99_us),
            d(m.p999_us, base.p999_us),
            per_1k,
            mib
        ));
    }
    out
}
