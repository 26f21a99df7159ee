//! The answer commands over stored results: `compare A B` (two measurements, per percentile,
//! with a verdict) and `size` (replicas and cores for a target load).

use std::path::Path;

use anyhow::Result;
use meshbench_analysis::attribution::{self, by_variant, Attributed};
use meshbench_analysis::compare::pair_up;
use meshbench_analysis::headline::{delta, observe, Headline};
use meshbench_analysis::runs::{percentile_name, PERCENTILES};
use meshbench_analysis::sizing::{self, Candidate, Model, Only, Request, SizingError};
use meshbench_analysis::threshold::Metric;
use meshbench_analysis::verdict::Margin;
use meshbench_analysis::{group, Group, Run};
use meshbench_results::RunResult;
use meshbench_store::Store;

use super::common::stored::{find_experiment, headline, open_store};
use super::common::thresholds::{check, parse_thresholds};
use super::common::units::{parse_duration, parse_percent};
use crate::cli::{CompareArgs, SizeArgs, StoreArg};
use crate::{exit, usage};

/// Whether `spec` names result files: one, or several separated by commas (repeats of one
/// measurement).
fn is_result_files(spec: &str) -> bool {
    spec.split(',')
        .all(|f| f.ends_with(".json") || Path::new(f).is_file())
}

/// A `meshbench run --json` file as a run named `name`, the `repeat`-th of its side.
fn result_file(file: &str, name: &str, repeat: u32) -> Result<Run> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| usage(format!("{file}: cannot read it ({e})")))?;
    let result: RunResult = serde_json::from_str(&text).map_err(|e| {
        usage(format!(
            "{file}: not a meshbench run --json result ({e}); write one with `meshbench run --json FILE`"
        ))
    })?;
    let mut run = Run::from_result(name, result).map_err(|e| usage(format!("{file}: {e}")))?;
    run.repeat = repeat;
    Ok(run)
}

/// One side of a comparison: result files (one run, or repeats of one measurement separated
/// by commas, named after the first), or a selection from the store.
/// One side of a comparison: its name, its runs grouped, and where their latency went (when
/// their steps had attribution on).
type Side = (String, Vec<Group>, Vec<Attributed>);

fn side(spec: &str, store: &StoreArg) -> Result<Side> {
    if is_result_files(spec) {
        let files: Vec<&str> = spec.split(',').collect();
        let first = Path::new(files[0]);
        let name = first
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| spec.to_string());
        let runs = files
            .iter()
            .zip(0..)
            .map(|(file, repeat)| result_file(file, &name, repeat))
            .collect::<Result<Vec<Run>>>()?;
        return Ok((spec.to_string(), group(runs), Vec::new()));
    }
    let store = open_store(store)?;
    let (key, pick) = match (spec.split_once('#'), spec.split_once(':')) {
        (Some((k, n)), _) => {
            let n: u32 = n.parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                usage(format!(
                    "{spec}: '{n}' is not a step number; `meshbench results show` numbers them from 1"
                ))
            })?;
            (k, Pick::Step(n - 1))
        }
        (None, Some((k, v))) => (k, Pick::Variant(v.to_string())),
        (None, None) => (spec, Pick::All),
    };
    let e = find_experiment(&store, key)?;
    let steps = store.steps(e.id)?;
    let picked: Vec<meshbench_store::StoredStep> = steps
        .iter()
        .filter(|s| match &pick {
            Pick::All => true,
            Pick::Step(n) => s.step.seq == *n,
            Pick::Variant(v) => {
                s.step.variant == *v || meshbench_store::topology_name::text(s.step.kind) == v
            }
        })
        .cloned()
        .collect();
    let runs: Vec<Run> = picked.iter().filter_map(Run::from_step).collect();
    if runs.is_empty() {
        if let Pick::Variant(v) = &pick {
            let mut known: Vec<&str> = steps.iter().map(|s| s.step.variant.as_str()).collect();
            known.dedup();
            return Err(usage(format!(
                "{spec}: experiment {} has no measured variant '{v}'; it has: {}",
                e.id,
                known.join(", ")
            )));
        }
    }
    Ok((
        format!("{spec} (experiment {} '{}')", e.id, e.name),
        group(runs),
        by_variant(&picked),
    ))
}

