//! The flags shared by the commands that read a source table, defined once
//! and flattened into each: where a DuckLake source is read
//! ([`DuckLakeArgs`], `build` and `refresh`) and the memory bound of the
//! assignment ([`MemoryArgs`], `build`, `refresh` and `compact`), and when
//! a change compacts ([`CompactPolicyArgs`], `refresh`, `delete`, `upsert`). The Python
//! API's keyword arguments carry the same names (`snapshot`, `data_path`,
//! `memory_limit`).

/// Where a DuckLake source is read.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DuckLakeArgs {
    /// DuckLake: the snapshot to read (`build`) or to bring the index to
    /// (`refresh`); default: the latest.
    #[arg(long)]
    pub snapshot: Option<u64>,
    /// DuckLake: resolve the catalog's data_path against this instead of the
    /// catalog's folder.
    #[arg(long)]
    pub data_path: Option<String>,
}

/// Memory for the assigned rows before spilling per bucket.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct MemoryArgs {
    /// Memory for assigned postings before spilling per bucket (e.g. 512MiB,
    /// 2GiB).
    #[arg(long, default_value = "2GiB", value_parser = parse_bytes)]
    pub memory_limit: usize,
}

/// When a refresh, delete or upsert compacts right after it publishes.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct CompactPolicyArgs {
    /// Compact when the index then has more than N delta tables (each adds
    /// requests to every cold query).
    #[arg(long, value_name = "N")]
    pub compact_above: Option<usize>,
    /// Compact when more than this fraction of the rows is deleted (0.1 = 10 %).
    #[arg(long, value_name = "FRACTION")]
    pub compact_deleted_above: Option<f64>,
}

impl CompactPolicyArgs {
    pub fn policy(&self) -> parqivf::builder::refresh::CompactPolicy {
        parqivf::builder::refresh::CompactPolicy {
            deltas_above: self.compact_above,
            deleted_above: self.compact_deleted_above,
        }
    }
}

/// `123`, `64KiB`, `512MiB`, `2GiB` (also KB/MB/GB as powers of 1000).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mult: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        u => return Err(format!("bad size unit {u:?} in {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> Command {
        Cli::try_parse_from(args).expect("parses").command
    }

    #[test]
    fn every_command_reading_a_source_takes_the_same_flags() {
        let build = parse(&[
            "parqivf",
            "build",
            "--source",
            "s",
            "--out",
            "o",
            "--snapshot",
            "3",
            "--data-path",
            "d",
            "--memory-limit",
            "512MiB",
        ]);
        let Command::Build(b) = build else {
            panic!("not build")
        };
        assert_eq!(
            (b.ducklake.snapshot, b.memory.memory_limit),
            (Some(3), 512 << 20)
        );
        assert_eq!(b.ducklake.data_path.as_deref(), Some("d"));
        let refresh = parse(&[
            "parqivf",
            "refresh",
            "--index",
            "i",
            "--snapshot",
            "3",
            "--data-path",
            "d",
            "--memory-limit",
            "2GiB",
        ]);
        let Command::Refresh(r) = refresh else {
            panic!("not refresh")
        };
        assert_eq!(
            (r.ducklake.snapshot, r.memory.memory_limit),
            (Some(3), 2 << 30)
        );
        let compact = parse(&[
            "parqivf",
            "compact",
            "--index",
            "i",
            "--memory-limit",
            "1GB",
        ]);
        let Command::Compact(c) = compact else {
            panic!("not compact")
        };
        assert_eq!(c.memory.memory_limit, 1_000_000_000);
        // The default is one value everywhere.
        let Command::Compact(c) = parse(&["parqivf", "compact", "--index", "i"]) else {
            panic!("not compact")
        };
        assert_eq!(c.memory.memory_limit, 2 << 30);
    }
}
