//! The `parqivf` command line. `anyhow` lives here and nowhere else.

mod cli;

use clap::Parser;
use std::process::ExitCode;

/// mimalloc keeps freed pages for reuse, where glibc trims them and a query
/// faults its buffers in again (see `Cargo.toml`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            // The chain of causes, skipping any cause whose text an outer
            // message already includes (typed errors often embed their
            // source), so that no path or message is printed twice.
            let mut message = err.to_string();
            for cause in err.chain().skip(1) {
                let text = cause.to_string();
                if !message.contains(&text) {
                    message = format!("{message}: {text}");
                }
            }
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
