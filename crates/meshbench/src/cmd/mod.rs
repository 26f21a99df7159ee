//! One module per subcommand; each turns parsed flags into work and an exit code. What two
//! commands share lives in [`common`], below them all: a command module uses `common` and
//! never another command module, and `common` uses no command module (a test here checks both),
//! so that no two files of `cmd/` import each other.

pub mod agent;
pub mod answers;
pub mod backend;
pub mod capacity;
mod common;
pub mod demo;
mod detached;
pub mod experiment;
pub mod gen;
pub mod k8s;
pub mod report;
pub mod results;
pub mod run;

use anyhow::Result;

use crate::cli::{Cli, Command};

pub fn dispatch(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Run(args) => run::execute(*args),
        Command::Backend(args) => backend::execute(args),
        Command::Demo(args) => demo::execute(args),
        Command::Gen(crate::cli::GenCommand::Gateway(args)) => gen::gateway(args),
        Command::Gen(crate::cli::GenCommand::Certs(args)) => gen::certs(args),
        Command::Gen(crate::cli::GenCommand::Grafana(args)) => gen::grafana(args),
        Command::Gen(crate::cli::GenCommand::K8s(args)) => k8s::gen(args),
        Command::K8s(crate::cli::K8sCommand::Run(args)) => k8s::run(*args),
        Command::K8s(crate::cli::K8sCommand::Restore(args)) => k8s::restore(args),
        Command::K8s(crate::cli::K8sCommand::NodeFacts) => k8s::node_facts(),
        Command::K8s(crate::cli::K8sCommand::Attach(args)) => detached::attach(args),
        Command::K8s(crate::cli::K8sCommand::Fetch(args)) => detached::fetch(args),
        Command::K8s(crate::cli::K8sCommand::Stop(args)) => detached::stop(args),
        Command::K8s(crate::cli::K8sCommand::Coordinator(args)) => detached::coordinator(args),
        // `--detach` runs the file's coordinator in the cluster instead: its own command.
        Command::Experiment(args) if args.detach => detached::detach(&args),
        Command::Experiment(args) => experiment::execute(args),
        Command::Results(c) => results::execute(c),
        Command::Compare(args) => answers::compare(args),
        Command::Size(args) => answers::size(args),
        Command::Capacity(args) => capacity::execute(args),
        Command::Report(args) => report::execute(args),
        Command::Agent(args) => agent::execute(args),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Where each path a file writes (`super::x`, `self::x`, `crate::cmd::x`, also in a group
    /// `super::{x, y}`) leads: the first module under `cmd` it names, or an item of `cmd`'s own.
    /// `module` is the file's own path under `cmd` (`["experiment", "on_cluster"]`). Comments
    /// are left out; `*` (a test's `use super::*`) names nothing.
    fn named(module: &[String], text: &str) -> Vec<String> {
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(" ");
        let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let ident = |s: &str| -> String {
            s.trim_start()
                .chars()
                .take_while(|c| is_ident(*c))
                .collect()
        };
        let mut out = Vec::new();
        for (at, _) in code.match_indices("::") {
            let head = &code[..at];
            let start = head
                .rfind(|c: char| !(is_ident(c) || c == ':'))
                .map_or(0, |i| i + 1);
            // Only the first `::` of a path: the whole path is read from there.
            if head[start..].contains("::") {
                continue;
            }
            let mut path: Vec<&str> = code[start..].split("::").collect();
            let (base, rest) = match path[0] {
                "crate" if path.get(1).is_some_and(|p| ident(p) == "cmd") => {
                    (Vec::new(), path.split_off(2))
                }
                "self" => (module.to_vec(), path.split_off(1)),
                "super" => {
                    let ups = path.iter().take_while(|p| **p == "super").count();
                    let kept = module.len().saturating_sub(ups);
                    (module[..kept].to_vec(), path.split_off(ups))
                }
                _ => continue,
            };
            if let Some(top) = base.first() {
                out.push(top.clone());
                continue;
            }
            let next = rest.first().copied().unwrap_or("");
            match next.strip_prefix('{') {
                // A group: each item's first name, up to the group's closing brace.
                Some(_) => {
                    let group = &code[start..];
                    let open = group.find('{').unwrap_or(0);
                    let mut depth = 0;
                    let mut item = String::new();
                    for c in group[open..].chars() {
                        match c {
                            '{' => depth += 1,
                            '}' => depth -= 1,
                            _ => {}
                        }
                        if depth == 1 && c == ',' || depth == 0 {
                            out.push(ident(item.trim_start_matches('{')));
                            item.clear();
                        } else {
                            item.push(c);
                        }
                        if depth == 0 {
                            break;
                        }
                    }
                }
                None => out.push(ident(next)),
            }
        }
        out
    }

    /// Every `.rs` file under `dir`, with its module path under `cmd`.
    fn files(dir: &Path, module: &[String], out: &mut Vec<(Vec<String>, String)>) {
        for entry in std::fs::read_dir(dir).expect("cmd/ is readable") {
            let path = entry.expect("an entry").path();
            let name = path
                .file_stem()
                .expect("a name")
                .to_string_lossy()
                .to_string();
            let mut inner = module.to_vec();
            if path.is_dir() {
                inner.push(name);
                files(&path, &inner, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                if name != "mod" {
                    inner.push(name);
                }
                let text = std::fs::read_to_string(&path).expect("a source file");
                out.push((inner, text));
            }
        }
    }

    /// Issue 59: no import circle between the files of `cmd/`. A command module names only
    /// itself and `common`; `common` names only itself; neither names `cmd`'s own items (the
    /// dispatch, which names every command).
    #[test]
    fn commands_use_common_and_never_each_other() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cmd");
        let mut all = Vec::new();
        files(&dir, &[], &mut all);
        let mut wrong = Vec::new();
        for (module, text) in &all {
            let Some(top) = module.first() else {
                continue;
            };
            for target in named(module, text) {
                if target.is_empty() || target == "*" {
                    continue;
                }
                let allowed = target == *top || (target == "common" && top != "common");
                if !allowed {
                    wrong.push(format!("cmd/{} names {target}", module.join("/")));
                }
            }
        }
        wrong.sort();
        wrong.dedup();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
