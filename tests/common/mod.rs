//! Test fixture: writes a small index snapshot (index.json, centroids,
//! postings files in the exact `ivf_postings` format, manifest.json) through
//! the library's public types. TEMPORARY: the coordinator swaps the postings
//! part for `postings::writer` and the hierarchy for `kmeans::Hierarchy::train`.
#![allow(dead_code)]

use arrow::array::{FixedSizeBinaryArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parqivf::distance::Metric;
use parqivf::format::definition::{BuildRecord, IndexDefinition, IndexSource};
use parqivf::format::manifest::{FileEntry, Manifest};
use parqivf::kmeans::Hierarchy;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// `n` clustered vectors of `dim`, seeded; rows `dup_every` apart repeat an
/// earlier vector exactly (to exercise ties).
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

fn nearest(metric: Metric, q: &[f32], centroids: &[f32], dim: usize) -> usize {
    let mut best = (f32::INFINITY, 0);
    for (i, c) in centroids.chunks_exact(dim).enumerate() {
        let d = metric.distance(q, c);
        if d < best.0 {
            best = (d, i);
        }
    }
    best.1
}

fn lloyd(data: &[f32], dim: usize, k: usize, iters: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    let n = data.len() / dim;
    let mut c: Vec<f32> = (0..k)
        .flat_map(|_| {
            let i = rng.random_range(0..n) * dim;
            data[i..i + dim].to_vec()
        })
        .collect();
    for _ in 0..iters {
        let mut sum = vec![0f32; k * dim];
        let mut cnt = vec![0usize; k];
        for p in data.chunks_exact(dim) {
            let a = nearest(Metric::L2, p, &c, dim);
            cnt[a] += 1;
            sum[a * dim..(a + 1) * dim]
                .iter_mut()
                .zip(p)
                .for_each(|(s, x)| *s += x);
        }
        let groups = c.chunks_exact_mut(dim).zip(sum.chunks_exact(dim)).zip(&cnt);
        for ((cj, sj), &nj) in groups.filter(|(_, n)| **n > 0) {
            cj.iter_mut().zip(sj).for_each(|(x, s)| *x = s / nj as f32);
        }
    }
    c
}

/// A naive two-level hierarchy: `nlist` leaves by Lloyd's k-means, grouped
/// under `nroots` roots (k-means of the leaves), renumbered so each root's
/// leaves are contiguous.
pub fn hierarchy(data: &[f32], dim: usize, nroots: usize, nlist: usize, seed: u64) -> Hierarchy {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let leaves = lloyd(data, dim, nlist, 6, &mut rng);
    let roots = lloyd(&leaves, dim, nroots, 6, &mut rng);
    let owner: Vec<usize> = leaves
        .chunks_exact(dim)
        .map(|l| nearest(Metric::L2, l, &roots, dim))
        .collect();
    let mut order: Vec<usize> = (0..nlist).collect();
    order.sort_by_key(|&l| (owner[l], l));
    let sorted: Vec<f32> = order
        .iter()
        .flat_map(|&l| leaves[l * dim..(l + 1) * dim].to_vec())
        .collect();
    let mut cid_offsets = vec![0u32];
    for r in 0..nroots {
        cid_offsets.push(cid_offsets[r] + owner.iter().filter(|&&o| o == r).count() as u32);
    }
    Hierarchy {
        dim,
        metric: Metric::L2,
        roots,
        leaves: sorted,
        cid_offsets,
    }
}

/// Options of [`write_index`].
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Roll to a new file after this many rows (at a row-group boundary).
    pub rows_per_file: usize,
    /// Split a cid's rows into row groups of at most this many rows.
    pub rows_per_row_group: usize,
    /// Write a `title` Utf8 payload column.
    pub payload: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            rows_per_file: 200,
            rows_per_row_group: 1 << 20,
            payload: false,
        }
    }
}

