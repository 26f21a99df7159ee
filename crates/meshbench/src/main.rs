//! The `meshbench` binary: parses the command line, runs the command, exits with its code.
//! Everything else lives in the library (`meshbench::main_with`) so that tests can call it.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(meshbench::main_with(std::env::args_os()))
}
