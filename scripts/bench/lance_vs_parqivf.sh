#!/usr/bin/env bash
# parqivf next to Lance (IVF_PQ with refine) on the same emulated S3, at the
# same time to first byte (issue 27): an S3 emulator fast enough not to be
# the bottleneck (s3s-fs, from crates.io: `cargo install s3s-fs --features
# binary`) behind scripts/bench/delay_proxy.py, which holds every request for
# a drawn time to first byte whatever the client. Both indexes are written
# through the emulator's own port (no delay), then queried through the proxy:
#   parqivf  `serve` one query per HTTP request, storage-resident (--warm) and
#            --preload codes; and a new `parqivf search` process per query
#   Lance    one query per call, warm (one dataset object) and cold (a new
#            dataset object per query; scripts/bench/lance_query.py)
# Prints one JSON line per (system, mode) with p50/p99 ms and recall@10.
#
# usage: scripts/bench/lance_vs_parqivf.sh DATASET NLIST NPROBE LANCE_NPROBES LANCE_SUBVECTORS [NQ] [TTFB_MS]
#   env: BENCH_DATA (./bench-data), S3S (s3s-fs binary; default on PATH),
#        PY (python with numpy), LANCE_PY (python with pylance, numpy, pyarrow),
#        BIN (target/release/parqivf), CODES (rabitq4), TAIL (e.g. 0.01@500;
#        default none), PORT (18014: the emulator; +1 the proxy; +2 serve)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATASET="$1"; NLIST="$2"; NPROBE="$3"; LNPROBES="$4"; LSUB="$5"; NQ="${6:-100}"; TTFB="${7:-30}"
DATA="${BENCH_DATA:-$PWD/bench-data}/$DATASET"
S3S="${S3S:-s3s-fs}"; PY="${PY:-python3}"; LANCE_PY="${LANCE_PY:-python3}"
BIN="${BIN:-target/release/parqivf}"; CODES="${CODES:-rabitq4}"; TAIL="${TAIL:-0@0}"
PORT="${PORT:-18014}"; PROXY=$((PORT + 1)); SERVE=$((PORT + 2))
WORK="$(mktemp -d)"; PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/s3/bench"
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
"$S3S" --host 127.0.0.1 --port "$PORT" --access-key "$AWS_ACCESS_KEY_ID" \
  --secret-key "$AWS_SECRET_ACCESS_KEY" "$WORK/s3" > "$WORK/s3s.log" 2>&1 & PIDS+=($!)
"$PY" scripts/bench/delay_proxy.py "$PROXY" "127.0.0.1:$PORT" --ttfb-ms "$TTFB" --tail "$TAIL" \
  > "$WORK/proxy.log" 2>&1 & PIDS+=($!)
sleep 1
direct="http://127.0.0.1:$PORT"; delayed="http://127.0.0.1:$PROXY"
echo "# $(date -u) $DATASET nlist $NLIST, ttfb ${TTFB} ms, tail $TAIL; uptime: $(uptime)"

# Build both through the emulator's own port.
AWS_ENDPOINT="$direct" "$BIN" build --source "$DATA/base.npy" --out s3://bench/parqivf \
  --nlist "$NLIST" --codes "$CODES" --json > "$WORK/build.json"
echo "parqivf build: $(grep -o '"total": [0-9.]*' "$WORK/build.json")"
AWS_ENDPOINT="$direct" "$LANCE_PY" scripts/bench/lance_query.py build s3://bench/lance "$DATA" "$NLIST" "$LSUB"

# parqivf through the proxy.
for mode in storage codes; do
  # storage: no RAM tier (serve's default one would keep the lists of the
  # warming pass, which sends the measured queries).
  flags=(--warm --postings-cache-size 0); [ "$mode" = codes ] && flags=(--preload codes)
  AWS_ENDPOINT="$delayed" "$BIN" serve --index "i=s3://bench/parqivf" --addr "127.0.0.1:$SERVE" \
    "${flags[@]}" > "$WORK/serve.log" 2>&1 & pid=$!
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$SERVE/healthz" > /dev/null && break; sleep 0.2; done
  "$PY" scripts/bench/serve_latency.py "http://127.0.0.1:$SERVE/v1/indexes/i/search" "$DATA/query.npy" \
    "$DATA/gt.npy" --nprobe "$NPROBE" --n "$NQ" --label "parqivf $mode"
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
AWS_ENDPOINT="$delayed" "$PY" - "$BIN" "$DATA" "$NPROBE" "$WORK" <<'PY'
import json, subprocess, sys, time
import numpy as np
bin_, data, nprobe, work = sys.argv[1:]
q = np.load(f"{data}/query.npy").astype(np.float32)
gt = np.load(f"{data}/gt.npy")
lat, hits = [], 0
for i in range(20):
    np.save(f"{work}/q.npy", q[i : i + 1])
    t = time.perf_counter()
    out = subprocess.run([bin_, "search", "--index", "s3://bench/parqivf", "--queries", f"{work}/q.npy",
                          "--k", "10", "--nprobe", nprobe, "--json"], check=True, capture_output=True).stdout
    lat.append((time.perf_counter() - t) * 1000)
    ids = json.loads(out.splitlines()[0])["rowids"]
    hits += len(set(ids) & set(gt[i, :10].tolist()))
print(json.dumps({"label": "parqivf cold process", "nprobe": int(nprobe), "queries": len(lat),
                  "recall": round(hits / (10 * len(lat)), 4),
                  "p50_ms": round(float(np.percentile(lat, 50)), 3),
                  "p99_ms": round(float(np.percentile(lat, 99)), 3)}), flush=True)
PY
for np in ${LNPROBES//,/ }; do
  AWS_ENDPOINT="$delayed" "$LANCE_PY" scripts/bench/lance_query.py query s3://bench/lance "$DATA" "$np" 4 "$NQ"
done
tail -1 "$WORK/proxy.log" >&2 || true
