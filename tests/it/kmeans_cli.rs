//! `parqivf train` as a process: exit codes and the `--json` contract.

use std::process::Command;

fn fvecs(rows: &[[f32; 2]]) -> Vec<u8> {
    rows.iter()
        .flat_map(|r| {
            2i32.to_le_bytes()
                .into_iter()
                .chain(r.iter().flat_map(|v| v.to_le_bytes()))
        })
        .collect()
}

#[test]
fn train_prints_json_summary_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("base.fvecs");
    let rows: Vec<[f32; 2]> = (0..200)
        .map(|i| [(i % 4) as f32 * 10.0 + (i % 7) as f32 * 0.1, (i % 4) as f32])
        .collect();
    std::fs::write(&path, fvecs(&rows)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_parqivf"))
        .args([
            "train",
            "--data",
            path.to_str().unwrap(),
            "--k",
            "4",
            "--niter",
            "5",
            "--eval-all",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["n"].as_u64(), v["dim"].as_u64(), v["k"].as_u64()),
        (Some(200), Some(2), Some(4))
    );
    assert_eq!(
        (v["mode"].as_str(), v["iterations"].as_u64()),
        (Some("flat"), Some(5))
    );
    for key in [
        "train_s",
        "objective",
        "imbalance",
        "obj_all",
        "assign_vectors_per_s",
    ] {
        assert!(
            v[key].as_f64().is_some_and(f64::is_finite),
            "{key} missing in {v}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_parqivf"))
        .args([
            "train",
            "--data",
            path.to_str().unwrap(),
            "--k",
            "8",
            "--roots",
            "2",
            "--compare-assign",
            "1,2",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"].as_str(), Some("hierarchy"));
    assert_eq!(
        v["assign_compare"][1]["agreement"].as_f64(),
        Some(1.0),
        "m = roots is exact: {v}"
    );
}

#[test]
fn train_on_bad_input_exits_two() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("base.fvecs");
    std::fs::write(&path, fvecs(&[[1.0, 2.0]])).unwrap();
    for args in [vec!["--k", "4"], vec!["--k", "1", "--roots", "2"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_parqivf"))
            .args(["train", "--data", path.to_str().unwrap()])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_parqivf"))
        .args(["train", "--data", "/nonexistent/x.npy", "--k", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/x.npy"));
}
