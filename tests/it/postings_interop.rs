//! Writes a small postings table for the independent pyarrow reader
//! (`tests/interop/pyarrow_postings.py`) into `$PARQIVF_INTEROP_DIR`, or into
//! a temporary folder when the variable is unset, checks it with `verify`,
//! and, when `$PARQIVF_PYTHON` names a Python with pyarrow (as
//! `scripts/test.sh` sets it), runs the script on it and requires exit 0.
//! With `PARQIVF_REQUIRE_INTEROP=1` a missing pyarrow is a failure.
//! The table covers multi-CID files, a CID spanning row groups and files, and
//! a payload column.

use crate::support;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use parqivf::postings::WriterOptions;
use parqivf::verify::{VerifyOptions, verify};
use std::sync::Arc;

#[tokio::test]
async fn write_table_for_the_independent_reader() {
    let temp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("PARQIVF_INTEROP_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).unwrap();
    let _ = std::fs::remove_file(dir.join("manifest.json"));
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(&dir).unwrap());
    // 3-row row groups and files capped at 700 bytes of row groups: cid 5 (10 rows) spans row groups and files.
    let options = WriterOptions {
        max_rows_per_row_group: 3,
        max_file_bytes: 700,
        ..WriterOptions::default()
    };
    let manifest =
        support::postings::write_table(Arc::clone(&store), &Path::default(), 8, options).await;
    assert!(manifest.files.len() > 2);
    let report = verify(store, &Path::default(), VerifyOptions { orphans: true })
        .await
        .unwrap();
    assert!(report.is_ok(), "{:?}", report.violations);

    let Some(python) = support::python::python_with("pyarrow") else {
        return;
    };
    let script = include_str!("../interop/pyarrow_postings.py");
    let text = support::python::run_python(&python, script, &[dir.to_str().unwrap()]);
    assert!(
        text.contains(&format!(
            "{} files checked by pyarrow, 0 failures",
            manifest.files.len()
        )),
        "{text}"
    );
}
