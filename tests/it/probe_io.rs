//! IO of open and search through a counting, delaying store: no LIST, one
//! footer GET per uncached candidate file, row groups read = planned, at most
//! two dependent rounds cold and one warm; a row group whose cid differs from
//! its statistics is `CorruptIndex`; a missing postings object is named.

use crate::support;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parqivf::format::manifest::Manifest;
use parqivf::format::postings_table::FooterViolation;
use parqivf::index::{Index, IndexError, IndexOptions, Preload, SearchParams};
use parqivf::probe::ProbeError;
use parqivf::store::counting::CountingStore;
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::{Layout, dataset, hierarchy, rowids, write_index};

const DIM: usize = 8;
const N: usize = 4000;
const NLIST: usize = 48;

/// Small files (one cid each) so a probe touches many of them.
async fn fixture() -> (Arc<InMemory>, Manifest, Vec<f32>) {
    let mem = Arc::new(InMemory::new());
    let data = dataset(N, DIM, 3);
    let h = hierarchy(&data, DIM, 4, NLIST, 5);
    let manifest = write_index(
        mem.clone(),
        &Path::from("idx"),
        &h,
        &data,
        &rowids(N),
        Layout::files_of(2 * 1024),
    )
    .await;
    (mem, manifest, data)
}

#[tokio::test]
async fn open_and_search_io_is_bounded() {
    let (mem, manifest, data) = fixture().await;
    let counting = CountingStore::new(mem).with_latency(Duration::from_millis(5));
    let store: Arc<dyn ObjectStore> = Arc::new(counting.clone());

    let index = Index::open(Arc::clone(&store), &Path::from("idx"))
        .await
        .unwrap();
    let open = counting.counts();
    assert_eq!(
        (open.get_requests, open.list_requests, open.head_requests),
        (4, 0, 0)
    );
    assert_eq!(
        open.rounds, 2,
        "index.json, then manifest, footers.json and centroids together"
    );

    let q = &data[100 * DIM..101 * DIM];
    let params = SearchParams {
        k: 10,
        nprobe: Some(8),
        ..SearchParams::default()
    };
    let r = index.search(q, &params).await.unwrap();
    let io = counting.counts() - open;
    let s = r.stats;
    println!("cold query: {s:?}\nstore: {io:?}");
    assert_eq!((io.list_requests, io.head_requests), (0, 0));
    assert!(s.candidate_files > 0 && s.candidate_files < manifest.files.len() as u64);
    assert_eq!(s.ram_bytes, 0, "cold: nothing from RAM");
    assert!(s.footers_read <= s.candidate_files);
    assert_eq!(
        s.footers_read, s.candidate_files,
        "cold: every candidate footer read once"
    );
    assert_eq!(s.row_groups_read, s.planned_row_groups);
    assert!(
        s.planned_row_groups >= 8,
        "one cid per row group, 8 cids probed"
    );
    // Store-side: one GET per footer, then one GET per coalesced range.
    assert_eq!(io.get_requests, s.requests);
    assert_eq!(io.get_bytes, s.bytes);
    assert!(io.get_requests >= s.footers_read + s.candidate_files.min(1));
    assert!(
        io.rounds <= 2 && s.rounds == 2,
        "cold: {} rounds observed",
        io.rounds
    );

    // Same query again: footers come from the cache, one round.
    let before = counting.counts();
    let again = index.search(q, &params).await.unwrap();
    let io = counting.counts() - before;
    assert_eq!(again.hits, r.hits);
    assert_eq!(again.stats.footers_read, 0);
    assert_eq!(again.stats.footers_cached, s.candidate_files);
    assert!(again.stats.ram_bytes > 0, "the cached footers' memory");
    assert_eq!((io.rounds, io.list_requests), (1, 0));
}

#[tokio::test]
async fn cold_query_over_many_files_is_two_rounds_and_warm_is_one() {
    let (mem, _, data) = fixture().await;
    let counting = CountingStore::new(mem).with_latency(Duration::from_millis(20));
    let store: Arc<dyn ObjectStore> = Arc::new(counting.clone());
    let params = SearchParams {
        k: 10,
        nprobe: Some(24),
        ..SearchParams::default()
    };
    let q = &data[7 * DIM..8 * DIM];

    let cold = Index::open(Arc::clone(&store), &Path::from("idx"))
        .await
        .unwrap();
    let before = counting.counts();
    let r = cold.search(q, &params).await.unwrap();
    let io = counting.counts() - before;
    assert!(
        r.stats.candidate_files >= 8,
        "touches {} files",
        r.stats.candidate_files
    );
    assert_eq!(io.rounds, 2, "footers at once, then row groups at once");

    let warm = Index::open(Arc::clone(&store), &Path::from("idx"))
        .await
        .unwrap();
    let w = warm.warm().await.unwrap();
    let before = counting.counts();
    let r2 = warm.search(q, &params).await.unwrap();
    let io = counting.counts() - before;
    assert!(w.footers_read >= r.stats.candidate_files);
    assert_eq!(io.rounds, 1);
    assert_eq!(r2.stats.footers_read, 0);
    assert_eq!(r2.hits, r.hits);
}

