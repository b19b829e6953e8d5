//! The `tollgate` binary: parses the command line, runs it, and turns an error into a message on
//! stderr and an exit code. Everything else lives in the library (`tollgate::run`).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = tollgate::Cli::parse();
    tollgate::init_logging(cli.verbose);
    match tollgate::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error}");
            for cause in error.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(2)
        }
    }
}
