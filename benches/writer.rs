//! Postings writer throughput (MB/s of postings written to `InMemory`,
//! streaming sha256 included) next to the raw `sha2` rate on this machine.
//!
//! Grid: 128-d f32 vectors (524 bytes per posting: cid + rowid + vector),
//! 64 000 postings in one root of 64 CIDs of 1 000 postings, default caps.
//! Seeded data; `sample_size(10)` because one iteration writes ~33 MB.

use arrow::array::{FixedSizeBinaryArray, Int32Array, Int64Array, RecordBatch};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use parqivf::format::postings_table::postings_schema;
use parqivf::postings::{PostingsWriter, WriterOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use std::hint::black_box;
use std::sync::Arc;

const DIM: usize = 128;
const CIDS: i32 = 64;
const PER_CID: usize = 1_000;
const POSTING_BYTES: usize = 4 + 8 + DIM * 4;

fn postings() -> Vec<RecordBatch> {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    (0..CIDS)
        .map(|cid| {
            let n = PER_CID;
            let bytes: Vec<u8> = (0..n * DIM)
                .flat_map(|_| rng.random::<f32>().to_le_bytes())
                .collect();
            RecordBatch::try_new(
                postings_schema(DIM, None, &[]),
                vec![
                    Arc::new(Int32Array::from(vec![cid; n])),
                    Arc::new(Int64Array::from_iter_values(
                        (0..n as i64).map(|i| i + i64::from(cid) * n as i64),
                    )),
                    Arc::new(
                        FixedSizeBinaryArray::try_new((DIM * 4) as i32, bytes.into(), None)
                            .unwrap(),
                    ),
                ],
            )
            .unwrap()
        })
        .collect()
}

fn bench_writer(c: &mut Criterion) {
    let batches = postings();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("postings_writer");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(
        (POSTING_BYTES * PER_CID * CIDS as usize) as u64,
    ));
    group.bench_function("write_bucket_128d_64k_inmemory", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
                let mut writer = PostingsWriter::new(
                    store,
                    Path::from("t"),
                    DIM,
                    None,
                    vec![],
                    WriterOptions::default(),
                )
                .unwrap();
                writer.write_bucket(0, batches.clone()).await.unwrap();
                black_box(writer.finish(CIDS as u32, vec![0, CIDS as u32]).unwrap())
            })
        })
    });
    group.finish();

    let data = vec![0xA5u8; 32 << 20];
    let mut group = c.benchmark_group("sha2_raw");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.bench_function("sha256_32MiB", |b| {
        b.iter(|| black_box(Sha256::digest(&data)))
    });
    group.finish();
}

criterion_group!(benches, bench_writer);
criterion_main!(benches);
