//! `scripts/lib/leftovers.sh`, the check that ends `scripts/test`: a process a test left running
//! (marked by the run's environment, or a simulated workload whose environment is cleared but
//! which runs in the run's temporary directory) fails the check and is killed; a run that left
//! nothing passes.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

/// Runs `script` in bash with the check loaded (failing on a leftover, after a grace of one
/// second); its stdout and status.
fn with_check(script: &str) -> (String, i32) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let full = format!(
        "set -u; log() {{ echo \"$*\"; }}; LEFTOVER_GRACE=1; LEFTOVERS=fail; source scripts/lib/leftovers.sh; \
         begin_test_run; {script}"
    );
    let out = Command::new("bash").arg("-c").arg(full).current_dir(root).output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code().unwrap_or(-1))
}

fn alive(pid: &str) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

#[test]
fn a_process_left_running_fails_the_check_and_is_killed() {
    // One marked by the environment, one with its environment cleared that runs in the run's
    // temporary directory (as a simulated workload does).
    let (out, code) = with_check(
        "test_env sleep 300 & marked=$!; mkdir -p \"$TEST_RUN_TMP/pod\"; \
         (cd \"$TEST_RUN_TMP/pod\" && exec env -i sleep 301) & cleared=$!; sleep 0.3; \
         echo \"pids $marked $cleared\"; if end_test_run; then echo passed; else echo failed; fi",
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("failed") && !out.contains("passed"), "{out}");
    assert!(out.contains("left these processes running"), "{out}");
    let pids: Vec<&str> = out.lines().find_map(|line| line.strip_prefix("pids ")).unwrap().split(' ').collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for pid in pids {
        assert!(!alive(pid), "process {pid} is still alive after the check: {out}");
    }
}

#[test]
fn a_run_that_left_nothing_passes() {
    let (out, code) = with_check(
        "test_env sleep 0.1; dir=$TEST_RUN_TMP; if end_test_run; then echo passed; fi; [ -e \"$dir\" ] || echo removed",
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("passed") && out.contains("removed"), "{out}");
}
