//! Secrets end to end, through the real binary, a hosted API on SQLite, the simulated cloud and
//! kubectl:
//!
//! - a job that takes `--secret db` prints its value; the Job's and the Pod's YAML (kubectl)
//!   carry a reference and no value; the value is in no API log, no `status --json`, no
//!   `inspect`, no database file; `secret set` then `resubmit` runs with the new version and says
//!   which;
//! - `secret delete` is refused while a service takes the secret, naming it, and accepted after
//!   `terminate`, after which kubectl lists none of the service's Secrets;
//! - bad input (names and keys Kubernetes refuses, more than 1 MiB, a secret that does not
//!   exist, a registry secret given as an env secret and the reverse) is refused with its code and
//!   stores nothing.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use anycloud_tests::e2e::{self, Api, Output};
use serde_json::Value;

/// The value of the secret's first version, and of its second: long and unique enough to
/// search for anywhere.
const FIRST: &str = "first-value-7Qz3v9Kx";
const SECOND: &str = "second-value-Hn4w2Lp8";

/// A hosted API on the simulated cloud with a ready one-worker cluster `demo`, and a
/// kubeconfig for it.
fn api_with_cluster(id: &str) -> (Api, PathBuf) {
    let api = Api::start_hosted(id).with_demo_cluster(&[]);
    let kubeconfig = api.scratch().join("kubeconfig");
    api.cli(&["cluster", "kubeconfig", "demo", "--output", kubeconfig.to_str().unwrap()]).expect_code(0);
    (api, kubeconfig)
}

/// `kubectl ARGS` on the cluster, which must succeed: its stdout.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubectl {}: {}\n{stdout}\n{stderr}", args.join(" "), out.status);
    stdout.into_owned()
}

fn status(api: &Api, name: &str) -> Value {
    let out = api.cli(&["--json", "status", name]);
    out.expect_code(0);
    out.json()
}

fn secrets(api: &Api) -> Value {
    let out = api.cli(&["--json", "secret", "list"]);
    out.expect_code(0);
    out.json()
}

/// A refusal: its exit code (2 for what does not exist, 3 for the rest) and its stable code, in
/// `--json`'s error.
fn refused(out: &Output, code: &str) {
    out.expect_code(if code.ends_with("NOT_FOUND") { 2 } else { 3 });
    assert_eq!(out.json_error()["error"]["code"], code, "{out}");
}

/// The API's database files (SQLite and its WAL) hold no `value` in the clear.
fn not_in_database(api: &Api, value: &str) {
    let database = api.sqlite_path();
    for path in [database.clone(), PathBuf::from(format!("{}-wal", database.display()))] {
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(
                !bytes.windows(value.len()).any(|window| window == value.as_bytes()),
                "{value} in {}",
                path.display()
            );
        }
    }
}