enum Pick {
    All,
    Variant(String),
    Step(u32),
}

/// Reads `--margin`: comma-separated items, each a share of A's value for every percentile
/// (`10%`), for one (`p99=50%`, after the share for all if both are given), or the floor (a
/// duration, `50us`). What is not given is zero, so `0` is no margin.
pub fn parse_margin(text: &str) -> Result<Margin> {
    let bad = || {
        usage(format!(
            "--margin {text}: give shares of A's value and a floor, like 10%,50us or p50=5%,p99=50%,0.1ms (0 for none)"
        ))
    };
    let mut margin = Margin::NONE;
    let mut floor = None;
    let (mut every, mut one): (Option<f64>, Vec<(usize, f64)>) = (None, Vec::new());
    for item in text.split(',').map(str::trim) {
        if let Some((name, share)) = item.split_once('=') {
            let i = PERCENTILES
                .iter()
                .position(|q| percentile_name(*q) == name.trim())
                .ok_or_else(bad)?;
            if !share.trim().ends_with('%') {
                return Err(bad());
            }
            one.push((i, parse_percent("--margin", share).map_err(|_| bad())?));
        } else if item.ends_with('%') && every.is_none() {
            every = Some(parse_percent("--margin", item).map_err(|_| bad())?);
        } else if !item.is_empty() && !item.ends_with('%') && floor.is_none() {
            let d = parse_duration("--margin", item).map_err(|_| bad())?;
            floor = Some(d.as_secs_f64() * 1000.0);
        } else {
            return Err(bad());
        }
    }
    margin.shares = [every.unwrap_or(0.0); 4];
    for (i, share) in one {
        margin.shares[i] = share;
    }
    margin.floor_ms = floor.unwrap_or(0.0);
    Ok(margin)
}

pub fn compare(args: CompareArgs) -> Result<u8> {
    let thresholds = parse_thresholds(&args.thresholds)?;
    let margin = match &args.margin {
        Some(text) => parse_margin(text)?,
        None => Margin::DEFAULT,
    };
    let (a_name, a, a_split) = side(&args.a, &args.store)?;
    let (b_name, b, b_split) = side(&args.b, &args.store)?;
    let pairs = pair_up(&a_name, a, &b_name, b, margin).map_err(|e| usage(e.to_string()))?;
    out!(
        "{}",
        meshbench_report::answers::compare_text(&a_name, &b_name, &pairs)
    );
    // Where both sides split their latency at the same load: which hop grew.
    for to in &b_split {
        let from = a_split
            .iter()
            .find(|f| f.load == to.load && f.cpu == to.cpu);
        if let Some(from) = from {
            out!(
                "{}",
                meshbench_report::attribution::grew_text(
                    &format!("{} ({})", from.variant, from.load),
                    &to.variant,
                    &attribution::grew(&from.shares, &to.shares)
                )
            );
        }
    }
    if thresholds.is_empty() {
        return Ok(exit::OK);
    }
    let b_headline = Headline::of(pairs.iter().map(|p| p.b.clone()).collect());
    let ok = check(&thresholds, |m| match m {
        // The shift the table prints, from the same function.
        Metric::Delta(q) => pairs
            .iter()
            .map(|p| {
                let at = if pairs.len() == 1 {
                    String::new()
                } else {
                    format!("{} @ {}", p.b.variant, p.b.load)
                };
                (at, delta(&p.a, &p.b, q, p.margin).point_ms())
            })
            .collect(),
        m => observe(&b_headline, m),
    });
    Ok(if ok { exit::OK } else { exit::FAILED })
}

