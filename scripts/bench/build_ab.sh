#!/usr/bin/env bash
# Two or more parqivf binaries building the same default index in
# interleaved rounds (issue 26, build time), so that a noisy host's drift
# hits each binary alike. Per build: user + sys CPU seconds and wall seconds
# (/usr/bin/time), the train, assign and write stages, and one sha256 over the
# postings, quantizer.json and calibration.json, so that a change meant to
# keep the bytes can be seen to keep them.
#
# usage: scripts/bench/build_ab.sh DATASET NLIST ROUNDS BIN...
#   env: BENCH_DATA (./bench-data)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATASET="$1"; NLIST="$2"; ROUNDS="$3"; shift 3
DATA="${BENCH_DATA:-$PWD/bench-data}/$DATASET"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  for bin in "$@"; do
    rm -rf "$WORK/idx"
    if ! /usr/bin/time -f "%U %S %e" -o "$WORK/time" \
      "$bin" build --source "$DATA/base.npy" --out "$WORK/idx" --nlist "$NLIST" > "$WORK/log" 2>&1; then
      cat "$WORK/log" >&2; exit 1
    fi
    stages=$(sed -n 's/^parqivf build: \(train\|assign\|write\): done in \(.*\) s$/\1 \2/p' "$WORK/log" | tr '\n' ' ')
    digest=$(cd "$WORK/idx" && find . \( -name '*.parquet' -o -name quantizer.json -o -name calibration.json \) \
      | sort | xargs cat | sha256sum | cut -c1-12)
    read -r user sys wall < "$WORK/time"
    echo "round $round $bin: cpu $(echo "$user + $sys" | bc) s wall $wall s (${stages% }) bytes $digest"
  done
done
