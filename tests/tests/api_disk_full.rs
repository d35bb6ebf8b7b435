//! The API on a full or read-only disk, from outside: its data directory is a small tmpfs of its
//! own (`anycloud_tests::tmpfs`, which needs root, as CI runs). Filled with a ballast file while
//! cluster creates run on the simulated cloud: writes answer `503 STORAGE_FULL` with
//! `Retry-After: 10` and change nothing, reads answer, health says `degraded` and `disk-full`;
//! the ballast removed, writes are taken again, every cluster becomes ready and the database
//! passes `PRAGMA integrity_check`. `api serve` refuses to start on a full or a read-only disk
//! (exit 2). A disk that turns read-only under a running API is not shown here: the kernel
//! refuses to remount a file system read-only while the API holds its database open for
//! writing (`EBUSY`), which the test checks.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api};
use anycloud_tests::tmpfs::Tmpfs;
use serde_json::{Value, json};
use sqlx::Connection;

const CLUSTERS: usize = 3;

fn health(api: &Api) -> Value {
    let answer = e2e::http(&api.url, "GET", "/v1/health", &[], b"");
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.json()
}

fn cluster_phase(api: &Api, name: &str) -> String {
    let out = api.cli(&["--json", "cluster", "status", name]);
    out.expect_code(0);
    out.json()["cluster"]["phase"].as_str().unwrap_or_default().to_owned()
}

fn new_credential(api: &Api, name: &str) -> e2e::HttpResponse {
    api.post_json("/v1/credentials", &json!({ "name": name, "provider": "sim" }))
}

/// `api serve` on this API's data directory, as a process that must exit: its code and stderr.
fn serve_once(api: &Api) -> (Option<i32>, String) {
    let out = api
        .command()
        .args(["api", "serve", "--id", &api.id, "--port", "0", "--data-dir"])
        .arg(api.data_dir())
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn integrity_check(api: &Api) -> String {
    e2e::block_on(async {
        let url = format!("sqlite://{}", api.sqlite_path().display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        let verdict: String = sqlx::query_scalar("PRAGMA integrity_check").fetch_one(&mut conn).await.unwrap();
        conn.close().await.unwrap();
        verdict
    })
}

#[test]
fn a_full_disk_refuses_writes_with_503_and_the_api_recovers_when_there_is_room() {
    let mut api = Api::start_hosted("diskfull");
    api.cli(&["credentials", "new", "sim", "--provider", "sim", "--wait"]).expect_code(0);
    // Move the data directory onto a 32 MiB tmpfs of its own, with the API stopped.
    api.terminate(Duration::from_secs(30));
    let aside = api.scratch().join("data");
    copy_dir(&api.data_dir(), &aside);
    let disk = Tmpfs::mount_on(&api.data_dir(), 32 << 20);
    copy_dir(&aside, &api.data_dir());
    api.restart();
    assert_eq!(health(&api), json!({ "status": "ok", "database": "reachable", "storage": "writable" }));

    // Cluster creates in flight, then the disk fills.
    let mut clusters: Vec<String> = (0..CLUSTERS).map(|n| format!("c{n}")).collect();
    for name in &clusters {
        api.cli(&e2e::sim_cluster_create(name, "sim", "1")).expect_code(0);
    }
    let ballast = disk.fill();
    let full_at = Instant::now();
    let mut n = 0;
    let refused = loop {
        let name = format!("late-{n}");
        n += 1;
        let answer = new_credential(&api, &name);
        if answer.status != 201 && answer.status != 200 {
            break answer;
        }
        assert!(full_at.elapsed() < Duration::from_secs(30), "no write was refused 30 s after the disk filled");
        std::thread::sleep(Duration::from_millis(20));
    };
    let refused_after = full_at.elapsed();
    assert_eq!((refused.status, refused.json()["error"]["code"].as_str()), (503, Some("STORAGE_FULL")), "{refused:?}");
    let retry_after = refused.headers.iter().find(|(name, _)| name == "retry-after").map(|(_, value)| value.as_str());
    assert_eq!(retry_after, Some("10"), "{refused:?}");
    let refused_name = format!("late-{}", n - 1);

    // The CLI says what happened; reads answer; health says why.
    let out = api.cli(&["credentials", "new", "while-full", "--provider", "sim"]);
    assert_ne!(out.code, 0, "{out}");
    out.expect_stderr("error[STORAGE_FULL]: ").expect_stderr("disk holding the API's database is full");
    let phases: Vec<String> = clusters.iter().map(|name| cluster_phase(&api, name)).collect();
    assert!(phases.iter().any(|phase| phase != "ready"), "every cluster was ready before the disk filled: {phases:?}");
    assert_eq!(health(&api), json!({ "status": "degraded", "database": "reachable", "storage": "disk-full" }));
    let names: Vec<String> =
        api.credentials().iter().map(|credential| credential["name"].as_str().unwrap().to_owned()).collect();
    assert!(!names.contains(&refused_name) && !names.contains(&"while-full".to_owned()), "{names:?}");

    // The kernel will not make it read-only under the running API.
    let remount = disk.remount("ro");
    assert!(remount.is_err(), "the disk was remounted read-only under the running API");

    // Full for a while (longer than a lease), then room again.
    std::thread::sleep(Duration::from_secs(5));
    ballast.remove();
    let room_at = Instant::now();
    let accepted_after = e2e::wait_until(Duration::from_secs(30), "a write accepted again", || {
        let answer = new_credential(&api, "after-room");
        (answer.status == 201 || answer.status == 200).then(|| room_at.elapsed())
    });
    clusters.sort();
    for name in &clusters {
        e2e::wait_until(Duration::from_secs(120), &format!("cluster {name} ready"), || {
            (cluster_phase(&api, name) == "ready").then_some(())
        });
    }
    let ready_after = room_at.elapsed();
    assert_eq!(health(&api)["status"], "ok");
    api.terminate(Duration::from_secs(30));
    assert_eq!(integrity_check(&api), "ok");

    // A full disk at start: `api serve` refuses, exit 2.
    let ballast = disk.fill();
    let (code, stderr) = serve_once(&api);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("STORAGE_FULL") && stderr.contains("is full"), "{stderr}");
    ballast.remove();

    // A read-only disk at start: refused too; writable again, the API starts.
    disk.remount("ro").unwrap();
    let (code, stderr) = serve_once(&api);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("STORAGE_READ_ONLY") && stderr.contains("read-only"), "{stderr}");
    disk.remount("rw").unwrap();
    api.restart();
    assert_eq!(health(&api)["storage"], "writable");
    for name in &clusters {
        assert_eq!(cluster_phase(&api, name), "ready");
    }
    api.terminate(Duration::from_secs(30));
    eprintln!(
        "api_disk_full: first 503 STORAGE_FULL {refused_after:?} after the disk filled; a write accepted again \
         {accepted_after:?} after the ballast was removed; {CLUSTERS} clusters ready {ready_after:?} after it"
    );
    drop(disk);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
