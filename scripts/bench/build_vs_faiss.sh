#!/usr/bin/env bash
# Build time against FAISS IVF-Flat train + add on the same data, in one run
# (issue 26): FAISS (shared/bench/bench_faiss.py, FAISS's defaults, 2
# threads; its search sweep cut to one nprobe on 10 queries), then REPS
# `parqivf build` runs for each of $CODES, then FAISS again. Prints FAISS's
# train/add line and the wall seconds of each build with its stages.
#
# FAISS's OpenBLAS is told its AVX-512 kernels where it misses them
# (scripts/bench/faiss_blas.sh).
#
# usage: scripts/bench/build_vs_faiss.sh DATASET NLIST [REPS]
#   env: BENCH_DATA (./bench-data), PY (python with numpy + faiss-cpu), SHARED
#        (../shared), BIN (target/release/parqivf), CODES ("rabitq4 pq4fs")
set -euo pipefail
cd "$(dirname "$0")/../.."
DATASET="$1"; NLIST="$2"; REPS="${3:-2}"
BENCH_DATA="${BENCH_DATA:-$PWD/bench-data}"; DATA="$BENCH_DATA/$DATASET"
PY="${PY:-python3}"; SHARED="${SHARED:-$PWD/../shared}"; BIN="${BIN:-target/release/parqivf}"
CODES="${CODES:-rabitq4 pq4fs}"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
. scripts/bench/faiss_blas.sh
faiss() {
  BENCH_DATA="$BENCH_DATA" BENCH_RESULTS="$WORK/faiss" "$PY" "$SHARED/bench/bench_faiss.py" "$DATASET" \
    --nlist "$NLIST" --nprobe 1 --threads 1 --single-q 0 --reps 1 --nq 10 | grep "train="
}
faiss
for codes in $CODES; do
  for _ in $(seq 1 "$REPS"); do
    rm -rf "$WORK/idx"
    start=$(date +%s.%N)
    stages=$("$BIN" build --source "$DATA/base.npy" --out "$WORK/idx" --nlist "$NLIST" --codes "$codes" 2>&1 \
      | sed -n -e 's/^parqivf build: \([a-z]*\): done in \(.*\) s$/\1 \2/p' \
          -e 's/^published .*(the recall calibration over [0-9]* queries \(.*\) s of it)$/calibrate \1/p' | tr '\n' ' ')
    end=$(date +%s.%N)
    echo "parqivf $DATASET --codes $codes: $(echo "$end - $start" | bc) s ($stages)"
  done
done
faiss
