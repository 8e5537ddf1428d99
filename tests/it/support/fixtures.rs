//! Seeded data and whole index snapshots, written the way production writes
//! them: the hierarchy comes from [`Hierarchy::train`], rows are assigned by
//! [`Hierarchy::assign`], postings go through [`PostingsWriter`] and
//! [`publish`], centroids through `format::centroids::encode` and
//! `index.json` through [`IndexDefinition::to_json`]. The one hand-built
//! Parquet file here, [`multi_cid_row_group_file`], is deliberately invalid.
//!
//! Self-contained (no `super::`), so `benches/common` includes it by path.

use arrow::array::StringArray;
use arrow::array::{ArrayRef, FixedSizeBinaryArray, Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parqivf::distance::Metric;
use parqivf::format::definition::{
    BuildRecord, INDEX_DEFINITION_FILE, IndexDefinition, IndexSource,
};
use parqivf::format::manifest::Manifest;
use parqivf::format::postings_table::postings_schema;
use parqivf::kmeans::{AssignMode, Hierarchy, HierarchyParams, KMeansParams};
use parqivf::postings::{PostingsWriter, WriterOptions, publish};
use parqivf::store::uri::RelativeLocation;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// `n × dim` values uniform in [-1, 1), deterministic by `seed`.
pub fn random_vectors(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n * dim)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect()
}

/// `n` clustered vectors of `dim`, seeded; every 50th row repeats the row 7
/// before it exactly (to exercise ties).
pub fn dataset(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centers: Vec<f32> = (0..16 * dim)
        .map(|_| rng.random_range(-10.0..10.0))
        .collect();
    let mut v = Vec::with_capacity(n * dim);
    for i in 0..n {
        if i % 50 == 49 {
            let src = (i - 7) * dim;
            v.extend_from_within(src..src + dim);
            continue;
        }
        let c = rng.random_range(0..16) * dim;
        v.extend((0..dim).map(|j| centers[c + j] + rng.random_range(-1.5f32..1.5)));
    }
    v
}

/// Rowids: a scrambled, non-contiguous identity per row.
pub fn rowids(n: usize) -> Vec<i64> {
    (0..n as i64)
        .map(|i| (i * 7919) % (n as i64 * 3 + 1) + 1_000)
        .collect()
}

/// An L2 hierarchy of `nlist` leaves under `nroots` roots, trained by the
/// library's k-means (6 Lloyd iterations, seeded).
pub fn hierarchy(data: &[f32], dim: usize, nroots: usize, nlist: usize, seed: u64) -> Hierarchy {
    let params = HierarchyParams {
        nlist,
        roots: nroots,
        metric: Metric::L2,
        kmeans: KMeansParams {
            niter: 6,
            ..KMeansParams::default()
        },
        polish: 0,
    };
    Hierarchy::train(data, dim, &params, &mut ChaCha8Rng::seed_from_u64(seed))
        .unwrap()
        .0
}

/// How [`write_index`] lays out the postings.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The postings writer's row-group and file caps.
    pub writer: WriterOptions,
    /// Write a `title` Utf8 payload column holding `row-{rowid}`.
    pub payload: bool,
}

impl Layout {
    /// Files closed after about `bytes` bytes, one row group per cid.
    pub fn files_of(bytes: u64) -> Self {
        Self {
            writer: WriterOptions {
                max_file_bytes: bytes,
                upload_buffer_bytes: 1 << 20,
                ..WriterOptions::default()
            },
            payload: false,
        }
    }
}

impl Default for Layout {
    /// Files of about 8 KiB (a few hundred small rows), so a snapshot has
    /// several files per root bucket.
    fn default() -> Self {
        Self::files_of(8 * 1024)
    }
}

/// The postings batch of `rows` (indexes into `data`/`ids`, sorted by cid).
fn postings_batch(
    dim: usize,
    rows: &[usize],
    cids: &[u32],
    data: &[f32],
    ids: &[i64],
    payload: &[Field],
) -> RecordBatch {
    let vectors: Vec<u8> = rows
        .iter()
        .flat_map(|&i| {
            data[i * dim..(i + 1) * dim]
                .iter()
                .flat_map(|x| x.to_le_bytes())
        })
        .collect();
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter_values(
            rows.iter().map(|&i| cids[i] as i32),
        )),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|&i| ids[i]))),
        Arc::new(FixedSizeBinaryArray::try_new((dim * 4) as i32, vectors.into(), None).unwrap()),
    ];
    if !payload.is_empty() {
        columns.push(Arc::new(StringArray::from_iter_values(
            rows.iter().map(|&i| format!("row-{}", ids[i])),
        )));
    }
    RecordBatch::try_new(postings_schema(dim, None, payload), columns).unwrap()
}

