//! Edits to the experiment file's YAML tree before it is read: each `--set key=value`, and the
//! old `load` words (`qps`, `jitter`) read as their new names with a note each. Also the hint
//! that a `--set` value was read as YAML. Nothing here checks the experiment itself; that is
//! [`super::Experiment::validate`]'s.

use serde_yaml_ng::{Mapping, Value};
use thiserror::Error;

/// Adds to each type mistake that a `--set` made how to write its value: `--set` reads VALUE
/// as YAML, so `--set name=1234` gives a number where text is wanted (`--set 'name="1234"'`)
/// and `--set topologies=baseline` one word where a list is (`--set 'topologies=[baseline]'`).
pub(super) fn how_to_set(problems: Vec<String>, overrides: &[String]) -> Vec<String> {
    problems
        .into_iter()
        .map(|problem| {
            let hint = overrides.iter().find_map(|o| {
                let (key, raw) = o.split_once('=')?;
                let (key, raw) = (key.trim(), raw.trim());
                let told = problem.strip_prefix(key)?;
                if !(told.starts_with(": ") || told.starts_with('[') || told.starts_with('.')) {
                    return None;
                }
                if told.contains("expected a string") {
                    Some(format!(
                        "--set reads the value as YAML, so {raw} is not text there; quote it: --set '{key}=\"{raw}\"'"
                    ))
                } else if told.contains("expected a list") && !raw.starts_with('[') {
                    Some(format!(
                        "--set reads the value as YAML; write a list: --set '{key}=[{raw}]'"
                    ))
                } else {
                    None
                }
            });
            match hint {
                Some(hint) => format!("{problem} ({hint})"),
                None => problem,
            }
        })
        .collect()
}

/// The `load` keys renamed to the words the rest of meshbench uses (units in the name, as the
/// engine's `rate_rps`), old word first. The old words are still read, with a note each.
const RENAMED_LOAD_KEYS: [(&str, &str); 2] = [("qps", "rate_rps"), ("jitter", "arrival")];

/// The old `load` words a file or its `--set`s used: read as the new ones, each with a note.
#[derive(Default)]
pub(super) struct OldWords {
    pub(super) notes: Vec<String>,
    /// (old, new) of each renamed key used.
    used: Vec<(&'static str, &'static str)>,
    /// `jitter` was used: its `true`/`false` are `arrival`'s `poisson`/`uniform`.
    jitter: bool,
}

impl OldWords {
    fn note(&mut self, old: &'static str, new: &'static str) {
        if !self.used.contains(&(old, new)) {
            self.used.push((old, new));
        }
        let note = format!(
            "load.{old} is an old name, read as load.{new}: write load.{new} instead{}",
            if old == "jitter" {
                " (false: uniform, true: poisson)"
            } else {
                " (the same values)"
            }
        );
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
        self.jitter |= old == "jitter";
    }

    /// A problem about a renamed key, in the words the file used (`load.qps[1]: ...`).
    pub(super) fn in_their_words(&self, problem: String) -> String {
        self.used.iter().fold(problem, |p, (old, new)| {
            let (was, is) = (format!("load.{old}"), format!("load.{new}"));
            match p.strip_prefix(&is) {
                Some(rest) if rest.starts_with([':', '[']) => format!("{was}{rest}"),
                _ => p,
            }
        })
    }

    /// Renames the file's old `load` keys.
    pub(super) fn in_file(&mut self, tree: &mut Value, problems: &mut Vec<String>) {
        let Some(Value::Mapping(load)) = tree.get_mut("load") else {
            return;
        };
        for (old, new) in RENAMED_LOAD_KEYS {
            let Some(value) = load.remove(old) else {
                continue;
            };
            if load.contains_key(new) {
                problems.push(format!(
                    "load.{old}: given with load.{new}, its new name; keep only load.{new}"
                ));
            }
            self.note(old, new);
            load.insert(Value::String(new.into()), value);
        }
    }

