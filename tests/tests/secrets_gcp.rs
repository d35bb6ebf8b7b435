//! A GCP service-account private key, once given to `credentials new`, appears nowhere in the
//! clear: not in the API's logs, not in any CLI output, not in the data directory's files, not in
//! PostgreSQL (the AWS secret key's test is in api_aws.rs).
#![allow(clippy::unwrap_used)]

use anycloud_tests::e2e::{Api, PgDatabase};
use anycloud_tests::fake_gce::FakeGce;
use anycloud_tests::gcp_test_key::{TEST_ONLY_PRIVATE_KEY, service_account_json};

fn the_private_key_appears_nowhere(api: Api) {
    let fake = FakeGce::start();
    let key_file = api.scratch().join("service-account.json");
    std::fs::write(&key_file, service_account_json()).unwrap();
    let key_file = key_file.to_str().unwrap();
    let endpoint = fake.url();
    for json in [false, true] {
        let name = if json { "gcp-json" } else { "gcp" };
        let mut args = vec!["credentials", "new", name, "--provider", "gcp", "--service-account-file", key_file];
        args.extend(["--endpoint", &endpoint, "--wait"]);
        if json {
            args.insert(0, "--json");
        }
        api.cli(&args).expect_code(0);
    }
    api.cli(&["credentials", "list"]).expect_code(0);
    api.cli(&["--json", "credentials", "list"]).expect_code(0);
    for run in api.credentials().iter().map(|credential| credential["verify_run"].as_str().unwrap().to_owned()) {
        api.cli(&["workflow", "inspect", &run, "--events"]).expect_code(0);
        api.inspect(&run, true);
    }
    // Each line of the key's base64 body, as it would appear in any copy of the PEM or the JSON.
    let lines: Vec<&str> =
        TEST_ONLY_PRIVATE_KEY.lines().filter(|line| line.len() >= 40 && !line.starts_with("---")).collect();
    assert!(lines.len() > 10, "the test key has a body");
    for line in lines {
        api.assert_secret_nowhere(line);
    }
    // The search finds what is there: the account's email is public.
    assert!(api.transcript().contains("anycloud-ci@"), "{}", api.transcript());
}

#[test]
fn sqlite_a_gcp_private_key_appears_nowhere() {
    the_private_key_appears_nowhere(Api::start("gcp-secrets"));
}

#[test]
fn postgres_a_gcp_private_key_appears_nowhere() {
    let database = PgDatabase::create();
    the_private_key_appears_nowhere(Api::start_with("gcp-secrets", Some(database.url.clone())));
}

/// An endpoint that answers with what it read elsewhere (here, an inner service's 403 with a
/// token in its body, as an SSRF target would) has none of its body kept: the credential is
/// invalid, its status and the run say how large the answer was, and the body appears nowhere.
#[test]
fn an_endpoints_body_that_is_not_googles_is_never_kept() {
    use std::io::{Read, Write};

    let canary = format!("InnerServiceToken-{}", uuid::Uuid::new_v4().simple());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let body = format!("{{\"AccessKeyId\":\"ASIAINNER\",\"Token\":\"{canary}\"}}\n");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0_u8; 16 * 1024];
            let _ = stream.read(&mut request);
            let answer = format!(
                "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    let api = Api::start("inner-body");
    let key_file = api.scratch().join("service-account.json");
    std::fs::write(&key_file, service_account_json()).unwrap();
    let key_file = key_file.to_str().unwrap();
    let args = ["credentials", "new", "probe", "--provider", "gcp", "--service-account-file", key_file];
    api.cli(&[&args[..], &["--endpoint", &endpoint, "--wait"]].concat()).expect_code(1);
    let credential = api.credential("probe");
    assert_eq!(credential["status"], "invalid");
    let message = credential["status_message"].as_str().unwrap();
    assert!(message.contains("HTTP 403") && message.contains("not shown"), "{message}");
    api.inspect(credential["verify_run"].as_str().unwrap(), true);
    api.assert_secret_nowhere(&canary);
}
