//! AWS credentials verified against moto (a local fake of EC2 and IAM) that checks every
//! request's signature and the IAM user's policies: keys allowed `ec2:*` are `valid` with what
//! DescribeRegions saw; an unknown key, a wrong secret and a user without EC2 permissions are
//! `invalid` with EC2's own words (a verdict, not a retry). The secret access keys appear
//! nowhere: not in the API's logs, not in any CLI output, not in the database (stored sealed).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{self, Api, AwsKey, Moto, PgDatabase};
use serde_json::Value;

/// `AKIA` and 16 random characters: an access key id moto has never issued.
fn unknown_key() -> AwsKey {
    let random = uuid::Uuid::new_v4().simple().to_string().to_uppercase();
    let secret = format!("unknownSecret/{}+{}", uuid::Uuid::new_v4().simple(), &random[..8]);
    AwsKey { access_key_id: format!("AKIA{}", &random[..16]), secret_access_key: secret }
}

/// `credentials new NAME --provider aws ... --wait --json`, the secret in the environment as
/// the CLI recommends, or as a flag.
fn new_aws(api: &Api, moto: &Moto, name: &str, key: &AwsKey, secret_as_flag: bool) -> e2e::Output {
    let mut args = vec![
        "--json",
        "credentials",
        "new",
        name,
        "--provider",
        "aws",
        "--access-key-id",
        &key.access_key_id,
        "--endpoint",
        &moto.endpoint,
        "--wait",
    ];
    if secret_as_flag {
        args.extend(["--secret-access-key", &key.secret_access_key]);
        api.cli(&args)
    } else {
        api.cli_env(&args, &[("AWS_SECRET_ACCESS_KEY", &key.secret_access_key)])
    }
}

/// The run behind a credential: one attempt at each step, and a verdict as its output.
fn check_run(api: &Api, credential: &Value, verdict: &str) {
    let id = credential["verify_run"].as_str().unwrap();
    let detail = api.inspect(id, true);
    assert_eq!(detail["run"]["status"], "succeeded", "a verdict, not a failure: {detail:#}");
    assert_eq!(detail["run"]["output"]["verdict"], verdict, "{detail:#}");
    let events = e2e::events(&detail);
    assert!(!events.iter().any(|event| event["kind"] == "step-failed"), "not retried: {events:#?}");
}

fn rejected(api: &Api, moto: &Moto, name: &str, key: &AwsKey, expected: &[&str]) {
    let out = new_aws(api, moto, name, key, true);
    out.expect_code(1);
    let credential = out.last_json()["credential"].clone();
    assert_eq!(credential["status"], "invalid", "{out}");
    let message = credential["status_message"].as_str().unwrap();
    assert!(message.starts_with("EC2 refused the keys: "), "{message}");
    for part in expected {
        assert!(message.contains(part), "{name}: {message:?} lacks {part:?}");
    }
    check_run(api, &credential, "rejected");
}

