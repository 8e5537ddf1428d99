//! Quantised codes in the postings and the exact re-rank from `vector`
//! pages (issue 12): exactness at full probe and full re-rank for every
//! scheme and metric and in every serving mode; the re-rank reads only the
//! pages holding candidates; bounded rounds; `rerank 0` reads no f32; a
//! corrupted code or page is a typed error, never a wrong answer.

use crate::support;

use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parqivf::builder::progress::ProgressMode;
use parqivf::builder::source::ArraySource;
use parqivf::builder::{BuildParams, build};
use parqivf::distance::Metric;
use parqivf::index::{Index, IndexError, IndexOptions, Preload, SearchParams, SearchResult};
use parqivf::probe::ProbeError;
use parqivf::quant::Scheme;
use std::sync::Arc;
use support::fixtures::{brute_force, dataset};

fn params(nlist: u32, metric: Metric, codes: Option<Scheme>) -> BuildParams {
    BuildParams {
        nlist,
        metric,
        codes,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

async fn built(
    store: &Arc<dyn ObjectStore>,
    data: &[f32],
    dim: usize,
    params: &BuildParams,
) -> Index {
    let idx = Path::from("idx");
    let src = Arc::new(ArraySource::new(data.to_vec(), dim, "generated").unwrap());
    build(src, store.clone(), &idx, params).await.unwrap();
    Index::open_current(store.clone(), &idx).await.unwrap()
}

fn pairs(r: &SearchResult) -> Vec<(i64, f32)> {
    r.hits.iter().map(|h| (h.rowid, h.distance)).collect()
}

/// Rows of `data`, moved a little: near but not on stored vectors.
fn queries(data: &[f32], dim: usize, rows: &[usize]) -> Vec<f32> {
    rows.iter()
        .flat_map(|&i| data[i * dim..(i + 1) * dim].iter().map(|x| x + 0.05))
        .collect()
}

#[tokio::test]
async fn full_probe_and_full_rerank_equal_brute_force_in_every_mode() {
    // dim 24: not a multiple of the 4-bit code's 64-dimension blocks.
    let (n, dim, nlist) = (1500, 24, 8);
    let data = dataset(n, dim, 5);
    let ids: Vec<i64> = (0..n as i64).collect();
    let q = queries(&data, dim, &[3, 700, 1499, 42]);
    for scheme in [Scheme::Sq8, Scheme::RaBitQ4, Scheme::Pq4Fs] {
        for metric in [Metric::L2, Metric::InnerProduct] {
            let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
            let index = built(&store, &data, dim, &params(nlist, metric, Some(scheme))).await;
            assert_eq!(index.quantizer().map(|q| q.scheme()), Some(scheme));
            // rerank × k ≥ n: every candidate is ranked exactly.
            let sp = SearchParams {
                k: 10,
                nprobe: Some(nlist as usize),
                rerank: Some(n.div_ceil(10)),
                ..SearchParams::default()
            };
            let mut answers = Vec::new();
            for mode in [Preload::None, Preload::Codes, Preload::All] {
                index.preload(mode).await.unwrap();
                let got = index.search_batch(&q, &sp).await.unwrap();
                for (i, (r, query)) in got.iter().zip(q.chunks_exact(dim)).enumerate() {
                    let want = brute_force(metric, dim, &data, &ids, query, 10);
                    assert_eq!(pairs(r), want, "{scheme} {metric:?} {mode:?} query {i}");
                    let s = &r.stats;
                    match mode {
                        Preload::All => assert_eq!((s.requests, s.pages_read), (0, 0), "{mode:?}"),
                        _ => assert!(s.pages_read > 0 && s.pages_read <= s.reranked, "{s:?}"),
                    }
                }
                answers.push(got.iter().map(pairs).collect::<Vec<_>>());
            }
            assert!(answers.windows(2).all(|w| w[0] == w[1]));
        }
    }
}

#[tokio::test]
async fn the_rerank_reads_only_the_pages_of_its_candidates_in_bounded_rounds() {
    // Four lists of ~1000 rows: a row group's vector chunk is ~125 pages.
    let (n, dim, nlist) = (4000, 32, 4);
    let data = dataset(n, dim, 9);
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let index = built(
        &store,
        &data,
        dim,
        &params(nlist, Metric::L2, Some(Scheme::RaBitQ4)),
    )
    .await;
    let q = queries(&data, dim, &[10]);
    let sp = SearchParams {
        k: 5,
        nprobe: Some(2),
        rerank: Some(3),
        ..SearchParams::default()
    };
    let cold = index.search(&q, &sp).await.unwrap().stats;
    assert!(cold.rounds <= 3, "cold rounds {}: {cold:?}", cold.rounds);
    let warm = index.search(&q, &sp).await.unwrap().stats;
    assert_eq!(warm.footers_read, 0);
    assert!(warm.rounds <= 2, "warm rounds {}: {warm:?}", warm.rounds);
    // At most one page per candidate, each 8 rows of 32 f32 plus its header.
    assert!(
        warm.reranked <= 15 && warm.pages_read <= warm.reranked,
        "{warm:?}"
    );
    assert!(
        warm.page_bytes <= warm.pages_read * (8 * 32 * 4 + 64),
        "{warm:?}"
    );
    // No vector column chunk was read: the bytes are codes (40 bytes a row
    // at 32-d), rowids, cids, offset indexes and the pages, against 128
    // bytes a row of f32.
    let probed_rows_f32 = warm.codes_scored * dim as u64 * 4;
    assert!(warm.bytes < probed_rows_f32 * 2 / 3, "{warm:?}");
    // The plan's minimum: a code a scanned row, a vector a candidate
    // (`minimum_bytes`); what is read is more.
    let vector = 4 * dim as u64;
    assert_eq!(
        warm.minimum_bytes,
        warm.codes_scored * 40 + warm.reranked * vector,
        "{warm:?}"
    );
    assert!(warm.bytes > warm.minimum_bytes, "{warm:?}");
    // rerank 0: the codes' estimates, no page read, one round fewer.
    let approx = index
        .search(
            &q,
            &SearchParams {
                rerank: Some(0),
                ..sp.clone()
            },
        )
        .await
        .unwrap();
    assert_eq!((approx.stats.pages_read, approx.stats.page_bytes), (0, 0));
    assert!(approx.stats.rounds <= 1, "{:?}", approx.stats);
    assert_eq!(approx.hits.len(), 5);
    // Codes in memory: one round, the pages alone.
    index.preload(Preload::Codes).await.unwrap();
    let pre = index.search(&q, &sp).await.unwrap().stats;
    assert_eq!((pre.rounds, pre.row_groups_read), (1, 0), "{pre:?}");
    assert_eq!(pre.bytes, pre.page_bytes, "{pre:?}");
    assert_eq!(pre.minimum_bytes, pre.reranked * vector, "{pre:?}");
    assert!(pre.bytes >= pre.minimum_bytes, "{pre:?}");
}

/// Without codes `minimum_bytes` is a vector a scanned row: the whole
/// vector chunks read hold that plus at most a page header and checksum a
/// row. (With codes it is checked in
/// `the_rerank_reads_only_the_pages_of_its_candidates_in_bounded_rounds`.)
#[tokio::test]
async fn minimum_bytes_without_codes_is_a_vector_a_scanned_row() {
    let (n, dim, nlist) = (4000, 32, 4);
    let data = dataset(n, dim, 9);
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let flat = built(&store, &data, dim, &params(nlist, Metric::L2, None)).await;
    let sp = SearchParams {
        k: 5,
        nprobe: Some(2),
        ..SearchParams::default()
    };
    let s = flat
        .search(&queries(&data, dim, &[10]), &sp)
        .await
        .unwrap()
        .stats;
    let vector = 4 * dim as u64;
    assert_eq!(s.minimum_bytes % vector, 0, "{s:?}");
    let rows = s.minimum_bytes / vector;
    assert!(rows > 0 && rows < n as u64, "{s:?}");
    assert!(
        s.vector_bytes >= s.minimum_bytes && s.vector_bytes <= rows * (vector + 64),
        "{s:?}"
    );
}

#[tokio::test]
async fn a_probed_lists_keys_and_codes_are_one_ranged_read() {
    // The writer puts `code` before `vector`, so a row group's `cid`,
    // `rowid` and `code` chunks are adjacent: one range a list. With
    // `vector` between them it was two (the last list's code chunk and the
    // next list's keys touching made nprobe = nlist one more than nlist).
    let (n, dim, nlist) = (4000, 32, 4);
    let data = dataset(n, dim, 9);
    let q = queries(&data, dim, &[10]);
    for scheme in [Scheme::Sq8, Scheme::RaBitQ4, Scheme::Pq4Fs] {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let index = built(&store, &data, dim, &params(nlist, Metric::L2, Some(scheme))).await;
        for nprobe in [1, nlist as usize] {
            // rerank 0: no offset index, no page; the codes round alone.
            let sp = SearchParams {
                k: 5,
                nprobe: Some(nprobe),
                rerank: Some(0),
                ..SearchParams::default()
            };
            index.search(&q, &sp).await.unwrap();
            let s = index.search(&q, &sp).await.unwrap().stats;
            assert_eq!(s.footers_read, 0, "{scheme}: warm footers");
            assert_eq!(s.row_groups_read, nprobe as u64, "{scheme}: {s:?}");
            assert_eq!(
                s.requests, s.row_groups_read,
                "{scheme} nprobe {nprobe}: {s:?}"
            );
            assert_eq!(s.rounds, 1, "{scheme}: {s:?}");
        }
    }
}

#[tokio::test]
async fn recall_of_the_default_codes_with_the_default_rerank() {
    let (n, dim, nlist) = (6000, 64, 16);
    let data = dataset(n, dim, 13);
    let ids: Vec<i64> = (0..n as i64).collect();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let index = built(
        &store,
        &data,
        dim,
        &params(nlist, Metric::L2, parqivf::builder::DEFAULT_CODES),
    )
    .await;
    let rows: Vec<usize> = (0..40).map(|i| i * 149).collect();
    let q = queries(&data, dim, &rows);
    let sp = SearchParams {
        k: 10,
        nprobe: Some(nlist as usize),
        ..SearchParams::default()
    };
    let got = index.search_batch(&q, &sp).await.unwrap();
    let mut found = 0;
    for (r, query) in got.iter().zip(q.chunks_exact(dim)) {
        let want: Vec<i64> = brute_force(Metric::L2, dim, &data, &ids, query, 10)
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        found += r.hits.iter().filter(|h| want.contains(&h.rowid)).count();
    }
    let recall = found as f64 / 400.0;
    // The build measured the re-rank its codes need on this data, and a
    // query that names none uses it.
    let measured = index.calibration().and_then(|c| c.rerank);
    let used = index.rerank(&sp);
    println!("default codes: measured re-rank {measured:?}, used {used}, recall@10 {recall}");
    assert_eq!(measured.map(|r| r as usize), Some(used));
    assert!(recall >= 0.95, "recall@10 {recall} at re-rank {used}");
}

#[tokio::test]
async fn a_corrupted_code_or_vector_page_is_a_typed_error() {
    for scheme in [Scheme::RaBitQ4, Scheme::Pq4Fs] {
        a_corrupted_code_or_vector_page_is_a_typed_error_for(scheme).await;
    }
}

async fn a_corrupted_code_or_vector_page_is_a_typed_error_for(scheme: Scheme) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let (n, dim, nlist) = (800, 16, 2);
    let data = dataset(n, dim, 3);
    let index = built(&store, &data, dim, &params(nlist, Metric::L2, Some(scheme))).await;
    let part = dir.path().join(index.postings_paths()[0].as_ref());
    let bytes = std::fs::read(&part).unwrap();
    let meta = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&bytes::Bytes::from(bytes.clone()))
        .unwrap();
    let column = |name: &str| {
        meta.row_group(0)
            .columns()
            .iter()
            .position(|c| c.column_path().string() == name)
            .unwrap()
    };
    let (code_start, code_len) = meta.row_group(0).column(column("code")).byte_range();
    let range = meta
        .row_group(0)
        .column(column("vector"))
        .offset_index_range()
        .unwrap();
    let pages = parquet::file::page_index::index_reader::decode_offset_index(
        &bytes[range.start as usize..range.end as usize],
    )
    .unwrap();
    let sp = SearchParams {
        k: 3,
        nprobe: Some(nlist as usize),
        rerank: Some(1000),
        ..SearchParams::default()
    };
    let q = queries(&data, dim, &[0]);
    for (what, at) in [
        // The last byte of the code chunk: inside the data of its last page.
        ("code", (code_start + code_len - 1) as usize),
        // The last byte of the first vector page.
        (
            "vector",
            (pages.page_locations()[0].offset
                + pages.page_locations()[0].compressed_page_size as i64
                - 1) as usize,
        ),
    ] {
        let mut broken = bytes.clone();
        broken[at] ^= 0x55;
        std::fs::write(&part, &broken).unwrap();
        let fresh = Index::open_current(store.clone(), &Path::from("idx"))
            .await
            .unwrap();
        let e = fresh.search(&q, &sp).await.unwrap_err();
        match &e {
            IndexError::Probe(ProbeError::PageChecksum { column, .. }) => {
                assert_eq!(column, what, "{e}")
            }
            other => panic!("{what}: expected a page checksum error, got {other}"),
        }
        std::fs::write(&part, &bytes).unwrap();
    }
}

