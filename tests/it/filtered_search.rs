//! Filtered search (issue 15): a SQL `WHERE` over the payload columns, in
//! every serving mode and with and without codes. At `nprobe = nlist` the
//! answer equals exact filtered brute force; at a small `nprobe` a query
//! still fills `k` (it probes on) unless `max_nprobe` stops it, which it
//! reports; a selective filter over postings in memory is scanned
//! exhaustively; row groups whose statistics rule the filter out are never
//! read, and the re-rank never fetches a `vector` page without a match;
//! bad filters are typed errors naming the column and the types.

use crate::support;

use arrow::array::TimestampMicrosecondArray;
use arrow::array::{
    ArrayRef, FixedSizeListArray, Float32Array, Int32Array, RecordBatch, StringArray,
};
use arrow::datatypes::{DataType, Field, Schema};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use parqivf::builder::{BuildParams, ParquetSource, ParquetSourceOptions, ProgressMode, build};
use parqivf::distance::Metric;
use parqivf::filter::FilterError;
use parqivf::index::{
    FilterPlan, Index, IndexError, Preload, QueryError, Scoring, SearchParams, SearchResult,
};
use parqivf::quant::Scheme;
use std::sync::Arc;
use support::fixtures::{brute_force, dataset};

const N: usize = 3000;
const DIM: usize = 16;
const NLIST: u32 = 16;
/// 2024-01-01T00:00:00Z in microseconds; row `i` is `i` seconds later.
const T0: i64 = 1_704_067_200_000_000;

/// One row's payload, as the test computes it independently of the index.
#[derive(Debug, Clone)]
struct Row {
    cat: Option<i32>,
    ts: i64,
    label: Option<String>,
    region: i32,
}

fn rows(data: &[f32]) -> Vec<Row> {
    data.chunks_exact(DIM)
        .enumerate()
        .map(|(i, v)| Row {
            cat: (i % 97 != 0).then_some(((i * 7919) % 100) as i32),
            ts: T0 + i as i64 * 1_000_000,
            label: (i % 50 != 0).then(|| format!("{}-{i}", ["en", "de", "fr"][i % 3])),
            // Correlated with the vector: the lists of clustered data are
            // mostly on one side of 0 in their first dimension.
            region: i32::from(v[0] > 0.0),
        })
        .collect()
}

/// The source table: `vector` plus the payload columns.
fn table(data: &[f32], rows: &[Row]) -> RecordBatch {
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let vectors = FixedSizeListArray::new(
        item,
        DIM as i32,
        Arc::new(Float32Array::from(data.to_vec())),
        None,
    );
    let columns: Vec<ArrayRef> = vec![
        Arc::new(vectors),
        Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.cat))),
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            rows.iter().map(|r| r.ts),
        )),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.label.clone()))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.region))),
    ];
    let schema = Schema::new(
        ["vector", "cat", "ts", "label", "region"]
            .iter()
            .zip(&columns)
            .map(|(n, c)| Field::new(*n, c.data_type().clone(), true))
            .collect::<Vec<_>>(),
    );
    RecordBatch::try_new(Arc::new(schema), columns).unwrap()
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<dyn ObjectStore>,
    data: Vec<f32>,
    rows: Vec<Row>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dataset(N, DIM, 3);
        let rows = rows(&data);
        std::fs::create_dir(dir.path().join("src")).unwrap();
        support::files::write_parquet(&dir.path().join("src"), "t.parquet", &table(&data, &rows));
        let store: Arc<dyn ObjectStore> =
            Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        Fixture {
            _dir: dir,
            store,
            data,
            rows,
        }
    }

    /// Build the table (with `codes`) into `name` and open it.
    async fn index(&self, name: &str, codes: Option<Scheme>) -> Index {
        let options = ParquetSourceOptions {
            column: "vector".into(),
            payload: ["cat", "ts", "label", "region"].map(String::from).to_vec(),
            ..Default::default()
        };
        let src = ParquetSource::open(self.store.clone(), "src/*.parquet", options)
            .await
            .unwrap();
        let params = BuildParams {
            nlist: NLIST,
            codes,
            progress: ProgressMode::Quiet,
            ..BuildParams::default()
        };
        build(
            Arc::new(src),
            self.store.clone(),
            &Path::from(name),
            &params,
        )
        .await
        .unwrap();
        Index::open_current(self.store.clone(), &Path::from(name))
            .await
            .unwrap()
    }

    /// Open the index built into `name` again (a reader of its own).
    async fn open(&self, name: &str) -> Index {
        Index::open_current(self.store.clone(), &Path::from(name))
            .await
            .unwrap()
    }

    /// Exact filtered top-k: brute force over the rows `keep` accepts.
    fn expected(&self, q: &[f32], k: usize, keep: &dyn Fn(&Row) -> bool) -> Vec<(i64, f32)> {
        let (mut data, mut ids) = (Vec::new(), Vec::new());
        for (i, (v, r)) in self.data.chunks_exact(DIM).zip(&self.rows).enumerate() {
            if keep(r) {
                data.extend_from_slice(v);
                ids.push(i as i64);
            }
        }
        brute_force(Metric::L2, DIM, &data, &ids, q, k)
    }

    fn queries(&self) -> Vec<f32> {
        [5usize, 777, 1500, 2222, 2999]
            .iter()
            .flat_map(|&i| self.data[i * DIM..(i + 1) * DIM].iter().map(|x| x + 0.1))
            .collect()
    }
}

