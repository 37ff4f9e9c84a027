#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for tests and benchmarks: install (Debian), start, stop.
#   scripts/dev/postgres.sh start   -> prints the SQLAlchemy URL on stdout
#   scripts/dev/postgres.sh stop
set -euo pipefail
PORT="${UTU_PG_PORT:-55432}"
DIR="${UTU_PG_DIR:-/tmp/utu-pg-$PORT}"
DB=utu_test

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

ensure_installed() {
  if [ -z "$(pg_bin)" ]; then
    if [ "$(id -u)" = 0 ]; then
      echo "installing PostgreSQL from Debian..." >&2
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) >&2
    else
      echo "error: PostgreSQL is not installed; run: sudo apt-get install postgresql" >&2; exit 2
    fi
  fi
}

# initdb refuses to run as root: run the server as the 'postgres' user then.
as_owner() { if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }

start() {
  ensure_installed
  local bin; bin="$(pg_bin)"
  if ! as_owner "$bin/pg_ctl" -D "$DIR" status >/dev/null 2>&1; then
    if [ ! -f "$DIR/PG_VERSION" ]; then
      mkdir -p "$DIR"; [ "$(id -u)" = 0 ] && chown postgres "$DIR"
      as_owner "$bin/initdb" -D "$DIR" -U postgres --auth=trust >/dev/null
    fi
    as_owner "$bin/pg_ctl" -D "$DIR" -l "$DIR/server.log" -w -o "-h 127.0.0.1 -p $PORT -k $DIR -c max_connections=300 -c fsync=off" start >/dev/null
  fi
  as_owner "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1 \
    || as_owner "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
  echo "postgresql+psycopg://postgres@127.0.0.1:$PORT/$DB"
}

stop() {
  local bin; bin="$(pg_bin)"
  [ -n "$bin" ] && [ -d "$DIR" ] && as_owner "$bin/pg_ctl" -D "$DIR" -m fast stop >/dev/null 2>&1 || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
