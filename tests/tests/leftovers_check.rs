//! `scripts/lib/leftovers.sh`, the check that ends `scripts/test`: a process a test left running
//! (marked by the run's environment, or a simulated workload whose environment is cleared but
//! which runs in the run's temporary directory) fails the check and is killed; a run that left
//! nothing passes. Failing is the default, in the script and in `scripts/test`; `LEFTOVERS=warn`
//! (local debugging) names and kills a leftover but passes.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Runs `script` in bash with the check loaded (after a grace of one second), `LEFTOVERS` as
/// `settings` leave it; its stdout and status.
fn with_check_as(settings: &str, script: &str) -> (String, i32) {
    let full = format!(
        "set -u; log() {{ echo \"$*\"; }}; LEFTOVER_GRACE=1; unset LEFTOVERS; {settings} \
         source scripts/lib/leftovers.sh; begin_test_run; {script}"
    );
    let out = Command::new("bash").arg("-c").arg(full).current_dir(root()).output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code().unwrap_or(-1))
}

/// [`with_check_as`] with the default setting.
fn with_check(script: &str) -> (String, i32) {
    with_check_as("", script)
}

/// Leaves two processes behind (one marked by the environment, one with its environment cleared
/// that runs in the run's temporary directory, as a simulated workload does), runs the check,
/// and prints their pids and whether it passed.
const LEAVE_TWO: &str = "test_env sleep 300 & marked=$!; mkdir -p \"$TEST_RUN_TMP/pod\"; \
     (cd \"$TEST_RUN_TMP/pod\" && exec env -i sleep 301) & cleared=$!; sleep 0.3; \
     echo \"pids $marked $cleared\"; if end_test_run; then echo passed; else echo failed; fi";

/// The pids `LEAVE_TWO` printed are all dead.
fn all_killed(out: &str) {
    let pids: Vec<&str> = out.lines().find_map(|line| line.strip_prefix("pids ")).unwrap().split(' ').collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for pid in pids {
        assert!(!alive(pid), "process {pid} is still alive after the check: {out}");
    }
}

fn alive(pid: &str) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

#[test]
fn a_process_left_running_fails_the_check_and_is_killed() {
    let (out, code) = with_check(LEAVE_TWO);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("failed") && !out.contains("passed"), "{out}");
    assert!(out.contains("ERROR: the tests left these processes running"), "{out}");
    all_killed(&out);
}

#[test]
fn with_leftovers_warn_a_process_left_running_is_named_and_killed_but_passes() {
    let (out, code) = with_check_as("LEFTOVERS=warn;", LEAVE_TWO);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("passed") && !out.contains("failed"), "{out}");
    assert!(out.contains("WARNING: the tests left these processes running"), "{out}");
    all_killed(&out);
}

#[test]
fn scripts_test_fails_on_a_leftover_unless_told_to_warn() {
    let script = std::fs::read_to_string(root().join("scripts/test")).unwrap();
    let settings: Vec<&str> = script.lines().map(str::trim).filter(|line| line.starts_with("LEFTOVERS=")).collect();
    assert_eq!(settings, [r#"LEFTOVERS="${LEFTOVERS:-fail}""#], "scripts/test must fail on a leftover by default");
    assert!(script.contains("if ! end_test_run; then\n    exit 1"), "scripts/test must fail when the check does");
}

#[test]
fn a_run_that_left_nothing_passes() {
    let (out, code) = with_check(
        "test_env sleep 0.1; dir=$TEST_RUN_TMP; if end_test_run; then echo passed; fi; [ -e \"$dir\" ] || echo removed",
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("passed") && out.contains("removed"), "{out}");
}
