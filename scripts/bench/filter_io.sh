#!/usr/bin/env bash
# What a filter skips from storage (issue 15): per-query IO stats of
# storage-resident searches (warm footers, one query per call) with filters
# on a column sorted within each list (`ts`, which grows with the rowid), a
# column correlated with the vectors (`region`), and `category` on an index
# built with `--sort-by category`, next to the same search without a filter.
# Prints one line per (index, filter): the mean of each stats field.
#
# usage: scripts/bench/filter_io.sh DATASET NLIST NPROBE [NQ]
#   needs $BENCH_DATA/DATASET-filter from scripts/bench/filter_data.py and the
#   index $BENCH_RESULTS/DATASET-filter-rabitq4 from filter_vs_faiss.sh.
#   env: BENCH_DATA (./bench-data), BENCH_RESULTS (../bench-results), PY, BIN
set -euo pipefail
cd "$(dirname "$0")/../.."
DATASET="$1"; NLIST="$2"; NPROBE="$3"; NQ="${4:-100}"
FD="${BENCH_DATA:-$PWD/bench-data}/$DATASET-filter"
RESULTS="${BENCH_RESULTS:-$PWD/../bench-results}"
PY="${PY:-python3}"; BIN="${BIN:-target/release/parqivf}"
Q="$FD/query_first$NQ.npy"
"$PY" -c 'import numpy as np, sys; np.save(sys.argv[2], np.load(sys.argv[1])[: int(sys.argv[3])])' "$FD/query.npy" "$Q" "$NQ"
SORTED="$RESULTS/$DATASET-filter-rabitq4-by-category"
if [ ! -d "$SORTED" ]; then
  "$BIN" build --source "$FD/base.parquet" --column vector --payload category,ts,region \
    --sort-by category --out "$SORTED" --nlist "$NLIST" --json > "$SORTED.build.json"
fi
sql() { "$PY" -c 'import json,sys; print(next(f["sql"] for f in json.load(open(sys.argv[1])) if f["name"] == sys.argv[2]))' "$FD/filters.json" "$1"; }
io() { # label index [filter]
  local label="$1" index="$2"; shift 2
  "$BIN" search --index "$index" --queries "$Q" --k 10 --nprobe "$NPROBE" --warm --batch-size 1 \
    --threads 1 --json --stats "$@" | "$PY" -c '
import json, sys
rows = [json.loads(l)["stats"] for l in sys.stdin]
keys = ["bytes", "rounds", "row_groups_read", "row_groups_pruned", "rows_matched", "codes_scored",
        "pages_read", "pages_pruned", "page_bytes", "lists_probed"]
print(sys.argv[1], json.dumps({k: round(sum(r[k] for r in rows) / len(rows), 1) for k in keys}))' "$label"
}
BASE="$RESULTS/$DATASET-filter-rabitq4"
io "no-filter" "$BASE"
for f in ts1 ts01 reg1 cat1; do io "$f" "$BASE" --filter "$(sql $f)"; done
io "no-filter sorted-by-category" "$SORTED"
for f in cat1 cat01; do io "$f sorted-by-category" "$SORTED" --filter "$(sql $f)"; done