/// Assign every vector to its nearest leaf; returns cid per row.
pub fn assign(h: &Hierarchy, data: &[f32]) -> Vec<u32> {
    data.chunks_exact(h.dim)
        .map(|v| nearest(h.metric, v, &h.leaves, h.dim) as u32)
        .collect()
}

fn props() -> WriterProperties {
    let v = ColumnPath::from("vector");
    let c = ColumnPath::from("cid");
    WriterProperties::builder()
        .set_column_encoding(c.clone(), Encoding::PLAIN)
        .set_column_dictionary_enabled(c, false)
        .set_compression(Compression::UNCOMPRESSED)
        .set_column_encoding(v.clone(), Encoding::PLAIN)
        .set_column_dictionary_enabled(v.clone(), false)
        .set_column_statistics_enabled(v, EnabledStatistics::None)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
            parqivf::format::postings_table::KV_FORMAT_VERSION.into(),
            parqivf::format::manifest::FORMAT_VERSION.to_string(),
        )]))
        .build()
}

/// One postings object from `(cid, rowid, data row)` sorted by cid: one cid
/// per row group (flush at each cid change), exact cid statistics, vector
/// PLAIN / uncompressed / no dictionary / no statistics. The cid column is
/// PLAIN too, so a test can patch its values in place.
pub fn postings_file(
    dim: usize,
    rows: &[(u32, i64, usize)],
    data: &[f32],
    layout: Layout,
) -> Vec<u8> {
    write_rows(dim, rows, data, layout, true)
}

/// Like [`postings_file`] but never flushing at a cid change: a broken file
/// whose row group holds several cids.
pub fn postings_file_single_row_group(
    dim: usize,
    rows: &[(u32, i64, usize)],
    data: &[f32],
    layout: Layout,
) -> Vec<u8> {
    write_rows(dim, rows, data, layout, false)
}

fn write_rows(
    dim: usize,
    rows: &[(u32, i64, usize)],
    data: &[f32],
    layout: Layout,
    flush: bool,
) -> Vec<u8> {
    let mut fields = vec![
        Field::new("cid", DataType::Int32, false),
        Field::new("rowid", DataType::Int64, false),
        Field::new("vector", DataType::FixedSizeBinary((dim * 4) as i32), false),
    ];
    if layout.payload {
        fields.push(Field::new("title", DataType::Utf8, true));
    }
    let schema = Arc::new(Schema::new(fields));
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, schema.clone(), Some(props())).unwrap();
    let mut start = 0;
    while start < rows.len() {
        let cid = rows[start].0;
        let mut end = start;
        while end < rows.len() && rows[end].0 == cid && end - start < layout.rows_per_row_group {
            end += 1;
        }
        let g = &rows[start..end];
        let cids: Vec<i32> = g.iter().map(|r| r.0 as i32).collect();
        let bytes: Vec<u8> = g
            .iter()
            .flat_map(|r| {
                data[r.2 * dim..(r.2 + 1) * dim]
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
            })
            .collect();
        let mut cols: Vec<arrow::array::ArrayRef> = vec![
            Arc::new(Int32Array::from(cids)),
            Arc::new(Int64Array::from(g.iter().map(|r| r.1).collect::<Vec<_>>())),
            Arc::new(FixedSizeBinaryArray::try_new((dim * 4) as i32, bytes.into(), None).unwrap()),
        ];
        if layout.payload {
            cols.push(Arc::new(StringArray::from(
                g.iter()
                    .map(|r| Some(format!("row-{}", r.1)))
                    .collect::<Vec<_>>(),
            )));
        }
        w.write(&RecordBatch::try_new(schema.clone(), cols).unwrap())
            .unwrap();
        if flush {
            w.flush().unwrap();
        }
        start = end;
    }
    w.close().unwrap();
    buf
}

