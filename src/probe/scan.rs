//! The exact scan: the `k` nearest rows of every query of a batch among the
//! row groups it probes, list-major ([`scan_batch`]), with the rows each
//! query may see (a filter's matches, the live rows) as optional masks.

use super::rows::{DecodedRowGroup, ProbedRows};
use crate::distance::Metric;
use crate::topk::TopK;
use rayon::prelude::*;
use std::sync::Arc;

/// The queries probing each loaded row group (`cids[q]`: the probed cids of
/// query `q`), ascending.
pub fn probing_queries(cids: &[&[u32]], loaded: &[Arc<DecodedRowGroup>]) -> Vec<Vec<u32>> {
    let mut by_cid: Vec<(u32, usize)> = loaded
        .iter()
        .enumerate()
        .map(|(i, rg)| (rg.cid, i))
        .collect();
    by_cid.sort_unstable();
    let mut probing: Vec<Vec<u32>> = vec![Vec::new(); loaded.len()];
    for (q, qc) in cids.iter().enumerate() {
        for &c in qc.iter() {
            let first = by_cid.partition_point(|&(x, _)| x < c);
            for &(_, g) in by_cid[first..].iter().take_while(|&&(x, _)| x == c) {
                probing[g].push(q as u32);
            }
        }
    }
    probing
}

/// Rows of a row group scanned together for every query that probes it: 64
/// rows of 128-d f32 are 32 KiB, read from memory once and then from cache.
const SCAN_BLOCK: usize = 64;

/// A mask with fewer than one set row in this many is walked by its set
/// bits, not block by block.
const SPARSE_SHARE: usize = 8;

/// The `k` nearest rows of every query of a batch (`queries` row-major,
/// `cids[q]` the sorted probed cids of query `q`) among the `loaded` row
/// groups, **list-major**: each row group is read block by block, and every
/// query that probes its cid scans the block while it is in cache. A row
/// group probed by many queries of a batch (nprobe · batch / nlist of them on
/// average) costs one pass over memory instead of one per query, so a batch
/// is bound by the distance computations, not by memory bandwidth. Row groups
/// run in parallel on rayon; per-task selections are merged, and since
/// [`TopK`] keeps the k smallest `(distance, rowid)` whatever the order, the
/// result does not depend on the thread count.
///
/// `masks[g]`, when given, keeps only the rows of `loaded[g]` whose bit is
/// set (a filter's matches); an empty `masks` keeps every row.
pub fn scan_batch(metric: Metric, dim: usize, rows: ProbedRows<'_>, k: usize) -> Vec<TopK> {
    let (queries, cids, loaded, masks) = (rows.queries, rows.cids, rows.loaded, rows.masks);
    let probing = probing_queries(cids, loaded);
    let empty = || -> Vec<TopK> { (0..cids.len()).map(|_| TopK::new(k)).collect() };
    loaded
        .par_iter()
        .enumerate()
        .zip(&probing)
        .filter(|(_, qs)| !qs.is_empty())
        .fold(empty, |mut tops, ((g, rg), qs)| {
            let mask = masks.get(g).and_then(Option::as_ref);
            // A sparse mask (a selective filter's): only its set rows.
            if let Some(m) = mask.filter(|m| m.count_set_bits() * SPARSE_SHARE < m.len()) {
                for i in m.set_indices() {
                    let (v, rowid) = (&rg.vectors[i * dim..(i + 1) * dim], rg.rowids[i]);
                    for &q in qs {
                        let query = &queries[q as usize * dim..(q as usize + 1) * dim];
                        tops[q as usize].push(metric.prepared_distance(query, v), rowid);
                    }
                }
                return tops;
            }
            for (block, (vectors, rowids)) in rg
                .vectors
                .chunks(SCAN_BLOCK * dim)
                .zip(rg.rowids.chunks(SCAN_BLOCK))
                .enumerate()
            {
                let first = block * SCAN_BLOCK;
                for &q in qs {
                    let q = q as usize;
                    let query = &queries[q * dim..(q + 1) * dim];
                    let top = &mut tops[q];
                    for (i, (v, &rowid)) in vectors.chunks_exact(dim).zip(rowids).enumerate() {
                        if mask.is_none_or(|m| m.value(first + i)) {
                            top.push(metric.prepared_distance(query, v), rowid);
                        }
                    }
                }
            }
            tops
        })
        .reduce(empty, |mut a, b| {
            a.iter_mut().zip(b).for_each(|(x, y)| x.merge(y));
            a
        })
}
#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Row groups of 0–150 rows (spanning several scan blocks) for 6 cids,
    /// two row groups for some cids, with rowids in a shuffled order and
    /// duplicated vectors to force distance ties.
    fn row_groups(dim: usize, rng: &mut ChaCha8Rng) -> Vec<Arc<DecodedRowGroup>> {
        let mut next = 0i64;
        (0..9u32)
            .map(|i| {
                let rows = rng.random_range(0..150);
                let mut vectors: Vec<f32> = (0..rows * dim)
                    .map(|_| rng.random_range(-1i32..=1) as f32)
                    .collect();
                if rows > 2 {
                    let (a, b) = vectors.split_at_mut(dim);
                    b[..dim].copy_from_slice(a);
                }
                let rowids = (0..rows)
                    .map(|_| {
                        next += 7;
                        (next * 31) % 10_007
                    })
                    .collect();
                Arc::new(DecodedRowGroup {
                    cid: i % 6,
                    rowids,
                    vectors: vectors.into(),
                    codes: None,
                    vector_pages: None,
                    payload: None,
                    file: 0,
                    row_group: i as usize,
                    fast_codes: Default::default(),
                })
            })
            .collect()
    }

    #[test]
    fn list_major_batch_scan_equals_per_query_scans_for_any_thread_count() {
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        let dim = 5;
        let loaded = row_groups(dim, &mut rng);
        let nq = 40;
        let queries: Vec<f32> = (0..nq * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
        let cids: Vec<Vec<u32>> = (0..nq)
            .map(|q| {
                let mut c: Vec<u32> = (0..6u32)
                    .filter(|&c| !(q as u32 + c).is_multiple_of(3))
                    .collect();
                c.sort_unstable();
                c
            })
            .collect();
        let probed: Vec<&[u32]> = cids.iter().map(Vec::as_slice).collect();
        let k = 7;
        // Reference: one query at a time, every row of its cids.
        let expected: Vec<Vec<(i64, f32)>> = (0..nq)
            .map(|q| {
                let query = &queries[q * dim..(q + 1) * dim];
                let mut all: Vec<(f32, i64)> = loaded
                    .iter()
                    .filter(|rg| cids[q].contains(&rg.cid))
                    .flat_map(|rg| {
                        rg.vectors
                            .chunks_exact(dim)
                            .zip(&rg.rowids)
                            .map(|(v, &r)| (Metric::L2.distance(query, v), r))
                    })
                    .collect();
                all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                all.into_iter().take(k).map(|(d, r)| (r, d)).collect()
            })
            .collect();
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let got: Vec<Vec<(i64, f32)>> = pool.install(|| {
                let rows = ProbedRows {
                    queries: &queries,
                    cids: &probed,
                    loaded: &loaded,
                    masks: &[],
                };
                scan_batch(Metric::L2, dim, rows, k)
                    .into_iter()
                    .map(|t| {
                        t.into_sorted()
                            .into_iter()
                            .map(|n| (n.rowid, n.distance))
                            .collect()
                    })
                    .collect()
            });
            assert_eq!(got, expected, "{threads} threads");
        }
    }
}
