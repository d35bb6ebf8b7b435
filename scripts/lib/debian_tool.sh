# shellcheck shell=bash
#
# scripts/lib/debian_tool.sh — make a command-line tool the tests need available.
#
# Sourced by scripts/test. Provides `ensure_debian_tool COMMAND PACKAGE WHY`: a COMMAND already
# on PATH is used as is; otherwise Debian's PACKAGE is installed with apt-get (as root, or with
# sudo when it needs no password). Used for:
#   `kubectl` (kubernetes-client) the reference client pointed at a simulated cluster,
#              tests/tests/kubectl_sim.rs. Debian's is an older kubectl (1.20) that speaks only
#              SPDY for `exec`; that test then checks every other command and says it skipped exec.
#   `chromium`, `chromedriver` (chromium, chromium-driver) the headless browser and its WebDriver
#              that tests/tests/console_browser.rs drives through the web console.
#   `shellcheck` (shellcheck) lints every cloud-init script the workflows generate,
#              workflows/tests/cloud_init_sandbox.rs, which fails without it.
#
# Works under `set -euo pipefail` in the sourcing script.

ensure_debian_tool() {
    local command=$1 package=$2 why=$3
    if command -v "$command" >/dev/null 2>&1; then
        printf '[test] %s: using %s (for %s)\n' "$command" "$(command -v "$command")" "$why" >&2
        return 0
    fi
    local sudo=()
    if [[ $(id -u) != 0 ]]; then
        if sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            printf "[test] %s is missing and apt-get needs root; install Debian's %s\n" "$command" "$package" >&2
            return 1
        fi
    fi
    printf "[test] %s: installing Debian's %s (for %s)\n" "$command" "$package" "$why" >&2
    "${sudo[@]}" apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$package" >&2
    command -v "$command" >/dev/null 2>&1
}
