#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tuner's multi-worker tests (and for trying
# `servetune tune --storage postgresql://...` by hand).
#
#   scripts/postgres.sh start   # initdb (once) + start on 127.0.0.1; prints the URL
#   scripts/postgres.sh url     # prints the URL of the running server
#   scripts/postgres.sh stop    # fast shutdown (the data dir stays under .cache/postgres)
#   scripts/postgres.sh wipe    # stop and delete the data dir
#
# Data lives in /tmp/servetune-postgres-<checkout hash> ($SERVETUNE_PG_DIR to change); trust auth on loopback only. As root, the server runs as the
# `postgres` system user (PostgreSQL refuses to run as root). Binaries: $PG_BIN, else
# /usr/lib/postgresql/15/bin, else whatever initdb is on PATH; when none is found and we may
# use apt-get, the `postgresql` package is installed.
# Port: $SERVETUNE_PG_PORT, else a free one chosen at first start and kept in the data dir.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Under /tmp, not the checkout: as root the server runs as `postgres`, which cannot enter a
# checkout below a private home directory (e.g. /root, mode 700).
BASE="${SERVETUNE_PG_DIR:-${TMPDIR:-/tmp}/servetune-postgres-$(printf %s "$ROOT" | cksum | cut -d' ' -f1)}"
DATA="$BASE/data"
PORT_FILE="$BASE/port"
LOG="$BASE/server.log"
DB=servetune
DB_USER=servetune

find_bin() {
  if [[ -n "${PG_BIN:-}" && -x "$PG_BIN/initdb" ]]; then echo "$PG_BIN"; return; fi
  for dir in /usr/lib/postgresql/*/bin; do
    [[ -x "$dir/initdb" ]] && { echo "$dir"; return; }
  done
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return; fi
  return 1
}

install_pg() {
  echo "postgres.sh: PostgreSQL server binaries not found; installing the postgresql package" >&2
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo -n"
  $sudo apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >&2
}

as_owner() {
  # Run a PostgreSQL binary as the data dir's owner (postgres when we are root).
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 - <<'PY'
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

port() {
  if [[ -n "${SERVETUNE_PG_PORT:-}" ]]; then echo "$SERVETUNE_PG_PORT"; elif [[ -f "$PORT_FILE" ]]; then cat "$PORT_FILE"; else return 1; fi
}

url() {
  echo "postgresql://$DB_USER@127.0.0.1:$(port)/$DB"
}

running() {
  [[ -f "$DATA/postmaster.pid" ]] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

start() {
  BIN="$(find_bin)" || { install_pg; BIN="$(find_bin)"; } || { echo "postgres.sh: no PostgreSQL after install" >&2; exit 1; }
  mkdir -p "$BASE"
  if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || { echo "postgres.sh: running as root needs a 'postgres' user (apt-get install postgresql creates it)" >&2; exit 1; }
    chown postgres "$BASE"
  fi
  if [[ ! -f "$DATA/PG_VERSION" ]]; then
    as_owner "$BIN/initdb" -D "$DATA" -U "$DB_USER" --auth=trust -E UTF8 >"$BASE/initdb.log" 2>&1 \
      || { cat "$BASE/initdb.log" >&2; exit 1; }
  fi
  [[ -f "$PORT_FILE" || -n "${SERVETUNE_PG_PORT:-}" ]] || free_port >"$PORT_FILE"
  local p; p="$(port)"
  if ! running; then
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
      -o "-p $p -c listen_addresses=127.0.0.1 -k $BASE -c max_connections=200 -c fsync=off" start >/dev/null \
      || { tail -n 30 "$LOG" >&2; exit 1; }
  fi
  as_owner "$BIN/psql" -h 127.0.0.1 -p "$p" -U "$DB_USER" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1 \
    || as_owner "$BIN/createdb" -h 127.0.0.1 -p "$p" -U "$DB_USER" "$DB"
  url
}

stop() {
  BIN="$(find_bin)" || exit 0
  if running; then as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null; fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) BIN="$(find_bin)"; running || { echo "postgres.sh: not running (scripts/postgres.sh start)" >&2; exit 1; }; url ;;
  wipe) stop; rm -rf "$BASE" ;;
  *) echo "usage: $0 start|stop|url|wipe" >&2; exit 2 ;;
esac
