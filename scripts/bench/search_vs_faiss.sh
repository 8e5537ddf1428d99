#!/usr/bin/env bash
# parqivf next to FAISS IndexIVFFlat on the same data, in one run:
# build an index over the SIFT-like base set, then a QPS/recall sweep over
# nprobe with 1 and 2 threads (postings preloaded, like FAISS in RAM, and
# read from local Parquet with warm footers), then FAISS's own sweep.
#
# usage: scripts/bench/search_vs_faiss.sh [NLIST] [NPROBES]
#   env: BENCH_DATA (default ./bench-data), BENCH_RESULTS (./bench-results),
#        PY (python with numpy + faiss-cpu), SHARED (../shared),
#        ROOTS (root centroids of the hierarchy; default: the build's, 1 = flat)
#        BIN (the parqivf binary; default target/release/parqivf)
set -euo pipefail
cd "$(dirname "$0")/../.."
NLIST="${1:-1000}"
NPROBES="${2:-4,16,32}"
DATA="${BENCH_DATA:-$PWD/bench-data}/synth-sift128-1000k-s1"
RESULTS="${BENCH_RESULTS:-$PWD/bench-results}"
PY="${PY:-python3}"
SHARED="${SHARED:-$PWD/../shared}"
BIN="${BIN:-target/release/parqivf}"
mkdir -p "$RESULTS"
OUT="$RESULTS/parqivf-nlist$NLIST${ROOTS:+-r$ROOTS}"
rm -rf "$OUT"
echo "# uptime: $(uptime)"
/usr/bin/time -v "$BIN" build --source "$DATA/base.npy" --out "$OUT" --nlist "$NLIST" ${ROOTS:+--roots "$ROOTS"} --json \
  > "$RESULTS/parqivf-build-nlist$NLIST.json" 2> "$RESULTS/parqivf-build-nlist$NLIST.log"
grep -E "Maximum resident|Elapsed" "$RESULTS/parqivf-build-nlist$NLIST.log" || true
cat "$RESULTS/parqivf-build-nlist$NLIST.json"
for mode in --preload --warm; do
  for th in 1 2; do
    for np in ${NPROBES//,/ }; do
      "$BIN" search --index "$OUT" --queries "$DATA/query.npy" --groundtruth "$DATA/gt.ivecs" \
        --k 10 --nprobe "$np" --threads "$th" --reps 3 "$mode" | sed "s/^/parqivf $mode /"
    done
  done
done
echo "# uptime: $(uptime)"
BENCH_QUIET_TIMEOUT="${BENCH_QUIET_TIMEOUT:-5}" BENCH_DATA="${BENCH_DATA:-$PWD/bench-data}" BENCH_RESULTS="$RESULTS" \
  "$PY" "$SHARED/bench/bench_faiss.py" synth-sift128-1000k-s1 --nlist "$NLIST" --nprobe "$NPROBES" \
  --threads 1,2 --single-q 0 --reps 3