/// Writes a complete snapshot folder `root` (index.json, centroids,
/// postings with manifest.json and footers.json) for `data` with rowids
/// `ids`, assigned exactly to the leaves of `h`. Not committed: call
/// `format::warehouse::commit` to make it an index version.
pub async fn write_index(
    store: Arc<dyn ObjectStore>,
    root: &Path,
    h: &Hierarchy,
    data: &[f32],
    ids: &[i64],
    layout: Layout,
) -> Manifest {
    let dim = h.dim;
    let cids = h.assign(data, AssignMode::Exact).unwrap();
    let payload = if layout.payload {
        vec![Field::new("title", DataType::Utf8, true)]
    } else {
        Vec::new()
    };
    let postings_root = RelativeLocation::parse("postings")
        .unwrap()
        .resolve_path(root);
    let mut writer = PostingsWriter::new(
        Arc::clone(&store),
        postings_root.clone(),
        dim,
        None,
        payload.clone(),
        layout.writer,
    )
    .unwrap();
    for r in 0..h.nroots() {
        let (lo, hi) = (h.cid_offsets[r], h.cid_offsets[r + 1]);
        let mut rows: Vec<usize> = (0..ids.len())
            .filter(|&i| (lo..hi).contains(&cids[i]))
            .collect();
        if rows.is_empty() {
            continue;
        }
        rows.sort_by_key(|&i| (cids[i], ids[i]));
        let batch = postings_batch(dim, &rows, &cids, data, ids, &payload);
        writer.write_bucket(r as u32, vec![batch]).await.unwrap();
    }
    let manifest = writer
        .finish(h.nlist() as u32, h.cid_offsets.clone())
        .unwrap();
    publish(&store, &postings_root, &manifest).await.unwrap();

    let definition = IndexDefinition::new(
        h.metric,
        dim as u32,
        manifest.nlist,
        h.nroots() as u32,
        IndexSource::VectorFile {
            location: "tests/support".into(),
        },
        BuildRecord {
            vector_column: "vector".into(),
            id_column: None,
            payload_columns: payload.iter().map(|f| f.name().clone()).collect(),
            seed: 0,
            sample_rows: ids.len() as u64,
            max_iterations: 6,
            threads: 1,
            skip_invalid: false,
            sort_by: None,
            quantization_error: None,
        },
    );
    let centroids = parqivf::format::centroids::encode(h).unwrap();
    store
        .put(
            &definition.centroids_path(root).unwrap(),
            PutPayload::from(centroids),
        )
        .await
        .unwrap();
    store
        .put(
            &RelativeLocation::parse(INDEX_DEFINITION_FILE)
                .unwrap()
                .resolve_path(root),
            PutPayload::from(definition.to_json()),
        )
        .await
        .unwrap();
    manifest
}

/// Exact k nearest by brute force, ties by the smaller rowid.
pub fn brute_force(
    metric: Metric,
    dim: usize,
    data: &[f32],
    ids: &[i64],
    q: &[f32],
    k: usize,
) -> Vec<(i64, f32)> {
    let mut all: Vec<(f32, i64)> = data
        .chunks_exact(dim)
        .zip(ids)
        .map(|(v, &r)| (metric.distance(q, v), r))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    all.into_iter().take(k).map(|(d, r)| (r, d)).collect()
}

/// An INVALID postings file: one row group holding every row of `rows`
/// (`(cid, rowid, row of data)`), so several cids share it. The postings
/// writer closes a row group at every cid change and cannot produce this, so
/// it is hand-built with the writer's column settings (PLAIN, uncompressed,
/// no dictionary, cid statistics, the format-version key) to fail only on
/// the one-cid-per-row-group rule. No page CRCs yet
/// (`postings::page_crc::add_page_crcs_to_file` adds them).
pub fn multi_cid_row_group_file(dim: usize, rows: &[(u32, i64, usize)], data: &[f32]) -> Vec<u8> {
    use parquet::basic::{Compression, Encoding};
    use parquet::file::metadata::KeyValue;
    use parquet::file::properties::{EnabledStatistics, WriterProperties};
    use parquet::schema::types::ColumnPath;

    let vector = ColumnPath::from("vector");
    let props = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .set_encoding(Encoding::PLAIN)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_column_statistics_enabled(vector, EnabledStatistics::None)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            parqivf::format::postings_table::KV_FORMAT_VERSION.into(),
            parqivf::format::manifest::FORMAT_VERSION.to_string(),
        )]))
        .build();
    let vectors: Vec<u8> = rows
        .iter()
        .flat_map(|r| {
            data[r.2 * dim..(r.2 + 1) * dim]
                .iter()
                .flat_map(|x| x.to_le_bytes())
        })
        .collect();
    let batch = RecordBatch::try_new(
        postings_schema(dim, None, &[]),
        vec![
            Arc::new(Int32Array::from_iter_values(
                rows.iter().map(|r| r.0 as i32),
            )),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(
                FixedSizeBinaryArray::try_new((dim * 4) as i32, vectors.into(), None).unwrap(),
            ),
        ],
    )
    .unwrap();
    let mut buf = Vec::new();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    buf
}

/// The ids of the `k` rows of `table` nearest to `q` (brute force, squared
/// L2, ties by table order).
pub fn nearest_ids(table: &[(i64, Vec<f32>)], q: &[f32], k: usize) -> Vec<i64> {
    let mut d: Vec<(f32, i64)> = table
        .iter()
        .map(|(id, v)| (v.iter().zip(q).map(|(a, b)| (a - b) * (a - b)).sum(), *id))
        .collect();
    d.sort_by(|a, b| a.partial_cmp(b).unwrap());
    d.into_iter().take(k).map(|(_, id)| id).collect()
}

/// The payload `id`s of an exhaustive search (`nprobe = nlist`) of the
/// current version of the index at `index`.
pub async fn exhaustive_ids(
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    index: &object_store::path::Path,
    q: &[f32],
    k: usize,
) -> Vec<i64> {
    let idx = parqivf::index::Index::open_current(store.clone(), index)
        .await
        .unwrap();
    let params = parqivf::index::SearchParams {
        k,
        nprobe: Some(idx.manifest().nlist as usize),
        include_payload: true,
        ..parqivf::index::SearchParams::default()
    };
    let r = idx.search(q, &params).await.unwrap();
    r.hits
        .iter()
        .map(|h| h.payload.as_ref().unwrap()["id"].as_i64().unwrap())
        .collect()
}
