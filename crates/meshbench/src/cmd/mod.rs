//! One module per subcommand; each turns parsed flags into work and an exit code.

pub mod agent;
mod agents;
pub mod answers;
pub mod backend;
pub mod capacity;
mod cluster;
pub mod demo;
mod detached;
pub mod experiment;
pub mod gen;
pub mod k8s;
mod live;
pub mod report;
pub mod results;
pub mod run;
pub(crate) mod signals;

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
        Command::K8s(crate::cli::K8sCommand::Restore(args)) => cluster::restore(args),
        Command::K8s(crate::cli::K8sCommand::NodeFacts) => cluster::node_facts(),
        Command::K8s(crate::cli::K8sCommand::Attach(args)) => detached::attach(args),
        Command::K8s(crate::cli::K8sCommand::Fetch(args)) => detached::fetch(args),
        Command::K8s(crate::cli::K8sCommand::Stop(args)) => detached::stop(args),
        Command::K8s(crate::cli::K8sCommand::Coordinator(args)) => detached::coordinator(args),
        Command::Experiment(args) => experiment::execute(args),
        Command::Results(c) => results::execute(c),
        Command::Compare(args) => answers::compare(args),
        Command::Size(args) => answers::size(args),
        Command::Capacity(args) => capacity::execute(args),
        Command::Report(args) => report::execute(args),
        Command::Agent(args) => agent::execute(args),
    }
}

/// Parses a duration flag: "10s", "2m", "500ms", or a bare number of seconds.
pub fn parse_duration(flag: &str, value: &str) -> Result<std::time::Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(std::time::Duration::from_secs_f64(secs));
        }
        return Err(crate::usage(format!(
            "{flag} {value}: must not be negative; give a duration like 10s or 500ms"
        )));
    }
    humantime::parse_duration(v).map_err(|_| {
        crate::usage(format!(
            "{flag} {value}: not a duration; give one like 10s, 2m or 500ms"
        ))
    })
}
