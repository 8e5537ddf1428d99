#!/usr/bin/env bash
# `parqivf serve`, one query per HTTP request, next to FAISS IndexIVFFlat in
# RAM, one query per call on one thread, in one run on the same data and
# queries (issue 26's "storage-resident, one query per request: ≥ 2.0×
# FAISS IVF-Flat in RAM", with p50 and p99).
#
# FAISS first and last (shared/bench/bench_faiss.py at FAISS_NPROBE, the
# fewest lists its IVF-Flat needs for recall@10 0.95 at NLIST: 12 on
# SIFT-like 1M at nlist 1000 (R 0.953), 116 on the embeddings at nlist 316
# (R 0.9505; figures before 2026-12-07 used 128, R 0.957, about 10 % more
# work for FAISS than the target needs), then `serve
# --workers 1` on INDEX (built with the same NLIST) in two modes, each a
# warming pass over the measured queries and then the measured pass
# (scripts/bench/serve_latency.py, the server's default depth: the
# index's recall target 0.95):
#   storage  --warm --postings-cache-size 0: footers in RAM, every query's
#            codes and re-rank pages read from the local Parquet files;
#   codes    --preload codes.
#
# usage: scripts/bench/serve_vs_faiss.sh DATASET NLIST FAISS_NPROBE INDEX [N]
# Each mode is measured with each HTTP client of CLIENTS
# (serve_latency.py --client: `httplib`, Python's http.client as in every
# earlier figure, and `one-write`, each request in one send; `native`,
# examples/serve_client.rs, the same exchange from Rust, whose own cost per
# request is a few microseconds instead of Python's tens), and with it
# the floor of an HTTP exchange with that client (`idle_floor_*_ms` from
# `--idle-floor 0`: 1,000 GET /healthz back to back), which no search can
# go below.
#   env: BENCH_DATA (./bench-data), PY (python with numpy + faiss-cpu),
#        SHARED (../shared), BIN (target/release/parqivf), PORT (8093),
#        CLIENTS ("httplib one-write native"),
#        CLIENT_BIN (target/release/examples/serve_client, built if absent),
#        THREADS ("all 1": each mode served with all cores, then with
#        `serve --threads 1`, one compute thread as FAISS's one thread),
#        PQ_NPROBE (unset: skipped): with `--threads 1`, the codes mode is
#        also measured against FAISS IVF-PQ{d/2}x4fs + refine (k_factor 4)
#        at this nprobe, or `auto`: FAISS's smallest nprobe with recall@10
#        >= 0.95, found by fastscan_batch_vs_faiss.py (12 on SIFT-like 1M,
#        116 on the embeddings; bench_quant.py's grid steps over both to 16
#        and 128, which figures before 2026-12-07 used), in process on one thread,
#        interleaved with the native client in scripts/bench/
#        fastscan_batch_vs_faiss.py: one query a call against one a
#        request, then the N queries in one call against one request of N
#        (issue 26's "codes in RAM, one query per request and in batch");
#        each side reports its best of 3 passes,
#        PACKED (unset; 1: every client sends its vectors packed, base64 of
#        little-endian floats, docs/http.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATASET="$1"; NLIST="$2"; FAISS_NPROBE="$3"; INDEX="$4"; NQ="${5:-1000}"
BENCH_DATA="${BENCH_DATA:-$PWD/bench-data}"; DATA="$BENCH_DATA/$DATASET"
PY="${PY:-python3}"; SHARED="${SHARED:-$PWD/../shared}"; BIN="${BIN:-target/release/parqivf}"
PORT="${PORT:-8093}"; CLIENTS="${CLIENTS:-httplib one-write native}"; THREADS="${THREADS:-all 1}"
CLIENT_BIN="${CLIENT_BIN:-target/release/examples/serve_client}"
PACK=(); [ -n "${PACKED:-}" ] && PACK=(--packed)
if [[ ( " $CLIENTS " == *" native "* || -n "${PQ_NPROBE:-}" ) && ! -x "$CLIENT_BIN" ]]; then
  cargo build --release --example serve_client
fi
WORK="$(mktemp -d)"; SERVER=""
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$WORK"' EXIT
. scripts/bench/faiss_blas.sh
faiss() {
  BENCH_DATA="$BENCH_DATA" BENCH_RESULTS="$WORK/faiss" "$PY" "$SHARED/bench/bench_faiss.py" "$DATASET" \
    --nlist "$NLIST" --nprobe "$FAISS_NPROBE" --threads 1 --single-q "$NQ" --nq "$NQ" --reps 3 \
    | sed -n 's/^  //p' | "$PY" -c '
import json, sys
r = json.loads(sys.stdin.readline())
print(json.dumps({"label": "faiss IVF-Flat, one query a call", "nprobe": r["nprobe"],
                  "recall": r["recall@10"], "qps": r["qps_single_1t"],
                  "mean_ms": round(r["lat_single_1t_us"] / 1000, 3)}))'
}
# The index's files in the page cache: local Parquet, read warm, as FAISS's
# index is in RAM.
find "$INDEX" -type f -exec cat {} + > /dev/null
URL="http://127.0.0.1:$PORT/v1/indexes/i"
faiss
for threads in $THREADS; do
for mode in storage codes; do
  case "$mode" in
    storage) flags=(--warm --postings-cache-size 0) ;;
    codes) flags=(--preload codes --max-batch "$NQ" --max-body-bytes 67108864) ;;
  esac
  [ "$threads" = all ] || flags+=(--threads "$threads")
  "$BIN" serve --index "i=$INDEX" --addr "127.0.0.1:$PORT" --workers 1 "${flags[@]}" > "$WORK/serve.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null && break
    sleep 0.1
  done
  for client in $CLIENTS; do
    label="parqivf serve $mode, threads $threads, one query a request"
    if [ "$client" = native ]; then
      "$CLIENT_BIN" "$URL/search" "$DATA/query.npy" "$DATA/gt.npy" --n "$NQ" --label "$label" --idle-floor 0 "${PACK[@]}"
    else
      "$PY" scripts/bench/serve_latency.py "$URL/search" "$DATA/query.npy" "$DATA/gt.npy" \
        --n "$NQ" --client "$client" --label "$label" --idle-floor 0 "${PACK[@]}"
    fi
  done
  if [ "$mode" = codes ] && [ "$threads" = 1 ] && [ -n "${PQ_NPROBE:-}" ]; then
    label="parqivf serve codes, threads 1"
    for batch in 1 "$NQ"; do
      single=(); [ "$batch" = 1 ] && single=(--single)
      BENCH_DATA="$BENCH_DATA" "$PY" scripts/bench/fastscan_batch_vs_faiss.py "$DATASET" "$NLIST" \
        "$PQ_NPROBE" --rounds 2 "${single[@]}" -- "$CLIENT_BIN" "$URL/search" "$DATA/query.npy" \
        "$DATA/gt.npy" --n "$NQ" --batch "$batch" --reps 3 --label "$label, $batch a request" "${PACK[@]}"
    done
  fi
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""
done
done
faiss
