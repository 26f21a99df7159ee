//! The results store under faults, through the binary: two experiments writing to one store at
//! once, store files that are not SQLite or are cut short, a disk that fills mid-experiment
//! (a small tmpfs). Each experiment is a few short baseline steps against the built-in backend.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// A directory of its own for each test, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!(
            "meshbench-storefaults-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }

    /// An experiment file of `steps` baseline steps of 0.2 s.
    fn experiment_file(&self, name: &str, steps: u32) -> String {
        let p = self.path(&format!("{name}.yaml"));
        std::fs::write(
            &p,
            format!(
                "name: {name}\ntopologies: [baseline]\nduration_secs: 0.2\nwarmup_secs: 0\n\
                 cooldown_secs: 0\nrepeats: {steps}\nload:\n  rate_rps: [50]\n  connections: [1]\n"
            ),
        )
        .unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The steps of an experiment as `results export --format json` gives them.
fn exported_steps(store: &str, experiment: &str) -> (serde_json::Value, Vec<serde_json::Value>) {
    let out = meshbench(
        &[
            "results", "export", experiment, "--format", "json", "--store", store,
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps = doc["steps"].as_array().unwrap().clone();
    (doc["experiment"].clone(), steps)
}

/// Every step measured and stored, in order.
fn assert_steps_whole(steps: &[serde_json::Value], n: usize, what: &str) {
    let seqs: Vec<u64> = steps.iter().map(|s| s["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..n as u64).collect::<Vec<_>>(), "{what}");
    for s in steps {
        assert_eq!(s["status"], "ok", "{what}: {}", s["error"]);
        assert!(s["summary"]["requests"].as_u64().unwrap() > 0, "{what}");
    }
}

#[test]
fn two_experiments_writing_to_one_store_at_once_keep_every_step() {
    let dir = Dir::new("parallel");
    let store = dir.path("results.db");
    let (a, b) = (dir.experiment_file("a", 6), dir.experiment_file("b", 6));
    // Both start on a store that does not exist yet: they also race to make it.
    let mut first = spawn_meshbench(&["experiment", &a, "--store", &store, "--quiet"]);
    let mut second = spawn_meshbench(&["experiment", &b, "--store", &store, "--quiet"]);
    for (name, out) in [
        ("a", wait_with_limit(&mut first, LIMIT)),
        ("b", wait_with_limit(&mut second, LIMIT)),
    ] {
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let (e, steps) = exported_steps(&store, name);
        assert_eq!(e["status"], "done", "{name}");
        assert_steps_whole(&steps, 6, name);
    }
    let out = meshbench(&["results", "list", "--store", &store], LIMIT);
    assert_eq!(stdout(&out).lines().count(), 3, "{}", stdout(&out));
}

/// Runs `args` with `--store FILE`; returns the output.
fn with_store(args: &[&str], file: &str) -> Output {
    let mut all = args.to_vec();
    all.extend(["--store", file]);
    meshbench(&all, LIMIT)
}

#[test]
fn store_files_that_are_not_sqlite_or_are_cut_short_are_refused_by_every_command() {
    let dir = Dir::new("badfiles");
    let real = dir.path("real.db");
    let quick = dir.experiment_file("quick", 3);
    let out = meshbench(&["experiment", &quick, "--store", &real, "--quiet"], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = std::fs::read(&real).unwrap();
    assert!(
        !Path::new(&format!("{real}-wal")).exists(),
        "the WAL is folded into the file on exit"
    );
    let random: Vec<u8> = (0..16_384u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    let files = [
        (
            "text.db",
            b"StartTime,Labels\n2026-01-01,x\n".to_vec(),
            "is not a results store (not an SQLite file)",
        ),
        (
            "random.db",
            random,
            "is not a results store (not an SQLite file)",
        ),
        (
            "half.db",
            bytes[..bytes.len() / 2].to_vec(),
            "is damaged (cut short: ",
        ),
    ];
    let out_dir = dir.path("out");
    let commands: &[&[&str]] = &[
        &["results", "list"],
        &["results", "show"],
        &["results", "show", "quick"],
        &["results", "export", "--format", "csv"],
        &["results", "export", "--format", "json"],
        &["results", "export", "--format", "fortio", "--out", &out_dir],
        &["experiment", &quick, "--quiet"],
        &["report", "--out", &out_dir],
        &["compare", "1", "2"],
        &["size", "--target-rps", "1000"],
        &[
            "capacity",
            "http://127.0.0.1:9/",
            "--slo",
            "p99<10ms",
            "--quiet",
        ],
    ];
    for (name, content, needle) in &files {
        let file = dir.path(name);
        std::fs::write(&file, content).unwrap();
        for args in commands {
            let what = format!("{name}: {}", args.join(" "));
            let out = with_store(args, &file);
            assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(&out));
            let err = stderr(&out);
            let lines: Vec<&str> = err.lines().collect();
            assert_eq!(lines.len(), 1, "{what}: one line: {err}");
            let line = lines[0];
            assert!(line.starts_with("meshbench: "), "{what}: {line}");
            assert!(line.contains(&file), "{what}: names the file: {line}");
            assert!(line.contains(needle), "{what}: {line}");
            assert!(
                line.contains("give another --store"),
                "{what}: what to do: {line}"
            );
            assert!(
                stdout(&out).is_empty(),
                "{what}: nothing ran: {}",
                stdout(&out)
            );
            assert_eq!(
                &std::fs::read(&file).unwrap(),
                content,
                "{what}: file untouched"
            );
            assert!(!Path::new(&format!("{file}-wal")).exists(), "{what}");
        }
    }
}

/// A tmpfs mounted for a test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(&at).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs(at))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_stops_the_experiment_in_one_line_and_keeps_every_finished_step() {
    let dir = Dir::new("full");
    let disk = Tmpfs::mount(dir.0.join("disk"), "256k").unwrap_or_else(|why| {
        panic!("cannot mount a small tmpfs to fill ({why}): this test needs root, as the lab does")
    });
    let store = disk.0.join("results.db").display().to_string();
    // Where a step the store refuses is kept: the temporary directory, not the full disk.
    let keep = dir.0.join("keep");
    std::fs::create_dir_all(&keep).unwrap();
    let file = dir.experiment_file("filling", 60);
    let mut child = Command::new(bin())
        .args(["experiment", &file, "--store", &store, "--quiet"])
        .env("TMPDIR", &keep)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_with_limit(&mut child, LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("meshbench: "))
        .collect();
    assert_eq!(errors.len(), 1, "{err}");
    let line = errors[0];
    assert_eq!(Some(line), err.lines().last(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        line.contains(&format!(
            "the results store {store} cannot grow: its disk is full"
        )),
        "{line}"
    );
    // "step N+1 was measured but not stored: ...; the N steps before it are in the store
    // (experiment 1); its result is kept in PATH"
    let stored: usize = match line.split_once(" steps before it are in the store") {
        Some((before, _)) => before.rsplit(' ').next().and_then(|n| n.parse().ok()),
        None => line
            .contains("the step before it is in the store")
            .then_some(1),
    }
    .unwrap_or_else(|| panic!("how many steps were stored: {line}"));
    assert!(
        (1..60).contains(&stored),
        "some steps fit before the disk filled: {line}"
    );
    assert!(
        line.starts_with(&format!(
            "meshbench: step {} was measured but not stored",
            stored + 1
        )),
        "{line}"
    );
    let kept = line
        .split("its result is kept in ")
        .nth(1)
        .unwrap_or_else(|| panic!("where the step went: {line}"));
    assert!(kept.starts_with(&keep.display().to_string()), "{line}");

    // Every step that finished before the disk filled reads back from the full disk.
    let (e, steps) = exported_steps(&store, "filling");
    assert_eq!(e["status"], "failed");
    assert_steps_whole(&steps, stored, "stored before the disk filled");
    let out = meshbench(&["results", "show", "filling", "--store", &store], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    // The step the store refused is whole in its file.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(kept).unwrap()).unwrap();
    assert_eq!(doc["store"], store.as_str());
    assert_eq!(doc["step"]["seq"], stored as u64);
    assert_eq!(doc["step"]["status"], "ok");
    assert!(doc["step"]["result"]["requests"]["total"].as_u64().unwrap() > 0);
    drop(disk);
}
