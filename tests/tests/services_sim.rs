//! Services on a simulated cluster, end to end through the real binary and a hosted API on
//! SQLite. The simulated kubelet runs each replica as a local HTTP server on its `$PORT`, and
//! the ClusterIP Service really answers on `127.43.x.y:PORT`, so what a service serves is read
//! outside Anycloud: over TCP, and from the processes (found by a marker in their command line).
//!
//! - deploy `web` (2 replicas of a Python server answering its `VERSION`): `running`, its status
//!   shows revision 1, the address and the ClusterIP; a job on the same cluster fetches a page
//!   through `$WEB_SERVICE_HOST:$WEB_SERVICE_PORT`;
//! - upgrade to v2: it serves v2 and no process of v1 is left;
//! - upgrade to a revision that exits 1, and to one that never listens (a 5 s progress deadline):
//!   each rolls back and ends `failed` with its cause (the exit code; the deadline), the service
//!   `running` on revision 2 again, while a client polling the ClusterIP during the whole upgrade
//!   saw no failed request and only v2;
//! - a SIGKILL of the API and its restart: a client polling the ClusterIP every 20 ms meanwhile
//!   sees no failed request (the cluster's kube-proxy is a process of its own, which the restarted
//!   API finds again rather than starting another);
//! - a SIGKILL of the API during an upgrade: v2's processes keep running through it, and after the
//!   restart the upgrade ends upgraded (it serves v3);
//! - the cluster's delete is refused while the service exists; terminate: the record stays
//!   `terminated`, no process is left; then the delete is accepted.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anycloud_tests::e2e::{self, Api};
use serde_json::Value;

/// How long a `--wait` may take before the test fails.
const WAIT: Duration = Duration::from_secs(120);

fn status(api: &Api, name: &str) -> Value {
    let out = api.cli(&["--json", "status", name]);
    out.expect_code(0);
    out.json()
}

/// A hosted API on the simulated cloud with a ready one-worker cluster `demo`.
fn api_with_cluster() -> Api {
    Api::start_hosted("services").with_demo_cluster(&[])
}

/// One GET of `http://addr/`: the body, or why it failed.
fn get(addr: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect(addr).map_err(|err| format!("connect: {err}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n").map_err(|err| format!("write: {err}"))?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|err| format!("read: {err}"))?;
    match answer.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.0 200") => Ok(body.to_owned()),
        _ => Err(format!("answer: {answer:?}")),
    }
}

/// A client polling `addr` every 20 ms until stopped: every answer (or failure) it saw.
struct Poller {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Result<String, String>>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Poller {
    fn start(addr: &str) -> Self {
        let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (addr, flag, log) = (addr.to_owned(), stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let answer = get(&addr);
                log.lock().unwrap().push(answer);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Self { stop, seen, thread }
    }

    fn stop(self) -> Vec<Result<String, String>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        Arc::try_unwrap(self.seen).unwrap().into_inner().unwrap()
    }
}

/// The answers, all `Ok(version)`, and at least a few of them.
fn only(seen: &[Result<String, String>], version: &str) {
    assert!(seen.len() > 10, "the poller made only {} requests", seen.len());
    let other: Vec<_> = seen.iter().filter(|answer| answer.as_deref() != Ok(version)).collect();
    assert!(
        other.is_empty(),
        "{} of {} answers were not {version}: {:?}",
        other.len(),
        seen.len(),
        &other[..other.len().min(5)]
    );
}

/// The service's server processes (the kubelet's wrapping shells aside).
fn servers(marker: &str) -> Vec<u32> {
    e2e::processes_with(marker)
        .into_iter()
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default().starts_with(b"python3\0"))
        .collect()
}

fn revision(detail: &Value, number: i64) -> &Value {
    detail["revisions"].as_array().unwrap().iter().find(|revision| revision["number"] == number).unwrap()
}

