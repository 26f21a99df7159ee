//! meshbench: measures what a gateway, a reverse proxy or a service-mesh data plane costs and how
//! far it scales. This crate is the command line only: [`cli`] declares the flags, [`cmd`] has
//! one module per subcommand that turns them into typed options, calls the libraries (the
//! runner for anything that sends traffic, analysis and report for answers) and prints.
//!
//! Exit codes (also in the README): 0 success; 1 the run could not be carried out (a file could
//! not be written, a server could not start) or measured nothing (no request succeeded); 2 bad
//! input (the message says what to change; also no command, or an unknown experiment);
//! 130 / 143 interrupted by SIGINT / SIGTERM after writing the partial result (or, stopped
//! before anything was measured, with one line saying where: [`Interrupted`]).

/// `print!` to stdout, except that a reader gone away (`meshbench ... | head`) ends the process
/// quietly with exit 0 instead of a panic: what it wanted was read.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` the same way as [`out!`].
macro_rules! outln {
    () => {
        $crate::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {{
        $crate::write_stdout(format_args!($($arg)*));
        $crate::write_stdout(format_args!("\n"));
    }};
}

/// `eprintln!` for meshbench's own lines: a line wider than a 120-column terminal
/// ([`meshbench_report::answers::WIDTH`]) is broken between words, its continuation indented two
/// spaces more (see [`write_stderr`]).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::write_stderr(&format!($($arg)*))
    };
}

pub mod cli;
pub mod cmd;

/// Writes `text` and a newline to stderr for [`errln!`], each of its lines within
/// [`WIDTH`](meshbench_report::answers::WIDTH) columns where it can be broken between words (a
/// path or a URL wider than that stays whole). A failure to write is ignored: there is nowhere
/// left to say it.
pub fn write_stderr(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(fitted(text).as_bytes());
}

/// `text`'s lines, each followed by a newline, the ones wider than
/// [`WIDTH`](meshbench_report::answers::WIDTH) broken between words with a hanging indent.
fn fitted(text: &str) -> String {
    use meshbench_report::answers::{wrap, WIDTH};
    let mut out = String::with_capacity(text.len() + 1);
    for line in text.split('\n') {
        if line.chars().count() <= WIDTH {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let body = line.trim_start_matches(' ');
        let indent = &line[..line.len() - body.len()];
        out.push_str(&wrap(body, indent, &format!("{indent}  ")));
    }
    out
}

/// Writes to stdout for [`out!`]; a closed pipe exits 0, another failure is ignored as `print!`
/// would have had it panic.
pub fn write_stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(exit::OK.into());
        }
    }
}

/// Whether `e` is stdout's reader going away.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

use std::ffi::OsString;

use clap::Parser;

/// Process exit codes.
pub mod exit {
    pub const OK: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const SIGINT: u8 = 130;
    pub const SIGTERM: u8 = 143;
}

