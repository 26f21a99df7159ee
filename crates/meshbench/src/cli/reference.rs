//! docs/cli-reference.md, written from the flag definitions themselves: every visible command,
//! its usage line and a table of its flags (default and help text), so that the reference can
//! never drift from what `--help` says. A test in the suite compares the file with this.

use clap::{Arg, Command, CommandFactory};

use super::Cli;

/// The whole reference, as docs/cli-reference.md holds it.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Command-line reference\n\n\
         Written from the flag definitions (`meshbench::cli::reference`); do not edit by hand: \
         `MESHBENCH_UPDATE_GOLDEN=1` and the suite's `readme` test rewrite it. docs/cli.md says \
         what the commands do and how they answer.\n",
    );
    let mut root = Cli::command();
    root.build();
    section(&mut out, &root, "meshbench");
    out
}

/// One command's section, then each visible subcommand's.
fn section(out: &mut String, command: &Command, path: &str) {
    if command.is_hide_set() {
        return;
    }
    out.push_str(&format!("\n## `{path}`\n\n"));
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        out.push_str(&format!("{}\n\n", one_line(&about.to_string())));
    }
    let mut usage = command.clone();
    out.push_str(&format!(
        "```text\n{}\n```\n",
        usage.render_usage().to_string().trim()
    ));
    let args: Vec<&Arg> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !["help", "version"].contains(&a.get_id().as_str()))
        .collect();
    if !args.is_empty() {
        out.push_str("\n| flag | default | meaning |\n| --- | --- | --- |\n");
        for arg in args {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                name(arg),
                defaults(arg),
                arg.get_long_help()
                    .or(arg.get_help())
                    .map_or_else(String::new, |h| one_line(&h.to_string()))
                    .replace('|', "\\|")
            ));
        }
    }
    for sub in command.get_subcommands() {
        if sub.get_name() != "help" {
            section(out, sub, &format!("{path} {}", sub.get_name()));
        }
    }
}

/// `-c, --connections N`, or `FILE` for a positional argument.
fn name(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
    let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
    let flag = match (arg.get_short(), arg.get_long()) {
        (Some(s), Some(l)) => format!("-{s}, --{l}"),
        (None, Some(l)) => format!("--{l}"),
        (Some(s), None) => format!("-{s}"),
        (None, None) => return format!("`{value}`"),
    };
    match takes_value {
        true => format!("`{flag} {value}`"),
        false => format!("`{flag}`"),
    }
}

/// The default, or the choices of a word flag, or `—`.
fn defaults(arg: &Arg) -> String {
    let values: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if values.is_empty() {
        "—".into()
    } else {
        format!("`{}`", values.join(" "))
    }
}

/// Help text as one line of a table cell.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
