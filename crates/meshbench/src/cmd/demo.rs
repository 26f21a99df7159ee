//! `meshbench demo`: the README's first command, a short version of
//! `examples/sidecar-overhead.yaml` (embedded in the binary). The backend alone, behind a real
//! Envoy sidecar configured as Istio's (installed first where it is missing, as nginx is; nginx,
//! its fallback, only where that fails: one line says why), and behind a client and a server sidecar talking mutual TLS, at three rates;
//! it runs as any experiment does and prints the same headline: what the sidecars add per
//! percentile, each with its interval and whether it is more than noise (the one verdict of
//! `analysis::verdict`), and what they cost in CPU and memory. Results go to the default store
//! (as any experiment's), an Istio-style CSV to `--out`.

use anyhow::{Context, Result};

use super::common::experiment_file::announce_stand_ins;
use super::common::session;
use super::common::signals::Signals;
use super::common::stored::{headline, show_command};
use crate::cli::DemoArgs;
use crate::usage;

/// The preset the demo shortens.
const PRESET: &str = include_str!("../../../../examples/sidecar-overhead.yaml");

/// What makes it short: 3 rates, 4 s each after a 1 s warm-up. Four one-second intervals a
/// side are the fewest with which the verdict can show a difference (docs/answers.md); with
/// three, every figure would be "too short to tell".
const SHORTER: &[&str] = &[
    "name=sidecar-overhead-demo",
    "duration_secs=4",
    "warmup_secs=1",
    "cooldown_secs=0.5",
    "load.rate_rps=[500, 1000, 2000]",
];

pub fn execute(args: DemoArgs) -> Result<u8> {
    let mut overrides: Vec<String> = SHORTER.iter().map(|s| s.to_string()).collect();
    overrides.extend(args.set.iter().cloned());
    let mut e = meshbench_experiment::parse("sidecar-overhead.yaml (embedded)", PRESET, &overrides)
        .map_err(|err| usage(err.to_string()))?;
    announce_stand_ins(&mut e, meshbench_runner::setup::Provision::Install);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    // The store every later command reads by default: after the demo, `meshbench results show
    // latest` (and `compare`, `report`) find its experiment as printed in the README.
    let store_path = args
        .store
        .clone()
        .unwrap_or_else(meshbench_store::default_path);
    let (done, code) = session::run(
        &e,
        &store_path,
        args.quiet,
        None,
        meshbench_runner::Site::Here,
        None,
        &Signals::install()?,
    )?;
    let store = meshbench_store::Store::open(&store_path)?;
    let h = headline(&store, done.id)?;
    out!("\n{}", meshbench_report::answers::headline_text(&h));
    let csv = args.out.join("sidecar-overhead.csv");
    std::fs::write(
        &csv,
        meshbench_report::export::istio_csv(&store.steps(done.id)?),
    )
    .with_context(|| format!("cannot write {}", csv.display()))?;
    // The last line names the store the demo wrote, not the default one. One line each, so
    // that each fits a terminal line unless its path alone is longer.
    outln!(
        "\nstored in {} (experiment {})\nIstio-style CSV in {}\nto see it again: `{}`",
        store_path.display(),
        done.id,
        csv.display(),
        show_command(done.id, &store_path)
    );
    Ok(code)
}
