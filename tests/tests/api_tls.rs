//! An API served over HTTPS (`api serve --tls-cert --tls-key`), as a hosted API listening beyond
//! loopback must be: the CLI pins the certificate it was given and trusts nothing else; plain
//! HTTP gets no answer; listening beyond loopback without TLS is refused.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use anycloud_tests::e2e::{Api, ApiOptions};

/// A self-signed certificate for 127.0.0.1 and localhost, written as `NAME.crt` and `NAME.key`.
fn self_signed(dir: &Path, name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (cert_path, key_path) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path.display().to_string(), key_path.display().to_string())
}

#[test]
fn an_https_api_is_reached_through_its_pinned_certificate_only() {
    let scratch = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(scratch.path(), "api");
    let api = Api::start_opts(ApiOptions {
        id: "tls-api".into(),
        args: vec!["--tls-cert".into(), cert.clone(), "--tls-key".into(), key],
        ..ApiOptions::default()
    });
    assert!(api.url.starts_with("https://127.0.0.1:"), "{}", api.url);

    // The CLI config pins the certificate; requests and answers go over TLS.
    let config_path = api.config_dir().join("config.json");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    let pinned = config["apis"]["tls-api"]["ca_pem"].as_str().unwrap().to_owned();
    assert_eq!(pinned.trim(), std::fs::read_to_string(&cert).unwrap().trim(), "the served certificate is pinned");
    let status = api.cli(&["api", "status"]);
    status.expect_code(0);
    assert!(status.stdout.contains("url         https://127.0.0.1:"), "{status}");
    api.cli(&["credentials", "new", "over-tls", "--provider", "sim", "--wait"]).expect_code(0);
    assert!(api.credentials().iter().any(|credential| credential["name"] == "over-tls"));

    // Plain HTTP gets no HTTP answer.
    let mut stream = std::net::TcpStream::connect(api.url.trim_start_matches("https://")).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "plain HTTP was answered: {:?}", String::from_utf8_lossy(&answer));

    // A CLI that pins another certificate does not talk to this API.
    let (other, _) = self_signed(scratch.path(), "other");
    let mut changed = config.clone();
    changed["apis"]["tls-api"]["ca_pem"] = std::fs::read_to_string(&other).unwrap().into();
    std::fs::write(&config_path, changed.to_string()).unwrap();
    let refused = api.cli(&["api", "status"]);
    refused.expect_code(2);
    assert!(refused.stderr.contains("API_UNREACHABLE") && refused.stderr.contains("certificate"), "{refused}");
    std::fs::write(&config_path, config.to_string()).unwrap();
    api.cli(&["api", "status"]).expect_code(0);
}

#[test]
fn listening_beyond_loopback_needs_tls() {
    let api = Api::start("plain");
    let out =
        api.command().args(["api", "serve", "--id", "open", "--listen", "0.0.0.0", "--port", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--tls-cert") && stderr.contains("0.0.0.0"), "{stderr}");
}

/// The streaming paths go through the pin too: `logs --follow` (a streamed GET) and `exec` (a
/// WebSocket, `wss://`), on a job of a simulated cluster of an HTTPS API.
#[test]
fn logs_and_exec_go_over_tls_to_a_pinned_api() {
    let scratch = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(scratch.path(), "api");
    let api = Api::start_opts(ApiOptions {
        id: "tls-jobs".into(),
        hosted: true,
        args: vec!["--tls-cert".into(), cert, "--tls-key".into(), key],
        ..ApiOptions::default()
    })
    .with_demo_cluster(&[]);
    let script = "i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo line $i; sleep 0.1; done";
    api.cli(&["job", "python:3.12", "--cluster", "demo", "-i", "long", "--", "sh", "-c", script]).expect_code(0);
    anycloud_tests::e2e::wait_until(Duration::from_secs(60), "the job's first lines", || {
        api.cli(&["logs", "long"]).stdout.contains("line 2\n").then_some(())
    });
    let exec = api.cli(&["exec", "long", "--", "sh", "-c", "echo over wss; exit 4"]);
    exec.expect_code(4);
    assert_eq!(exec.stdout, "over wss\n", "{exec}");
    api.cli(&["terminate", "long"]).expect_code(0);
}

/// A pinned certificate that does not load stops every command at the CLI, naming the API and
/// how to pin it again: the CLI never falls back to the system's roots.
#[test]
fn a_pin_that_does_not_load_is_refused_not_bypassed() {
    let scratch = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(scratch.path(), "api");
    let api = Api::start_opts(ApiOptions {
        id: "tls-pin".into(),
        args: vec!["--tls-cert".into(), cert, "--tls-key".into(), key],
        ..ApiOptions::default()
    });
    let config_path = api.config_dir().join("config.json");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    for broken in
        ["", "not a certificate", "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"]
    {
        let mut changed = config.clone();
        changed["apis"]["tls-pin"]["ca_pem"] = broken.into();
        std::fs::write(&config_path, changed.to_string()).unwrap();
        for args in [&["api", "status"][..], &["credentials", "list"], &["logs", "some-job"]] {
            let refused = api.cli(args);
            refused.expect_code(2).expect_stderr("PINNED_CA_INVALID").expect_stderr("API `tls-pin`");
            refused.expect_stderr("anycloud api serve --id tls-pin --use");
        }
    }
    std::fs::write(&config_path, config.to_string()).unwrap();
    api.cli(&["api", "status"]).expect_code(0);
}
