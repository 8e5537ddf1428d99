//! Running the `parqivf` binary in a test: its output once it succeeded, and
//! that output as JSON lines.

use std::process::Output;

/// The standard output of `out`, which must have succeeded (else the test
/// fails showing its standard error).
pub fn stdout(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Each line of the standard output of `out` (which must have succeeded) as
/// a JSON value.
pub fn json_lines(out: Output) -> Vec<serde_json::Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}