/// Write a complete snapshot under `root`: files per root bucket, rolled at
/// cid boundaries after `layout.rows_per_file` rows.
pub async fn write_index(
    store: &dyn ObjectStore,
    root: &Path,
    h: &Hierarchy,
    data: &[f32],
    ids: &[i64],
    layout: Layout,
) -> Manifest {
    let dim = h.dim;
    let cids = assign(h, data);
    let mut rows: Vec<(u32, i64, usize)> = cids
        .iter()
        .zip(ids)
        .enumerate()
        .map(|(i, (&c, &r))| (c, r, i))
        .collect();
    rows.sort_by_key(|r| (r.0, r.1));
    let nroots = h.cid_offsets.len() - 1;
    let mut files = Vec::new();
    let mut pins = Vec::new();
    for r in 0..nroots {
        let (lo, hi) = (h.cid_offsets[r], h.cid_offsets[r + 1]);
        let bucket: Vec<_> = rows
            .iter()
            .copied()
            .filter(|x| (lo..hi).contains(&x.0))
            .collect();
        // Roll at cid boundaries once a file holds rows_per_file rows.
        let mut part = 0;
        let mut start = 0;
        while start < bucket.len() {
            let mut end = start;
            while end < bucket.len()
                && (end - start < layout.rows_per_file || bucket[end].0 == bucket[end - 1].0)
            {
                end += 1;
            }
            let chunk = &bucket[start..end];
            // Page CRC32s and a footers.json pin, as the postings writer does.
            let bytes = parqivf::postings::page_crc::add_page_crcs_to_file(&postings_file(
                dim, chunk, data, layout,
            ))
            .unwrap();
            let path = format!("cid_bucket={r:06}/part-{part:05}.parquet");
            pins.push(parqivf::format::footers::FooterPin::of_file(&path, &bytes).unwrap());
            files.push(FileEntry {
                path: path.clone(),
                cid_bucket: r as u32,
                min_cid: chunk[0].0,
                max_cid: chunk[chunk.len() - 1].0,
                rows: chunk.len() as u64,
                size: bytes.len() as u64,
                sha256: hex::encode(Sha256::digest(&bytes)),
            });
            store
                .put(
                    &Path::from(format!("{root}/postings/{path}")),
                    PutPayload::from(bytes),
                )
                .await
                .unwrap();
            part += 1;
            start = end;
        }
    }
    let manifest = Manifest {
        format_version: 1,
        nlist: h.leaves.len() as u32 / dim as u32,
        ntotal: rows.len() as u64,
        cid_offsets: h.cid_offsets.clone(),
        files,
    };
    put_json(store, &format!("{root}/postings/manifest.json"), &manifest).await;
    let footers = parqivf::format::footers::Footers {
        format_version: parqivf::format::footers::FOOTERS_FORMAT_VERSION,
        files: pins,
    };
    put_json(store, &format!("{root}/postings/footers.json"), &footers).await;
    let centroids = parqivf::format::centroids::encode(h).unwrap();
    store
        .put(
            &Path::from(format!("{root}/centroids/centroids.parquet")),
            PutPayload::from(centroids),
        )
        .await
        .unwrap();
    let def = IndexDefinition::new(
        h.metric,
        dim as u32,
        manifest.nlist,
        nroots as u32,
        IndexSource::VectorFile {
            location: "tests/common".into(),
        },
        BuildRecord {
            vector_column: "vector".into(),
            id_column: None,
            payload_columns: if layout.payload {
                vec!["title".into()]
            } else {
                Vec::new()
            },
            seed: 0,
            sample_rows: data.len() as u64 / dim as u64,
            max_iterations: 6,
            threads: 1,
            skip_invalid: false,
        },
    );
    put_json(store, &format!("{root}/index.json"), &def).await;
    manifest
}

pub async fn put_json<T: serde::Serialize>(store: &dyn ObjectStore, path: &str, v: &T) {
    let bytes = serde_json::to_vec_pretty(v).unwrap();
    store
        .put(&Path::from(path), PutPayload::from(bytes))
        .await
        .unwrap();
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