#[tokio::test]
async fn postings_cache_and_preload_remove_row_group_io() {
    let (mem, _, data) = fixture().await;
    let counting = CountingStore::new(mem);
    let store: Arc<dyn ObjectStore> = Arc::new(counting.clone());
    let index = Index::open(Arc::clone(&store), &Path::from("idx"))
        .await
        .unwrap();
    let pre = index.preload(parqivf::index::Preload::All).await.unwrap();
    assert_eq!(pre.row_groups_read, pre.planned_row_groups);
    let before = counting.counts();
    let params = SearchParams {
        nprobe: Some(NLIST),
        ..SearchParams::default()
    };
    let r = index.search(&data[..DIM], &params).await.unwrap();
    assert_eq!(
        counting.counts() - before,
        Default::default(),
        "preloaded: no IO at all"
    );
    assert_eq!(r.stats.row_groups_read, 0);
    assert_eq!(r.stats.row_groups_cached, r.stats.planned_row_groups);
    // Every list probed: the RAM tier served at least every vector.
    let vectors = index.manifest().ntotal * (DIM as u64) * 4;
    assert!(
        r.stats.ram_bytes >= vectors,
        "{} bytes from RAM, {vectors} of vectors",
        r.stats.ram_bytes
    );
}

/// Replace manifest file `i` (at `rel`) with `bytes` as a buggy *writer*
/// would, not storage corruption: page CRCs and the footers.json pin describe
/// the new bytes, so only the reader's layout checks can catch what is wrong.
async fn put_postings(mem: &InMemory, i: usize, rel: &str, bytes: &[u8]) -> Vec<u8> {
    let bytes = parqivf::format::page_crc::add_page_crcs_to_file(bytes).unwrap();
    let footers_path = Path::from("idx/postings/footers.json");
    let mut footers: parqivf::format::footers::Footers =
        serde_json::from_slice(&mem.get(&footers_path).await.unwrap().bytes().await.unwrap())
            .unwrap();
    footers.files[i] = parqivf::format::footers::FooterPin::of_file(rel, &bytes).unwrap();
    mem.put(&footers_path, PutPayload::from(footers.to_json_bytes()))
        .await
        .unwrap();
    // The manifest records the rewritten file's size and sha256, as a writer would.
    let manifest_path = Path::from("idx/postings/manifest.json");
    let mut manifest = Manifest::parse(
        &mem.get(&manifest_path)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    manifest.files[i].size = bytes.len() as u64;
    manifest.files[i].sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    mem.put(&manifest_path, PutPayload::from(manifest.to_json_bytes()))
        .await
        .unwrap();
    let path = Path::from(format!("idx/postings/{rel}"));
    mem.put(&path, PutPayload::from(bytes.clone()))
        .await
        .unwrap();
    bytes
}

/// Rewrite the one value of the `cid` dictionary of row group 0 of the
/// first file (the writer stores cid RLE_DICTIONARY over that value; its
/// data page follows the dictionary page): every row now holds a cid its
/// (unchanged) statistics deny, from the first.
#[tokio::test]
async fn lying_statistics_are_corrupt_index() {
    let (mem, manifest, data) = fixture().await;
    let entry = &manifest.files[0];
    let (path, bytes, meta) = first_postings_file(&mem, &manifest).await;
    let cid = meta.row_group(0).column(0);
    assert!(
        cid.dictionary_page_offset().is_some(),
        "cid has a dictionary"
    );
    let value = cid.data_page_offset() as usize - 4;
    let mut patched = bytes.to_vec();
    let old = i32::from_le_bytes(patched[value..value + 4].try_into().unwrap());
    assert_eq!(old as u32, entry.min_cid);
    patched[value..value + 4].copy_from_slice(&(old + 1).to_le_bytes());
    put_postings(&mem, 0, &entry.path, &patched).await;
    assert_corrupt_row(mem, &path, &data, 0, i64::from(old) + 1, i64::from(old)).await;
}

/// The path, bytes and footer of the manifest's first postings file.
async fn first_postings_file(
    mem: &InMemory,
    manifest: &Manifest,
) -> (Path, bytes::Bytes, parquet::file::metadata::ParquetMetaData) {
    let path = Path::from(format!("idx/postings/{}", manifest.files[0].path));
    let bytes = mem.get(&path).await.unwrap().bytes().await.unwrap();
    let meta = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&bytes)
        .unwrap();
    (path, bytes, meta)
}

