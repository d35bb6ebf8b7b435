# shellcheck shell=bash
#
# scripts/lib/moto.sh — make moto (a local fake of the AWS APIs) available for the tests.
#
# Sourced by scripts/test. Provides `ensure_moto`, which exports ANYCLOUD_TEST_MOTO_VENV: a
# Python virtualenv holding `bin/moto_server` (and boto3, for the tests' setup scripts). The
# tests start their own servers from it (`$ANYCLOUD_TEST_MOTO_VENV/bin/moto_server -H
# 127.0.0.1 -p PORT`); they never skip AWS: without moto they fail.
#
# Order of preference:
#   1. ANYCLOUD_TEST_MOTO_VENV already set and usable  -> used as is.
#   2. "${ANYCLOUD_VENV:-/var/tmp/anycloud-venv}" with moto_server, moto and boto3 -> reused.
#   3. Otherwise that venv is created with `python3 -m venv` (Debian's python3-venv is
#      installed with apt-get when the venv module is missing) and
#      `pip install 'moto[server,ec2,s3]>=5,<6'` runs in it.
#
# Environment knobs:
#   ANYCLOUD_TEST_MOTO_VENV  use this venv, do nothing else (must hold bin/moto_server).
#   ANYCLOUD_VENV            where to find or create the venv (default /var/tmp/anycloud-venv).
#   CI=true                  failing to get moto fails ensure_moto; elsewhere it is a warning
#                            (and the AWS tests fail with a clear message).
#
# Works under `set -euo pipefail` in the sourcing script.

_moto_log() {
    printf '[test] moto: %s\n' "$*" >&2
}

_MOTO_SPEC='moto[server,ec2,s3]>=5,<6'

# True if $1 is a venv with moto_server whose python imports moto and boto3.
_moto_usable() {
    local venv=$1
    [[ -x $venv/bin/moto_server && -x $venv/bin/python ]] || return 1
    "$venv/bin/python" -c 'import moto, boto3' >/dev/null 2>&1
}

_moto_version() {
    "$1/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null || printf 'unknown\n'
}

_moto_install_python3_venv() {
    if [[ $(id -u) -ne 0 ]]; then
        _moto_log "python3's venv module is missing and not running as root; install it" \
            "(e.g. sudo apt-get install -y python3-venv) and re-run"
        return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        _moto_log "python3's venv module is missing and apt-get is unavailable; install python3-venv"
        return 1
    fi
    _moto_log "python3's venv module is missing; installing Debian package python3-venv (apt-get)"
    if ! apt-get update >&2; then
        _moto_log "apt-get update failed"
        return 1
    fi
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv >&2; then
        _moto_log "apt-get install python3-venv failed"
        return 1
    fi
}

# Creates (or repairs) the venv $1 and installs moto in it. Caller holds the lock.
_moto_create_locked() {
    local venv=$1 python
    if _moto_usable "$venv"; then
        _moto_log "$venv was set up meanwhile (moto $(_moto_version "$venv"))"
        return 0
    fi
    if ! python=$(command -v python3); then
        _moto_log "python3 not found; install it (e.g. apt-get install -y python3 python3-venv)"
        return 1
    fi
    if [[ -e $venv && ! -f $venv/pyvenv.cfg && -n $(ls -A -- "$venv" 2>/dev/null) ]]; then
        _moto_log "$venv exists and is not a Python venv; set ANYCLOUD_VENV to another directory"
        return 1
    fi
    if [[ ! -x $venv/bin/pip ]]; then
        if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
            _moto_install_python3_venv || return 1
        fi
        # --clear: a venv left half made (e.g. without pip) is made again.
        _moto_log "creating venv $venv with $python"
        if ! "$python" -m venv --clear "$venv" >&2; then
            _moto_log "python3 -m venv failed"
            return 1
        fi
    fi
    _moto_log "installing $_MOTO_SPEC into $venv (pip)"
    if ! "$venv/bin/pip" install --disable-pip-version-check --quiet "$_MOTO_SPEC" >&2; then
        _moto_log "pip install $_MOTO_SPEC failed"
        return 1
    fi
    if ! _moto_usable "$venv"; then
        _moto_log "$venv still has no usable moto_server after pip install"
        return 1
    fi
    _moto_log "installed moto $(_moto_version "$venv") in $venv"
}

_moto_create() {
    local venv=$1 rc=0 lock_fd=
    if ! mkdir -p -- "$(dirname -- "$venv")"; then
        _moto_log "cannot create the parent directory of $venv"
        return 1
    fi
    # Serialise concurrent runs that share the venv.
    if command -v flock >/dev/null 2>&1; then
        exec {lock_fd}>>"$venv.lock"
        if ! flock -w 600 "$lock_fd"; then
            _moto_log "timed out waiting for lock $venv.lock"
            exec {lock_fd}>&-
            return 1
        fi
    fi
    _moto_create_locked "$venv" || rc=$?
    if [[ -n $lock_fd ]]; then
        exec {lock_fd}>&-
    fi
    return "$rc"
}

ensure_moto() {
    if [[ -n ${ANYCLOUD_TEST_MOTO_VENV:-} ]]; then
        if [[ -x $ANYCLOUD_TEST_MOTO_VENV/bin/moto_server ]]; then
            _moto_log "using preset ANYCLOUD_TEST_MOTO_VENV=$ANYCLOUD_TEST_MOTO_VENV"
            export ANYCLOUD_TEST_MOTO_VENV
            return 0
        fi
        _moto_log "preset ANYCLOUD_TEST_MOTO_VENV=$ANYCLOUD_TEST_MOTO_VENV has no bin/moto_server"
        if [[ ${CI:-} == true ]]; then
            _moto_log "ERROR: moto is required in CI"
            return 1
        fi
        _moto_log "WARNING: the AWS tests will fail"
        return 0
    fi

    local venv=${ANYCLOUD_VENV:-/var/tmp/anycloud-venv}
    if _moto_usable "$venv"; then
        _moto_log "reusing venv $venv (moto $(_moto_version "$venv"))"
    elif ! _moto_create "$venv"; then
        if [[ ${CI:-} == true ]]; then
            _moto_log "ERROR: could not set up moto in CI. The AWS tests require it and never skip it." \
                "Make python3 (with venv, or apt-get) and PyPI available, or set ANYCLOUD_TEST_MOTO_VENV" \
                "to a venv holding moto[server]."
            return 1
        fi
        _moto_log "WARNING: could not set up moto in $venv; the AWS tests will fail." \
            "Set ANYCLOUD_TEST_MOTO_VENV to a venv holding moto[server], or fix the error above."
        return 0
    fi
    export ANYCLOUD_TEST_MOTO_VENV=$venv
    _moto_log "ANYCLOUD_TEST_MOTO_VENV=$ANYCLOUD_TEST_MOTO_VENV"
}
