//! What the commands share, and nothing else: each command module of `cmd/` uses these and
//! never another command, and nothing here uses a command (the test in `cmd` checks both). One
//! idea per file, lower ones first:
//!
//! - [`units`]: durations and shares read from flags and written in lines;
//! - [`signals`]: Ctrl-C and SIGTERM, and the exit codes they end a command with;
//! - [`stored`]: the results store and an experiment in it, read back; the command that shows
//!   it again;
//! - [`thresholds`]: `--threshold` read, and checked at the end;
//! - [`tables`]: the step tables a run prints and `results show` prints again;
//! - [`html_report`]: an experiment's HTML report and plots;
//! - [`load_flags`]: the per-request and pacing flags of a load as the runner's options;
//! - [`fleet`]: the agents that send a command's load, and their token and TLS;
//! - [`faces`]: the live faces of a run (`/metrics`, remote write, the live page);
//! - [`progress`]: the progress lines on stderr while load runs;
//! - [`experiment_file`]: an experiment file read and checked;
//! - [`session`]: an experiment's steps run into the store, its table, closing line and exit
//!   code;
//! - [`journal`]: a cluster run's journal: the watcher beside the run, and the restore of what
//!   a killed run left.

pub mod experiment_file;
pub mod faces;
pub mod fleet;
pub mod html_report;
pub mod journal;
pub mod load_flags;
pub mod progress;
pub mod session;
pub mod signals;
pub mod stored;
pub mod tables;
pub mod thresholds;
pub mod units;
