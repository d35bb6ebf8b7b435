//! One live process per API id on one database, and one key per database, through the real
//! binary and real databases.
//!
//! - A second `anycloud api serve` with the id of a running API, on the same database (SQLite:
//!   the same data directory, so the same file; PostgreSQL: the same `--database-url`, its own
//!   data directory, and the same `ANYCLOUD_SECRET_KEY`, so that only the owner lock can refuse
//!   it) exits 2 within seconds with `error[API_ALREADY_RUNNING]: ` naming the id and saying how
//!   to proceed (all of stderr on SQLite; the last line on PostgreSQL, after sqlx's INFO logs of
//!   the server's migration notices), prints no URL, and changes nothing: every row of the credentials, engine and
//!   sealing-key tables is the same before and after, and the first API still answers (a
//!   credential saved through it afterwards is verified). Without the lock the second process
//!   would start and take back (steal) every run the first holds under the shared owner name.
//! - Once the first is SIGKILLed the name is free at once: a restart comes up, the credential
//!   saved before the kill is still listed and valid, and the verification that was in flight
//!   when it died (a simulated call of 3 s) is taken back by the new process (its timeline names
//!   the new pid) and ends valid long before its 30 s lease would have lapsed.
//! - A database remembers which key seals its secrets: an API started on it with another key
//!   (another `ANYCLOUD_SECRET_KEY`, or another data directory's `secret.key`) exits 2 with
//!   `error[SECRET_KEY_MISMATCH]: ` and changes nothing; with the first key (and another id, so
//!   that the owner lock is not what answers) it starts and lists the first API's credential.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, ApiOptions, Output, PgDatabase};
use base64::Engine as _;

/// How long a refused `api serve` may take to exit (the owner lock waits 3 s for a dying holder).
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(15);

