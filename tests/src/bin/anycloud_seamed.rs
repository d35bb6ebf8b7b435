//! `anycloud-seamed`: the `anycloud` binary with the test seams its environment asks for. The
//! test suite runs it where a test needs a seam; the `anycloud` binary itself reads none of
//! these variables (a test checks that they are not even in it), so no seam can be switched on
//! in production. Every API it serves announces its seams (stdout, its log, `api status`).
//!
//! | variable | seam |
//! | --- | --- |
//! | `ANYCLOUD_TEST_SIMULATED_KUBE` | base URL of a simulated Kubernetes that serves every cluster's control plane |
//! | `ANYCLOUD_TEST_PAUSE_AFTER_LAUNCH_MS` | pause between a launch call's answer and its step's checkpoint |
//! | `ANYCLOUD_TEST_PAUSE_IN_SECRET_APPLY_MS` | pause between a job's Secrets and its Job in `job.run`'s `apply` |
//! | `ANYCLOUD_TEST_HOSTED_API_ADDRESS` | the address every hosted API's VM is reached at (where the tests' VM runner serves it) |
//! | `ANYCLOUD_TEST_EXEC_IDLE_LIMIT_MS` | the exec idle limit |
//! | `ANYCLOUD_TEST_FOLLOW_GAP_MS` | pause between a follower's read of the run and its read of the events |

use std::time::Duration;

use anycloud_cli::Seams;
use anycloud_workflows::seams::TestSeams;

fn main() -> std::process::ExitCode {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let millis = |name: &str| var(name).and_then(|ms| ms.parse().ok()).map(Duration::from_millis);
    let seams = Seams {
        api: TestSeams {
            simulated_kube: var("ANYCLOUD_TEST_SIMULATED_KUBE"),
            pause_after_launch: millis("ANYCLOUD_TEST_PAUSE_AFTER_LAUNCH_MS"),
            pause_in_secret_apply: millis("ANYCLOUD_TEST_PAUSE_IN_SECRET_APPLY_MS"),
            hosted_api_address: var("ANYCLOUD_TEST_HOSTED_API_ADDRESS"),
            exec_idle_limit: millis("ANYCLOUD_TEST_EXEC_IDLE_LIMIT_MS"),
        },
        follow_gap: millis("ANYCLOUD_TEST_FOLLOW_GAP_MS"),
    };
    anycloud_cli::main(seams)
}
