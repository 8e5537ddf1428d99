//! A recall you can ask for (`calibration.json`, `target_recall`): the build
//! measures the calibration, a target is met on average over queries the
//! index never saw and each query probes its own number of lists, every
//! answer carries an estimate, an index without a calibration refuses a
//! target with a typed error, and refresh and compaction carry the
//! calibration (pinned, verified) and say when it is stale.

use crate::support;

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use parqivf::builder::mutate::{UpsertRows, upsert};
use parqivf::builder::refresh::{CompactPolicy, compact};
use parqivf::builder::{ArraySource, BuildParams, ProgressMode, build};
use parqivf::distance::Metric;
use parqivf::index::{
    DEFAULT_NPROBE, DEFAULT_TARGET_RECALL, Index, ProbeDepth, QueryError, SearchParams,
};
use parqivf::probe::target::STALE_CHANGE;

const DIM: usize = 16;
const NLIST: u32 = 64;
const QUERIES: usize = 400;

fn params(calibration_queries: usize) -> BuildParams {
    BuildParams {
        nlist: NLIST,
        // The exact scan: recall is the share of neighbours in the lists probed.
        codes: None,
        calibration_queries,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

/// `n` rows and `QUERIES` held-out queries from one clustered distribution
/// (16 clusters over 64 lists: neighbours often sit across a boundary).
fn data(n: usize) -> (Vec<f32>, Vec<f32>) {
    let all = support::fixtures::dataset(n + QUERIES, DIM, 41);
    let (q, base) = all.split_at(QUERIES * DIM);
    (base.to_vec(), q.to_vec())
}

async fn built(
    n: usize,
    calibration_queries: usize,
) -> (Arc<dyn ObjectStore>, Path, Vec<f32>, Vec<f32>) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    let (base, queries) = data(n);
    let ids: Vec<i64> = (0..(base.len() / DIM) as i64).collect();
    let src = ArraySource::new(base.clone(), DIM, "clustered")
        .unwrap()
        .with_ids(ids, None)
        .unwrap();
    build(
        Arc::new(src),
        store.clone(),
        &idx,
        &params(calibration_queries),
    )
    .await
    .unwrap();
    (store, idx, base, queries)
}

/// Mean recall@10 of `params` over `queries` against brute force over
/// `base` (rowid = row), the mean lists probed, the mean estimate, and the
/// fewest and most lists one query probed.
async fn measure(
    index: &Index,
    base: &[f32],
    queries: &[f32],
    params: &SearchParams,
) -> (f64, f64, f64, (u64, u64)) {
    let ids: Vec<i64> = (0..(base.len() / DIM) as i64).collect();
    let results = index.search_batch(queries, params).await.unwrap();
    let (mut recall, mut lists, mut estimate) = (0.0, 0.0, 0.0);
    let (mut fewest, mut most) = (u64::MAX, 0);
    for (q, r) in queries.chunks_exact(DIM).zip(&results) {
        let truth = support::fixtures::brute_force(Metric::L2, DIM, base, &ids, q, 10);
        let found = r
            .hits
            .iter()
            .filter(|h| truth.iter().any(|t| t.0 == h.rowid))
            .count();
        recall += found as f64 / 10.0;
        lists += r.stats.lists_probed as f64;
        fewest = fewest.min(r.stats.lists_probed);
        most = most.max(r.stats.lists_probed);
        let e = r
            .stats
            .estimated_recall
            .expect("every answer carries an estimate");
        assert!((0.0..=1.0).contains(&e), "estimate {e}");
        estimate += e;
    }
    let n = results.len() as f64;
    (recall / n, lists / n, estimate / n, (fewest, most))
}

fn target(t: f64) -> SearchParams {
    SearchParams {
        target_recall: Some(t),
        ..SearchParams::default()
    }
}

#[tokio::test]
async fn a_target_is_met_on_average_with_each_query_probing_its_own_lists() {
    let (store, idx, base, queries) = built(20_000, 1000).await;
    let index = Index::open_current(store, &idx).await.unwrap();
    let calibration = index
        .calibration()
        .expect("the build measures a calibration");
    assert_eq!(
        (calibration.k, calibration.queries, calibration.rows),
        (10, 1000, 20_000)
    );
    assert_eq!(
        calibration
            .recall_by_nprobe
            .last()
            .map(|p| (p.nprobe, p.recall)),
        Some((NLIST, 1.0))
    );
    // Each target on the grid has its stop, a gap and a cap on the lists.
    let stops = &calibration.target_stops;
    assert_eq!(calibration.format_version, 3);
    assert_eq!(
        (stops.len(), stops.first().map(|s| s.recall)),
        (200, Some(0.5))
    );
    assert!(
        stops
            .iter()
            .all(|s| s.cap <= NLIST && s.lists <= f64::from(s.cap))
    );
    for t in [0.8, 0.9, 0.95] {
        let (recall, lists, estimate, (fewest, most)) =
            measure(&index, &base, &queries, &target(t)).await;
        let stop = stops.iter().find(|s| s.recall >= t).unwrap();
        eprintln!(
            "target {t}: recall {recall:.4}, mean lists {lists:.2} ({fewest}..={most}), estimate {estimate:.4}; stop: gap {}, cap {}, {:.2} lists on the calibration's queries",
            stop.gap, stop.cap, stop.lists
        );
        // No query goes past its stop's cap.
        assert!(
            most <= u64::from(stop.cap),
            "target {t}: {most} lists, cap {}",
            stop.cap
        );
        // 400 queries and a 1000-query calibration: a few hundredths of
        // sampling error. Above the target up to 0.04: the calibration's
        // queries are the index's own rows, and with flat-k-means leaves the
        // stop over-delivers at 0.8 on this set (0.831, issue 26); never
        // more than 0.03 below it.
        assert!(
            recall >= t - 0.03 && recall <= t + 0.04,
            "target {t}: recall {recall}"
        );
        assert!(
            (estimate - t).abs() <= 0.01,
            "target {t}: estimate {estimate}"
        );
        // The stop is per query: easy queries probe fewer lists than hard ones.
        assert!(
            fewest < most,
            "target {t}: every query probed {fewest} lists"
        );
        assert!(lists < f64::from(NLIST) / 2.0, "target {t}: {lists} lists");
    }
    // A fixed nprobe is estimated by the calibration's curve, and measures close to it.
    let fixed = SearchParams {
        nprobe: Some(4),
        ..SearchParams::default()
    };
    let (recall, _, estimate, _) = measure(&index, &base, &queries, &fixed).await;
    let point = calibration
        .recall_by_nprobe
        .iter()
        .find(|p| p.nprobe == 4)
        .unwrap();
    assert!((estimate - point.recall).abs() < 1e-9);
    assert!(
        (recall - point.recall).abs() <= 0.03,
        "nprobe 4: {recall} against {}",
        point.recall
    );
    // Target 1 probes every list: exact.
    let (recall, lists, estimate, _) = measure(&index, &base, &queries, &target(1.0)).await;
    assert_eq!((recall, lists, estimate), (1.0, f64::from(NLIST), 1.0));
    // max_nprobe caps a target (and may be below the default nprobe).
    let capped = SearchParams {
        max_nprobe: Some(2),
        ..target(0.99)
    };
    let (_, _, _, (_, most)) = measure(&index, &base, &queries, &capped).await;
    assert_eq!(most, 2);
    // Naming neither is the default target, answer for answer.
    let neither = SearchParams::default();
    assert_eq!(
        index.probe_depth(&neither),
        Ok(ProbeDepth::Recall(DEFAULT_TARGET_RECALL))
    );
    let by_default = index.search_batch(&queries, &neither).await.unwrap();
    let named = index
        .search_batch(&queries, &target(DEFAULT_TARGET_RECALL))
        .await
        .unwrap();
    let answers = |r: &[parqivf::index::SearchResult]| -> Vec<(Vec<i64>, u64)> {
        r.iter()
            .map(|r| {
                let ids = r.hits.iter().map(|h| h.rowid).collect();
                (ids, r.stats.lists_probed)
            })
            .collect()
    };
    assert_eq!(answers(&by_default), answers(&named));
    // Both named is an error naming both.
    let both = SearchParams {
        nprobe: Some(4),
        ..target(0.9)
    };
    let err = index.search(&queries[..DIM], &both).await.unwrap_err();
    assert!(
        matches!(
            err,
            parqivf::index::IndexError::Query(QueryError::NprobeAndTarget { nprobe: 4, .. })
        ),
        "{err}"
    );
}

#[tokio::test]
async fn an_index_without_a_calibration_refuses_a_target_and_estimates_nothing() {
    let (store, idx, _, queries) = built(3_000, 0).await;
    let index = Index::open_current(store, &idx).await.unwrap();
    assert!(index.calibration().is_none() && index.definition().calibration.is_none());
    let err = index
        .search(&queries[..DIM], &target(0.9))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            parqivf::index::IndexError::Query(QueryError::NotCalibrated)
        ),
        "{err}"
    );
    // Naming neither probes DEFAULT_NPROBE lists here.
    let r = index
        .search(&queries[..DIM], &SearchParams::default())
        .await
        .unwrap();
    assert_eq!(r.stats.estimated_recall, None);
    assert_eq!(r.stats.lists_probed, DEFAULT_NPROBE as u64);
    assert_eq!(
        index.probe_depth(&SearchParams::default()),
        Ok(ProbeDepth::Lists(DEFAULT_NPROBE))
    );
    let out_of_range = index
        .search(&queries[..DIM], &target(1.5))
        .await
        .unwrap_err();
    assert!(
        out_of_range.to_string().contains("target_recall = 1.5"),
        "{out_of_range}"
    );
}