#[tokio::test]
async fn verify_reencodes_a_sample_and_reports_codes_that_do_not_match() {
    for scheme in [Scheme::RaBitQ4, Scheme::Pq4Fs] {
        verify_reencodes_a_sample_and_reports_codes_that_do_not_match_for(scheme).await;
    }
}

async fn verify_reencodes_a_sample_and_reports_codes_that_do_not_match_for(scheme: Scheme) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (n, dim, nlist) = (1200, 16, 8);
    let data = dataset(n, dim, 4);
    built(&store, &data, dim, &params(nlist, Metric::L2, Some(scheme))).await;
    let idx = Path::from("idx");
    let options = parqivf::verify::VerifyOptions::default();
    let report = parqivf::verify::verify_location(store.clone(), &idx, options)
        .await
        .unwrap();
    assert!(report.is_ok(), "{:?}", report.violations);
    // The snapshot folder opened bare (no commit pins), with the parameters
    // of another rotation or codebook: every re-encoded code differs.
    let commit = parqivf::format::warehouse::current(&store, &idx)
        .await
        .unwrap()
        .unwrap();
    let folder = parqivf::format::warehouse::snapshot_folder(&idx, &commit.snapshot).unwrap();
    let other = match scheme {
        Scheme::Pq4Fs => parqivf::quant::Quantizer::train_pq4(&dataset(300, dim, 999), dim, 999),
        _ => parqivf::quant::Quantizer::rabitq4(dim, 999),
    }
    .unwrap();
    store
        .put(
            &folder.clone().join("quantizer.json"),
            parqivf::format::quantizer::encode(&other).into(),
        )
        .await
        .unwrap();
    let report = parqivf::verify::verify_location(store.clone(), &folder, options)
        .await
        .unwrap();
    let mismatches = report
        .violations
        .iter()
        .filter(|v| matches!(v, parqivf::verify::Violation::CodeMismatch { .. }))
        .count();
    assert!(mismatches > 0, "{:?}", report.violations);
}