/// A fresh secret key: base64 of 32 random bytes, as `ANYCLOUD_SECRET_KEY` takes it.
fn new_key() -> String {
    let mut bytes = uuid::Uuid::new_v4().as_bytes().to_vec();
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Runs `anycloud api serve --id ID --port 0 --data-dir DIR [--database-url URL]` as the
/// production binary with `api`'s environment (config dir, scrubbed variables) plus `env`, and
/// waits up to [`REFUSAL_TIMEOUT`] for it to exit; a process still running then is killed and
/// the test fails.
fn serve_once(api: &Api, id: &str, data_dir: &Path, database_url: Option<&str>, env: &[(&str, &str)]) -> Output {
    let logs = api.scratch();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let stdout_path = logs.join(format!("serve-{tag}.stdout"));
    let stderr_path = logs.join(format!("serve-{tag}.stderr"));
    let mut args: Vec<String> = ["api", "serve", "--id", id, "--port", "0", "--data-dir"].map(str::to_owned).to_vec();
    args.push(data_dir.display().to_string());
    if let Some(url) = database_url {
        args.extend(["--database-url".to_owned(), url.to_owned()]);
    }
    let mut child = api
        .command()
        .args(&args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(File::create(&stdout_path).unwrap())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() >= REFUSAL_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = Output {
        args,
        code: status.and_then(|status| status.code()).unwrap_or(-1),
        stdout: std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "`anycloud {}` was still running after {REFUSAL_TIMEOUT:?} (killed it): it should have been refused\n{output}",
        output.args.join(" ")
    );
    eprintln!("`anycloud {}` exited {} after {:?}", output.args.join(" "), output.code, started.elapsed());
    output
}

/// Every row of the tables a refused start could touch (credentials, the engine's runs, steps
/// and events, the key proof), as text, read without the API.
fn rows(api: &Api) -> BTreeMap<String, Vec<String>> {
    let mut rows = BTreeMap::new();
    match &api.database_url {
        None => {
            for (table, (_, table_rows)) in e2e::sqlite_snapshot(&api.sqlite_path(), &[]) {
                rows.insert(table, table_rows);
            }
        }
        Some(_) => {
            for table in e2e::SNAPSHOT_TABLES {
                let sql = format!("SELECT row_to_json(t)::text AS row FROM {table} t ORDER BY row");
                rows.insert(table.to_owned(), api.query_strings(&sql));
            }
        }
    }
    rows.insert("sealing_key".to_owned(), api.query_strings("SELECT sealed FROM sealing_key"));
    assert!(!rows["credentials"].is_empty() && !rows["engine_runs"].is_empty(), "nothing to compare: {rows:#?}");
    rows
}

/// Fails the test unless `out` is a refusal: exit 2, nothing on stdout (no URL), and stderr ends
/// with one line that starts with `error[CODE]: `. Before it, only INFO log lines may come (on
/// PostgreSQL, sqlx logs the server's notices while the migrations are checked); on SQLite the
/// error line is all of stderr. Returns that line.
#[track_caller]
fn refused_with(out: &Output, code: &str, sqlite: bool) -> String {
    assert_eq!(out.code, 2, "`anycloud {}` should exit 2 (not observed)\n{out}", out.args.join(" "));
    assert!(out.stdout.is_empty(), "the refused API printed on stdout\n{out}");
    let prefix = format!("error[{code}]: ");
    let lines: Vec<&str> = out.stderr.lines().collect();
    let (line, logs) = lines.split_last().unwrap_or_else(|| panic!("stderr is empty\n{out}"));
    assert!(line.starts_with(&prefix), "stderr should end with a line starting {prefix:?}\n{out}");
    for log in logs {
        assert!(!sqlite && log.contains(" INFO "), "stderr holds more than the error line\n{out}");
    }
    (*line).to_owned()
}

/// Saves `name` (simulated account, verification of `latency_ms` a call) without waiting, and
/// returns its verification run.
fn save_credential_no_wait(api: &Api, name: &str, latency_ms: &str) -> String {
    let out = api.cli(&["--json", "credentials", "new", name, "--provider", "sim", "--sim-latency-ms", latency_ms]);
    out.expect_code(0);
    out.json()["workflow_id"].as_str().unwrap().to_owned()
}

/// `STATUS LEASE_OWNER CURRENT_STEP` of a run, read from the database.
fn run_state(api: &Api, run: &str) -> String {
    let sql = format!(
        "SELECT status || ' ' || COALESCE(lease_owner, '-') || ' ' || COALESCE(current_step, '-') FROM engine_runs \
         WHERE id = '{run}'"
    );
    api.query_strings(&sql).pop().unwrap_or_default()
}

/// The second-process refusal, then the kill that frees the name and the restart that takes the
/// runs back. `second_data_dir` and `env` say how the second process finds the same database.
fn one_owner(mut api: Api, second_data_dir: &Path, env: &[(&str, &str)]) {
    let id = api.id.clone();
    api.cli(&["credentials", "new", "before", "--provider", "sim", "--wait"]).expect_code(0);
    let before = rows(&api);
    let first_pid = api.pid();

    let out = serve_once(&api, &id, second_data_dir, api.database_url.as_deref(), env);
    let line = refused_with(&out, "API_ALREADY_RUNNING", api.database_url.is_none());
    for words in [
        format!("API `{id}` is already running on this database"),
        format!("`anycloud api stop {id}`"),
        "another --id".to_owned(),
    ] {
        assert!(line.contains(&words), "the refusal lacks {words:?}\n{out}");
    }

    // Nothing moved, and the first API still answers.
    assert_eq!(rows(&api), before, "the refused process changed the database");
    assert_eq!(api.pid(), first_pid);
    api.cli(&["credentials", "new", "after", "--provider", "sim", "--wait"]).expect_code(0);
    assert_eq!(api.credential("before")["status"], "valid");

    // A verification in flight (its simulated call takes 3 s) when the first API is killed.
    let slow = save_credential_no_wait(&api, "slow", "3000");
    let owner = format!("api-{id}");
    e2e::wait_until(Duration::from_secs(10), "the slow verification to be driven", || {
        let state = run_state(&api, &slow);
        (state == format!("running {owner} ask_provider")).then_some(())
    });
    api.kill();

    // The name is free at once: the restart comes up under it and takes the run back.
    let restarted = Instant::now();
    api.restart();
    let second_pid = api.pid();
    assert_ne!(second_pid, first_pid);
    assert_eq!(api.credential("before")["status"], "valid");
    assert_eq!(api.credential("after")["status"], "valid");
    // Well before its 30 s lease would have lapsed (it was taken back, not waited out).
    e2e::wait_until(Duration::from_secs(15), "the in-flight verification to end valid", || {
        (api.credential("slow")["status"] == "valid").then_some(())
    });
    let took = restarted.elapsed();
    let detail = api.inspect(&slow, true);
    assert_eq!(detail["run"]["status"], "succeeded", "{detail:#}");
    let pids = e2e::claim_pids(&e2e::events(&detail));
    assert_eq!(pids.first(), Some(&first_pid), "{detail:#}");
    assert_eq!(pids.last(), Some(&second_pid), "the restart did not take the run back: {detail:#}");
    eprintln!("restart on {} took the in-flight run back and finished it in {took:?}", id);
}

#[test]
fn a_second_process_with_a_running_apis_id_on_its_sqlite_file_is_refused() {
    let api = Api::start("one-owner");
    let data_dir = api.data_dir();
    one_owner(api, &data_dir, &[]);
}

#[test]
fn a_second_process_with_a_running_apis_id_on_its_postgres_database_is_refused() {
    let db = PgDatabase::create();
    let key = new_key();
    let api = Api::start_opts(ApiOptions {
        id: "one-owner-pg".to_owned(),
        database_url: Some(db.url.clone()),
        env: vec![("ANYCLOUD_SECRET_KEY".to_owned(), key.clone())],
        ..ApiOptions::default()
    });
    // Its own data directory (its own token), the same key: only the owner lock can refuse it.
    let data_dir = api.scratch().join("second");
    one_owner(api, &data_dir, &[("ANYCLOUD_SECRET_KEY", &key)]);
}

#[test]
fn a_postgres_database_refuses_an_api_with_another_secret_key() {
    let db = PgDatabase::create();
    let k1 = new_key();
    let k2 = new_key();
    let a = Api::start_opts(ApiOptions {
        id: "keys-a".to_owned(),
        database_url: Some(db.url.clone()),
        env: vec![("ANYCLOUD_SECRET_KEY".to_owned(), k1.clone())],
        ..ApiOptions::default()
    });
    a.cli(&["credentials", "new", "c", "--provider", "sim", "--wait"]).expect_code(0);
    let before = rows(&a);

    // Another ANYCLOUD_SECRET_KEY, another id (so the owner lock is not what answers).
    let out = serve_once(&a, "keys-b", &a.scratch().join("b"), Some(&db.url), &[("ANYCLOUD_SECRET_KEY", &k2)]);
    let line = refused_with(&out, "SECRET_KEY_MISMATCH", false);
    for words in ["API `keys-b`", "sealed with another key", "secret.key", "ANYCLOUD_SECRET_KEY"] {
        assert!(line.contains(words), "the refusal lacks {words:?}\n{out}");
    }
    assert!(!out.stderr.contains(&k1) && !out.stderr.contains(&k2), "a key leaked into stderr\n{out}");
    // Another data directory's own `secret.key` (made on its first start): refused the same way.
    let out = serve_once(&a, "keys-d", &a.scratch().join("d"), Some(&db.url), &[]);
    refused_with(&out, "SECRET_KEY_MISMATCH", false);
    assert_eq!(rows(&a), before, "a refused start changed the database");
    a.cli(&["credentials", "list"]).expect_code(0);

    // With the key that sealed it, another API starts on it and sees the first one's credential.
    let c = Api::start_opts(ApiOptions {
        id: "keys-c".to_owned(),
        database_url: Some(db.url.clone()),
        env: vec![("ANYCLOUD_SECRET_KEY".to_owned(), k1)],
        ..ApiOptions::default()
    });
    assert_eq!(c.credential("c")["status"], "valid");
    c.cli(&["credentials", "new", "c2", "--provider", "sim", "--wait"]).expect_code(0);
}

#[test]
fn a_sqlite_file_refuses_an_api_with_another_secret_key() {
    // The first API seals with its data directory's `secret.key`.
    let a = Api::start("keys-file");
    a.cli(&["credentials", "new", "c", "--provider", "sim", "--wait"]).expect_code(0);
    let before = rows(&a);
    // The same file under another id, with a wrong ANYCLOUD_SECRET_KEY.
    let key = new_key();
    let out = serve_once(&a, "keys-file-2", &a.data_dir(), None, &[("ANYCLOUD_SECRET_KEY", &key)]);
    let line = refused_with(&out, "SECRET_KEY_MISMATCH", true);
    assert!(line.contains("API `keys-file-2`") && line.contains("sealed with another key"), "{out}");
    assert_eq!(rows(&a), before, "the refused start changed the database");
    assert_eq!(a.credential("c")["status"], "valid");
}