fn pairs(r: &SearchResult) -> Vec<(i64, f32)> {
    r.hits.iter().map(|h| (h.rowid, h.distance)).collect()
}

fn filtered(filter: &str, nprobe: usize) -> SearchParams {
    SearchParams {
        k: 10,
        nprobe: Some(nprobe),
        // Re-rank every candidate: exact at full probe.
        rerank: Some(N),
        filter: Some(filter.into()),
        ..SearchParams::default()
    }
}

type Case = (&'static str, fn(&Row) -> bool);

/// Filters with what they mean, written out by hand.
const CASES: &[Case] = &[
    ("cat < 30", |r| r.cat.is_some_and(|c| c < 30)),
    ("cat <> 5", |r| r.cat.is_some_and(|c| c != 5)),
    ("cat IS NULL", |r| r.cat.is_none()),
    ("label LIKE 'de%' AND cat IN (1, 2, 3, 40, 41)", |r| {
        r.label.as_deref().is_some_and(|l| l.starts_with("de"))
            && r.cat.is_some_and(|c| [1, 2, 3, 40, 41].contains(&c))
    }),
    (
        "ts >= TIMESTAMP '2024-01-01 00:20:00' AND NOT region = 1",
        |r| r.ts >= T0 + 1_200_000_000 && r.region != 1,
    ),
    ("cat = 7 OR label = 'fr-2'", |r| {
        r.cat == Some(7) || r.label.as_deref() == Some("fr-2")
    }),
];

#[tokio::test]
async fn full_probe_equals_filtered_brute_force_in_every_mode() {
    let fx = Fixture::new();
    let queries = fx.queries();
    for (name, codes, modes) in [
        ("flat", None, &[Preload::None, Preload::All][..]),
        (
            "rabitq4",
            Some(Scheme::RaBitQ4),
            &[Preload::None, Preload::Codes, Preload::All][..],
        ),
        (
            "pq4fs",
            Some(Scheme::Pq4Fs),
            &[Preload::None, Preload::Codes, Preload::All][..],
        ),
    ] {
        for &mode in modes {
            let index = fx.index(&format!("{name}-{mode:?}"), codes).await;
            index.preload(mode).await.unwrap();
            for &(filter, keep) in CASES {
                let params = filtered(filter, NLIST as usize);
                let got = index.search_batch(&queries, &params).await.unwrap();
                for (qi, q) in queries.chunks_exact(DIM).enumerate() {
                    let expected = fx.expected(q, 10, &keep);
                    assert_eq!(
                        pairs(&got[qi]),
                        expected,
                        "{name} {mode:?} {filter} query {qi}"
                    );
                    let one = index.search(q, &params).await.unwrap();
                    assert_eq!(
                        one.hits, got[qi].hits,
                        "{name} {mode:?} {filter}: batch = single"
                    );
                }
            }
        }
    }
}

/// Filters matching 1 % of the rows or fewer.
const SELECTIVE: &[Case] = &[
    ("cat = 7", |r| r.cat == Some(7)),
    ("cat = 7 AND region = 1", |r| {
        r.cat == Some(7) && r.region == 1
    }),
    ("label = 'fr-2' OR label = 'de-1000'", |r| {
        matches!(r.label.as_deref(), Some("fr-2" | "de-1000"))
    }),
];

#[tokio::test]
async fn the_storage_plan_answers_as_the_memory_plans_at_full_probe() {
    let fx = Fixture::new();
    let queries = fx.queries();
    for (name, codes, modes) in [
        ("flat", None, &[Preload::All][..]),
        (
            "rabitq4",
            Some(Scheme::RaBitQ4),
            &[Preload::Codes, Preload::All][..],
        ),
    ] {
        let storage = fx.index(name, codes).await;
        let mut memory = Vec::new();
        for &mode in modes {
            let index = fx.open(name).await;
            index.preload(mode).await.unwrap();
            memory.push((mode, index));
        }
        for &(filter, _) in CASES.iter().chain(SELECTIVE) {
            let params = filtered(filter, NLIST as usize);
            let want = storage.search_batch(&queries, &params).await.unwrap();
            for (mode, index) in &memory {
                let got = index.search_batch(&queries, &params).await.unwrap();
                for (qi, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(
                        pairs(g),
                        pairs(w),
                        "{name} {mode:?} {filter} query {qi}: memory differs from storage"
                    );
                    assert_eq!(g.stats.rows_matched, w.stats.rows_matched);
                    assert_eq!(g.stats.filter_plan, w.stats.filter_plan);
                }
            }
        }
    }
}

#[tokio::test]
async fn selective_filters_are_exact_from_storage_reading_their_columns_and_pages_only() {
    let fx = Fixture::new();
    let queries = fx.queries();
    for codes in [None, Some(Scheme::RaBitQ4)] {
        let index = fx.index(&format!("idx-{codes:?}"), codes).await;
        for &(filter, keep) in SELECTIVE {
            // The default re-rank and a small nprobe: exact all the same.
            let params = SearchParams {
                k: 10,
                nprobe: Some(2),
                filter: Some(filter.into()),
                ..SearchParams::default()
            };
            let with_payload = SearchParams {
                include_payload: true,
                ..params.clone()
            };
            let mut counted = 0;
            for (qi, q) in queries.chunks_exact(DIM).enumerate() {
                let r = index.search(q, &params).await.unwrap();
                let at = format!("{codes:?} {filter} query {qi}: {:?}", r.stats);
                assert_eq!(pairs(&r), fx.expected(q, 10, &keep), "{at}");
                assert_eq!(r.stats.filter_scoring, Scoring::Exact, "{at}");
                assert_eq!(r.stats.filter_plan, FilterPlan::Exhaustive, "{at}");
                // The filter's columns, then the matches' pages: no code,
                // no whole vector chunk.
                assert_eq!((r.stats.code_bytes, r.stats.vector_bytes), (0, 0), "{at}");
                assert!(r.stats.page_bytes > 0, "{at}");
                assert!(r.stats.pages_read <= r.stats.rows_matched, "{at}");
                // The first query reads the filter's columns; later ones
                // find them in the filter-columns cache.
                let kept = r.stats.planned_row_groups - r.stats.row_groups_pruned;
                if qi == 0 {
                    counted = r.stats.payload_bytes;
                    assert!(counted > 0, "{at}");
                } else {
                    assert_eq!(r.stats.payload_bytes, 0, "{at}");
                    assert_eq!(r.stats.row_groups_cached, kept, "{at}");
                }
                // The answer's payload is the whole payload: more bytes.
                let p = index.search(q, &with_payload).await.unwrap();
                assert_eq!(pairs(&p), pairs(&r), "{at}");
                assert!(p.stats.payload_bytes > counted, "{at}");
                let payload = p.payload.as_ref().expect("payload asked for");
                assert!(payload.column_by_name("label").is_some(), "{at}");
                assert_eq!(payload.num_rows(), p.hits.len(), "{at}");
            }
        }
    }
}

#[tokio::test]
async fn explain_tells_the_plan_the_search_then_runs() {
    let fx = Fixture::new();
    let queries = fx.queries();
    let index = fx.index("idx", Some(Scheme::RaBitQ4)).await;
    for &(filter, _) in CASES.iter().chain(SELECTIVE) {
        let params = filtered(filter, 2);
        let plans = index.explain(&queries, &params).await.unwrap();
        let got = index.search_batch(&queries, &params).await.unwrap();
        for (qi, (plan, r)) in plans.iter().zip(&got).enumerate() {
            let at = format!("{filter} query {qi}: {plan:?} {:?}", r.stats);
            assert_eq!(plan.lists_first, 2, "{at}");
            assert_eq!(plan.lists_probed as u64, r.stats.lists_probed, "{at}");
            assert_eq!(plan.rows_matched, r.stats.rows_matched, "{at}");
            assert_eq!(plan.filter_plan, r.stats.filter_plan, "{at}");
            assert_eq!(plan.filter_scoring, r.stats.filter_scoring, "{at}");
            // Both ways are priced; the chosen one costs no more.
            let (exact, lists) = (plan.exact.unwrap(), plan.lists.unwrap());
            let chosen = match plan.filter_scoring {
                Scoring::Exact => exact.cost(),
                _ => lists.cost(),
            };
            assert!(chosen <= exact.cost().min(lists.cost()), "{at}");
        }
    }
    // Without a filter: the lists only.
    let plain = SearchParams {
        filter: None,
        ..filtered("cat = 1", 3)
    };
    let plans = index.explain(&queries, &plain).await.unwrap();
    assert!(
        plans
            .iter()
            .all(|p| p.lists_probed == 3 && p.exact.is_none())
    );
    // The CLI prints one plan a query and searches nothing.
    let path = fx._dir.path().join("q.npy");
    support::files::write_npy(&path, &queries, DIM);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parqivf"))
        .args(["search", "--index"])
        .arg(fx._dir.path().join("idx"))
        .arg("--queries")
        .arg(&path)
        .args([
            "--nprobe",
            "2",
            "--filter",
            "cat = 7",
            "--explain",
            "--json",
        ])
        .output()
        .unwrap();
    let lines = support::cli::json_lines(out);
    assert_eq!(lines.len(), queries.len() / DIM);
    assert!(
        lines
            .iter()
            .all(|l| l["filter_scoring"] == "exact" && l.get("rowids").is_none())
    );
}

#[tokio::test]
async fn a_small_nprobe_still_fills_k_by_probing_on() {
    let fx = Fixture::new();
    let queries = fx.queries();
    for codes in [None, Some(Scheme::RaBitQ4)] {
        let index = fx.index(&format!("idx-{codes:?}"), codes).await;
        // 3 % of the rows match: one list holds about 6 of them. The
        // budget (nprobe / 3 %) is past every list; short of exhaustive
        // (`max_nprobe` below nlist) the query probes on to the cap.
        let keep = |r: &Row| r.cat.is_some_and(|c| c < 3);
        let params = SearchParams {
            max_nprobe: Some(NLIST as usize - 1),
            ..filtered("cat < 3", 1)
        };
        let got = index.search_batch(&queries, &params).await.unwrap();
        for (qi, r) in got.iter().enumerate() {
            assert_eq!(r.hits.len(), 10, "{codes:?} query {qi}: {:?}", r.stats);
            assert!(
                r.hits.iter().all(|h| keep(&fx.rows[h.rowid as usize])),
                "{codes:?} query {qi}: a hit fails the filter"
            );
            assert_eq!(r.stats.filter_plan, FilterPlan::Probe);
            assert!(!r.stats.capped);
            assert!(r.stats.rows_matched >= 10, "{:?}", r.stats);
        }
        assert!(
            got.iter().any(|r| r.stats.lists_probed > 1),
            "{codes:?}: no query probed past nprobe 1"
        );
    }
}

#[tokio::test]
async fn max_nprobe_caps_the_search_and_says_so() {
    let fx = Fixture::new();
    let index = fx.index("idx", Some(Scheme::RaBitQ4)).await;
    let q = &fx.queries()[..DIM];
    // One row matches: no search can fill k.
    let mut params = filtered("label = 'de-1501'", 1);
    params.max_nprobe = Some(2);
    let capped = index.search(q, &params).await.unwrap();
    assert!(capped.stats.capped, "{:?}", capped.stats);
    assert_eq!(capped.stats.lists_probed, 2);
    assert!(capped.hits.len() <= 1);
    params.max_nprobe = None;
    let all = index.search(q, &params).await.unwrap();
    assert!(!all.stats.capped);
    assert_eq!(all.stats.lists_probed, u64::from(NLIST));
    assert_eq!(
        all.hits.iter().map(|h| h.rowid).collect::<Vec<_>>(),
        vec![1501]
    );
    params.max_nprobe = Some(0);
    assert!(matches!(
        index.search(q, &params).await,
        Err(IndexError::Query(QueryError::InvalidMaxNprobe {
            max_nprobe: 0,
            nprobe: 1,
            nlist: 16
        }))
    ));
}

#[tokio::test]
async fn a_selective_filter_in_memory_is_scanned_exhaustively_and_exactly() {
    let fx = Fixture::new();
    let queries = fx.queries();
    for (codes, mode) in [
        (None, Preload::All),
        (Some(Scheme::RaBitQ4), Preload::Codes),
    ] {
        let index = fx.index(&format!("idx-{codes:?}"), codes).await;
        index.preload(mode).await.unwrap();
        // 1 % of the rows.
        let keep = |r: &Row| r.cat == Some(7);
        let got = index
            .search_batch(&queries, &filtered("cat = 7", 1))
            .await
            .unwrap();
        for (qi, q) in queries.chunks_exact(DIM).enumerate() {
            assert_eq!(got[qi].stats.filter_plan, FilterPlan::Exhaustive);
            assert_eq!(got[qi].stats.lists_probed, u64::from(NLIST));
            assert_eq!(
                pairs(&got[qi]),
                fx.expected(q, 10, &keep),
                "{codes:?} query {qi}"
            );
        }
    }
}

#[tokio::test]
async fn statistics_prune_row_groups_and_the_rerank_skips_pages_without_matches() {
    let fx = Fixture::new();
    let index = fx.index("idx", Some(Scheme::RaBitQ4)).await;
    let q = &fx.queries()[..DIM];
    let all = NLIST as usize;
    let plain = index
        .search(
            q,
            &SearchParams {
                nprobe: Some(all),
                ..filtered("region >= 0", all)
            },
        )
        .await
        .unwrap();
    assert_eq!(plain.stats.row_groups_pruned, 0, "{:?}", plain.stats);
    // The lists of one side of 0 have region 0 throughout: min = max = 0.
    let region = index.search(q, &filtered("region = 1", all)).await.unwrap();
    assert!(region.stats.row_groups_pruned > 0, "{:?}", region.stats);
    assert!(region.stats.row_groups_read < plain.stats.row_groups_read);
    assert!(region.stats.bytes < plain.stats.bytes);
    assert_eq!(pairs(&region), fx.expected(q, 10, &|r| r.region == 1));
    // `ts` grows with the rowid, the order of the rows in a list: the first
    // tenth of the table is a prefix of each row group, and the pages past
    // it hold no match.
    let early = index
        .search(q, &filtered("ts < TIMESTAMP '2024-01-01 00:05:00'", all))
        .await
        .unwrap();
    assert!(early.stats.pages_pruned > 0, "{:?}", early.stats);
    assert!(
        early.stats.pages_read <= early.stats.reranked,
        "{:?}",
        early.stats
    );
    assert_eq!(
        pairs(&early),
        fx.expected(q, 10, &|r| r.ts < T0 + 300_000_000)
    );
}

#[tokio::test]
async fn null_rows_never_satisfy_a_comparison() {
    let fx = Fixture::new();
    let index = fx.index("idx", None).await;
    let params = SearchParams {
        k: 200,
        include_payload: true,
        ..filtered("NOT (cat = 5)", NLIST as usize)
    };
    let r = index.search(&fx.queries()[..DIM], &params).await.unwrap();
    assert_eq!(r.hits.len(), 200);
    for h in &r.hits {
        let cat = h.payload.as_ref().and_then(|p| p.get("cat")).cloned();
        assert!(
            cat.as_ref()
                .is_some_and(|c| c.as_i64().is_some_and(|c| c != 5)),
            "row {} has cat {cat:?}",
            h.rowid
        );
    }
}

#[tokio::test]
async fn bad_filters_are_typed_errors_naming_the_column_and_types() {
    let fx = Fixture::new();
    let index = fx.index("idx", None).await;
    let q = &fx.queries()[..DIM];
    let err = |filter: &str| {
        let index = &index;
        let filter = filter.to_string();
        async move {
            match index.search(q, &filtered(&filter, 4)).await {
                Err(IndexError::Filter(e)) => e,
                other => panic!("{filter}: expected a filter error, got {other:?}"),
            }
        }
    };
    match err("nope = 1").await {
        FilterError::UnknownColumn { column, available } => {
            assert_eq!(column, "nope");
            assert_eq!(available.len(), 4, "{available:?}");
        }
        e => panic!("unknown column: {e}"),
    }
    let mismatch = err("cat = 'seven'").await;
    assert!(
        matches!(mismatch, FilterError::TypeMismatch { .. }),
        "{mismatch}"
    );
    let text = mismatch.to_string();
    assert!(
        text.contains("cat") && text.contains("Int32") && text.contains("seven"),
        "{text}"
    );
    assert!(matches!(err("cat = = 1").await, FilterError::Syntax { .. }));
    // `vector` is not a payload column a filter may read.
    assert!(matches!(
        err("vector IS NULL").await,
        FilterError::UnknownColumn { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_filters_answer_as_the_library_and_bad_ones_are_400s() {
    use parqivf::server::index_backend::IndexLoader;
    use parqivf::server::{Server, ServerConfig};
    let fx = Fixture::new();
    let index = fx.index("idx", Some(Scheme::RaBitQ4)).await;
    let location = fx._dir.path().join("idx").display().to_string();
    let config = ServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        indexes: vec![("t".into(), location)],
        ..ServerConfig::default()
    };
    let server = Server::bind(config, Arc::new(IndexLoader::default()))
        .await
        .unwrap();
    let url = format!("http://{}/v1/indexes/t/search", server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let q = fx.queries()[..DIM].to_vec();
    let ask = |body: serde_json::Value| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let r = client.post(url).json(&body).send().await.unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let filter = "cat < 3 AND label NOT LIKE 'fr%'";
    let (status, body) = ask(serde_json::json!({
        "vector": q, "k": 10, "nprobe": 1, "filter": filter, "include": ["stats"],
        "max_nprobe": NLIST - 1
    }))
    .await;
    assert_eq!(status, 200, "{body}");
    let capped = |p: SearchParams| SearchParams {
        max_nprobe: Some(NLIST as usize - 1),
        ..p
    };
    let want = index
        .search(&q, &capped(filtered(filter, 1)))
        .await
        .unwrap();
    let got: Vec<i64> = body["results"][0]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["rowid"].as_i64().unwrap())
        .collect();
    // The library's default re-rank over HTTP: compare with the same.
    let want_default = index
        .search(
            &q,
            &capped(SearchParams {
                rerank: None,
                ..filtered(filter, 1)
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        got,
        want_default
            .hits
            .iter()
            .map(|h| h.rowid)
            .collect::<Vec<_>>()
    );
    assert_eq!(got.len(), want.hits.len());
    assert_eq!(body["results"][0]["stats"]["filter_plan"], "probe");
    for (filter, needle) in [("nope = 1", "nope"), ("cat = 'x'", "Int32")] {
        let (status, body) = ask(serde_json::json!({ "vector": q, "filter": filter })).await;
        assert_eq!(status, 400, "{filter}: {body}");
        assert_eq!(body["error"]["code"], "invalid_filter", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{filter}: {message}");
    }
    let (status, body) = ask(serde_json::json!({
        "vector": q, "nprobe": 4, "max_nprobe": 2, "filter": "cat = 1"
    }))
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &serde_json::json!("max_nprobe_out_of_range"))
    );
    let _ = stop.send(());
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_cli_exits_2_naming_the_column_of_a_bad_filter() {
    let fx = Fixture::new();
    fx.index("idx", None).await;
    let queries = fx._dir.path().join("q.npy");
    support::files::write_npy(&queries, &fx.queries(), DIM);
    let run = |filter: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_parqivf"))
            .args(["search", "--index"])
            .arg(fx._dir.path().join("idx"))
            .arg("--queries")
            .arg(&queries)
            .args(["--k", "3", "--nprobe", "2", "--json", "--filter", filter])
            .output()
            .unwrap()
    };
    let bad = run("colour = 'red'");
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("colour") && stderr.contains("cat"),
        "{stderr}"
    );
    let good = run("cat = 7");
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    let lines = String::from_utf8_lossy(&good.stdout);
    assert_eq!(lines.lines().count(), 5);
    for line in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for id in v["rowids"].as_array().unwrap() {
            assert_eq!(fx.rows[id.as_u64().unwrap() as usize].cat, Some(7));
        }
    }
}
