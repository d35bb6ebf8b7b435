# shellcheck shell=bash
#
# scripts/lib/shellcheck.sh — make `shellcheck` available for the test that lints every cloud-init
# script the workflows generate (workflows/tests/cloud_init_sandbox.rs), which fails without it.
#
# Sourced by scripts/test. Provides `ensure_shellcheck`: a `shellcheck` already on PATH is used as
# is; otherwise Debian's `shellcheck` is installed with apt-get (as root, or with sudo when it
# needs no password).
#
# Works under `set -euo pipefail` in the sourcing script.

_shellcheck_log() {
    printf '[test] shellcheck: %s\n' "$*" >&2
}

ensure_shellcheck() {
    if command -v shellcheck >/dev/null 2>&1; then
        _shellcheck_log "using $(command -v shellcheck) ($(shellcheck --version | sed -n 's/^version: //p'))"
        return 0
    fi
    local sudo=()
    if [[ $(id -u) != 0 ]]; then
        if sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            _shellcheck_log "shellcheck is missing and apt-get needs root; install Debian's shellcheck"
            return 1
        fi
    fi
    _shellcheck_log "installing Debian's shellcheck"
    "${sudo[@]}" apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq shellcheck >&2
    command -v shellcheck >/dev/null 2>&1
}
