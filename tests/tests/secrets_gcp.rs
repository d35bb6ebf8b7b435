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
