//! The API while its PostgreSQL is down: a request that needs the database answers `503
//! DATABASE_UNAVAILABLE` with `Retry-After` (not a 500) and changes nothing, the CLI says so,
//! `GET /v1/health` stays 200 and says `database: unreachable`, and once the server is back the
//! same API answers again without a restart.
//!
//! The server is the test's own (`initdb` into a temporary directory, on a free port), crashed
//! with `pg_ctl stop -m immediate` and started again, so that no other test's database is
//! touched. It runs in the default run (about 15 s), with PostgreSQL's binaries from the server
//! scripts/test finds or installs.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anycloud_tests::e2e::{self, Api};

/// A PostgreSQL server of the test's own.
struct PrivateServer {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
    _temp: tempfile::TempDir,
}

impl PrivateServer {
    fn create() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's binaries in /usr/lib/postgresql/*/bin")
            .filter_map(|entry| entry.ok().map(|entry| entry.path().join("bin")))
            .find(|bin| bin.join("initdb").exists())
            .expect("initdb");
        let temp = tempfile::tempdir().unwrap();
        if as_root() {
            // initdb and pg_ctl refuse root: the server runs as `postgres`.
            Command::new("chown").arg("postgres:").arg(temp.path()).status().unwrap();
        }
        let server = Self { dir: temp.path().join("data"), port: e2e::free_port(), bin, _temp: temp };
        server.run("initdb", &["-A", "trust", "-U", "postgres", "-D", &server.data()]);
        server
    }

    fn data(&self) -> String {
        self.dir.display().to_string()
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn start(&self) {
        let options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.data());
        let log = self.dir.join("server.log").display().to_string();
        self.run("pg_ctl", &["-D", &self.data(), "-o", &options, "-l", &log, "-w", "start"]);
    }

    /// Stops the server as a crash would.
    fn crash(&self) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]);
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let mut command = if as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        let status = command.args(args).stdout(Stdio::null()).status().unwrap();
        assert!(status.success(), "{tool} {args:?} failed");
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if self.dir.join("postmaster.pid").exists() {
            self.crash();
        }
    }
}

fn as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn health(api: &Api) -> serde_json::Value {
    let answer = e2e::http(&api.url, "GET", "/v1/health", &[], b"");
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.json()
}

#[test]
fn requests_during_a_database_outage_answer_503_and_change_nothing() {
    let server = PrivateServer::create();
    server.start();
    let mut api = Api::start_with("dbout", Some(server.url()));
    api.cli(&["credentials", "new", "before", "--provider", "sim", "--wait"]).expect_code(0);
    assert_eq!(health(&api), serde_json::json!({ "status": "ok", "database": "reachable" }));

    server.crash();
    let bearer = format!("Bearer {}", api.token());
    let answer = e2e::http(&api.url, "GET", "/v1/credentials", &[("Authorization", &bearer)], b"");
    assert_eq!(answer.status, 503, "{answer:?}");
    assert_eq!(answer.json()["error"]["code"], "DATABASE_UNAVAILABLE", "{answer:?}");
    assert!(answer.json()["error"]["message"].as_str().unwrap().contains("changed nothing"), "{answer:?}");
    assert!(answer.headers.iter().any(|(name, value)| name == "retry-after" && value == "2"), "{answer:?}");
    let out = api.cli(&["credentials", "new", "during", "--provider", "sim"]);
    assert_ne!(out.code, 0, "{out}");
    out.expect_stderr("error[DATABASE_UNAVAILABLE]: ");
    assert_eq!(health(&api), serde_json::json!({ "status": "degraded", "database": "unreachable" }));

    // Back: the same process answers again, and the refused request left nothing behind.
    server.start();
    e2e::wait_until(Duration::from_secs(15), "the API reaches its database again", || {
        (health(&api)["database"] == "reachable").then_some(())
    });
    let names: Vec<String> =
        api.credentials().iter().map(|credential| credential["name"].as_str().unwrap().to_owned()).collect();
    assert_eq!(names, ["before"]);
    api.cli(&["credentials", "new", "after", "--provider", "sim", "--wait"]).expect_code(0);
    api.terminate(Duration::from_secs(30));
}
