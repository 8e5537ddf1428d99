//! `builder::distributed`, the stages as a distributed engine runs them:
//! count on the driver, sample every part on a worker, train on the
//! driver, assign every part and write every bucket on workers (in any
//! order and split), publish on the driver. The snapshot is byte for byte
//! the single-node build's, and a worker refuses a source that changed.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{AsArray, FixedSizeListArray, Float32Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, UInt32Type};
use parqivf::builder::distributed::{
    self, BuildPlan, ROOT_COLUMN, SampleReader, Worker, plan_from_samples,
};
use parqivf::builder::{BuildError, BuildParams, ProgressMode, SourceSpec, build, open_source};
use parqivf::store::options::StoreOptions;

const DIM: usize = 8;

fn write_table(dir: &std::path::Path, vectors: &[f32], files: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let rows = vectors.len() / DIM;
    let per = rows.div_ceil(files);
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let schema = Arc::new(Schema::new(vec![Field::new(
        "embedding",
        DataType::FixedSizeList(item.clone(), DIM as i32),
        false,
    )]));
    for f in 0..files {
        let part = &vectors[f * per * DIM..((f + 1) * per).min(rows) * DIM];
        let values = Arc::new(Float32Array::from(part.to_vec()));
        let list = FixedSizeListArray::new(item.clone(), DIM as i32, values, None);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(list)]).unwrap();
        let file = std::fs::File::create(dir.join(format!("part-{f}.parquet"))).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
}

fn params() -> BuildParams {
    BuildParams {
        nlist: 12,
        // The stages by hand (like a distributed build) measure no recall
        // calibration: nor does the build they are compared with.
        calibration_queries: 0,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

/// Every file of the index's only snapshot, by path below the snapshot folder.
fn snapshot_files(index: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    let snapshots: Vec<_> = std::fs::read_dir(index.join("snapshots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
    let mut out = BTreeMap::new();
    let mut stack = vec![snapshots[0].clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let name = p.strip_prefix(&snapshots[0]).unwrap().display().to_string();
                out.insert(name, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[tokio::test]
async fn the_distributed_stages_publish_what_build_publishes() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("table");
    write_table(&table, &support::fixtures::random_vectors(2400, DIM, 5), 3);
    let spec = SourceSpec {
        source: table.display().to_string(),
        column: "embedding".into(),
        ..SourceSpec::default()
    };
    let options = StoreOptions::default();

    let single = dir.path().join("single");
    let (store, path) = parqivf::store::location::open(&single.display().to_string()).unwrap();
    let source = open_source(&spec, &options).await.unwrap();
    build(source, store, &path, &params()).await.unwrap();

    // Driver: count. Workers: sample the parts, last first.
    let out = dir.path().join("dist").display().to_string();
    let part_rows = distributed::count_source(&spec, &options).await.unwrap();
    assert_eq!(part_rows, vec![800, 800, 800]);
    let reader = SampleReader::open(&spec, &params(), part_rows.clone(), &options)
        .await
        .unwrap();
    let mut samples = Vec::new();
    for part in (0..3).rev() {
        samples.push((part, reader.sample_part(part).await.unwrap()));
    }
    samples.sort_by_key(|(p, _)| *p);
    let samples = samples.into_iter().map(|(_, s)| s).collect();
    let plan = plan_from_samples(
        &spec,
        &out,
        &params(),
        &options,
        part_rows,
        samples,
        (0.0, 0.0),
    )
    .await
    .unwrap();
    // The plan travels as bytes.
    let plan = BuildPlan::from_bytes(&plan.to_bytes()).unwrap();
    let worker = Worker::open(plan.clone(), &options).await.unwrap();

    // Assign every part, last first; the engine groups rows by root bucket.
    let mut buckets: BTreeMap<u32, Vec<RecordBatch>> = BTreeMap::new();
    for part in (0..plan.parts()).rev() {
        let rows = worker.assign_part(part).await.unwrap();
        let roots = rows
            .column_by_name(ROOT_COLUMN)
            .unwrap()
            .as_primitive::<UInt32Type>();
        for root in roots
            .values()
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>()
        {
            let mask =
                arrow::compute::kernels::cmp::eq(roots, &UInt32Array::new_scalar(root)).unwrap();
            let picked = arrow::compute::filter_record_batch(&rows, &mask).unwrap();
            // Split each bucket's rows in two batches, as a shuffle may.
            let half = picked.num_rows() / 2;
            buckets.entry(root).or_default().push(picked.slice(0, half));
            buckets
                .entry(root)
                .or_default()
                .push(picked.slice(half, picked.num_rows() - half));
        }
    }
    let mut files = Vec::new();
    for (root, batches) in buckets.into_iter().rev() {
        files.extend(worker.write_bucket(root, batches).await.unwrap());
    }
    let summary = distributed::publish(&plan, files, &options, 0.0, 0.0)
        .await
        .unwrap();
    assert_eq!((summary.version, summary.rows, summary.parts), (1, 2400, 3));

    let (a, b) = (
        snapshot_files(&single),
        snapshot_files(dir.path().join("dist").as_path()),
    );
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        assert!(
            bytes == &b[name],
            "{name} differs from the single-node build"
        );
    }

    // The source changes: workers refuse it, by parts and by rows.
    write_table(&table, &support::fixtures::random_vectors(2500, DIM, 6), 4);
    let e = Worker::open(plan.clone(), &options).await.err().unwrap();
    assert!(matches!(e, BuildError::SourceChanged { .. }), "{e}");
    assert!(e.to_string().contains("the driver counted 3 parts"), "{e}");
    std::fs::remove_file(table.join("part-3.parquet")).unwrap();
    let e = worker_error(&plan, &options).await;
    assert!(
        e.contains("changed since the build was planned") && e.contains("800 rows"),
        "{e}"
    );
}

async fn worker_error(plan: &BuildPlan, options: &StoreOptions) -> String {
    let worker = Worker::open(plan.clone(), options).await.unwrap();
    let mut last = String::new();
    for part in 0..plan.parts() {
        if let Err(e) = worker.assign_part(part).await {
            last = e.to_string();
        }
    }
    last
}
