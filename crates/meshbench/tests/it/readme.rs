//! A new user's first hour, as README.md prints it: the demo first (the set-up's first
//! command, shortened), then every `console` block of the README in order, run by trycmd as
//! printed (each line `$ meshbench ...`, its output elided, each exit 0). The blocks marked
//! `console,ignore` need what this machine has not (a cluster: docs/kubernetes.md's tests run
//! those). The commands run in a directory whose `examples/` is the repository's, with a
//! default store of their own (XDG_DATA_HOME), as after `cargo install` on a fresh machine.
//!
//! And `--help`: every command's fits 100 columns, and every flag it shows has a sentence.
//! And the docs that must stay true to the code: docs/cli-reference.md is what the flags say,
//! docs/architecture.md is short and names only paths that exist.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use clap::{CommandFactory, Parser};

use crate::common;

#[test]
fn the_readmes_commands_run_as_printed_after_the_demo() {
    let dir = common::scratch_dir("readme");
    let data_home = dir.join("data");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The set-up's first command, shorter: its experiment, under its name, in the default store.
    let demo = Command::new(common::bin())
        .args([
            "demo",
            "--quiet",
            "--set",
            "duration_secs=2",
            "--set",
            "load.rate_rps=[500]",
        ])
        .env("XDG_DATA_HOME", &data_home)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    // trycmd runs a `NAME.md` case in `NAME.in/` where there is one.
    let cwd = dir.join("readme.in");
    std::fs::create_dir_all(&cwd).unwrap();
    std::os::unix::fs::symlink(
        repo.join("examples").canonicalize().unwrap(),
        cwd.join("examples"),
    )
    .unwrap();
    std::fs::copy(repo.join("README.md"), dir.join("readme.md")).unwrap();
    trycmd::TestCases::new()
        .register_bin("meshbench", Path::new(common::bin()))
        .env("XDG_DATA_HOME", data_home.display().to_string())
        .timeout(Duration::from_secs(600))
        .case(dir.join("readme.md"));
}

#[test]
fn every_help_fits_100_columns_and_every_flag_says_what_it_does() {
    let mut commands = vec![(Vec::<String>::new(), meshbench::cli::Cli::command())];
    let mut checked = 0;
    let mut problems = Vec::new();
    while let Some((path, command)) = commands.pop() {
        if command.is_hide_set() {
            continue;
        }
        for arg in command.get_arguments() {
            let name = arg.get_id().as_str();
            if arg.is_hide_set() || ["help", "version"].contains(&name) {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                problems.push(format!(
                    "`meshbench {}`: {name} has no help text",
                    path.join(" ")
                ));
            }
        }
        let mut args = path.clone();
        args.push("--help".into());
        let out = Command::new(common::bin()).args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if line.chars().count() > 100 {
                problems.push(format!(
                    "`meshbench {}`: a line of {} columns: {line}",
                    args.join(" "),
                    line.chars().count()
                ));
            }
        }
        checked += 1;
        for sub in command.get_subcommands() {
            let mut p = path.clone();
            p.push(sub.get_name().to_string());
            commands.push((p, sub.clone()));
        }
    }
    assert!(checked > 20, "only {checked} commands");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// README.md gets out of the way: at most 150 lines before "Layout", no paragraph of prose
/// over 6 lines (code blocks, tables and list items aside).
#[test]
fn the_readme_is_a_front_door() {
    let text = include_str!("../../../../README.md");
    let before_layout = text
        .lines()
        .position(|l| l == "## Layout")
        .expect("a Layout section");
    assert!(before_layout <= 150, "{before_layout} lines before Layout");
    let mut in_code = false;
    let mut paragraph = Vec::new();
    for line in text.lines().chain([""]) {
        if line.starts_with("```") {
            in_code = !in_code;
            paragraph.clear();
            continue;
        }
        let prose = !in_code
            && !line.is_empty()
            && !line.starts_with('|')
            && !line.starts_with('#')
            && !line.starts_with("- ")
            && !line.starts_with("  ");
        if prose {
            paragraph.push(line);
        } else {
            assert!(
                paragraph.len() <= 6,
                "a paragraph of {} lines: {paragraph:#?}",
                paragraph.len()
            );
            paragraph.clear();
        }
    }
}

/// docs/cli-reference.md is what the flag definitions say now (`MESHBENCH_UPDATE_GOLDEN=1`
/// rewrites it).
#[test]
fn the_flag_reference_is_written_from_the_definitions() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli-reference.md");
    let now = meshbench::cli::reference::markdown();
    if std::env::var_os("MESHBENCH_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &now).unwrap();
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == now,
        "docs/cli-reference.md is stale: run this test with MESHBENCH_UPDATE_GOLDEN=1"
    );
}

