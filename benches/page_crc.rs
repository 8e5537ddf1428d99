//! Read-path cost of the page CRC32 check (issue #17 item 3; goal ≤ 3 %).
//!
//! `page-crc/check/…` checks every page of every column chunk of the index
//! (`postings::page_crc::check_column_chunk`, what the executor runs on each
//! fetched chunk); `page-crc/search/…` is a batch of 64 queries read from
//! local disk with warm footers and no postings cache (so every probed row
//! group is fetched, CRC-checked and decoded). The bench prints the CRC share
//! of a search: bytes checked per batch ÷ check throughput ÷ batch time.
//! Same data as `benches/search.rs`.
//!
//! `page-crc/checked-page/…` checks the index's `vector` pages one at a
//! time, each header parsed and its CRC computed (`checked_page`), as the
//! re-rank does: the cost a candidate's page adds besides its read.
//!
//! `page-crc/crc32/{crate}/{bytes}` is the CRC32 alone on pages of a re-rank's
//! sizes (a 128-d or 384-d row, a few rows, a list's chunk): `crc32fast`, what
//! `format::page_crc::crc32` calls, next to `crc-fast` (object_store's), which
//! it replaced.
//!
//! Run: `cargo bench --bench page_crc`.

mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use object_store::ObjectStoreExt;
use object_store::path::Path;
use parqivf::format::page_crc::{check_column_chunk, checked_page, checked_pages};
use parqivf::index::{Index, SearchParams};
use parquet::file::metadata::ParquetMetaDataReader;
use std::sync::Arc;
use std::time::Instant;

const QUERIES: usize = 64;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (n, dim, nroots, nlist) = (20_000, 64, 8, 64);
    let (_dir, store) = common::local_store();
    // Files of about 4096 rows.
    let (queries, manifest) = common::search_index(
        &rt,
        Arc::clone(&store),
        (n, dim, nroots, nlist),
        1 << 20,
        QUERIES,
    );
    // Every column chunk of the index, as the executor fetches them.
    let mut chunks = Vec::new();
    for f in &manifest.files {
        let bytes = rt
            .block_on(async {
                store
                    .get(&Path::from(format!("idx/postings/{}", f.path)))
                    .await?
                    .bytes()
                    .await
            })
            .unwrap();
        let meta = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .unwrap();
        for rg in meta.row_groups() {
            for col in rg.columns() {
                let (s, l) = col.byte_range();
                chunks.push(bytes.slice(s as usize..(s + l) as usize));
            }
        }
    }
    let total: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    let mut group = c.benchmark_group("page-crc");
    group.sample_size(20);
    for size in [64usize, 600, 1_600, 2_048, 16_384] {
        let page: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(format!("crc32/crc32fast/{size}"), |b| {
            b.iter(|| parqivf::format::page_crc::crc32(std::hint::black_box(&page)))
        });
        group.bench_function(format!("crc32/crc-fast/{size}"), |b| {
            b.iter(|| {
                crc_fast::checksum(
                    crc_fast::CrcAlgorithm::Crc32IsoHdlc,
                    std::hint::black_box(&page),
                )
            })
        });
    }
    // The pages of the chunks with more than one (the `vector` column's,
    // a few rows a page), each header and data as the writer made them:
    // what the re-rank checks one by one (`checked_page`), a header parse
    // and a CRC each.
    let pages: Vec<&[u8]> = chunks
        .iter()
        .flat_map(|ch| {
            let checked = checked_pages(ch).unwrap();
            let many = checked.len() > 1;
            checked
                .into_iter()
                .filter(move |_| many)
                .map(move |p| &ch[p.offset..p.data.end])
        })
        .take(4096)
        .collect();
    group.throughput(Throughput::Elements(pages.len() as u64));
    let bytes = pages.iter().map(|p| p.len()).sum::<usize>() / pages.len().max(1);
    group.bench_function(
        format!("checked-page/{}-pages-of-{bytes}-bytes", pages.len()),
        |b| {
            b.iter(|| {
                for page in &pages {
                    std::hint::black_box(checked_page(std::hint::black_box(page)).unwrap());
                }
            })
        },
    );
    group.throughput(Throughput::Bytes(total));
    group.bench_function(format!("check/all-chunks/{n}x{dim}"), |b| {
        b.iter(|| {
            for ch in &chunks {
                check_column_chunk(ch).unwrap();
            }
        })
    });
    let t = Instant::now();
    let reps = 50;
    for _ in 0..reps {
        for ch in &chunks {
            check_column_chunk(ch).unwrap();
        }
    }
    let crc_bytes_per_s = (total * reps) as f64 / t.elapsed().as_secs_f64();

    let index = rt
        .block_on(Index::open(Arc::clone(&store), &Path::from("idx")))
        .unwrap();
    rt.block_on(index.warm()).unwrap();
    group.throughput(Throughput::Elements(QUERIES as u64));
    for nprobe in [16, nlist] {
        let params = SearchParams {
            k: 10,
            nprobe: Some(nprobe),
            ..SearchParams::default()
        };
        group.bench_function(
            format!("search/{n}x{dim}/nlist{nlist}/nprobe{nprobe}"),
            |b| b.iter(|| rt.block_on(index.search_batch(&queries, &params)).unwrap()),
        );
        let t = Instant::now();
        let mut checked = 0;
        let reps = 20;
        for _ in 0..reps {
            let r = rt.block_on(index.search_batch(&queries, &params)).unwrap();
            checked = r[0].stats.row_group_bytes;
        }
        let per_batch = t.elapsed().as_secs_f64() / reps as f64;
        let crc = checked as f64 / crc_bytes_per_s;
        println!(
            "page-crc: nprobe {nprobe}: {checked} bytes checked per batch of {QUERIES} queries, \
             CRC {:.1} us of {:.1} us per batch = {:.2} % (check throughput {:.2} GB/s)",
            crc * 1e6,
            per_batch * 1e6,
            100.0 * crc / per_batch,
            crc_bytes_per_s / 1e9
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
