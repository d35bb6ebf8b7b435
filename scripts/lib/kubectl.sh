# shellcheck shell=bash
#
# scripts/lib/kubectl.sh — make `kubectl` available for the test that points the reference
# client at a simulated cluster (tests/tests/kubectl_sim.rs).
#
# Sourced by scripts/test. Provides `ensure_kubectl`: a `kubectl` already on PATH is used as
# is (these machines have one); otherwise Debian's `kubernetes-client` is installed with
# apt-get (as root, or with sudo when it needs no password). Debian's package is an older
# kubectl (1.20) that speaks only SPDY for `exec`; the test then checks every other command
# and says that it skipped `exec` and why.
#
# Works under `set -euo pipefail` in the sourcing script.

_kubectl_log() {
    printf '[test] kubectl: %s\n' "$*" >&2
}

ensure_kubectl() {
    if command -v kubectl >/dev/null 2>&1; then
        _kubectl_log "using $(command -v kubectl) ($(kubectl version --client 2>/dev/null | head -n 1))"
        return 0
    fi
    local sudo=()
    if [[ $(id -u) != 0 ]]; then
        if sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            _kubectl_log "kubectl is missing and apt-get needs root; install Debian's kubernetes-client"
            return 1
        fi
    fi
    _kubectl_log "installing Debian's kubernetes-client"
    "${sudo[@]}" apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq kubernetes-client >&2
    command -v kubectl >/dev/null 2>&1
}
