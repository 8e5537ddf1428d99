//! The Python interpreter with the independent readers (pyarrow, duckdb)
//! that interop tests check our files against.

/// The Python that has `module`, from `PARQIVF_PYTHON` (set by
/// `scripts/test.sh`). When it is unset the test is skipped with a note,
/// unless `PARQIVF_REQUIRE_INTEROP=1` (CI), where that is a failure.
pub fn python_with(module: &str) -> Option<String> {
    let required = std::env::var("PARQIVF_REQUIRE_INTEROP").is_ok_and(|v| v == "1");
    let python = std::env::var("PARQIVF_PYTHON").ok();
    let ok = python.as_ref().is_some_and(|p| {
        std::process::Command::new(p)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if ok {
        return python;
    }
    assert!(
        !required,
        "PARQIVF_REQUIRE_INTEROP=1 but PARQIVF_PYTHON={python:?} cannot import {module}"
    );
    eprintln!("skipping: no Python with {module} (run scripts/test.sh)");
    None
}

/// Run `script` with `args`; panic with its output if it fails.
pub fn run_python(python: &str, script: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python starts");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "python failed:\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