#[tokio::test]
async fn refresh_and_compaction_carry_the_calibration_and_say_when_it_is_stale() {
    let (store, idx, base, queries) = built(10_000, 1000).await;
    let build_params = params(1000);
    let upserted = |first: i64, vectors: Vec<f32>| {
        let rows = UpsertRows {
            ids: (first..first + (vectors.len() / DIM) as i64).collect(),
            vectors,
            payload: None,
        };
        let (store, idx, build_params) = (store.clone(), idx.clone(), build_params.clone());
        async move {
            upsert(
                store.clone(),
                &idx,
                rows,
                &build_params,
                CompactPolicy::default(),
            )
            .await
            .unwrap();
            Index::open_current(store, &idx).await.unwrap()
        }
    };
    // Append 20 % more rows of the same distribution: the rows after the
    // first 10 000 of the same seeded stream.
    let extra =
        support::fixtures::dataset(12_000 + QUERIES, DIM, 41)[(QUERIES + 10_000) * DIM..].to_vec();
    let index = upserted(10_000, extra.clone()).await;
    let status = index.calibration_status().expect("carried by the refresh");
    assert_eq!(
        (status.calibrated_rows, status.rows, status.stale),
        (10_000, 12_000, false)
    );
    let all: Vec<f32> = [base.as_slice(), extra.as_slice()].concat();
    let (recall, _, estimate, _) = measure(&index, &all, &queries, &target(0.9)).await;
    assert!(
        (recall - estimate).abs() <= 0.03,
        "after +20 %: recall {recall}, estimate {estimate}"
    );
    // Past STALE_CHANGE more rows, the index says so.
    let n = (10_000.0 * STALE_CHANGE) as usize + 1_000;
    let index = upserted(20_000, support::fixtures::random_vectors(n, DIM, 5)).await;
    assert!(index.calibration_status().unwrap().stale);
    // Compaction keeps the centroids, so it keeps (and pins) the calibration.
    compact(store.clone(), &idx, &build_params).await.unwrap();
    let index = Index::open_current(store.clone(), &idx).await.unwrap();
    assert!(index.definition().layers.is_none());
    assert_eq!(index.calibration().map(|c| c.rows), Some(10_000));
    assert!(index.calibration_status().unwrap().stale);
    let report = parqivf::verify::verify_location(store, &idx, Default::default())
        .await
        .unwrap();
    assert!(report.is_ok(), "{:?}", report.violations);
}