fn aws_credentials_are_verified_against_ec2(mut api: Api) {
    // Five requests without authentication: two users and their keys, one policy.
    let moto = Moto::start_with_auth(5);
    let allowed = moto.iam_user_with_key("anycloud-ec2", Some("ec2:*"));
    let powerless = moto.iam_user_with_key("anycloud-nothing", None);

    // Keys allowed ec2:* are valid; the secret comes from AWS_SECRET_ACCESS_KEY.
    let out = new_aws(&api, &moto, "team-aws", &allowed, false);
    out.expect_code(0);
    let credential = out.last_json()["credential"].clone();
    assert_eq!(credential["status"], "valid", "{out}");
    let message = credential["status_message"].as_str().unwrap();
    let regions: usize = message
        .strip_prefix("EC2 DescribeRegions: ")
        .and_then(|rest| rest.strip_suffix(" regions enabled for these keys"))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("not the DescribeRegions message: {message:?}"));
    assert!(regions > 0, "{message}");
    assert_eq!(credential["public"]["identity"], allowed.access_key_id.as_str());
    assert_eq!(credential["public"]["endpoint"], moto.endpoint.as_str());
    assert_eq!(credential["public"]["region"], "us-east-1");
    check_run(&api, &credential, "accepted");
    // The same, without --json.
    let plain = api.cli_env(
        &[
            "credentials",
            "new",
            "team-aws-2",
            "--provider",
            "aws",
            "--access-key-id",
            &allowed.access_key_id,
            "--endpoint",
            &moto.endpoint,
            "--wait",
        ],
        &[("AWS_SECRET_ACCESS_KEY", &allowed.secret_access_key)],
    );
    plain.expect_code(0);
    assert!(plain.stdout.contains(&format!("credential team-aws-2 is valid: {message}")), "{plain}");

    // Keys EC2 does not know, the right key with a wrong secret, and a user without EC2
    // permissions: invalid, in EC2's words.
    let unknown = unknown_key();
    rejected(
        &api,
        &moto,
        "unknown-key",
        &unknown,
        &["AuthFailure", "AWS was not able to validate the provided access credentials"],
    );
    let wrong_secret = AwsKey {
        access_key_id: allowed.access_key_id.clone(),
        secret_access_key: format!("wrongSecret/{}", uuid::Uuid::new_v4().simple()),
    };
    rejected(&api, &moto, "wrong-secret", &wrong_secret, &["AuthFailure"]);
    rejected(&api, &moto, "no-ec2", &powerless, &["AccessDenied", "is not authorized to perform: ec2:DescribeRegions"]);
    // moto saw the requests (the endpoint override took) and refused three of them.
    assert!(moto.log().matches(" 401 -").count() + moto.log().matches(" 403 -").count() >= 3, "{}", moto.log());

    // Everything a user can look at.
    let table = api.cli(&["credentials", "list"]);
    table.expect_code(0);
    for (name, status) in [
        ("team-aws", "valid"),
        ("team-aws-2", "valid"),
        ("unknown-key", "invalid"),
        ("wrong-secret", "invalid"),
        ("no-ec2", "invalid"),
    ] {
        let row = table.stdout.lines().find(|line| line.starts_with(&format!("{name} "))).unwrap();
        assert!(row.contains(&format!(" {status} ")), "{table}");
    }
    let listed = api.credentials();
    assert_eq!(listed.len(), 5);
    for credential in &listed {
        let id = credential["verify_run"].as_str().unwrap();
        api.cli(&["--json", "workflow", "inspect", id, "--events"]).expect_code(0);
        api.cli(&["workflow", "inspect", id, "--events"]).expect_code(0);
    }
    api.cli(&["--json", "workflow", "list"]).expect_code(0);
    api.cli(&["workflow", "list"]).expect_code(0);

    // Stored sealed: the secret column holds `v2:` (sealed for its row) and base64 of nonce (24
    // bytes), ciphertext and tag (16 bytes), never the key.
    let sealed = api.query_strings("SELECT secret FROM credentials WHERE name = 'team-aws'");
    assert_eq!(sealed.len(), 1);
    assert_ne!(sealed[0], allowed.secret_access_key);
    let expected_len = (24 + allowed.secret_access_key.len() + 16).div_ceil(3) * 4;
    let encoded = sealed[0].strip_prefix("v2:").unwrap_or_else(|| panic!("{}", sealed[0]));
    assert_eq!(encoded.len(), expected_len, "{}", sealed[0]);

    let status = api.terminate(Duration::from_secs(40));
    assert_eq!(status.code(), Some(0), "{status}\n{}", api.logs());
    for secret in [&allowed, &powerless, &unknown, &wrong_secret].map(|key| &key.secret_access_key) {
        api.assert_secret_nowhere(secret);
    }
    // The search finds what is there: the access key ids are public, in the output and the
    // database.
    assert!(api.transcript().contains(&allowed.access_key_id));
    if api.database_url.is_none() {
        let stored = e2e::files_under(&api.data_dir())
            .iter()
            .any(|path| e2e::contains_bytes(&std::fs::read(path).unwrap(), allowed.access_key_id.as_bytes()));
        assert!(stored, "the access key id is not in the SQLite files");
    }
}

#[test]
fn sqlite_aws_credentials_are_verified_against_ec2() {
    aws_credentials_are_verified_against_ec2(Api::start("aws"));
}

#[test]
fn postgres_aws_credentials_are_verified_against_ec2() {
    let database = PgDatabase::create();
    aws_credentials_are_verified_against_ec2(Api::start_with("aws", Some(database.url.clone())));
}
