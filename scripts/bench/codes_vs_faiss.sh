#!/usr/bin/env bash
# parqivf with quantised codes next to FAISS's quantised IVF indexes on the
# same data, in one run (issues 12, 26): builds with --codes none and each of
# $QCODES (default rabitq4 pq4fs; sq8 on request)
# (time, peak RSS), a recall/QPS sweep over nprobe and rerank in the three
# serving modes (--preload all, --preload codes, nothing preloaded with warm
# footers), batch and one query per call, one thread; then one query per
# HTTP request through `parqivf serve` (p50/p99) and the memory of each serve
# mode; then shared/bench/bench_quant.py.
#
# usage: scripts/bench/codes_vs_faiss.sh DATASET NLIST [NPROBES] [RERANKS]
#   env: BENCH_DATA (./bench-data), BENCH_RESULTS (./bench-results), PY (python
#        with numpy + faiss-cpu), SHARED (../shared), BIN (target/release/parqivf),
#        SERVE_NPROBE / SERVE_RERANK (the serve runs; default the first of each)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATASET="$1"; NLIST="$2"
NPROBES="${3:-16,32,64}"; RERANKS="${4:-4,10}"
DATA="${BENCH_DATA:-$PWD/bench-data}/$DATASET"
RESULTS="${BENCH_RESULTS:-$PWD/bench-results}"
PY="${PY:-python3}"; SHARED="${SHARED:-$PWD/../shared}"; BIN="${BIN:-target/release/parqivf}"
GT="$DATA/gt.npy"; [ -f "$GT" ] || GT="$DATA/gt.ivecs"
mkdir -p "$RESULTS"
echo "# $(date -u) uptime: $(uptime)"
. scripts/bench/faiss_blas.sh
QCODES="${QCODES:-rabitq4 pq4fs}"
for codes in none $QCODES; do
  OUT="$RESULTS/$DATASET-$codes"
  if [ -n "${SKIP_BUILD:-}" ] && [ -d "$OUT" ]; then continue; fi
  rm -rf "$OUT"
  /usr/bin/time -v "$BIN" build --source "$DATA/base.npy" --out "$OUT" --nlist "$NLIST" --codes "$codes" --json \
    > "$OUT.build.json" 2> "$OUT.build.log"
  echo "build $codes: $(grep -o '"total": [0-9.]*' "$OUT.build.json") $(grep -E 'Maximum resident' "$OUT.build.log" | tr -s ' ')"
  echo "postings bytes $codes: $(grep -o '"postings-bytes": [0-9]*' "$OUT.build.json")"
done
search() { "$BIN" search --index "$1" --queries "$DATA/query.npy" --groundtruth "$GT" --k 10 --threads 1 "${@:2}"; }
for np in ${NPROBES//,/ }; do
  echo "flat all batch    $(search "$RESULTS/$DATASET-none" --nprobe "$np" --preload all --reps 3)"
  echo "flat all single   $(search "$RESULTS/$DATASET-none" --nprobe "$np" --preload all --batch-size 1 --reps 1)"
  echo "flat warm single  $(search "$RESULTS/$DATASET-none" --nprobe "$np" --warm --batch-size 1 --reps 1)"
  for codes in $QCODES; do
    for rr in ${RERANKS//,/ }; do
      echo "$codes all batch    $(search "$RESULTS/$DATASET-$codes" --nprobe "$np" --rerank "$rr" --preload all --reps 3)"
      echo "$codes codes batch  $(search "$RESULTS/$DATASET-$codes" --nprobe "$np" --rerank "$rr" --preload codes --reps 3)"
      echo "$codes codes single $(search "$RESULTS/$DATASET-$codes" --nprobe "$np" --rerank "$rr" --preload codes --batch-size 1 --reps 1)"
      echo "$codes warm single  $(search "$RESULTS/$DATASET-$codes" --nprobe "$np" --rerank "$rr" --warm --batch-size 1 --reps 1)"
    done
  done
done
SNP="${SERVE_NPROBE:-${NPROBES%%,*}}"; SRR="${SERVE_RERANK:-${RERANKS%%,*}}"
serve_run() { # label index preload-args...
  local label="$1" index="$2"; shift 2
  "$BIN" serve --index "d=$index" --addr 127.0.0.1:18089 "$@" > "$RESULTS/serve.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 600); do curl -sf http://127.0.0.1:18089/healthz > /dev/null && break; sleep 0.2; done
  "$PY" scripts/bench/serve_latency.py http://127.0.0.1:18089/v1/indexes/d/search "$DATA/query.npy" "$GT" \
    --nprobe "$SNP" --rerank "$SRR" --label "$label"
  echo "serve $label: $(grep -E 'VmHWM' /proc/$pid/status | tr -s ' ')"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
serve_run "flat preload all" "$RESULTS/$DATASET-none" --preload all
serve_run "flat storage (warm)" "$RESULTS/$DATASET-none" --warm --postings-cache-size 0
for codes in $QCODES; do
  serve_run "$codes preload all" "$RESULTS/$DATASET-$codes" --preload all
  serve_run "$codes preload codes" "$RESULTS/$DATASET-$codes" --preload codes
  serve_run "$codes storage (warm)" "$RESULTS/$DATASET-$codes" --warm --postings-cache-size 0
done
echo "# $(date -u) uptime: $(uptime)"
BENCH_DATA="${BENCH_DATA:-$PWD/bench-data}" "$PY" "$SHARED/bench/bench_quant.py" "$DATASET" "$NLIST" --threads 1
echo "# $(date -u) uptime: $(uptime)"