/// Over HTTP: `target_recall` in the request, `estimated_recall` in the
/// stats, the calibration in the index info, `400 not_calibrated` for an
/// index without one; and `--recall-sample 1` re-runs every query
/// exhaustively, its measured recall (Prometheus) equal to the recall
/// measured offline against brute force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_takes_a_target_and_recall_sampling_measures_what_offline_measures() {
    use parqivf::server::index_backend::IndexLoader;
    use parqivf::server::recall_sample::RecallSampling;
    use parqivf::server::{Server, ServerConfig};
    let dir = tempfile::tempdir().unwrap();
    let (calibrated, plain) = (dir.path().join("a"), dir.path().join("b"));
    let (base, queries) = data(10_000);
    for (path, queries_asked) in [(&calibrated, 1000), (&plain, 0)] {
        let (store, idx) = parqivf::store::location::open(&path.display().to_string()).unwrap();
        let src = ArraySource::new(base.clone(), DIM, "clustered").unwrap();
        build(Arc::new(src), store, &idx, &params(queries_asked))
            .await
            .unwrap();
    }
    let config = ServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        indexes: vec![
            ("a".into(), calibrated.display().to_string()),
            ("b".into(), plain.display().to_string()),
        ],
        recall_sampling: RecallSampling {
            rate: 1.0,
            cpu_share: 1.0,
        },
        ..ServerConfig::default()
    };
    let server = Server::bind(config, Arc::new(IndexLoader::default()))
        .await
        .unwrap();
    let url = format!("http://{}", server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let info: serde_json::Value = client
        .get(format!("{url}/v1/indexes/a"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["calibration"]["calibrated_rows"], 10_000, "{info}");
    assert_eq!(info["calibration"]["stale"], false);
    // POST `body` to index `name`'s search.
    let search = |name: &str, body: serde_json::Value| {
        let request = client
            .post(format!("{url}/v1/indexes/{name}/search"))
            .json(&body);
        async move { request.send().await.unwrap() }
    };
    let r = search(
        "b",
        serde_json::json!({ "vector": &queries[..DIM], "target_recall": 0.9 }),
    )
    .await;
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_calibrated", "{body}");

    // The re-runs are in the background, one at a time behind a queue of
    // `recall_sample::QUEUE`: the queries wait for them every 32 so that
    // none is skipped however slow the machine, and at the end until all
    // are measured.
    let scrape = || async {
        let text = client
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let value = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name) && l.contains("index=\"a\""))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (
            value("parqivf_recall_measured_sum"),
            value("parqivf_recall_measured_count"),
            value("parqivf_recall_estimated_count"),
        )
    };
    let caught_up = |sent: usize| async move {
        for _ in 0..400 {
            if scrape().await.1 + 32.0 >= sent as f64 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    };
    let ids: Vec<i64> = (0..10_000).collect();
    let n = 200;
    let mut offline = 0.0;
    for (i, q) in queries.chunks_exact(DIM).take(n).enumerate() {
        if i % 32 == 0 {
            caught_up(i).await;
        }
        let body: serde_json::Value = search(
            "a",
            serde_json::json!({ "vector": q, "k": 10, "target_recall": 0.9, "include": ["stats"] }),
        )
        .await
        .json()
        .await
        .unwrap();
        let result = &body["results"][0];
        let e = result["stats"]["estimated_recall"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&e));
        let served: Vec<i64> = result["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["rowid"].as_i64().unwrap())
            .collect();
        let truth = support::fixtures::brute_force(Metric::L2, DIM, &base, &ids, q, 10);
        offline += truth.iter().filter(|t| served.contains(&t.0)).count() as f64 / 10.0;
    }
    let offline = offline / n as f64;
    let mut got = scrape().await;
    for _ in 0..200 {
        if got.1 >= n as f64 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        got = scrape().await;
    }
    let (sum, count, estimated) = got;
    assert_eq!((count, estimated), (n as f64, n as f64));
    let measured = sum / count;
    assert!(
        (measured - offline).abs() <= 0.01,
        "sampled {measured}, offline {offline}"
    );
    // (After the sampled queries: these would be sampled too.) A request
    // naming neither gets each index's default: the target on
    // the calibrated one, DEFAULT_NPROBE lists on the other; both named is
    // a 400.
    for (name, lists) in [("a", None), ("b", Some(DEFAULT_NPROBE as u64))] {
        let body: serde_json::Value = search(
            name,
            serde_json::json!({ "vector": &queries[..DIM], "include": ["stats"] }),
        )
        .await
        .json()
        .await
        .unwrap();
        let stats = &body["results"][0]["stats"];
        match lists {
            Some(lists) => assert_eq!(stats["lists_probed"], lists, "{body}"),
            None => {
                let e = stats["estimated_recall"].as_f64().unwrap();
                assert!(e >= DEFAULT_TARGET_RECALL - 0.01, "{body}");
            }
        }
    }
    let r = search(
        "a",
        serde_json::json!({ "vector": &queries[..DIM], "nprobe": 4, "target_recall": 0.9 }),
    )
    .await;
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "nprobe_and_target_recall", "{body}");
    let _ = stop.send(());
    running.await.unwrap().unwrap();
}
