#!/usr/bin/env bash
# The test command (README): sets up what the tests need, then runs them all.
#  - a Python venv (.venv-test) with pyarrow, duckdb and moto: the independent
#    readers of our Parquet, and moto_server as a real S3 API on loopback;
#  - moto_server on 127.0.0.1 with a free port and a bucket, stopped by PID at exit;
#  - PostgreSQL (scripts/postgres.sh: apt's `postgresql` when missing, a
#    throwaway server on 127.0.0.1, destroyed at exit) for the DuckLake
#    suite's PostgreSQL catalogs (PARQIVF_PG_CONNINFO); the log lists every
#    DuckLake test as `<test>::sqlite` and `<test>::postgres`;
#  - `cargo test` over the whole crate (unit, integration, doc tests);
#  - the Python package (python/): built by maturin into the venv from the
#    same target folder and profile as the tests (only the extension crate
#    compiles again), then its pytest suite, Ray builds included.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${PARQIVF_VENV:-$PWD/.venv-test}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# DuckDB is pinned: the ducklake and postgres extension wheels exist per
# DuckDB release (tests/ducklake/pg_lake.py loads them, nothing is downloaded).
if ! "$VENV/bin/python" -c "import pyarrow, duckdb, moto, flask_cors, pytest, ray.data, duckdb_extension_ducklake, duckdb_extension_postgres_scanner; assert duckdb.__version__ == '1.4.4'" 2>/dev/null \
  || [ ! -x "$VENV/bin/maturin" ]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "pyarrow>=15" "duckdb==1.4.4" "duckdb-extension-ducklake==1.4.4" \
    "duckdb-extension-postgres-scanner==1.4.4" "moto[server]>=5" numpy \
    "maturin>=1.9,<2" "pytest>=8" "ray[data]>=2.40"
fi
export PARQIVF_PYTHON="$VENV/bin/python"
export PARQIVF_REQUIRE_INTEROP=1

# moto_server: a real S3 API on loopback for the store-conformance suite.
PORT="$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT" >"${TMPDIR:-/tmp}/parqivf-moto-$PORT.log" 2>&1 &
MOTO_PID=$!
PG_DIR="${TMPDIR:-/tmp}/parqivf-pg-$$"
trap 'kill "$MOTO_PID" 2>/dev/null || true; wait "$MOTO_PID" 2>/dev/null || true; PGPREP_DIR="$PG_DIR" bash scripts/postgres.sh destroy 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  "$VENV/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/')" 2>/dev/null && break
  sleep 0.1
done
export AWS_ENDPOINT="http://127.0.0.1:$PORT" AWS_ALLOW_HTTP=true AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
export PARQIVF_S3_BUCKET=parqivf-test
"$VENV/bin/python" - <<PY
import urllib.request
req = urllib.request.Request("http://127.0.0.1:$PORT/parqivf-test", method="PUT")
urllib.request.urlopen(req)
print("moto_server on 127.0.0.1:$PORT (pid $MOTO_PID), bucket parqivf-test")
PY

# PostgreSQL for the DuckLake catalogs (every DuckLake test runs on SQLite and
# on PostgreSQL; each PostgreSQL case uses a schema of its own).
eval "$(PGPREP_DIR="$PG_DIR" bash scripts/postgres.sh)"
export PARQIVF_PG_CONNINFO="$PG_CONNINFO"
unset PGPASSWORD PG_URL PG_CONNINFO
echo "PostgreSQL on 127.0.0.1:$PGPORT ($PG_DIR)"

# The distance and assignment kernels first, with their output: the log names
# the SIMD path simsimd dispatches to on this CPU (haswell, skylake, sapphire,
# …) and the assignment kernels tested; each tolerance is derived from the
# kernel's documented precision, which holds on every path.
cargo test --locked --lib -- distance:: kmeans::assign:: --nocapture --test-threads 1

# The store-conformance suite next, with its output, so the log shows each
# backend (memory, local, S3 on moto) passing; then everything else.
cargo test --locked --test it -- store_conformance:: --nocapture --test-threads 1
cargo test --locked "$@" -- --skip on_every_backend

# The Python package: the extension built into the venv (dev profile, the
# target folder above), then pytest over every function, error and the Ray
# build. pytest exits 5 when it collects no test, which fails this script.
(cd python && VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" "$VENV/bin/maturin" develop --locked --quiet)
"$VENV/bin/python" -m pytest python/tests -ra -p no:cacheprovider