/// Input that cannot be run: reported as one line, exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Shorthand for a usage error.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// A run a signal stopped before it measured anything (nothing to store, nothing to print but
/// this): its line, and the signal's exit code (130 / 143).
#[derive(Debug)]
pub struct Interrupted {
    pub code: u8,
    pub line: String,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

impl std::error::Error for Interrupted {}

/// A command line clap refused, in one line: what was wrong, clap's suggestion if it has one
/// (`did you mean '--rate'?`), and the help of the command `args` named.
fn parse_error_line(e: &clap::Error, args: &[OsString]) -> String {
    use clap::error::{ContextKind, ContextValue};
    let text = e.to_string();
    // The first line, plus the indented lines clap lists under it (missing arguments).
    let mut lines = text.lines();
    let mut line = lines
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .to_string();
    for more in lines.take_while(|l| l.starts_with(' ')) {
        line.push(' ');
        line.push_str(more.trim());
    }
    let suggested: Vec<String> = [
        ContextKind::SuggestedArg,
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedValue,
    ]
    .into_iter()
    .filter_map(|kind| match e.get(kind)? {
        ContextValue::String(s) => Some(vec![s.clone()]),
        ContextValue::Strings(v) => Some(v.clone()),
        _ => None,
    })
    .flatten()
    .collect();
    if !suggested.is_empty() {
        // The suggestion says more than the list of every value allowed.
        if let Some(at) = line.find(" [possible values: ") {
            if let Some(end) = line[at..].find(']') {
                line.replace_range(at..at + end + 1, "");
            }
        }
        let quoted: Vec<String> = suggested.iter().map(|s| format!("'{s}'")).collect();
        line.push_str(&format!("; did you mean {}?", quoted.join(" or ")));
    }
    // Within 120 columns: clap's longest phrasing shortened, and no pointer to the help where
    // the line already lists what is allowed.
    let line = line.replace(
        "the following required arguments were not provided:",
        "missing",
    );
    if line.contains("[possible values: ") {
        line
    } else {
        format!("{line} (see `{} --help`)", command_path(args))
    }
}

/// The (sub)command the words of `args` name, as typed: `meshbench results show`.
fn command_path(args: &[OsString]) -> String {
    use clap::CommandFactory;
    let mut command = cli::Cli::command();
    let mut path = vec!["meshbench".to_string()];
    for word in args.iter().skip(1).filter_map(|a| a.to_str()) {
        match command.find_subcommand(word) {
            Some(sub) => {
                path.push(sub.get_name().to_string());
                command = sub.clone();
            }
            None if word.starts_with('-') => continue,
            None => break,
        }
    }
    path.join(" ")
}

/// Parses `args`, runs the command and returns the exit code; errors are printed as one line.
pub fn main_with(args: impl IntoIterator<Item = OsString>) -> u8 {
    let args: Vec<OsString> = args.into_iter().collect();
    let cli = match cli::Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    return exit::OK;
                }
                // `meshbench` or `meshbench gen` alone: the usage (on stderr), a usage error.
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = e.print();
                    return exit::USAGE;
                }
                _ => {}
            }
            // One line, as every refusal is (tests hold it): not broken to fit.
            eprintln!("meshbench: {}", parse_error_line(&e, &args));
            return exit::USAGE;
        }
    };
    match cmd::dispatch(cli) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => exit::OK,
        Err(e) => {
            // A measured step that neither the store nor a file could take is printed rather
            // than lost; the line below says so.
            if let Some(meshbench_runner::RunnerError::NotStored(n)) = e.downcast_ref() {
                if let meshbench_runner::Kept::Nowhere { json, .. } = &n.kept {
                    use std::io::Write;
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(json.as_bytes()).and_then(|()| out.flush());
                }
            }
            // The error's one line (what was wrong, what to do), whole: scripts and tests read
            // it as one line, so it is not broken to fit 120 columns.
            eprintln!("meshbench: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() {
                exit::USAGE
            } else if let Some(stopped) = e.downcast_ref::<Interrupted>() {
                stopped.code
            } else {
                exit::FAILED
            }
        }
    }
}

#[cfg(test)]
mod width_tests {
    use super::fitted;

    #[test]
    fn a_wide_line_is_broken_between_words_and_a_short_one_kept_as_it_is() {
        let short = "warning:   two  spaces kept";
        assert_eq!(fitted(short), format!("{short}\n"));
        let words: Vec<String> = (0..40).map(|i| format!("word{i}")).collect();
        let wide = format!("  note: {}", words.join(" "));
        let out = fitted(&wide);
        assert!(out.lines().count() > 1, "{out}");
        for line in out.lines() {
            assert!(line.chars().count() <= 120, "{line}");
        }
        assert!(
            out.lines().skip(1).all(|l| l.starts_with("    word")),
            "{out}"
        );
        let joined: Vec<&str> = out.split_whitespace().collect();
        let given: Vec<&str> = wide.split_whitespace().collect();
        assert_eq!(joined, given, "no word lost or split");
        assert_eq!(fitted("a\nb"), "a\nb\n");
    }
}
