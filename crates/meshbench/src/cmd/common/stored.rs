//! Experiments read back from the results store, as every command that answers from it reads
//! them: the store `--store` names (which must exist), an experiment by id, name or `latest`,
//! its measured runs and headline, and the command that shows it again.

use std::path::Path;

use anyhow::Result;
use meshbench_analysis::headline::Headline;
use meshbench_analysis::{group, Run};
use meshbench_store::{ExperimentRow, Store, StoreError, StoredStep};

use crate::cli::StoreArg;
use crate::usage;

/// Opens the store named by `--store` (or the default), which must exist.
pub fn open_store(s: &StoreArg) -> Result<Store> {
    let path = s
        .store
        .clone()
        .unwrap_or_else(meshbench_store::default_path);
    if !path.exists() {
        return Err(usage(format!(
            "no results store at {}; run `meshbench experiment FILE` or give --store",
            path.display()
        )));
    }
    Ok(Store::open(&path)?)
}

/// An experiment of the store by id, name or `latest`. A name the store does not hold is bad
/// input (exit 2) in every command; a store that cannot be read is not (exit 1).
pub fn find_experiment(store: &Store, key: &str) -> Result<ExperimentRow> {
    store.experiment(key).map_err(|e| match e {
        StoreError::NotFound(_) => usage(e.to_string()),
        e => e.into(),
    })
}

/// The measured runs of an experiment.
pub fn runs_of(store: &Store, experiment: i64) -> Result<Vec<Run>> {
    Ok(store
        .steps(experiment)?
        .iter()
        .filter_map(Run::from_step)
        .collect())
}

/// The headline of a stored experiment.
pub fn headline(store: &Store, experiment: i64) -> Result<Headline> {
    Ok(Headline::of(group(runs_of(store, experiment)?)))
}

/// What the changes pairs of `steps` cost the traffic, ranked ("" without changes).
pub fn changes_text(steps: &[StoredStep]) -> String {
    meshbench_report::changes::text(&meshbench_analysis::changes::by_pair(
        steps,
        meshbench_analysis::verdict::Margin::DEFAULT,
    ))
}

/// `meshbench results show ID`, with `--store FILE` unless `store` is the default one: the
/// command, as a user types it into a POSIX shell, that shows experiment `id` again.
pub fn show_command(id: i64, store: &Path) -> String {
    let mut command = format!("meshbench results show {id}");
    if store != meshbench_store::default_path() {
        command.push_str(" --store ");
        command.push_str(&shell_word(&store.to_string_lossy()));
    }
    command
}

/// `text` as one word of a POSIX shell: as it is when nothing in it is special, else quoted.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:=@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}