#[test]
fn a_secret_reaches_its_job_by_reference_and_is_shown_nowhere() {
    let (api, kubeconfig) = api_with_cluster("secrets");

    // ---- A secret from a literal; listed with its keys and version, never its value.
    let literal = format!("DB_PASSWORD={FIRST}");
    let out = api.cli(&["secret", "new", "db", "--from-literal", &literal, "--from-literal", "DB_USER=batch"]);
    out.expect_code(0);
    assert!(out.stdout.contains("secret db is at version 1 (keys DB_PASSWORD, DB_USER)"), "{out}");
    let listed = secrets(&api);
    assert_eq!(listed[0]["name"], "db", "{listed:#}");
    assert_eq!(listed[0]["version"], 1, "{listed:#}");
    assert_eq!(listed[0]["keys"], serde_json::json!(["DB_PASSWORD", "DB_USER"]), "{listed:#}");

    // ---- A job that prints it: it completes and its log has the value.
    let script = "echo \"user=$DB_USER password=$DB_PASSWORD\"";
    let out = api.cli(&[
        "job",
        "python:3.12",
        "--cluster",
        "demo",
        "-i",
        "reader",
        "--secret",
        "db",
        "--wait",
        "--",
        "sh",
        "-c",
        script,
    ]);
    out.expect_code(0);
    assert!(out.stdout.contains("it takes secret(s) db (version 1)"), "{out}");
    let logs = api.cli(&["logs", "reader"]);
    assert_eq!(logs.stdout, format!("user=batch password={FIRST}\n"), "{logs}");

    // ---- The Job and the Pod carry a reference, never the value.
    let job_yaml = kubectl(&kubeconfig, &["get", "job", "reader-1", "-o", "yaml"]);
    assert!(job_yaml.contains("secretRef") && job_yaml.contains("name: reader.1.db.v1"), "{job_yaml}");
    let pod_yaml = kubectl(&kubeconfig, &["get", "pods", "-l", "anycloud.dev/deployment=reader", "-o", "yaml"]);
    assert!(pod_yaml.contains("secretRef"), "{pod_yaml}");
    for yaml in [&job_yaml, &pod_yaml] {
        assert!(!yaml.contains(FIRST), "a value in Kubernetes' spec:\n{yaml}");
    }
    let secret_yaml = kubectl(&kubeconfig, &["get", "secret", "reader.1.db.v1", "-o", "yaml"]);
    assert!(secret_yaml.contains("anycloud.dev/attempt: \"1\""), "labelled with its attempt:\n{secret_yaml}");
    assert!(
        secret_yaml.contains("kind: Job") && secret_yaml.contains("name: reader-1"),
        "owned by its Job:\n{secret_yaml}"
    );

    // ---- Nowhere else: status, inspect, the API's log, its database.
    let detail = status(&api, "reader");
    assert_eq!(detail["deployment"]["secrets"], serde_json::json!([{ "name": "db", "version": 1 }]), "{detail:#}");
    let run = detail["workflow"]["id"].as_str().unwrap().to_owned();
    let inspected = api.inspect(&run, true).to_string();
    let verbose = api.cli(&["status", "reader", "--verbose"]);
    assert!(verbose.stdout.contains("secrets    db (version 1)"), "{verbose}");
    for shown in [detail.to_string(), inspected, verbose.stdout.clone(), api.logs()] {
        assert!(!shown.contains(FIRST), "the value is shown:\n{shown}");
    }
    not_in_database(&api, FIRST);

    // ---- A new version; the resubmit takes it and says so.
    let out = api.cli_stdin(&["secret", "set", "db"], format!("DB_PASSWORD={SECOND}\nDB_USER=batch\n").as_bytes());
    out.expect_code(0);
    assert!(out.stdout.contains("version 2"), "{out}");
    let out = api.cli(&["resubmit", "reader", "--wait"]);
    out.expect_code(0);
    assert!(out.stdout.contains("it takes secret(s) db (version 2)"), "{out}");
    assert_eq!(api.cli(&["logs", "reader"]).stdout, format!("user=batch password={SECOND}\n"));
    not_in_database(&api, SECOND);
    assert!(!api.logs().contains(SECOND));
    // The first attempt's Job went, and its Secret with it.
    let left = kubectl(&kubeconfig, &["get", "secrets", "-o", "name"]);
    assert!(!left.contains("reader.1.db") && left.contains("reader.2.db.v2"), "{left}");

    // ---- A service takes it: the delete is refused, naming it; after terminate it is accepted.
    let out = api.cli(&[
        "service",
        "acme/web:1",
        "--cluster",
        "demo",
        "-i",
        "web",
        "--secret",
        "db",
        "-e",
        "VERSION=v1",
        "--wait",
        "--",
        "python3",
        "-c",
        e2e::VERSION_SERVER,
        "anycloud-test-secret-web",
    ]);
    out.expect_code(0);
    let listed = secrets(&api);
    assert_eq!(listed[0]["used_by"], serde_json::json!(["web"]), "{listed:#}");
    let out = api.cli(&["--json", "secret", "delete", "db"]);
    refused(&out, "SECRET_IN_USE");
    assert!(out.stderr.contains("web"), "{out}");
    assert!(kubectl(&kubeconfig, &["get", "secrets", "-o", "name"]).contains("web.db.v2"));
    api.cli(&["terminate", "web", "--wait"]).expect_code(0);
    let left = kubectl(&kubeconfig, &["get", "secrets", "-o", "name"]);
    assert!(!left.contains("web."), "the service's Secrets outlived it:\n{left}");
    api.cli(&["secret", "delete", "db"]).expect_code(0);
    assert_eq!(secrets(&api), serde_json::json!([]));
}

#[test]
fn bad_secrets_and_bad_references_are_refused_and_store_nothing() {
    let (api, _kubeconfig) = api_with_cluster("secrets-bad");
    let stored = |api: &Api| api.query_strings("SELECT name FROM secrets");
    for (args, code, says) in [
        (vec!["Bad_Name", "--from-literal", "A=1"], "INVALID_SECRET", "not a DNS label"),
        (vec!["db", "--from-literal", "1A=1"], "INVALID_SECRET", "key `1A` is not valid"),
        (vec!["db", "--from-literal", "db.password=1"], "INVALID_SECRET", "key `db.password` is not valid"),
    ] {
        let mut command = vec!["--json", "secret", "new"];
        command.extend(args);
        let out = api.cli(&command);
        refused(&out, code);
        assert!(out.json_error()["error"]["message"].as_str().unwrap().contains(says), "{out}");
    }
    let big = api.scratch().join("big.env");
    std::fs::write(&big, format!("BIG={}\n", "x".repeat(1024 * 1024 + 1))).unwrap();
    let out = api.cli(&["--json", "secret", "new", "db", "--from-env-file", big.to_str().unwrap()]);
    refused(&out, "INVALID_SECRET");
    assert!(out.json_error()["error"]["message"].as_str().unwrap().contains("at most 1048576"), "{out}");
    assert!(stored(&api).is_empty(), "a refused secret was stored");

    // References: one that does not exist, and each kind where the other goes.
    api.cli(&["secret", "new", "db", "--from-literal", "A=1"]).expect_code(0);
    api.cli_stdin(
        &["secret", "new", "ghcr", "--registry", "ghcr.io", "--username", "acme", "--password-stdin"],
        b"token-1\n",
    )
    .expect_code(0);
    for (flags, code) in [
        (["--secret", "nope"], "SECRET_NOT_FOUND"),
        (["--secret", "ghcr"], "WRONG_SECRET_KIND"),
        (["--pull-secret", "db"], "WRONG_SECRET_KIND"),
    ] {
        let mut command = vec!["--json", "job", "python:3.12", "--cluster", "demo", "-i", "refused"];
        command.extend(flags);
        command.extend(["--", "true"]);
        refused(&api.cli(&command), code);
    }
    let out = api.cli(&["--json", "secret", "set", "ghcr", "--from-literal", "A=1"]);
    refused(&out, "WRONG_SECRET_KIND");
    assert!(api.query_strings("SELECT name FROM deployments").is_empty(), "a refused job was stored");
    let listed = secrets(&api);
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed:#}");
    assert_eq!(listed[1]["registry"], "ghcr.io", "{listed:#}");
    assert!(!listed.to_string().contains("token-1"), "{listed:#}");
    not_in_database(&api, "token-1");
}
