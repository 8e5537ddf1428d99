//! Build progress: indicatif bars on a terminal, one plain log line per phase
//! otherwise, or nothing at all (library callers and tests).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressMode {
    /// Bars on a terminal, plain lines otherwise (the CLI default).
    #[default]
    Auto,
    /// Plain log lines on stderr.
    Plain,
    /// Nothing.
    Quiet,
}

/// One phase's progress.
pub struct Phase {
    name: &'static str,
    bar: Option<ProgressBar>,
    plain: bool,
    start: Instant,
}

impl Phase {
    /// Start a phase of `total` units (rows, parts, buckets).
    pub fn start(mode: ProgressMode, name: &'static str, total: u64, unit: &'static str) -> Self {
        let tty = std::io::stderr().is_terminal();
        let bar = match mode {
            ProgressMode::Auto if tty => {
                let b = ProgressBar::new(total);
                let style = ProgressStyle::with_template(&format!(
                    "{{prefix:>8}} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit} ({{eta}})"
                ))
                .unwrap_or_else(|_| ProgressStyle::default_bar());
                b.set_style(style);
                b.set_prefix(name);
                Some(b)
            }
            _ => None,
        };
        let plain =
            matches!(mode, ProgressMode::Plain) || (matches!(mode, ProgressMode::Auto) && !tty);
        if plain {
            eprintln!("parqivf build: {name}: started ({total} {unit})");
        }
        Self {
            name,
            bar,
            plain,
            start: Instant::now(),
        }
    }

    /// Advance by `n` units.
    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    /// Finish the phase and return its wall time.
    pub fn finish(self) -> Duration {
        let elapsed = self.start.elapsed();
        if let Some(b) = &self.bar {
            b.finish();
        }
        if self.plain {
            eprintln!(
                "parqivf build: {}: done in {:.3} s",
                self.name,
                elapsed.as_secs_f64()
            );
        }
        elapsed
    }
}

/// Peak resident set size of this process in bytes (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