#[tokio::test]
async fn pyarrow_and_duckdb_read_the_code_column_and_the_page_index() {
    for scheme in [Scheme::RaBitQ4, Scheme::Pq4Fs] {
        pyarrow_and_duckdb_read_the_code_column_and_the_page_index_for(scheme).await;
    }
}

async fn pyarrow_and_duckdb_read_the_code_column_and_the_page_index_for(scheme: Scheme) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let (n, dim) = (900, 40);
    let data = dataset(n, dim, 8);
    let index = built(&store, &data, dim, &params(4, Metric::L2, Some(scheme))).await;
    let Some(python) = support::python::python_with("duckdb") else {
        return;
    };
    let width = index.quantizer().unwrap().code_bytes().to_string();
    for (entry, path) in index.manifest().files.iter().zip(index.postings_paths()) {
        let file = dir.path().join(path.as_ref());
        let text = support::python::run_python(
            &python,
            include_str!("../interop/codes_readers.py"),
            &[file.to_str().unwrap(), &width, &entry.rows.to_string()],
        );
        assert!(text.contains(", 0 failures"), "{text}");
    }
}

/// A row group of a fast-scan index weighs the same in the decoded-postings
/// cache however it came there: decoded and transposed by a query, read
/// with its payload (whose transposition is left to its first scan), or
/// preloaded. Its weight counts the blocks in each case, so a row group
/// transposed after it was cached cannot take the cache past its bound.
/// Before, the last two were weighed without their blocks.
#[tokio::test]
async fn a_cached_row_group_is_weighed_with_its_blocks_however_it_came() {
    let (n, dim, nlist) = (3000, 32, 8);
    let data = dataset(n, dim, 13);
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let fast = params(nlist, Metric::L2, Some(Scheme::Pq4Fs));
    let preloaded = built(&store, &data, dim, &fast).await;
    preloaded.preload(Preload::Codes).await.unwrap();
    let held = preloaded.cache_bytes().1;
    let every_list = SearchParams {
        k: 5,
        nprobe: Some(nlist as usize),
        ..SearchParams::default()
    };
    let q = queries(&data, dim, &[3, 1500]);
    for include_payload in [false, true] {
        let options = IndexOptions {
            postings_cache_bytes: usize::MAX,
            ..IndexOptions::default()
        };
        let queried = Index::open_with(store.clone(), &Path::from("idx"), options, Preload::None)
            .await
            .unwrap();
        let sp = SearchParams {
            include_payload,
            ..every_list.clone()
        };
        let answers = queried.search_batch(&q, &sp).await.unwrap();
        assert_eq!(answers[0].stats.row_groups_cached, 0);
        assert_eq!(
            held,
            queried.cache_bytes().1,
            "preloaded against queried, payload {include_payload}"
        );
    }
    // The blocks are a real share of it: 8 bytes a row at 32-d, + 4.
    assert!(held > n * (8 + 16 + 12), "{held} bytes held for {n} rows");
}