    /// `spec` with an old `load` key renamed (`load.qps=[100]` -> `load.rate_rps=[100]`).
    pub(super) fn in_override(&mut self, spec: &str) -> String {
        for (old, new) in RENAMED_LOAD_KEYS {
            let key = format!("load.{old}");
            if let Some(rest) = spec.trim_start().strip_prefix(&key) {
                if rest.starts_with(['=', '.', '[']) {
                    self.note(old, new);
                    return format!("load.{new}{rest}");
                }
            }
        }
        spec.to_string()
    }

    /// `jitter`'s booleans as `arrival`'s words.
    pub(super) fn jitter_as_arrival(&self, tree: &mut Value) {
        if !self.jitter {
            return;
        }
        let word = |v: &mut Value| {
            if let Value::Bool(b) = v {
                *v = Value::String(if *b { "poisson" } else { "uniform" }.into());
            }
        };
        match tree.get_mut("load").and_then(|l| l.get_mut("arrival")) {
            Some(Value::Sequence(list)) => list.iter_mut().for_each(word),
            Some(one) => word(one),
            None => {}
        }
    }
}

impl OldWords {
    /// The old `load.connection_pool`: its number is the connections now, and the
    /// `load.connections` it came with were the requests in flight (`load.in_flight`).
    pub(super) fn pool_as_connections(&mut self, tree: &mut Value, problems: &mut Vec<String>) {
        let Some(Value::Mapping(load)) = tree.get_mut("load") else {
            return;
        };
        let Some(pool) = load.remove("connection_pool") else {
            return;
        };
        if load.contains_key("in_flight") {
            problems.push(
                "load.connection_pool: given with load.in_flight, the new words; keep only load.connections (connections) and load.in_flight (requests in flight)"
                    .into(),
            );
            return;
        }
        let note = "load.connection_pool is an old name: its number is load.connections now, and the load.connections it came with are load.in_flight (requests in flight); write those instead";
        if !self.notes.iter().any(|n| n == note) {
            self.notes.push(note.into());
        }
        if pool.as_u64() == Some(0) {
            return; // 0 was one connection per request in flight: the new default.
        }
        let in_flight = load.remove("connections").unwrap_or_else(|| {
            let default = super::LoadSection::default().connections;
            Value::Sequence(default.into_iter().map(Value::from).collect())
        });
        load.insert(Value::String("in_flight".into()), in_flight);
        load.insert(
            Value::String("connections".into()),
            Value::Sequence(vec![pool]),
        );
    }
}

/// A `--set` that cannot be applied; each names the override as given.
#[derive(Debug, Error)]
pub(super) enum OverrideError {
    #[error("--set {spec}: expected KEY=VALUE, e.g. duration_secs=3")]
    NoValue { spec: String },
    #[error("--set {spec}: the value is not YAML: {source}")]
    NotYaml {
        spec: String,
        source: serde_yaml_ng::Error,
    },
    #[error("--set {spec}: empty part in the key")]
    EmptyPart { spec: String },
    /// The key goes through `at`, which holds a value that is not a mapping.
    #[error("--set {spec}: {at} is not a mapping")]
    NotAMapping { spec: String, at: String },
}

/// Applies `a.b.c=VALUE` (VALUE read as YAML: `3`, `[1, 2]`, `nginx`) to the tree.
pub(super) fn apply_override(tree: &mut Value, spec: &str) -> Result<(), OverrideError> {
    let owned = || spec.to_string();
    let (key, raw) = spec
        .split_once('=')
        .ok_or_else(|| OverrideError::NoValue { spec: owned() })?;
    let value: Value = serde_yaml_ng::from_str(raw).map_err(|source| OverrideError::NotYaml {
        spec: owned(),
        source,
    })?;
    let parts: Vec<&str> = key.trim().split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(OverrideError::EmptyPart { spec: owned() });
    }
    let mut node = tree;
    for (i, part) in parts.iter().enumerate() {
        if node.is_null() {
            *node = Value::Mapping(Mapping::new());
        }
        let Value::Mapping(map) = node else {
            return Err(OverrideError::NotAMapping {
                spec: owned(),
                at: parts[..i].join("."),
            });
        };
        let k = Value::String(part.to_string());
        if i + 1 == parts.len() {
            map.insert(k, value);
            return Ok(());
        }
        node = map.entry(k).or_insert(Value::Null);
    }
    Ok(())
}