pub fn size(args: SizeArgs) -> Result<u8> {
    let headroom = parse_percent("--headroom", &args.headroom)?;
    if args.cores_per_replica.is_nan() || args.cores_per_replica <= 0.0 {
        return Err(usage("--cores-per-replica must be above 0"));
    }
    let req = Request {
        target_rps: args.target_rps,
        headroom,
        cores_per_replica: args.cores_per_replica,
        extrapolate: args.extrapolate,
    };
    let candidates = match args.rps_per_core {
        Some(rpc) if rpc.is_nan() || rpc <= 0.0 => {
            return Err(usage("--rps-per-core must be above 0"))
        }
        Some(rpc) => vec![Candidate {
            name: "proxy".into(),
            model: Ok(Model::from_figures(rpc, args.memory_mib)),
        }],
        None => {
            let store = open_store(&args.store)?;
            let only = Only {
                role: args.role.clone(),
                variant: args.variant.clone(),
            };
            let (used, candidates) =
                sizable(&store, &args.experiment, args.cores_per_replica, &only)?;
            outln!("{used}");
            candidates
        }
    };
    let mut answered = 0;
    for c in &candidates {
        match c.model.as_ref().map(|m| sizing::size(m, &req)) {
            Ok(Ok(s)) => {
                answered += 1;
                out!(
                    "{}",
                    meshbench_report::answers::sizing_text(&c.name, args.target_rps, &s)
                )
            }
            Ok(Err(e @ (SizingError::Headroom | SizingError::Target))) => {
                return Err(usage(e.to_string()))
            }
            Ok(Err(e)) => outln!("{}: cannot size: {e}", c.name),
            Err(why) => outln!("{}: cannot size: {why}", c.name),
        }
    }
    Ok(if answered > 0 { exit::OK } else { exit::FAILED })
}

/// The experiment to size from and its proxies, with a line saying which it is. `latest` is
/// the newest experiment with a proxy that can be sized from (a capacity search against a URL
/// measures no proxy, so the experiment before it is used, and the line says why).
fn sizable(
    store: &Store,
    key: &str,
    cores_per_replica: f64,
    only: &Only,
) -> Result<(String, Vec<Candidate>)> {
    let of = |e: &meshbench_store::ExperimentRow| -> Result<Vec<Candidate>> {
        let h = headline(store, e.id)?;
        let source = format!("experiment {} '{}'", e.id, e.name);
        Ok(sizing::candidates(&h, &source, cores_per_replica, only))
    };
    let why_not = |e: &meshbench_store::ExperimentRow, c: &[Candidate]| -> String {
        let name = format!("experiment {} '{}'", e.id, e.name);
        if c.is_empty() {
            let what = if only.role.is_some() || only.variant.is_some() {
                "no proxy matching --role/--variant"
            } else {
                "no proxy (a URL, or the baseline alone)"
            };
            return format!("{name} measured {what}");
        }
        let each: Vec<String> = c
            .iter()
            .filter_map(|c| {
                c.model
                    .as_ref()
                    .err()
                    .map(|why| format!("{}: {why}", c.name))
            })
            .collect();
        format!("{name} cannot be sized from: {}", each.join("; "))
    };
    let usable = |c: &[Candidate]| c.iter().any(|c| c.model.is_ok());
    if key != "latest" {
        let e = store.experiment(key).map_err(|e| usage(e.to_string()))?;
        let c = of(&e)?;
        if !usable(&c) {
            anyhow::bail!("{}", why_not(&e, &c));
        }
        return Ok((format!("sizing from experiment {} '{}'", e.id, e.name), c));
    }
    let all = store.experiments()?;
    let Some(newest) = all.first() else {
        return Err(usage(format!(
            "{} holds no experiment; run one first (`meshbench experiment FILE`) or give --rps-per-core",
            store.path().display()
        )));
    };
    let mut newest_why = None;
    for e in &all {
        let c = of(e)?;
        if usable(&c) {
            let used = match newest_why {
                None => format!("sizing from experiment {} '{}', the newest", e.id, e.name),
                Some(why) => format!(
                    "sizing from experiment {} '{}', the newest that size can use ({why})",
                    e.id, e.name
                ),
            };
            return Ok((used, c));
        }
        if e.id == newest.id {
            newest_why = Some(why_not(e, &c));
        }
    }
    anyhow::bail!(
        "no experiment in {} can be sized from; the newest: {}",
        store.path().display(),
        newest_why.unwrap_or_default()
    )
}
