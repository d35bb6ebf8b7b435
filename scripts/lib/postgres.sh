# shellcheck shell=bash
#
# scripts/lib/postgres.sh — make a PostgreSQL server available for the tests.
#
# Sourced by scripts/test. Provides `ensure_postgres`, which exports
# ANYCLOUD_TEST_DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/test)
# or returns non-zero. The tests never skip PostgreSQL.
#
# Order of preference:
#   1. ANYCLOUD_TEST_DATABASE_URL already set  -> used as is.
#   2. A server answering at 127.0.0.1:5432    -> database `test` (created if
#      missing), user `postgres`, or `root` if `postgres` cannot connect.
#   3. A private server: initdb into "${ANYCLOUD_PG_DIR:-/var/tmp/anycloud-pg}/data"
#      (trust auth, superuser `postgres`), listening on 127.0.0.1 only on a free
#      port (55432 preferred), unix socket inside the data dir. An existing data
#      dir is reused, and started if not running. Debian's `postgresql` package
#      is installed with apt-get if initdb/pg_ctl cannot be found. The server is
#      left running (stop it with: pg_ctl -D <data dir> stop, as user postgres
#      when running as root).
#
# Environment knobs:
#   ANYCLOUD_TEST_DATABASE_URL  use this database, do nothing else.
#   ANYCLOUD_PG_DIR             private server base dir (default /var/tmp/anycloud-pg);
#                               holds data/ (data dir + socket) and postgres.log.
#   ANYCLOUD_PG_PORT            preferred port of the private server (default 55432);
#                               the next free port is used if it is taken.
#   ANYCLOUD_PG_FORCE_PRIVATE=1 skip the 127.0.0.1:5432 probe and always use a
#                               private server (for testing this script).
#   CI=true                     failures print a CI-oriented error.
#
# Works under `set -euo pipefail` in the sourcing script.

_pg_log() {
    printf '[test] postgres: %s\n' "$*" >&2
}

# True if something accepts TCP connections on 127.0.0.1:$1.
_pg_port_open() {
    local port=$1
    if command -v timeout >/dev/null 2>&1; then
        timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$port" 2>/dev/null
    else
        bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$port" 2>/dev/null
    fi
}

# True if a PostgreSQL server answers on 127.0.0.1:$1.
_pg_server_answers() {
    local port=$1
    if command -v pg_isready >/dev/null 2>&1; then
        pg_isready -q -t 3 -h 127.0.0.1 -p "$port" >/dev/null 2>&1
    else
        _pg_port_open "$port"
    fi
}

# _pg_psql PSQL PORT USER DB SQL — run one statement; prints unaligned tuples.
# Never prompts for a password.
_pg_psql() {
    local psql=$1 port=$2 user=$3 db=$4 sql=$5
    PGCONNECT_TIMEOUT=5 "$psql" -X -w -q -t -A -v ON_ERROR_STOP=1 \
        -h 127.0.0.1 -p "$port" -U "$user" -d "$db" -c "$sql" 2>/dev/null
}

# _pg_ensure_db PSQL PORT USER — make sure database `test` exists and accepts
# `select 1` as USER. Returns non-zero if USER cannot get there.
_pg_ensure_db() {
    local psql=$1 port=$2 user=$3
    if _pg_psql "$psql" "$port" "$user" test 'select 1' >/dev/null; then
        return 0
    fi
    # Database missing (or user lacks access): connect to a maintenance db.
    local maint
    for maint in postgres template1; do
        if _pg_psql "$psql" "$port" "$user" "$maint" 'select 1' >/dev/null; then
            _pg_log "database test missing on 127.0.0.1:$port; creating it as $user"
            # Ignore failure here (e.g. a concurrent run created it); re-check below.
            _pg_psql "$psql" "$port" "$user" "$maint" 'CREATE DATABASE test' >/dev/null || true
            _pg_psql "$psql" "$port" "$user" test 'select 1' >/dev/null
            return
        fi
    done
    return 1
}

