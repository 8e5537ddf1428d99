//! The `parqivf` command line. `anyhow` lives here and nowhere else.

mod cli;

use clap::Parser;
use std::process::ExitCode;

/// mimalloc keeps freed pages for reuse, where glibc trims them and a query
/// faults its buffers in again (see `Cargo.toml`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    no_huge_pages();
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

/// Transparent huge pages off for this process, as `MIMALLOC_ALLOW_THP=0`
/// would do, before any thread starts. mimalloc asks the kernel for huge
/// pages (`madvise`), and the first touch of each 2 MiB page then zeroes
/// all of it: every new thread, and every buffer a build frees and takes
/// again after mimalloc returned it, paid for that. Without them a
/// one-query `search` process took 10–20 ms instead of 50–140 ms and the
/// embeddings' build 5.3–6.0 s instead of 11.3 s, with the same query rates
/// once warm (docs/benchmarks.md, "Huge pages").
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and reads or writes
    // no memory of ours; a kernel without it returns an error, ignored.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
