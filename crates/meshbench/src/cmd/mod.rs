//! One module per subcommand; each turns parsed flags into work and an exit code. What two
//! commands share lives in [`common`], below them all: a command module uses `common` and
//! never another command module, and `common` uses no command module, so that no two files of
//! `cmd/` import each other.

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
