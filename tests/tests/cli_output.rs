//! The CLI behaves like a Unix tool when its reader goes away (`anycloud ... | head`): it ends
//! quietly with exit 0 instead of panicking on the broken pipe.

#![allow(clippy::unwrap_used)]

use std::process::Stdio;

use anycloud_tests::e2e::Api;

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let api = Api::start("pipes");
    api.cli(&["credentials", "new", "one", "--provider", "sim", "--wait"]).expect_code(0);
    for _ in 0..5 {
        let mut child = api
            .command()
            .args(["workflow", "list"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before the command has its answer from the API to print.
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
        assert!(!stderr.contains("panicked"), "stderr: {stderr}");
    }
}
