#!/usr/bin/env bash
# Query latency with S3-like time to first byte (issue 27): `parqivf serve`
# one query per HTTP request (scripts/bench/serve_latency.py: a pass to warm
# the footers, then the measured pass), and a new `parqivf search` process
# per query with nothing cached (cold), in front of an emulated store
# (`--store-latency`, `src/store/latency.rs`) at each time to first byte,
# without and with a 1 % tail of 500 ms. Serving modes:
#   storage  storage-resident (footers in RAM, postings read per query:
#            --postings-cache-size 0, as serve's default RAM tier would
#            keep the lists of the warming pass, the measured queries')
#   disk     storage-resident with a disk cache filled by POST …/warm (no RAM tier)
#   ram      serve's default: storage-resident with its RAM tier of decoded
#            lists (256 MiB an index), warmed by 500 other queries
#   codes    --preload codes (only the re-rank's vector pages per query)
#   codes-cold-disk  --preload codes with an empty disk cache, measured on
#            the first pass (no warming): every re-rank page a miss
# Prints one JSON line per (ttfb, tail, mode) with p50/p99 ms and recall,
# and the host's idle floor (serve_latency.py --idle-floor TTFB: a
# /healthz answered after the client idled one time to first byte).
#
# usage: scripts/bench/latency.sh INDEX DATASET NPROBE [NQ] [TTFBS]
#   NPROBE the lists a query probes, or "default" for the index's own depth
#   (its recall target 0.95 where it has a calibration);
#   INDEX a built index (e.g. from search_vs_faiss.sh), DATASET a folder of
#   gen_synth.py / gen_embed.py (query.npy, gt.npy); NQ queries (100) per
#   warm mode, 20 cold; TTFBS "0 30 60" (ms).
#   env: PY (python3 with numpy), BIN (target/release/parqivf), PORT (18791),
#        HEDGE (--hedge-after: auto, the default, off or a duration), MODES
#        ("storage disk ram codes"), TAILS ("none 1%": without and with the tail),
#        JITTER (0.2: each request's time to first byte drawn uniformly within
#        ± that share; 0 for a fixed one), CLIENT (serve_latency.py --client:
#        httplib, the default, or one-write)
#   INDEX may be an s3:// location (AWS_* in the environment, e.g. s3s-fs:
#   scripts/bench/lance_vs_parqivf.sh starts one); the emulated latency is
#   then in front of the S3 client.
set -euo pipefail
cd "$(dirname "$0")/../.."
INDEX="$1"; DATA="$2"; NPROBE="$3"; NQ="${4:-100}"; TTFBS="${5:-0 30 60}"
PY="${PY:-python3}"; BIN="${BIN:-target/release/parqivf}"; PORT="${PORT:-18791}"
HEDGE="${HEDGE:-auto}"; MODES="${MODES:-storage disk ram codes}"; TAILS="${TAILS:-none 1%}"
JITTER="${JITTER:-0.2}"; CLIENT="${CLIENT:-httplib}"
TOKEN="latency-bench-token-0123456789"
WORK="$(mktemp -d)"
trap 'kill "$SERVER" 2>/dev/null || true; rm -rf "$WORK"' EXIT
SERVER=""
echo "$TOKEN" > "$WORK/token"
URL="http://127.0.0.1:$PORT/v1/indexes/i"
# A local index is read into the page cache first: the emulated latency is
# what is measured, not the disk's.
[ -d "$INDEX" ] && find "$INDEX" -type f -exec cat {} + > /dev/null

serve() { # latency-spec extra-flags…
  local spec="$1"; shift
  "$BIN" ${spec:+--store-latency "$spec"} --hedge-after "$HEDGE" serve --index "i=$INDEX" --addr "127.0.0.1:$PORT" \
    --auth-token-file "$WORK/token" "$@" > "$WORK/serve.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null && return
    sleep 0.1
  done
  cat "$WORK/serve.log"; exit 1
}
stop() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

depth=(--nprobe "$NPROBE"); [ "$NPROBE" = default ] && depth=()
for ttfb in $TTFBS; do
  for t in $TAILS; do
    tail=""; [ "$t" = "1%" ] && tail=",tail=0.01@500ms"
    spec=""
    [ "$ttfb" != 0 ] || [ -n "$tail" ] && spec="ttfb=${ttfb}ms,jitter=$JITTER$tail,seed=1"
    label="ttfb=${ttfb}ms jitter=$JITTER${tail:+ tail 1%@500ms} hedge=$HEDGE"
    for mode in $MODES; do
      case "$mode" in
        storage) serve "$spec" --warm --postings-cache-size 0 ;;
        disk) rm -rf "$WORK/cache"; serve "$spec" --warm --postings-cache-size 0 --cache-dir "$WORK/cache"
              curl -sf -X POST -H "Authorization: Bearer $TOKEN" "$URL/warm" > /dev/null ;;
        ram) serve "$spec" --warm ;;
        codes) serve "$spec" --preload codes ;;
        codes-cold-disk) rm -rf "$WORK/cache"; serve "$spec" --preload codes --cache-dir "$WORK/cache" ;;
      esac
      novel=0; [ "$mode" = ram ] && novel=500
      warming=(--warm-novel "$novel"); [ "$mode" = codes-cold-disk ] && warming=(--no-warming)
      "$PY" scripts/bench/serve_latency.py "$URL/search" "$DATA/query.npy" "$DATA/gt.npy" \
        "${depth[@]}" --n "$NQ" --label "$label $mode" --token "$TOKEN" "${warming[@]}" --client "$CLIENT" \
        --idle-floor "$ttfb"
      stop
    done
    # Cold: a new process per query, nothing cached (open + footers + postings).
    "$PY" - "$BIN" "$INDEX" "$DATA" "$NPROBE" "$spec" "$label" "$WORK" "$HEDGE" <<'PY'
import json, subprocess, sys, time
import numpy as np
bin_, index, data, nprobe, spec, label, work, hedge = sys.argv[1:]
q = np.load(f"{data}/query.npy").astype(np.float32)
lat = []
for i in range(20):
    np.save(f"{work}/q.npy", q[i : i + 1])
    cmd = [bin_, "--hedge-after", hedge] + (["--store-latency", spec] if spec else []) + [
        "search", "--index", index, "--queries", f"{work}/q.npy", "--k", "10", "--json"] + (
        [] if nprobe == "default" else ["--nprobe", nprobe])
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    lat.append((time.perf_counter() - t) * 1000)
print(json.dumps({"label": f"{label} cold process", "nprobe": None if nprobe == "default" else int(nprobe), "queries": len(lat),
                  "p50_ms": round(float(np.percentile(lat, 50)), 3),
                  "p99_ms": round(float(np.percentile(lat, 99)), 3)}), flush=True)
PY
  done
done
