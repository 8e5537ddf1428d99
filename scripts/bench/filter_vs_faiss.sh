#!/usr/bin/env bash
# Filtered search (issue 15): parqivf `search --filter` next to FAISS
# IndexIVFFlat + IDSelectorBatch on the same data, in one run:
#  1. scripts/bench/filter_data.py makes $BENCH_DATA/DATASET-filter (skipped
#     when its filters.json exists): base.parquet (`vector` + payload
#     category/ts/region), query.npy, filters.json and the exact filtered
#     top-10 per filter (gt_<name>.npy, -1 padded);
#  2. builds parqivf from base.parquet with --payload category,ts,region, once
#     with the default codes (rabitq4) and once with --codes none (time, peak RSS);
#  3. for each filter × nprobe: `parqivf search --filter SQL` against that
#     filter's ground truth, one thread, in the serving modes
#       flat:    --preload all batch / single, storage (--warm) single
#       rabitq4: --preload all batch / single, --preload codes batch / single,
#                storage (--warm) single
#     ("single" = --batch-size 1; batch runs --reps 3, single --reps 1);
#  4. scripts/bench/filter_faiss.py: the same filters and nprobes in FAISS
#     (1 search thread, batch and one query per call).
# Every result is one line: `filter DATASET {filters.json entry}`,
# `parqivf DATASET FILTER INDEX MODE NPROBE {search summary}` or
# `faiss {json}`; scripts/bench/filter_table.py turns the log into tables.
#
# usage: scripts/bench/filter_vs_faiss.sh DATASET NLIST [NPROBES] | tee log
#        scripts/bench/filter_table.py log
#   env: BENCH_DATA (./bench-data), BENCH_RESULTS (../bench-results), PY (python
#        with numpy + faiss-cpu + pyarrow), SHARED (../shared), BIN
#        (target/release/parqivf), FILTERS (comma list of filter names; default
#        all), SKIP_BUILD (reuse existing indexes), SKIP_FAISS, FAISS_ARGS (extra
#        filter_faiss.py flags, e.g. "--selector batch,bitmap --single-q 300"),
#        SINGLE_NQ (parqivf's one-query-per-call runs use the first SINGLE_NQ
#        queries; default all: storage-resident single runs are slow), NICE (e.g.
#        "nice -n 10", prefixed to every build and search), FAISS_NPROBES (FAISS's
#        nprobes, default NPROBES; add NLIST for FAISS's exact filtered answer)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATASET="$1"; NLIST="$2"; NPROBES="${3:-16,64}"
BENCH_DATA="${BENCH_DATA:-$PWD/bench-data}"
DATA="$BENCH_DATA/$DATASET"; FD="$BENCH_DATA/$DATASET-filter"
RESULTS="${BENCH_RESULTS:-$PWD/../bench-results}"
PY="${PY:-python3}"; SHARED="${SHARED:-$PWD/../shared}"; BIN="${BIN:-target/release/parqivf}"
NICE="${NICE:-}"
export SHARED
mkdir -p "$RESULTS"
echo "# $(date -u) uptime: $(uptime)"
echo "# $DATASET nlist $NLIST nprobes $NPROBES bin $BIN ($("$BIN" --version 2>&1 | head -1))"
if [ ! -f "$FD/filters.json" ]; then
  $NICE "$PY" scripts/bench/filter_data.py "$DATA" "$FD"
fi
# name<TAB>sql<TAB>gt<TAB>entry-json, one filter a line (FILTERS selects by name)
FILTER_LINES="$("$PY" - "$FD/filters.json" "${FILTERS:-}" <<'EOF'
import json, sys
keep = [x for x in sys.argv[2].split(",") if x]
for f in json.load(open(sys.argv[1])):
    if not keep or f["name"] in keep:
        print("\t".join([f["name"], f["sql"], f["gt"], json.dumps(f)]))
EOF
)"
while IFS=$'\t' read -r name sql gt entry; do
  echo "filter $DATASET $entry"
done <<< "$FILTER_LINES"