# Path of a psql binary: PATH first, then the given bin dir.
_pg_find_psql() {
    local bindir=${1:-}
    if command -v psql >/dev/null 2>&1; then
        command -v psql
    elif [[ -n $bindir && -x $bindir/psql ]]; then
        printf '%s\n' "$bindir/psql"
    else
        return 1
    fi
}

# Try the machine's server at 127.0.0.1:5432. Sets _PG_URL on success.
_pg_try_default_server() {
    local port=5432
    if ! _pg_server_answers "$port"; then
        _pg_log "no server answering at 127.0.0.1:$port"
        return 1
    fi
    _pg_log "server answering at 127.0.0.1:$port"
    local psql
    if ! psql=$(_pg_find_psql); then
        _pg_log "psql not found; assuming user postgres and database test exist"
        _PG_URL="postgres://postgres@127.0.0.1:$port/test"
        return 0
    fi
    local user
    for user in postgres root; do
        _pg_log "checking 'select 1' as user $user on database test"
        if _pg_ensure_db "$psql" "$port" "$user"; then
            _PG_URL="postgres://$user@127.0.0.1:$port/test"
            return 0
        fi
        _pg_log "cannot connect as user $user"
    done
    _pg_log "server at 127.0.0.1:$port is not usable (no trust access for postgres or root)"
    return 1
}

# Print the directory holding initdb and pg_ctl: PATH first, then the newest
# /usr/lib/postgresql/*/bin.
_pg_find_bindir() {
    local initdb pgctl
    if initdb=$(command -v initdb 2>/dev/null) && pgctl=$(command -v pg_ctl 2>/dev/null); then
        initdb=$(readlink -f -- "$initdb")
        pgctl=$(readlink -f -- "$pgctl")
        if [[ $(dirname -- "$initdb") == "$(dirname -- "$pgctl")" ]]; then
            dirname -- "$initdb"
            return 0
        fi
    fi
    local dir
    while IFS= read -r dir; do
        if [[ -x $dir/initdb && -x $dir/pg_ctl ]]; then
            printf '%s\n' "$dir"
            return 0
        fi
    done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k5,5Vr)
    return 1
}

_pg_install_debian_postgresql() {
    if [[ $(id -u) -ne 0 ]]; then
        _pg_log "initdb/pg_ctl not found and not running as root; install PostgreSQL" \
            "(e.g. sudo apt-get install -y postgresql) and re-run"
        return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        _pg_log "initdb/pg_ctl not found and apt-get is unavailable; install PostgreSQL server binaries"
        return 1
    fi
    _pg_log "initdb/pg_ctl not found; installing Debian package postgresql (apt-get)"
    if ! apt-get update >&2; then
        _pg_log "apt-get update failed"
        return 1
    fi
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2; then
        _pg_log "apt-get install postgresql failed"
        return 1
    fi
}

# Run a command as the owner of the private cluster: `postgres` when we are
# root (initdb/pg_ctl refuse to run as root), ourselves otherwise.
_pg_as_owner() {
    if [[ $(id -u) -ne 0 ]]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u postgres -- "$@"
    else
        su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
    fi
}

# As root, make sure the `postgres` system user exists.
_pg_ensure_os_user() {
    [[ $(id -u) -eq 0 ]] || return 0
    if id -u postgres >/dev/null 2>&1; then
        return 0
    fi
    _pg_log "creating system user postgres (initdb refuses to run as root)"
    if ! useradd --system --user-group --no-create-home --shell /bin/sh postgres >&2; then
        _pg_log "useradd postgres failed"
        return 1
    fi
}

# pg_ctl start, without passing the lock fd on: the server would inherit it
# and hold the lock for as long as it runs.
_pg_start() {
    if [[ -n ${_PG_LOCK_FD:-} ]]; then
        _pg_as_owner "$@" >/dev/null 2>&1 {_PG_LOCK_FD}>&-
    else
        _pg_as_owner "$@" >/dev/null 2>&1
    fi
}