/// Every `meshbench` line in docs/ (in a code block, `\` continuations joined, a trailing `#`
/// comment dropped) is one the flag definitions take as printed; an `experiment` line with a
/// file of examples/ is also planned (`--dry-run`): its file and `--set`s read, its plan made,
/// its programs looked for (a missing one is what the line needs, said in one line, exit 1).
#[test]
fn the_docs_commands_are_ones_meshbench_takes() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let repo = docs.join("..");
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(&docs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        lines.extend(command_lines(&text).into_iter().map(|l| (name.clone(), l)));
    }
    assert!(lines.len() >= 25, "only {} commands in docs/", lines.len());
    let mut problems = Vec::new();
    let mut planned = 0;
    for (doc, line) in &lines {
        let Some(words) = shell_words(line) else {
            problems.push(format!("{doc}: unbalanced quotes: {line}"));
            continue;
        };
        if let Err(e) = meshbench::cli::Cli::try_parse_from(&words) {
            let first = e.to_string().lines().next().unwrap_or_default().to_string();
            problems.push(format!("{doc}: `{line}`: {first}"));
            continue;
        }
        let file = words.get(2).filter(|f| f.starts_with("examples/"));
        if words.get(1).map(String::as_str) != Some("experiment") || file.is_none() {
            continue;
        }
        let mut args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        args.retain(|a| !["--detach", "--dry-run"].contains(a));
        args.push("--dry-run");
        let out = Command::new(common::bin())
            .args(&args)
            .current_dir(&repo)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let needs = out.status.code() == Some(1) && err.trim().lines().count() == 1;
        if !out.status.success() && !needs {
            problems.push(format!("{doc}: `{line}` --dry-run: {err}"));
        }
        planned += 1;
    }
    assert!(planned > 5, "only {planned} experiment lines planned");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The `meshbench ...` lines of `text`'s code blocks, continuations joined, comments and
/// prompts dropped.
fn command_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let mut pending: Option<String> = None;
    for raw in text.lines() {
        if raw.trim_start().starts_with("```") {
            in_code = !in_code;
            pending = None;
            continue;
        }
        if !in_code {
            continue;
        }
        let line = raw.trim().trim_start_matches("$ ");
        let line = match pending.take() {
            Some(head) => format!("{head} {line}"),
            None if line.starts_with("meshbench ") => line.to_string(),
            None => continue,
        };
        if let Some(head) = line.strip_suffix('\\') {
            pending = Some(head.trim_end().to_string());
            continue;
        }
        // A comment, or the shell's redirection, pipe or job control after the command.
        let end = ["  #", " # ", " > ", " | ", " &", " && "]
            .iter()
            .filter_map(|cut| line.find(cut))
            .min();
        let line = end.map_or(line.clone(), |at| line[..at].trim_end().to_string());
        // A drawing in a code block (`meshbench ──► runner`) is no command.
        let word = line.split_whitespace().nth(1).unwrap_or_default();
        if word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '-') {
            out.push(line);
        }
    }
    out
}

/// `line` split as a POSIX shell splits words (quotes, no expansion); `None` when a quote is
/// left open.
fn shell_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return None;
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// docs/architecture.md stays a map a new engineer reads in a quarter of an hour (under 320
/// lines), and every path it names is there: `crates/...`, a crate's `NAME/src/...` or
/// `NAME/tests/...`, `docs/...` and `scripts/...` (a `<name>` in a recipe aside).
#[test]
fn the_architecture_map_is_short_and_names_only_what_exists() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(repo.join("docs/architecture.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines < 320,
        "docs/architecture.md has {lines} lines: keep it a map (decisions.md holds the why)"
    );
    let crates: Vec<String> = std::fs::read_dir(repo.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let in_path = |c: char| c.is_ascii_alphanumeric() || "_./<>-".contains(c);
    let mut named = 0;
    let mut missing = Vec::new();
    for token in text.split(|c: char| !in_path(c)) {
        let token = token.trim_end_matches(['.', ',']);
        let mut parts = token.split('/');
        let (Some(first), Some(second)) = (parts.next(), parts.next()) else {
            continue;
        };
        let path = match first {
            "crates" | "docs" | "scripts" => token.to_string(),
            _ if crates.iter().any(|c| c == first) && ["src", "tests"].contains(&second) => {
                format!("crates/{token}")
            }
            _ => continue,
        };
        if path.contains('<') {
            continue;
        }
        named += 1;
        if !repo.join(&path).exists() {
            missing.push(path);
        }
    }
    assert!(
        named > 40,
        "only {named} paths found in docs/architecture.md"
    );
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that do not exist: {missing:?}"
    );
}

/// Every preset says at its top what it needs, how long it takes and the smallest machine or
/// cluster it fits (`# needs:`, `# takes:`, `# fits:`); for a lab preset those are the lines
/// its `--dry-run` prints (the fits line up to what this machine's cores add), so they stay
/// true as the plan changes.
#[test]
fn every_preset_says_what_it_needs_takes_and_fits_as_its_dry_run_does() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let header = |key: &str| {
            text.lines()
                .take_while(|l| l.starts_with('#'))
                .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
                .unwrap_or_else(|| panic!("{}: no `# {key}:` line at its top", path.display()))
                .to_string()
        };
        let (needs, takes, fits) = (header("needs"), header("takes"), header("fits"));
        let out = Command::new(common::bin())
            .args(["experiment", &path.display().to_string(), "--dry-run"])
            .output()
            .unwrap();
        let plan = String::from_utf8_lossy(&out.stdout);
        let first = plan.lines().next().unwrap_or_default();
        assert!(
            first.ends_with(&format!("= {takes}")),
            "{}: takes {takes}, its plan says {first}",
            path.display()
        );
        let said = |key: &str| {
            plan.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}: ")))
                .map(|l| l.split("; this machine has").next().unwrap().to_string())
        };
        if let (Some(n), Some(f)) = (said("needs"), said("fits")) {
            assert_eq!((n, f), (needs, fits), "{}", path.display());
        }
        checked += 1;
    }
    assert!(checked >= 20, "{checked} presets");
}
