//! Any program as a hop (`type: command`): its argv and configuration template come from the
//! experiment file, with placeholders for the hop's addresses, workers and files filled in. The
//! lab knows nothing else of it: no version beyond its path, no gateway rendering.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{p, CommandTemplate, Hop};
use crate::{install, write_file, LabError};

/// The suffix of its configuration file (`{role}.conf`).
pub const CONFIG: &str = "conf";

/// The template's program: an absolute path, or a name on PATH.
pub fn binary(template: &CommandTemplate) -> Result<PathBuf, LabError> {
    let program = template.argv.first().ok_or_else(|| LabError::Missing {
        program: "command".into(),
        hint: "proxy.command is empty".into(),
    })?;
    let path = Path::new(program);
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    install::find(program, &[]).ok_or_else(|| LabError::Missing {
        program: program.clone(),
        hint: "not found on PATH".into(),
    })
}

/// Writes the filled-in template to `config` and builds the filled-in command line.
pub fn prepare(
    bin: &Path,
    template: &CommandTemplate,
    hop: &Hop,
    config: &Path,
) -> Result<Command, LabError> {
    let fill = |s: &str| {
        s.replace("{config}", &p(config))
            .replace("{listen_port}", &hop.listen.port().to_string())
            .replace("{upstream_port}", &hop.upstream.port().to_string())
            .replace("{listen}", &hop.listen.to_string())
            .replace("{upstream}", &hop.upstream.to_string())
            .replace("{workers}", &hop.workers.to_string())
            .replace("{dir}", &p(&hop.dir))
    };
    write_file(config, fill(&template.config))?;
    let mut command = Command::new(bin);
    command.current_dir(&hop.dir);
    command.args(template.argv.iter().skip(1).map(|a| fill(a)));
    Ok(command)
}
