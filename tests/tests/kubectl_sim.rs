//! The reference client judges the simulated Kubernetes: `kubectl`, pointed at a simulated
//! cluster with the kubeconfig `anycloud cluster kubeconfig --output` writes, works on a job that
//! Anycloud submitted: `get nodes`, `get jobs,pods -o wide`, `describe job`, `logs` (and `-f`),
//! `exec` (its exit code is the remote command's) and `delete job` (after which Anycloud's run
//! sees the Job gone and ends the job `failed`, saying so); and, as against a real apiserver,
//! `get --raw /version/`, `get nodes -o yaml`, `apply -f`, `create job` and `wait`.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anycloud_tests::e2e::{self, Api};

struct Kubectl<'a> {
    kubeconfig: &'a Path,
}

impl Kubectl<'_> {
    /// Runs `kubectl ARGS`: (exit code, stdout, stderr).
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs (scripts/test installs it)");
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
    }

    /// Runs `kubectl ARGS`, which must succeed, and returns its stdout.
    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.run(args);
        assert_eq!(code, 0, "kubectl {}: exit {code}\nstdout:\n{stdout}\nstderr:\n{stderr}", args.join(" "));
        stdout
    }
}

/// Whether this kubectl execs over WebSocket (1.30 and later); older ones speak only SPDY.
fn speaks_websocket_exec() -> bool {
    let out = Command::new("kubectl").args(["version", "--client", "-o", "json"]).output().unwrap();
    let version: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let minor = version["clientVersion"]["minor"].as_str().unwrap_or("0").trim_end_matches('+').parse::<u32>();
    minor.is_ok_and(|minor| minor >= 30)
}

#[test]
fn kubectl_works_on_a_job_anycloud_submitted() {
    let api = Api::start_hosted("kubectl");
    api.cli(&["credentials", "new", "sim", "--provider", "sim", "--wait"]).expect_code(0);
    let mut create = e2e::sim_cluster_create("demo", "sim", "2");
    create.push("--wait");
    api.cli(&create).expect_code(0);
    let kubeconfig = api.scratch().join("kubeconfig");
    api.cli(&["cluster", "kubeconfig", "demo", "--output", kubeconfig.to_str().unwrap()]).expect_code(0);
    let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the kubeconfig holds the cluster's admin token: mode {mode:o}");
    let kubectl = Kubectl { kubeconfig: &kubeconfig };

    let script = "i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo line $i; sleep 0.1; done";
    api.cli(&["job", "python:3.12", "--cluster", "demo", "-i", "seen", "--", "sh", "-c", script]).expect_code(0);
    e2e::wait_until(Duration::from_secs(60), "the job to run", || {
        (api.cli(&["--json", "status", "seen"]).json()["state"] == "running").then_some(())
    });

    let nodes = kubectl.ok(&["get", "nodes"]);
    for node in ["cp", "w0", "w1"] {
        assert!(nodes.lines().any(|line| line.starts_with(node) && line.contains("Ready")), "{nodes}");
    }
    let version: serde_json::Value = serde_json::from_str(&kubectl.ok(&["get", "--raw", "/version/"])).unwrap();
    assert_eq!(version["major"], "1", "{version}");
    let nodes_yaml = kubectl.ok(&["get", "nodes", "-o", "yaml"]);
    assert_eq!(nodes_yaml.matches("      bootID: ").count(), 3, "{nodes_yaml}");
    let manifest = api.scratch().join("applied.yaml");
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: applied\nspec:\n  template:\n    spec:\n      \
               restartPolicy: Never\n      containers:\n      - name: main\n        image: busybox\n        command: [\"true\"]\n";
    std::fs::write(&manifest, job).unwrap();
    assert_eq!(kubectl.ok(&["apply", "-f", manifest.to_str().unwrap()]), "job.batch/applied created\n");
    let made = kubectl.ok(&["create", "job", "made", "--image=busybox", "--", "true"]);
    assert_eq!(made, "job.batch/made created\n");
    kubectl.ok(&["wait", "--for=condition=complete", "job/applied", "job/made", "--timeout=60s"]);

    let wide = kubectl.ok(&["get", "jobs,pods", "-o", "wide"]);
    assert!(wide.contains("job.batch/seen-1"), "{wide}");
    let pod_line = wide.lines().find(|line| line.starts_with("pod/seen-1-")).unwrap_or_else(|| panic!("{wide}"));
    assert!(pod_line.contains("Running") && (pod_line.contains(" w0 ") || pod_line.contains(" w1 ")), "{pod_line}");
    let pod = pod_line.split_whitespace().next().unwrap().trim_start_matches("pod/").to_owned();

    let described = kubectl.ok(&["describe", "job", "seen-1"]);
    for words in ["Name:", "seen-1", "anycloud.dev/deployment=seen", "python:3.12", "Pods Statuses:"] {
        assert!(described.contains(words), "`describe job` lacks {words:?}:\n{described}");
    }

    let logs = kubectl.ok(&["logs", "job/seen-1"]);
    assert!(logs.starts_with("line 1\nline 2\n"), "{logs}");
    let follow = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["logs", "-f", &pod, "--tail", "1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut follow = follow;
    let _ = follow.kill();
    let followed = String::from_utf8_lossy(&follow.wait_with_output().unwrap().stdout).into_owned();
    assert!(followed.lines().count() >= 5, "`logs -f` streamed {followed:?} in 2 s (10 lines a second are written)");

    assert!(
        speaks_websocket_exec(),
        "this kubectl execs only over SPDY (before 1.30), which the simulated API does not speak: the exec check \
         needs kubectl 1.30 or later (scripts/lib/debian_tool.sh installs Debian's)"
    );
    let (code, stdout, _) = kubectl.run(&["exec", &pod, "--", "sh", "-c", "echo from $HOSTNAME; exit 2"]);
    assert_eq!(code, 2, "kubectl exec exits with the remote command's code");
    assert_eq!(stdout, format!("from {pod}\n"));

    kubectl.ok(&["delete", "job", "seen-1"]);
    // As on a real cluster, the Job goes at once and its Pod after its grace period.
    e2e::wait_until(Duration::from_secs(30), "the Job and its Pod to be gone", || {
        (!kubectl.ok(&["get", "jobs,pods"]).contains("seen-1")).then_some(())
    });
    api.cli(&["wait", "deployment/seen", "--timeout", "60s"]).expect_code(1);
    let detail = api.cli(&["--json", "status", "seen"]).json();
    assert_eq!(detail["state"], "failed", "{detail:#}");
    let reason = detail["deployment"]["reason"].as_str().unwrap();
    assert!(reason.contains("deleted outside Anycloud"), "{reason}");
}