# First free 127.0.0.1 port at or above $1.
_pg_free_port() {
    local port=$1 last=$(($1 + 100))
    while ((port <= last)); do
        if ! _pg_port_open "$port"; then
            printf '%s\n' "$port"
            return 0
        fi
        port=$((port + 1))
    done
    return 1
}

_pg_show_log() {
    local logfile=$1
    if [[ -f $logfile ]]; then
        _pg_log "last lines of $logfile:"
        tail -n 20 -- "$logfile" >&2 || true
    fi
}

# Bring up the private server. Sets _PG_URL on success. Caller holds the lock.
_pg_private_server_locked() {
    local base=$1 bindir=$2
    local datadir=$base/data logfile=$base/postgres.log
    local pgctl=$bindir/pg_ctl initdb=$bindir/initdb

    if [[ $(id -u) -eq 0 ]]; then
        chown postgres: -- "$base"
        # Reused dirs may hold files created by root (e.g. the log); fix ownership.
        if [[ -n $(find "$base" ! -user postgres -print -quit 2>/dev/null) ]]; then
            chown -R postgres: -- "$base"
        fi
    fi

    # A data dir from another major version cannot be started; it only holds
    # throwaway test data, so re-create it.
    if [[ -f $datadir/PG_VERSION ]]; then
        local have want
        have=$(<"$datadir/PG_VERSION")
        want=$("$initdb" --version | sed -n 's/.*PostgreSQL) \([0-9]*\).*/\1/p')
        if [[ -n $want && $have != "$want" ]] &&
            ! _pg_as_owner "$pgctl" -D "$datadir" status >/dev/null 2>&1; then
            _pg_log "data dir $datadir is from PostgreSQL $have, binaries are $want; re-initialising"
            rm -rf -- "$datadir"
        fi
    fi

    if [[ ! -f $datadir/PG_VERSION ]]; then
        _pg_log "initialising data dir $datadir with $initdb (trust auth, user postgres)"
        if ! _pg_as_owner "$initdb" -D "$datadir" -U postgres --auth=trust \
            --encoding=UTF8 --locale=C >"$logfile.initdb" 2>&1; then
            _pg_log "initdb failed:"
            cat -- "$logfile.initdb" >&2 || true
            return 1
        fi
        rm -f -- "$logfile.initdb"
        # The socket lives in the data dir; its path must fit in sun_path (107 bytes).
        local sockdir=$datadir
        if ((${#datadir} + 16 > 107)); then
            _pg_log "data dir path too long for a unix socket; TCP only"
            sockdir=
        fi
        _pg_as_owner tee -a "$datadir/postgresql.conf" >/dev/null <<EOF

# Added by scripts/lib/postgres.sh (anycloud test server).
listen_addresses = '127.0.0.1'
unix_socket_directories = '$sockdir'
max_connections = 200
# Throwaway test data: trade durability for speed.
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    fi

    local port
    if _pg_as_owner "$pgctl" -D "$datadir" status >/dev/null 2>&1; then
        # Line 4 of postmaster.pid is the port.
        port=$(sed -n 4p "$datadir/postmaster.pid" 2>/dev/null || true)
        if [[ ! $port =~ ^[0-9]+$ ]]; then
            _pg_log "server in $datadir is running but its port is unknown"
            return 1
        fi
        _pg_log "private server already running (data dir $datadir, port $port)"
    else
        local preferred=${ANYCLOUD_PG_PORT:-55432}
        if ! port=$(_pg_free_port "$preferred"); then
            _pg_log "no free port in $preferred..$((preferred + 100))"
            return 1
        fi
        _pg_log "starting private server (data dir $datadir, 127.0.0.1:$port, log $logfile)"
        if ! _pg_start "$pgctl" -D "$datadir" -l "$logfile" -w -t 60 \
            -o "-p $port" start; then
            _pg_log "pg_ctl start failed"
            _pg_show_log "$logfile"
            return 1
        fi
    fi

    _pg_log "waiting for 127.0.0.1:$port to accept connections"
    local psql tries=0
    psql=$(_pg_find_psql "$bindir") || psql=
    until
        if [[ -n $psql ]]; then
            _pg_psql "$psql" "$port" postgres postgres 'select 1' >/dev/null
        else
            _pg_server_answers "$port"
        fi
    do
        tries=$((tries + 1))
        if ((tries >= 60)); then
            _pg_log "server on port $port did not become ready"
            _pg_show_log "$logfile"
            return 1
        fi
        sleep 1
    done

    if [[ -n $psql ]]; then
        if ! _pg_ensure_db "$psql" "$port" postgres; then
            _pg_log "cannot create/connect to database test on port $port"
            return 1
        fi
    elif [[ -x $bindir/createdb ]]; then
        _pg_log "creating database test"
        "$bindir/createdb" -w -h 127.0.0.1 -p "$port" -U postgres test 2>/dev/null || true
    else
        _pg_log "neither psql nor createdb found; cannot create database test"
        return 1
    fi
    _PG_URL="postgres://postgres@127.0.0.1:$port/test"
}

_pg_private_server() {
    local base=${ANYCLOUD_PG_DIR:-/var/tmp/anycloud-pg}
    local bindir
    if ! bindir=$(_pg_find_bindir); then
        _pg_install_debian_postgresql || return 1
        if ! bindir=$(_pg_find_bindir); then
            _pg_log "initdb/pg_ctl still not found after installing postgresql"
            return 1
        fi
    fi
    _pg_log "using PostgreSQL binaries in $bindir"
    _pg_ensure_os_user || return 1
    if ! mkdir -p -- "$base"; then
        _pg_log "cannot create $base"
        return 1
    fi

    # Serialise concurrent runs that share the same base dir.
    local rc=0
    _PG_LOCK_FD=
    if command -v flock >/dev/null 2>&1; then
        exec {_PG_LOCK_FD}>>"$base/.lock"
        if ! flock -w 180 "$_PG_LOCK_FD"; then
            _pg_log "timed out waiting for lock $base/.lock"
            exec {_PG_LOCK_FD}>&-
            unset _PG_LOCK_FD
            return 1
        fi
    fi
    _pg_private_server_locked "$base" "$bindir" || rc=$?
    if [[ -n $_PG_LOCK_FD ]]; then
        exec {_PG_LOCK_FD}>&-
    fi
    unset _PG_LOCK_FD
    return "$rc"
}

ensure_postgres() {
    if [[ -n ${ANYCLOUD_TEST_DATABASE_URL:-} ]]; then
        _pg_log "using preset ANYCLOUD_TEST_DATABASE_URL"
        export ANYCLOUD_TEST_DATABASE_URL
        return 0
    fi

    _PG_URL=
    if [[ ${ANYCLOUD_PG_FORCE_PRIVATE:-} == 1 ]]; then
        _pg_log "ANYCLOUD_PG_FORCE_PRIVATE=1: skipping 127.0.0.1:5432"
    elif _pg_try_default_server; then
        _pg_log "using server at 127.0.0.1:5432"
    fi

    if [[ -z $_PG_URL ]]; then
        if ! _pg_private_server; then
            if [[ ${CI:-} == true ]]; then
                _pg_log "ERROR: could not bring up a PostgreSQL server in CI." \
                    "The tests require PostgreSQL and never skip it. Provide a server" \
                    "at 127.0.0.1:5432 (trust auth for user postgres), make initdb/pg_ctl" \
                    "or apt-get available, or set ANYCLOUD_TEST_DATABASE_URL."
            else
                _pg_log "ERROR: could not bring up a PostgreSQL server; the tests require it." \
                    "Start one at 127.0.0.1:5432, install PostgreSQL, or set ANYCLOUD_TEST_DATABASE_URL."
            fi
            return 1
        fi
    fi

    export ANYCLOUD_TEST_DATABASE_URL=$_PG_URL
    unset _PG_URL
    _pg_log "ANYCLOUD_TEST_DATABASE_URL=$ANYCLOUD_TEST_DATABASE_URL"
}
