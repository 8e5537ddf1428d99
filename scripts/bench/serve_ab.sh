#!/usr/bin/env bash
# Two or more parqivf binaries serving the same index, one query per HTTP
# request (scripts/bench/serve_latency.py: a warming pass, then N measured
# queries at the index's default depth), in interleaved rounds so that a
# noisy host's drift hits each binary alike. MODE is how `serve` holds the
# index: `storage` (--warm --postings-cache-size 0: every query's codes and
# re-rank pages read from the local Parquet files) or `codes`
# (--preload codes).
#
# usage: scripts/bench/serve_ab.sh INDEX DATASET MODE ROUNDS BIN...
#   env: BENCH_DATA (./bench-data), PY (python with numpy), N (1000),
#        PORT (8094)
set -euo pipefail
cd "$(dirname "$0")/../.."
INDEX="$1"; DATASET="$2"; MODE="$3"; ROUNDS="$4"; shift 4
DATA="${BENCH_DATA:-$PWD/bench-data}/$DATASET"
PY="${PY:-python3}"; N="${N:-1000}"; PORT="${PORT:-8094}"
case "$MODE" in
  storage) flags=(--warm --postings-cache-size 0) ;;
  codes) flags=(--preload codes) ;;
  *) echo "MODE is storage or codes, not $MODE" >&2; exit 2 ;;
esac
SERVER=""; trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null' EXIT
find "$INDEX" -type f -exec cat {} + > /dev/null
for round in $(seq 1 "$ROUNDS"); do
  for bin in "$@"; do
    "$bin" serve --index "i=$INDEX" --addr "127.0.0.1:$PORT" --workers 1 "${flags[@]}" > /dev/null 2>&1 &
    SERVER=$!
    for _ in $(seq 1 600); do
      curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null && break
      sleep 0.1
    done
    echo "round $round $bin $MODE: $("$PY" scripts/bench/serve_latency.py "http://127.0.0.1:$PORT/v1/indexes/i/search" \
      "$DATA/query.npy" "$DATA/gt.npy" --n "$N")"
    kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""
  done
done
