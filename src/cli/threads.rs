//! `--threads N` of `build`, `search` and `serve`: the worker threads, at
//! least one; the flag left out means every core.

use std::num::NonZeroUsize;

/// Parses `--threads`: 0 is refused with what to do instead.
pub fn parse_threads(s: &str) -> Result<NonZeroUsize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("at least 1 (leave --threads out for every core)".into()),
        Ok(n) => Ok(NonZeroUsize::new(n).expect("n is not 0")),
        Err(e) => Err(format!("not a thread count: {e}")),
    }
}
