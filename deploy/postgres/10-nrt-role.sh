#!/bin/sh
# First start of the postgres container only (docker-entrypoint-initdb.d): the services' role.
# `nrt` owns the database `nrt` and is no superuser; the superuser `postgres` keeps its own password.
set -eu
psql -v ON_ERROR_STOP=1 --username postgres --dbname postgres \
  --set=role_password="$NRT_POSTGRES_PASSWORD" <<'SQL'
CREATE ROLE nrt LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'role_password';
CREATE DATABASE nrt OWNER nrt;
SQL
psql -v ON_ERROR_STOP=1 --username postgres --dbname nrt -c 'ALTER SCHEMA public OWNER TO nrt;'
