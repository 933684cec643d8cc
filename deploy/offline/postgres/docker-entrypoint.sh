#!/bin/bash
# The official postgres image's entrypoint, as far as NRT's compose file uses it: on the first start
# (an empty PGDATA) initdb with POSTGRES_USER (default postgres) and POSTGRES_PASSWORD (required),
# password authentication (scram-sha-256) for every network client, then the scripts in
# /docker-entrypoint-initdb.d (*.sh run, or sourced when not executable; *.sql through psql)
# against a server that listens on its Unix socket only; then postgres itself, as user postgres,
# listening on every address. Arguments: `postgres ...` (the default) or any other command.
set -Eeuo pipefail

if [ "${1:0:1}" = - ]; then
  set -- postgres "$@"
fi
if [ "$1" = postgres ] && [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA"
  chown postgres:postgres "$PGDATA"
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
fi

if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_USER:=postgres}"
  : "${POSTGRES_DB:=$POSTGRES_USER}"
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "error: the database is uninitialized and POSTGRES_PASSWORD is not set" >&2
    exit 1
  fi
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" >/dev/null
  rm -f "$pwfile"
  printf '\nhost all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=/var/run/postgresql" -w start >/dev/null
  export PGUSER="$POSTGRES_USER" PGHOST=/var/run/postgresql
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";' >/dev/null
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh)
        if [ -x "$f" ]; then echo "running $f"; "$f"; else echo "sourcing $f"; . "$f"; fi
        ;;
      *.sql) echo "running $f"; psql -v ON_ERROR_STOP=1 --dbname "$POSTGRES_DB" -f "$f" ;;
      *) [ -e "$f" ] && echo "ignoring $f" ;;
    esac
  done
  unset PGUSER PGHOST
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "PostgreSQL init process complete; ready for start up."
fi

if [ "$1" = postgres ]; then
  shift
  exec postgres -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql "$@"
fi
exec "$@"
