//! One store's experiments copied into another, each with new ids, whole or not at all: how a
//! run made elsewhere (a detached run's store, fetched from its coordinator's pod) joins the
//! local store and is read like any run made here.
//!
//! The other file is opened as a [`Store`] first, so that one written by an older meshbench is
//! migrated to this schema before anything is copied; the copy itself names no column but the
//! keys it renumbers (each table's columns are read from the schema), so a column added by a
//! later migration is carried without this module changing.

use std::path::Path;

use rusqlite::{params, Transaction, TransactionBehavior};

use crate::{Named, Store, StoreError};

/// The tables whose rows belong to one step, by `step_id`.
const STEP_TABLES: [&str; 4] = ["histograms", "series", "usage", "samples"];

impl Store {
    /// Copies every experiment of the store at `other` (migrated first if it is older) into
    /// this one, in one transaction: the new ids, in the other's order.
    pub fn import(&mut self, other: &Path) -> Result<Vec<i64>, StoreError> {
        drop(Store::open(other)?);
        let path = self.path.clone();
        // SQLite attaches outside a transaction only.
        self.conn
            .execute(
                "ATTACH DATABASE ?1 AS theirs",
                params![other.display().to_string()],
            )
            .named(&path)?;
        let copied = Transaction::new(&mut self.conn, TransactionBehavior::Immediate)
            .and_then(|tx| {
                let ids = copy_all(&tx)?;
                tx.commit().map(|()| ids)
            })
            .named(&path);
        self.conn
            .execute("DETACH DATABASE theirs", [])
            .named(&path)?;
        copied
    }
}

/// Each experiment of `theirs`, its steps and their rows, renumbered.
fn copy_all(tx: &Transaction) -> rusqlite::Result<Vec<i64>> {
    let experiment_columns = columns(tx, "experiments", &["id"])?;
    let step_columns = columns(tx, "steps", &["id", "experiment_id"])?;
    let mut experiments = tx.prepare("SELECT id FROM theirs.experiments ORDER BY id")?;
    let ids: Vec<i64> = experiments
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut new_ids = Vec::with_capacity(ids.len());
    for id in ids {
        tx.execute(
            &format!(
                "INSERT INTO main.experiments ({c}) SELECT {c} FROM theirs.experiments WHERE id = ?1",
                c = experiment_columns
            ),
            params![id],
        )?;
        let experiment = tx.last_insert_rowid();
        new_ids.push(experiment);
        let mut steps =
            tx.prepare("SELECT id FROM theirs.steps WHERE experiment_id = ?1 ORDER BY id")?;
        let step_ids: Vec<i64> = steps
            .query_map(params![id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for step in step_ids {
            tx.execute(
                &format!(
                    "INSERT INTO main.steps (experiment_id, {c}) SELECT ?2, {c} FROM theirs.steps WHERE id = ?1",
                    c = step_columns
                ),
                params![step, experiment],
            )?;
            let new_step = tx.last_insert_rowid();
            for table in STEP_TABLES {
                let c = columns(tx, table, &["step_id"])?;
                tx.execute(
                    &format!(
                        "INSERT INTO main.{table} (step_id, {c}) SELECT ?2, {c} FROM theirs.{table} WHERE step_id = ?1"
                    ),
                    params![step, new_step],
                )?;
            }
        }
    }
    Ok(new_ids)
}

/// `table`'s columns in this store's schema but `except`, comma-separated.
fn columns(tx: &Transaction, table: &str, except: &[&str]) -> rusqlite::Result<String> {
    let mut info = tx.prepare(&format!("PRAGMA main.table_info({table})"))?;
    let names: Vec<String> = info
        .query_map([], |r| r.get::<_, String>(1))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(names
        .into_iter()
        .filter(|n| !except.contains(&n.as_str()))
        .collect::<Vec<_>>()
        .join(", "))
}