# Rowids: base.parquet has no id column, so the build numbers rows by their
# position in the file (src/builder/parquet_source.rs), which is what the
# ground truth of filter_data.py uses.
declare -A IDX=([rabitq4]="$RESULTS/$DATASET-filter-rabitq4" [flat]="$RESULTS/$DATASET-filter-flat")
for label in rabitq4 flat; do
  OUT="${IDX[$label]}"
  if [ -n "${SKIP_BUILD:-}" ] && [ -d "$OUT" ]; then continue; fi
  codes=(); [ "$label" = flat ] && codes=(--codes none)
  rm -rf "$OUT"
  $NICE /usr/bin/time -v "$BIN" build --source "$FD/base.parquet" --column vector --payload category,ts,region \
    --out "$OUT" --nlist "$NLIST" "${codes[@]}" --json > "$OUT.build.json" 2> "$OUT.build.log"
  echo "build $DATASET $label: $(grep -o '"total": [0-9.]*' "$OUT.build.json") $(grep -E 'Maximum resident' "$OUT.build.log" | tr -s ' ')"
  echo "postings bytes $DATASET $label: $(grep -o '"postings-bytes": [0-9]*' "$OUT.build.json")"
done

# One query per call over the first SINGLE_NQ queries only (default all): the
# ground-truth files need not be cut, search reads their rows alongside.
QSINGLE="$FD/query.npy"
if [ -n "${SINGLE_NQ:-}" ]; then
  QSINGLE="$FD/query_first$SINGLE_NQ.npy"
  "$PY" -c 'import numpy as np, sys; np.save(sys.argv[2], np.load(sys.argv[1])[: int(sys.argv[3])])' \
    "$FD/query.npy" "$QSINGLE" "$SINGLE_NQ"
fi

# search LABEL MODE NPROBE NAME SQL GT args... -> one tagged line; a failing
# search is logged as {"error": ...} and the run goes on.
search() {
  local label="$1" mode="$2" np="$3" name="$4" sql="$5" gt="$6"; shift 6
  local out rc=0 q="$FD/query.npy"
  [[ "$mode" == *single ]] && q="$QSINGLE"
  out="$($NICE "$BIN" search --index "${IDX[$label]}" --queries "$q" --groundtruth "$FD/$gt" \
    --k 10 --threads 1 --nprobe "$np" --filter "$sql" "$@" < /dev/null 2> "$RESULTS/filter-search.err")" || rc=$?
  if [ "$rc" -ne 0 ] || [ -z "$out" ]; then
    out="$("$PY" -c 'import json,sys; print(json.dumps({"error": "exit " + sys.argv[1], "stderr": open(sys.argv[2]).read()[-300:]}))' \
      "$rc" "$RESULTS/filter-search.err")"
  fi
  echo "parqivf $DATASET $name $label $mode $np $out"
}
while IFS=$'\t' read -r name sql gt entry; do
  for np in ${NPROBES//,/ }; do
    search flat all-batch     "$np" "$name" "$sql" "$gt" --preload all --reps 3
    search flat all-single    "$np" "$name" "$sql" "$gt" --preload all --batch-size 1 --reps 1
    search flat warm-single   "$np" "$name" "$sql" "$gt" --warm --batch-size 1 --reps 1
    search rabitq4 all-batch    "$np" "$name" "$sql" "$gt" --preload all --reps 3
    search rabitq4 all-single   "$np" "$name" "$sql" "$gt" --preload all --batch-size 1 --reps 1
    search rabitq4 codes-batch  "$np" "$name" "$sql" "$gt" --preload codes --reps 3
    search rabitq4 codes-single "$np" "$name" "$sql" "$gt" --preload codes --batch-size 1 --reps 1
    search rabitq4 warm-single  "$np" "$name" "$sql" "$gt" --warm --batch-size 1 --reps 1
  done
done <<< "$FILTER_LINES"
echo "# $(date -u) uptime: $(uptime)"
if [ -z "${SKIP_FAISS:-}" ]; then
  $NICE "$PY" scripts/bench/filter_faiss.py "$FD" "$DATA/base.npy" "$NLIST" "${FAISS_NPROBES:-$NPROBES}" \
    ${FILTERS:+--filters "$FILTERS"} --dataset "$DATASET" ${FAISS_ARGS:-}
fi
echo "# $(date -u) uptime: $(uptime)"
