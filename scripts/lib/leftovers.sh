# shellcheck shell=bash
#
# scripts/lib/leftovers.sh — find the processes a test run left running.
#
# Sourced by scripts/test. The test commands run with `ANYCLOUD_TEST_RUN=<id>` in their
# environment and `TMPDIR` set to a directory of the run's own (see `begin_test_run`). A process
# the run started carries the marker in its environment, or (a simulated workload or kube-proxy,
# whose environment is cleared on purpose) runs in, or names on its command line, a path under
# that directory. `end_test_run` waits a few seconds for such processes to end, then lists, kills
# and counts those still alive: a test that leaves one behind fails the run.

# begin_test_run: exports TEST_RUN_ID and TEST_RUN_TMP (made here) for `test_env`.
begin_test_run() {
    TEST_RUN_ID="$(date +%s)-$$"
    TEST_RUN_TMP="$(mktemp -d "${TMPDIR:-/tmp}/anycloud-test-run.XXXXXX")"
    # As /tmp is: tests that run a tool as another user (initdb as `postgres`) reach their
    # directories in it; each test's own directory is still its user's alone (0700).
    chmod 1777 "$TEST_RUN_TMP"
    export TEST_RUN_ID TEST_RUN_TMP
}

# test_env CMD...: runs CMD marked as this run's, its temporary files in the run's directory.
test_env() {
    env ANYCLOUD_TEST_RUN="$TEST_RUN_ID" TMPDIR="$TEST_RUN_TMP" "$@"
}

# _leftover_pids: the pids of live processes that belong to this run (never this shell).
_leftover_pids() {
    local dir pid cwd cmdline
    for dir in /proc/[0-9]*; do
        pid=${dir#/proc/}
        [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
        # A zombie has ended; its parent merely has not reaped it.
        [[ $(awk '{print $3}' "$dir/stat" 2>/dev/null) == Z ]] && continue
        if tr '\0' '\n' 2>/dev/null <"$dir/environ" | grep -qx "ANYCLOUD_TEST_RUN=$TEST_RUN_ID"; then
            echo "$pid"
            continue
        fi
        cwd=$(readlink "$dir/cwd" 2>/dev/null || true)
        cmdline=$(tr '\0' ' ' 2>/dev/null <"$dir/cmdline" || true)
        if [[ $cwd == "$TEST_RUN_TMP"* || $cmdline == *"$TEST_RUN_TMP"* ]]; then
            echo "$pid"
        fi
    done
}

# end_test_run: 0 when nothing of the run is alive after a grace of LEFTOVER_GRACE seconds (10);
# else lists what is, kills it, and returns 1 (with LEFTOVERS=warn: says so and returns 0).
# Removes the run's temporary directory either way.
end_test_run() {
    local deadline=$((SECONDS + ${LEFTOVER_GRACE:-10})) pids pid
    while :; do
        pids=$(_leftover_pids)
        [[ -z $pids || $SECONDS -ge $deadline ]] && break
        sleep 1
    done
    if [[ -n $pids ]]; then
        local level=ERROR
        [[ ${LEFTOVERS:-fail} == warn ]] && level=WARNING
        log "$level: the tests left these processes running (a test must end every process it starts):"
        for pid in $pids; do
            log "  $pid: $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") (in $(readlink "/proc/$pid/cwd" 2>/dev/null))"
        done
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
    fi
    rm -rf -- "$TEST_RUN_TMP"
    [[ -z $pids || ${LEFTOVERS:-fail} == warn ]]
}