/// The search of `data`'s first vector over every list fails with
/// [`ProbeError::CorruptIndex`] at row `row` of row group 0 of `path`.
async fn assert_corrupt_row(
    mem: Arc<InMemory>,
    path: &Path,
    data: &[f32],
    row: usize,
    found: i64,
    expected: i64,
) {
    let index = Index::open(mem, &Path::from("idx")).await.unwrap();
    let params = SearchParams {
        nprobe: Some(NLIST),
        ..SearchParams::default()
    };
    match index.search(&data[..DIM], &params).await {
        Err(IndexError::Probe(ProbeError::CorruptIndex {
            path: p,
            row_group: 0,
            row: r,
            found: f,
            expected: e,
        })) => {
            assert_eq!(p, path.to_string());
            assert_eq!((r, f, e), (row, found, expected));
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// An index written before the key columns' encodings (`cid` and `rowid`
/// PLAIN, as parquet writes them without a dictionary) reads the same, and
/// its cids are checked row by row: a lie in row 3 is named.
#[tokio::test]
async fn plain_key_columns_of_older_indexes() {
    let (mem, manifest, data) = fixture().await;
    let index = Index::open(mem.clone(), &Path::from("idx")).await.unwrap();
    let params = SearchParams {
        nprobe: Some(NLIST),
        ..SearchParams::default()
    };
    let before = index.search(&data[..DIM], &params).await.unwrap();
    // Rewrite every file with PLAIN cid and rowid: same rows, same groups.
    let props = parquet::file::properties::WriterProperties::builder()
        .set_dictionary_enabled(false)
        .set_encoding(parquet::basic::Encoding::PLAIN)
        .set_compression(parquet::basic::Compression::UNCOMPRESSED)
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::Page)
        .set_offset_index_disabled(false)
        .set_data_page_row_count_limit(2)
        .set_write_batch_size(2)
        .build();
    for (i, entry) in manifest.files.iter().enumerate() {
        let path = Path::from(format!("idx/postings/{}", entry.path));
        let bytes = mem.get(&path).await.unwrap().bytes().await.unwrap();
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
                .unwrap();
        let groups: Vec<usize> = (0..reader.metadata().num_row_groups())
            .map(|g| reader.metadata().row_group(g).num_rows() as usize)
            .collect();
        let schema = reader.schema().clone();
        let kv = reader
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .cloned();
        let batches: Vec<_> = reader.build().unwrap().map(Result::unwrap).collect();
        let all = arrow::compute::concat_batches(&schema, &batches).unwrap();
        let mut out = Vec::new();
        let props = props
            .clone()
            .into_builder()
            .set_key_value_metadata(kv)
            .build();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
        let mut at = 0;
        for rows in groups {
            w.write(&all.slice(at, rows)).unwrap();
            w.flush().unwrap();
            at += rows;
        }
        w.close().unwrap();
        let meta = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&bytes::Bytes::from(out.clone()))
            .unwrap();
        for g in 0..meta.num_row_groups() {
            for c in 0..2 {
                let chunk = meta.row_group(g).column(c);
                assert!(chunk.dictionary_page_offset().is_none());
                assert!(
                    chunk
                        .encodings()
                        .all(|e| e != parquet::basic::Encoding::DELTA_BINARY_PACKED)
                );
            }
        }
        put_postings(&mem, i, &entry.path, &out).await;
    }
    let index = Index::open(mem.clone(), &Path::from("idx")).await.unwrap();
    let after = index.search(&data[..DIM], &params).await.unwrap();
    assert_eq!(after.hits, before.hits);
    assert!(!after.hits.is_empty());

    // Row 3 of row group 0 of the first file says another cid.
    let entry = &manifest.files[0];
    let (path, bytes, meta) = first_postings_file(&mem, &manifest).await;
    let cid = meta.row_group(0).column(0);
    let (start, len) = cid.byte_range();
    // PLAIN pages of 2 rows: row 3 is the last value of the second page.
    let mut pages =
        parqivf::format::page_crc::checked_pages(&bytes[start as usize..(start + len) as usize])
            .unwrap();
    let second = pages.remove(1).data;
    let value = start as usize + second.end - 4;
    let mut patched = bytes.to_vec();
    let old = i32::from_le_bytes(patched[value..value + 4].try_into().unwrap());
    patched[value..value + 4].copy_from_slice(&(old + 7).to_le_bytes());
    put_postings(&mem, 0, &entry.path, &patched).await;
    assert_corrupt_row(mem, &path, &data, 3, i64::from(old) + 7, i64::from(old)).await;
}

#[tokio::test]
async fn missing_postings_object_is_named_and_orphans_are_never_read() {
    let (mem, manifest, data) = fixture().await;
    let missing = Path::from(format!("idx/postings/{}", manifest.files[1].path));
    mem.delete(&missing).await.unwrap();
    let orphan = Path::from("idx/postings/cid_bucket=000000/part-99999.parquet");
    mem.put(&orphan, PutPayload::from_static(b"not parquet"))
        .await
        .unwrap();
    let index = Index::open(mem, &Path::from("idx")).await.unwrap();
    let params = SearchParams {
        nprobe: Some(NLIST),
        ..SearchParams::default()
    };
    match index.search(&data[..DIM], &params).await {
        Err(IndexError::Probe(ProbeError::Store {
            path,
            source: object_store::Error::NotFound { .. },
        })) => {
            assert_eq!(path, missing.to_string())
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// A small prefetch hint: footers.json gives each footer's exact length, so
/// the tail read still covers the whole footer in one GET (no dependent
/// third round), and answers stay the same.
#[tokio::test]
async fn footer_larger_than_prefetch_hint_is_still_one_get() {
    let (mem, _, data) = fixture().await;
    let counting = CountingStore::new(mem).with_latency(Duration::from_millis(5));
    let store: Arc<dyn ObjectStore> = Arc::new(counting.clone());
    let options = IndexOptions {
        prefetch_hint: 16,
        ..IndexOptions::default()
    };
    let small = Index::open_with_options(Arc::clone(&store), &Path::from("idx"), options)
        .await
        .unwrap();
    let normal = Index::open(Arc::clone(&store), &Path::from("idx"))
        .await
        .unwrap();
    let params = SearchParams {
        nprobe: Some(8),
        ..SearchParams::default()
    };
    let q = &data[..DIM];
    let before = counting.counts();
    let a = small.search(q, &params).await.unwrap();
    let io = counting.counts() - before;
    let b = normal.search(q, &params).await.unwrap();
    assert_eq!(a.hits, b.hits);
    assert_eq!(a.stats.rounds, 2);
    assert_eq!(io.get_requests, a.stats.requests);
    assert_eq!(a.stats.requests, b.stats.requests);
}

/// A row group holding two cids (min ≠ max in its statistics) is refused.
#[tokio::test]
async fn row_group_with_two_cids_is_refused() {
    let (mem, mut manifest, data) = fixture().await;
    let entry = manifest.files[0].clone();
    let rows: Vec<(u32, i64, usize)> = (0..4)
        .map(|i| (entry.min_cid + (i % 2), i as i64, i as usize))
        .collect();
    let mut sorted = rows.clone();
    sorted.sort_by_key(|r| r.0);
    let bytes = support::fixtures::multi_cid_row_group_file(DIM, &sorted, &data);
    manifest.files[0].max_cid = manifest.files[0].max_cid.max(entry.min_cid + 1);
    let path = Path::from(format!("idx/postings/{}", entry.path));
    let bytes = put_postings(&mem, 0, &entry.path, &bytes).await;
    manifest.files[0].size = bytes.len() as u64;
    support::store::put_json(mem.as_ref(), "idx/postings/manifest.json", &manifest).await;
    let index = Index::open(mem, &Path::from("idx")).await.unwrap();
    let params = SearchParams {
        nprobe: Some(NLIST),
        ..SearchParams::default()
    };
    match index.search(&data[..DIM], &params).await {
        Err(IndexError::Probe(ProbeError::FooterContract(violations))) => {
            let multi = violations.iter().find_map(|v| match v {
                FooterViolation::MultipleCids {
                    path: p,
                    row_group: 0,
                    min,
                    max,
                } => Some((p.clone(), i64::from(*min), i64::from(*max))),
                _ => None,
            });
            assert_eq!(
                multi,
                Some((
                    path.to_string(),
                    i64::from(entry.min_cid),
                    i64::from(entry.min_cid) + 1
                )),
                "{violations:?}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// The answer of the current snapshot of `idx` to `q` ([`top5`]).
async fn current_answer(
    mem: &Arc<dyn ObjectStore>,
    idx: &Path,
    q: &[f32],
) -> parqivf::index::SearchResult {
    Index::open_current(Arc::clone(mem), idx)
        .await
        .unwrap()
        .search(q, &top5())
        .await
        .unwrap()
}

/// The first 5 hits of 16 lists: what the tests of a committed index ask.
fn top5() -> SearchParams {
    SearchParams {
        k: 5,
        nprobe: Some(16),
        ..SearchParams::default()
    }
}

/// 2,000 vectors (`seed`) built `times` times into `idx` (nlist 16, the
/// default codes): versions 1 to `times` of one index in memory.
async fn committed(seed: u64, times: usize) -> (Arc<dyn ObjectStore>, Vec<f32>) {
    use parqivf::builder::{ArraySource, BuildParams, ProgressMode, build};
    let mem: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = dataset(2000, DIM, seed);
    let params = BuildParams {
        nlist: 16,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    for _ in 0..times {
        let src = Arc::new(ArraySource::new(data.clone(), DIM, "generated").unwrap());
        build(src, Arc::clone(&mem), &Path::from("idx"), &params)
            .await
            .unwrap();
    }
    (mem, data)
}

/// A committed index opens in two dependent rounds: the commit log's hint
/// with the latest commit's copy and its bundle (which holds `index.json`,
/// every document the commit pins and every postings footer the copy lists,
/// `footers-ahead`); then the copy's version with the next one (absent).
/// So a new process's first query reads no footer: its row groups are its
/// first round. A second commit adds nothing: the hint, the copy and the
/// bundle move. Without the bundle, the documents and footers are read in
/// the second round.
#[tokio::test]
async fn opening_a_committed_index_is_two_rounds() {
    let (mem, data) = committed(11, 2).await;
    let counting = CountingStore::new(Arc::clone(&mem)).with_latency(Duration::from_millis(5));
    let store: Arc<dyn ObjectStore> = Arc::new(counting.clone());
    let index = Index::open_current(store, &Path::from("idx"))
        .await
        .unwrap();
    assert_eq!(index.commit().map(|c| c.version), Some(2));
    let open = counting.counts();
    assert_eq!((open.list_requests, open.head_requests), (0, 0));
    assert_eq!(
        open.rounds, 2,
        "the hint with the latest commit's copy and bundle; versions 2 and 3: {open:?}"
    );
    // Three advisory objects and two versions: the documents and footers
    // are in the bundle.
    assert_eq!(open.get_requests, 3 + 2, "{open:?}");
    let files = index.manifest().files.len() as u64;
    assert!(files >= 2, "{files} postings files");
    // The index reports the same cost itself (what `search --stats`, the
    // server's index info and Python's `info` show).
    let own = index.open_stats();
    assert_eq!(
        (own.rounds, own.requests, own.bytes, own.hedges),
        (open.rounds, open.get_requests, open.get_bytes, 0),
        "{own:?} against the store's {open:?}"
    );
    assert!(own.open_us >= 2 * 5_000, "two rounds of 5 ms: {own:?}");

    // The first query decodes the footers read at open: no footer request,
    // its row groups (and the re-rank's pages) are its only rounds.
    let q = &data[7 * DIM..8 * DIM];
    let params = top5();
    let before = counting.counts();
    let first = index.search(q, &params).await.unwrap();
    let after = counting.counts();
    assert!(first.stats.footers_read >= 1, "{:?}", first.stats);
    assert_eq!(first.stats.footers_cached, 0, "{:?}", first.stats);
    assert_eq!(
        after.get_requests - before.get_requests,
        first.stats.requests,
        "{:?}",
        first.stats
    );
    let expected_rounds = if first.stats.pages_read > 0 { 2 } else { 1 };
    assert_eq!(first.stats.rounds, expected_rounds, "{:?}", first.stats);
    // The same answers as an index that reads its footers per query.
    let plain = Index::open(Arc::clone(&mem) as Arc<dyn ObjectStore>, index.folder())
        .await
        .unwrap();
    let again = plain.search(q, &params).await.unwrap();
    assert_eq!(again.hits, first.hits);
    assert_eq!(again.stats.footers_read, first.stats.footers_read);
    assert_eq!(
        again.stats.requests,
        first.stats.requests + again.stats.footers_read,
        "one GET per footer is what the open saved: {:?} against {:?}",
        again.stats,
        first.stats
    );
    assert_eq!(again.stats.rounds, first.stats.rounds + 1);

    // Without the bundle, the documents and footers are read with the
    // versions: still two rounds, one GET per pinned document and one per
    // postings footer more.
    let bundle = Path::from("idx/versions/latest-bundle.bin");
    mem.delete(&bundle).await.unwrap();
    let counting = CountingStore::new(Arc::clone(&mem)).with_latency(Duration::from_millis(5));
    let store: Arc<dyn ObjectStore> = Arc::new(counting.clone());
    let unbundled = Index::open_current(store, &Path::from("idx"))
        .await
        .unwrap();
    let pins = index.commit().unwrap().pins.len() as u64;
    let open = counting.counts();
    assert_eq!(open.rounds, 2, "{open:?}");
    assert_eq!(open.get_requests, 3 + 2 + pins + files, "{open:?}");
    assert_eq!(unbundled.search(q, &params).await.unwrap().hits, first.hits);

    // A stale copy of the latest commit costs a round, never a wrong
    // snapshot.
    let first = Path::from("idx/versions/00000000000000000001.json");
    let first = mem.get(&first).await.unwrap().bytes().await.unwrap();
    let latest = Path::from("idx/versions/latest-commit.json");
    mem.put(&latest, PutPayload::from(first)).await.unwrap();
    let counting = CountingStore::new(Arc::clone(&mem)).with_latency(Duration::from_millis(5));
    let store: Arc<dyn ObjectStore> = Arc::new(counting.clone());
    let stale = Index::open_current(store, &Path::from("idx"))
        .await
        .unwrap();
    assert_eq!(stale.commit(), index.commit());
    assert_eq!(stale.folder(), index.folder());
    // The copy's round, versions 2 and 3, then version 2's documents.
    assert_eq!(counting.counts().rounds, 4, "{:?}", counting.counts());
}

/// The footers an open reads ahead are advisory: a copy whose
/// `footers-ahead` names other ranges costs the query its footer round,
/// never a wrong footer; a footer read ahead is checked against its pin as
/// any footer, so a flipped byte is `FooterPin`, never a different plan.
#[tokio::test]
async fn footers_read_ahead_are_checked_like_any_footer() {
    let (mem, data) = committed(12, 1).await;
    // The copy's footers are read from their objects (the bundle's own are
    // the next test's).
    mem.delete(&Path::from("idx/versions/latest-bundle.bin"))
        .await
        .unwrap();
    let latest = Path::from("idx/versions/latest-commit.json");
    let copy: serde_json::Value =
        serde_json::from_slice(&mem.get(&latest).await.unwrap().bytes().await.unwrap()).unwrap();
    let ahead = copy["footers-ahead"].as_array().unwrap().clone();
    let q = &data[3 * DIM..4 * DIM];
    let search = top5();
    let index = Index::open_current(Arc::clone(&mem), &Path::from("idx"))
        .await
        .unwrap();
    assert_eq!(ahead.len(), index.manifest().files.len());
    let expected = index.search(q, &search).await.unwrap();
    assert!(expected.stats.footers_read >= 1, "{:?}", expected.stats);

    // Ranges one byte off: the open reads them, the reader drops them, and
    // the query reads its footers itself.
    let mut shifted = copy.clone();
    for f in shifted["footers-ahead"].as_array_mut().unwrap() {
        f["offset"] = serde_json::json!(f["offset"].as_u64().unwrap() - 1);
    }
    mem.put(
        &latest,
        PutPayload::from(serde_json::to_vec(&shifted).unwrap()),
    )
    .await
    .unwrap();
    let index = Index::open_current(Arc::clone(&mem), &Path::from("idx"))
        .await
        .unwrap();
    let got = index.search(q, &search).await.unwrap();
    assert_eq!(got.hits, expected.hits);
    assert_eq!(
        got.stats.requests,
        expected.stats.requests + got.stats.footers_read,
        "{:?}",
        got.stats
    );

    // A flipped byte inside the first file's footer, read ahead at the
    // right range: refused by its pin.
    mem.put(
        &latest,
        PutPayload::from(serde_json::to_vec(&copy).unwrap()),
    )
    .await
    .unwrap();
    let first = &ahead[0];
    let object = Path::from(format!(
        "{}/{}",
        index.folder(),
        first["path"].as_str().unwrap()
    ));
    let mut bytes = mem
        .get(&object)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let at = first["offset"].as_u64().unwrap() as usize + 16;
    bytes[at] ^= 0x40;
    mem.put(&object, PutPayload::from(bytes)).await.unwrap();
    let index = Index::open_current(Arc::clone(&mem), &Path::from("idx"))
        .await
        .unwrap();
    let err = index.warm().await.map(|_| ()).unwrap_err();
    assert!(
        matches!(&err, IndexError::Probe(ProbeError::FooterPin(_))),
        "{err}"
    );
}

/// A new process opens from the latest commit's bundle in one round
/// (`Index::open_ahead`: the hint, the copy and the bundle) and checks that
/// the commit is current (versions `N` and `N + 1`) alongside its first
/// query, so open and query together cost one round less than a confirmed
/// open. The bundle is advisory: a stale one is caught by that check, a
/// document in it that fails its pin makes the open a confirmed one, and a
/// footer in it that fails its pin is read from its object. Every way gives
/// the current snapshot's answers.
#[tokio::test]
async fn a_new_process_opens_from_the_bundle_and_checks_it_alongside_its_first_query() {
    let (mem, data) = committed(13, 2).await;
    let q = &data[5 * DIM..6 * DIM];
    let params = top5();
    let idx = Path::from("idx");
    let expected = current_answer(&mem, &idx, q).await;
    let open_ahead = |store: Arc<dyn ObjectStore>| {
        let idx = idx.clone();
        async move {
            Index::open_ahead(store, &idx, IndexOptions::default(), Default::default())
                .await
                .unwrap()
        }
    };

    let counting = CountingStore::new(Arc::clone(&mem)).with_latency(Duration::from_millis(5));
    let (index, pending) = open_ahead(Arc::new(counting.clone())).await;
    let open = counting.counts();
    assert_eq!((open.rounds, open.get_requests), (1, 3), "{open:?}");
    assert!(index.open_stats().ahead, "{:?}", index.open_stats());
    assert_eq!(index.commit().map(|c| c.version), Some(2));
    let (got, current) = futures::join!(
        index.search(q, &params),
        pending.expect("a bundle: opened ahead").is_current()
    );
    let got = got.unwrap();
    assert!(current.unwrap());
    assert_eq!(got.hits, expected.hits);
    let all = counting.counts();
    let query_rounds = if got.stats.pages_read > 0 { 2 } else { 1 };
    assert_eq!(got.stats.rounds, query_rounds, "{:?}", got.stats);
    assert_eq!(
        all.rounds,
        1 + query_rounds,
        "the check overlaps the first query's first round: {all:?}"
    );
    assert_eq!(all.get_requests, 3 + 2 + got.stats.requests, "{all:?}");

    // A stale copy and bundle (version 2's, with version 3 committed): the
    // open is ahead at version 2, its check says so, and a confirmed open
    // gives version 3.
    let versions = Path::from("idx/versions");
    let (copy_at, bundle_at) = (
        versions.clone().join("latest-commit.json"),
        versions.clone().join("latest-bundle.bin"),
    );
    let read = |p: Path| {
        let mem = Arc::clone(&mem);
        async move { mem.get(&p).await.unwrap().bytes().await.unwrap() }
    };
    let (copy2, bundle2) = (read(copy_at.clone()).await, read(bundle_at.clone()).await);
    {
        use parqivf::builder::{ArraySource, BuildParams, ProgressMode, build};
        let params = BuildParams {
            nlist: 16,
            progress: ProgressMode::Quiet,
            ..BuildParams::default()
        };
        let src = Arc::new(ArraySource::new(dataset(500, DIM, 99), DIM, "other").unwrap());
        build(src, Arc::clone(&mem), &idx, &params).await.unwrap();
    }
    let v3 = Index::open_current(Arc::clone(&mem), &idx).await.unwrap();
    assert_eq!(v3.commit().map(|c| c.version), Some(3));
    let v3_hits = v3.search(q, &params).await.unwrap().hits;
    assert_ne!(v3_hits, expected.hits, "another data set");
    for (at, bytes) in [(&copy_at, &copy2), (&bundle_at, &bundle2)] {
        mem.put(at, PutPayload::from(bytes.clone())).await.unwrap();
    }
    let (stale, pending) = open_ahead(Arc::clone(&mem)).await;
    assert_eq!(stale.commit().map(|c| c.version), Some(2));
    assert!(!pending.unwrap().is_current().await.unwrap());
    let confirmed = Index::open_with(
        Arc::clone(&mem),
        &idx,
        IndexOptions::default(),
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(confirmed.commit().map(|c| c.version), Some(3));
    assert_eq!(confirmed.search(q, &params).await.unwrap().hits, v3_hits);
    // A preloaded open runs that check alongside its preload of version
    // 2's codes, and still gives version 3, preloaded.
    let preloaded = Index::open_with(
        Arc::clone(&mem),
        &idx,
        IndexOptions::default(),
        Preload::Codes,
    )
    .await
    .unwrap();
    assert_eq!(preloaded.commit().map(|c| c.version), Some(3));
    let got = preloaded.search(q, &params).await.unwrap();
    assert_eq!(got.hits, v3_hits);
    assert_eq!(
        got.stats.rounds,
        u64::from(got.stats.pages_read > 0),
        "codes in memory: {:?}",
        got.stats
    );
}

/// A preloaded open (`Index::open_with`, what `serve` and Python open)
/// from the latest commit's bundle runs the commit log's check alongside the
/// preload's first round instead of before it: one round at open and the
/// preload's rounds, not two and the preload's. The index reports the
/// check in its open's cost, and is given only once the check is done.
#[tokio::test]
async fn a_preloaded_open_checks_the_commit_alongside_its_preload() {
    let (mem, data) = committed(15, 2).await;
    let idx = Path::from("idx");
    let delayed = || CountingStore::new(Arc::clone(&mem)).with_latency(Duration::from_millis(5));

    // The preload's own rounds, on an index already open.
    let counting = delayed();
    let index = Index::open_current(Arc::new(counting.clone()), &idx)
        .await
        .unwrap();
    let before = counting.counts();
    index.preload(Preload::Codes).await.unwrap();
    let preload_rounds = counting.counts().rounds - before.rounds;
    assert!(preload_rounds >= 1, "{:?}", counting.counts());

    let counting = delayed();
    let index = Index::open_with(
        Arc::new(counting.clone()),
        &idx,
        IndexOptions::default(),
        Preload::Codes,
    )
    .await
    .unwrap();
    let all = counting.counts();
    assert_eq!(
        all.rounds,
        1 + preload_rounds,
        "the bundle's round, then the check alongside the preload: {all:?}"
    );
    let own = index.open_stats();
    assert_eq!(
        (own.rounds, own.requests, own.ahead),
        (2, 3 + 2, false),
        "the open's own cost counts the check: {own:?}"
    );
    assert_eq!(index.commit().map(|c| c.version), Some(2));
    let q = &data[3 * DIM..4 * DIM];
    let params = top5();
    let expected = current_answer(&mem, &idx, q).await;
    assert_eq!(index.search(q, &params).await.unwrap().hits, expected.hits);
}

/// A bundle that fails its pins is never an error and never a different
/// answer: a flipped byte in a document makes the open a confirmed one
/// (every document read from its object); one in a footer leaves that
/// footer to be read from its object by the first query that needs it.
#[tokio::test]
async fn a_bundle_that_fails_its_pins_is_read_around() {
    let (mem, data) = committed(14, 1).await;
    let q = &data[9 * DIM..10 * DIM];
    let params = top5();
    let idx = Path::from("idx");
    let open_ahead = || {
        let (mem, idx) = (Arc::clone(&mem), idx.clone());
        async move {
            Index::open_ahead(mem, &idx, IndexOptions::default(), Default::default())
                .await
                .unwrap()
        }
    };
    let (index, pending) = open_ahead().await;
    assert!(pending.unwrap().is_current().await.unwrap());
    let expected = index.search(q, &params).await.unwrap();
    assert_eq!(
        expected.stats.footers_read,
        index.manifest().files.len() as u64
    );

    let bundle_at = Path::from("idx/versions/latest-bundle.bin");
    let bundle = mem.get(&bundle_at).await.unwrap().bytes().await.unwrap();
    let header = u32::from_le_bytes(bundle[8..12].try_into().unwrap()) as usize;
    let parsed = parqivf::format::open_bundle::OpenBundle::parse(&bundle).unwrap();
    assert_eq!(parsed.footers.len(), index.manifest().files.len());
    let docs: u64 = parsed.documents.iter().map(|(p, _)| p.length).sum();
    let flipped = |at: usize| {
        let mut b = bundle.to_vec();
        b[at] ^= 0x20;
        PutPayload::from(b)
    };
    // The first document (`index.json`).
    mem.put(&bundle_at, flipped(12 + header + 1)).await.unwrap();
    let (index, pending) = open_ahead().await;
    assert!(pending.is_none());
    assert!(!index.open_stats().ahead, "{:?}", index.open_stats());
    assert_eq!(index.search(q, &params).await.unwrap().hits, expected.hits);
    // The first footer.
    mem.put(&bundle_at, flipped(12 + header + docs as usize + 20))
        .await
        .unwrap();
    let (index, pending) = open_ahead().await;
    assert!(pending.unwrap().is_current().await.unwrap());
    let got = index.search(q, &params).await.unwrap();
    assert_eq!(got.hits, expected.hits);
    assert_eq!(
        got.stats.requests,
        expected.stats.requests + 1,
        "{:?}",
        got.stats
    );
}