#[test]
fn services_deploy_serve_upgrade_roll_back_and_end_on_a_simulated_cluster() {
    let mut api = api_with_cluster();

    // ---- Deploy: running, with its address; the cluster's delete is refused.
    // Every revision runs the same command (an upgrade changes the image, variables, replicas):
    // the marker finds the service's replicas, whatever their revision.
    let m1 = "anycloud-test-web".to_owned();
    let out = api.cli(&[
        "service",
        "acme/web:1",
        "--cluster",
        "demo",
        "-i",
        "web",
        "--replicas",
        "2",
        "-e",
        "VERSION=v1",
        "--progress-deadline",
        "30s",
        "--wait",
        "--",
        "python3",
        "-c",
        e2e::VERSION_SERVER,
        &m1,
    ]);
    out.expect_code(0);
    let detail = status(&api, "web");
    assert_eq!(detail["state"], "running", "{detail:#}");
    assert_eq!(detail["deployment"]["kind"], "service");
    assert_eq!(detail["deployment"]["revision"], 1);
    assert_eq!(detail["address"]["dns_name"], "web.anycloud.svc.cluster.local");
    assert_eq!(detail["address"]["port"], 8080);
    let ip = detail["address"]["cluster_ip"].as_str().unwrap().to_owned();
    assert!(ip.starts_with("127.43."), "{ip}");
    let addr = format!("{ip}:8080");
    assert_eq!(get(&addr).unwrap(), "v1");
    assert_eq!(servers(&m1).len(), 2, "two replicas of v1 run");
    let shown = api.cli(&["status", "web"]);
    shown.expect_code(0);
    for words in
        ["running, revision 1 serves", "web.anycloud.svc.cluster.local:8080", &ip, "live Pod health is not shown"]
    {
        assert!(shown.stdout.contains(words), "status does not say {words:?}:\n{}", shown.stdout);
    }
    api.cli(&["wait", "deployment/web"]).expect_code(0);
    let refused = api.cli(&["cluster", "delete", "demo"]);
    refused.expect_code(3).expect_stderr("CLUSTER_IN_USE").expect_stderr("web");

    // ---- A job on the same cluster fetches a page through the Service's variables.
    let fetch = "import os, urllib.request; print(urllib.request.urlopen('http://%s:%s/' % (os.environ['WEB_SERVICE_HOST'], os.environ['WEB_SERVICE_PORT'])).read().decode())";
    api.cli(&["job", "python:3.12", "--cluster", "demo", "-i", "fetch", "--wait", "--", "python3", "-c", fetch])
        .expect_code(0);
    assert_eq!(api.cli(&["logs", "fetch"]).stdout, "v1\n");

    // ---- Upgrade to v2: it serves v2, and no replica of v1 is left.
    let out = api.cli(&["deployment", "upgrade", "web", "--image", "acme/web:2", "-e", "VERSION=v2", "--wait"]);
    out.expect_code(0);
    let detail = status(&api, "web");
    assert_eq!((detail["state"].as_str(), detail["deployment"]["revision"].as_i64()), (Some("running"), Some(2)));
    assert_eq!(revision(&detail, 1)["result"], "superseded");
    assert_eq!(revision(&detail, 2)["result"], "running");
    assert_eq!(get(&addr).unwrap(), "v2");
    e2e::wait_until(WAIT, "v1's processes to go", || (servers(&m1).len() == 2).then_some(()));

    // ---- Upgrade to a revision that exits 1: rolled back, failed with the exit code; v2 served
    // throughout, and the service runs revision 2 again.
    let poller = Poller::start(&addr);
    let out = api.cli(&["deployment", "upgrade", "web", "-e", "MODE=crash", "-e", "VERSION=v3", "--wait"]);
    let seen = poller.stop();
    out.expect_code(1);
    assert!(out.stdout.contains("revision 3 failed"), "{}", out.stdout);
    only(&seen, "v2");
    let detail = status(&api, "web");
    assert_eq!((detail["state"].as_str(), detail["deployment"]["revision"].as_i64()), (Some("running"), Some(2)));
    let third = revision(&detail, 3);
    assert_eq!(third["result"], "failed", "{detail:#}");
    let cause = third["reason"].as_str().unwrap();
    assert!(cause.contains("revision 3's container") && cause.contains("code 1"), "{third:#}");
    assert!(detail["deployment"]["reason"].as_str().unwrap().contains("revision 2 serves"), "{detail:#}");
    let shown = api.cli(&["status", "web"]).stdout;
    assert!(shown.contains("failed: step `wait_available` failed: revision 3's container"), "{shown}");

    // ---- Upgrade to a revision that never listens: the deadline rolls it back.
    let poller = Poller::start(&addr);
    let out = api.cli(&[
        "deployment",
        "upgrade",
        "web",
        "-e",
        "MODE=mute",
        "-e",
        "VERSION=v4",
        "--progress-deadline",
        "5s",
        "--wait",
    ]);
    let seen = poller.stop();
    out.expect_code(1);
    only(&seen, "v2");
    let detail = status(&api, "web");
    assert_eq!((detail["state"].as_str(), detail["deployment"]["revision"].as_i64()), (Some("running"), Some(2)));
    let fourth = revision(&detail, 4);
    assert_eq!(fourth["result"], "failed", "{detail:#}");
    assert!(fourth["reason"].as_str().unwrap().contains("progress deadline of 5s"), "{fourth:#}");
    e2e::wait_until(WAIT, "the mute revision's processes to go", || (servers(&m1).len() == 2).then_some(()));

    // ---- A SIGKILL of the API and its restart, the service at rest: its ClusterIP answers every
    // request meanwhile, as a real cluster's kube-proxy does without its control plane.
    let proxies = api.data_dir().join("sim-kubelet").join(".kube-proxy");
    let proxy = e2e::processes_with(&proxies.display().to_string());
    assert_eq!(proxy.len(), 1, "one kube-proxy process serves the cluster: {proxy:?}");
    let poller = Poller::start(&addr);
    std::thread::sleep(Duration::from_millis(500));
    api.kill();
    std::thread::sleep(Duration::from_secs(1));
    api.restart();
    status(&api, "web");
    std::thread::sleep(Duration::from_millis(1500));
    let seen = poller.stop();
    only(&seen, "v2");
    assert_eq!(
        e2e::processes_with(&proxies.display().to_string()),
        proxy,
        "the same kube-proxy serves after the restart"
    );

    // ---- A SIGKILL of the API during an upgrade: v2 keeps running through it; the upgrade
    // ends upgraded after the restart.
    let v2: Vec<u32> = servers(&m1);
    api.cli(&["deployment", "upgrade", "web", "-e", "VERSION=v5"]).expect_code(0);
    std::thread::sleep(Duration::from_millis(300));
    api.kill();
    let alive = servers(&m1);
    assert!(v2.iter().all(|pid| alive.contains(pid)), "v2's replicas {v2:?} died with the API: {alive:?}");
    api.restart();
    e2e::wait_until(WAIT, "the upgrade to revision 5 to settle", || {
        let detail = status(&api, "web");
        let fifth = revision(&detail, 5)["result"].as_str().unwrap_or_default().to_owned();
        matches!(fifth.as_str(), "running" | "failed" | "rolled-back").then_some(detail)
    });
    let detail = status(&api, "web");
    assert_eq!(detail["state"], "running", "{detail:#}");
    let serving = detail["deployment"]["revision"].as_i64().unwrap();
    assert!(serving == 5 || serving == 2, "{detail:#}");
    let expected = if serving == 5 { "v5" } else { "v2" };
    e2e::wait_until(WAIT, "the Service to answer", || (get(&addr).ok()? == expected).then_some(()));

    // ---- Terminate: the record stays `terminated`, nothing runs; then the cluster's delete is accepted.
    api.cli(&["terminate", "web", "--wait"]).expect_code(0);
    let detail = status(&api, "web");
    assert_eq!(detail["state"], "terminated", "{detail:#}");
    assert!(servers(&m1).is_empty());
    api.cli(&["wait", "deployment/web"]).expect_code(1);
    let listed = api.cli(&["--json", "service", "list"]);
    listed.expect_code(0);
    assert_eq!(listed.json()["deployments"].as_array().unwrap().len(), 1);
    api.cli(&["cluster", "delete", "demo", "--wait"]).expect_code(0);
    e2e::wait_until(WAIT, "the cluster's kube-proxy to exit", || {
        e2e::processes_with(&proxies.display().to_string()).is_empty().then_some(())
    });
}
