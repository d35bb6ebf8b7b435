//! Bad input, through the CLI and as raw HTTP: each is refused with a clear message, the
//! documented exit code (3 bad input; 2 unknown id or rejected token) or HTTP status and error
//! code, and changes nothing: the full rows of `credentials`, `engine_runs`, `engine_steps` and
//! `engine_events` (read from the API's SQLite file, opened read-only) are the same before and
//! after. Only `GET /v1/health` answers without the bearer token. The AWS secret sent along
//! with several refused requests appears nowhere.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{self, Api, ApiOptions, HttpResponse, Moto, Snapshot};
use serde_json::{Value, json};

const KEY_ID: &str = "AKIAE2EBADINPUT00001";
const UNKNOWN_RUN: &str = "00000000-0000-4000-8000-000000000000";

/// A CLI case: arguments, extra environment, exit code, words on stderr, the API's error code.
struct Case<'a> {
    what: &'a str,
    args: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
    code: i32,
    message: String,
    error_code: &'a str,
}

impl<'a> Case<'a> {
    fn new(what: &'a str, args: &[&'a str], code: i32, message: impl Into<String>, error_code: &'a str) -> Self {
        Self { what, args: args.to_vec(), env: Vec::new(), code, message: message.into(), error_code }
    }

    fn env(mut self, name: &'a str, value: &'a str) -> Self {
        self.env.push((name, value));
        self
    }
}

struct Checker<'a> {
    api: &'a Api,
    before: Snapshot,
    masked: &'a [&'a str],
    answers: Vec<String>,
}

impl Checker<'_> {
    #[track_caller]
    fn unchanged(&self, what: &str) {
        let now = e2e::sqlite_snapshot(&self.api.sqlite_path(), self.masked);
        if now != self.before {
            for (table, rows) in &now {
                if self.before.get(table) != Some(rows) {
                    panic!(
                        "{what} changed table {table}:\nbefore {:#?}\nafter {rows:#?}",
                        self.before.get(table).unwrap()
                    );
                }
            }
        }
    }

    /// Runs the case plainly and with `--json`: exit code, message, error code; nothing changed.
    #[track_caller]
    fn cli(&mut self, case: &Case<'_>) {
        let out = self.api.cli_env(&case.args, &case.env);
        assert_eq!(out.code, case.code, "{}: exit code\n{out}", case.what);
        let prefix = format!("error[{}]: ", case.error_code);
        assert!(out.stderr.starts_with(&prefix), "{}: stderr should start with {prefix:?}\n{out}", case.what);
        assert!(out.stderr.contains(&case.message), "{}: stderr lacks {:?}\n{out}", case.what, case.message);
        assert!(out.stdout.is_empty(), "{}: stdout should be empty\n{out}", case.what);
        let mut args = vec!["--json"];
        args.extend(&case.args);
        let out = self.api.cli_env(&args, &case.env);
        assert_eq!(out.code, case.code, "{} (--json): exit code\n{out}", case.what);
        let error = out.json_error();
        assert_eq!(error["error"]["code"], case.error_code, "{} (--json)\n{out}", case.what);
        assert!(error["error"]["message"].as_str().unwrap().contains(&case.message), "{} (--json)\n{out}", case.what);
        self.unchanged(case.what);
    }

    /// Sends a raw request; checks the status and error code; nothing changed.
    #[track_caller]
    fn http(
        &mut self,
        what: &str,
        (method, path): (&str, &str),
        headers: &[(&str, &str)],
        body: &[u8],
        status: u16,
        code: &str,
    ) -> HttpResponse {
        let answer = e2e::http(&self.api.url, method, path, headers, body);
        assert_eq!(answer.status, status, "{what}: {method} {path}: {answer:?}");
        assert!(
            answer.headers.iter().any(|(name, value)| name == "content-type" && value.starts_with("application/json")),
            "{what}: {answer:?}"
        );
        let json = answer.json();
        assert_eq!(json["error"]["code"], code, "{what}: {method} {path}: {answer:?}");
        assert!(!json["error"]["message"].as_str().unwrap().is_empty(), "{what}: {answer:?}");
        self.answers.push(answer.body.clone());
        self.unchanged(what);
        answer
    }
}

#[test]
fn bad_input_is_refused_clearly_and_changes_nothing() {
    let moto = Moto::start();
    let mut api = Api::start("bad-input");
    let secret = format!("badInputSecret/{}+Zz", uuid::Uuid::new_v4().simple());

    // Something to protect: a sim and an AWS credential, verified.
    api.cli(&["credentials", "new", "base-sim", "--provider", "sim", "--wait"]).expect_code(0);
    api.cli_env(
        &[
            "credentials",
            "new",
            "base-aws",
            "--provider",
            "aws",
            "--access-key-id",
            KEY_ID,
            "--endpoint",
            &moto.endpoint,
        ],
        &[("AWS_SECRET_ACCESS_KEY", &secret)],
    )
    .expect_code(0);
    let aws_run = api.credential("base-aws")["verify_run"].as_str().unwrap().to_owned();
    api.cli(&["workflow", "inspect", &aws_run, "--follow"]).expect_code(0);
    assert_eq!(api.credential("base-aws")["status"], "valid");
    let sim_run = api.credential("base-sim")["verify_run"].as_str().unwrap().to_owned();

    let before = e2e::sqlite_snapshot(&api.sqlite_path(), &[]);
    assert_eq!(before["credentials"].0, 2, "{before:#?}");
    assert_eq!(before["engine_runs"].0, 2, "{before:#?}");
    // Two finished runs: each has at least submitted, claimed and succeeded (its steps'
    // successes are entries read from engine_steps).
    assert!(before["engine_events"].0 >= 6, "{before:#?}");
    assert_eq!(before["engine_steps"].0, 4, "{before:#?}");
    let mut check = Checker { api: &api, before, masked: &[], answers: Vec::new() };

    // ---- Through the CLI.
    let scratch = api.scratch();
    let not_a_key = scratch.join("adc.json");
    std::fs::write(
        &not_a_key,
        json!({"type": "authorized_user", "client_id": "x", "client_secret": "y", "refresh_token": "z"}).to_string(),
    )
    .unwrap();
    let not_a_key = not_a_key.to_str().unwrap();
    // Under the CLI's 64 KiB file limit, but over the API's body limit once escaped again.
    let huge_key = scratch.join("huge.json");
    let huge = json!({
        "type": "service_account", "project_id": "p", "client_email": "a@p.iam.gserviceaccount.com",
        "private_key": "\n".repeat(25 * 1024),
    });
    std::fs::write(&huge_key, huge.to_string()).unwrap();
    assert!(std::fs::metadata(&huge_key).unwrap().len() < 64 * 1024);
    let huge_key = huge_key.to_str().unwrap();
    let oversized_key = scratch.join("oversized.json");
    std::fs::write(&oversized_key, "k".repeat(70 * 1024)).unwrap();
    let oversized_key = oversized_key.to_str().unwrap();
    let long_name = "a".repeat(64);
    let not_a_label =
        |name: &str| format!("credential name `{name}` is not a DNS label: use 1 to 63 lowercase letters");
    let cases = [
        Case::new(
            "an unknown provider",
            &["credentials", "new", "x", "--provider", "azure"],
            3,
            "unknown provider `azure`: use aws, gcp or sim",
            "INVALID_CREDENTIAL",
        ),
        Case::new(
            "an AWS credential without its secret",
            &["credentials", "new", "x", "--provider", "aws", "--access-key-id", KEY_ID],
            3,
            "credential `x`: the AWS secret access key is missing; pass --secret-access-key or set \
             AWS_SECRET_ACCESS_KEY",
            "INVALID_CREDENTIAL",
        ),
        Case::new(
            "an AWS credential without its access key id",
            &["credentials", "new", "x", "--provider", "aws"],
            3,
            "credential `x`: the AWS access key id is missing",
            "INVALID_CREDENTIAL",
        )
        .env("AWS_SECRET_ACCESS_KEY", &secret),
        Case::new(
            "a GCP machine-identity credential without its project",
            &["credentials", "new", "x", "--provider", "gcp", "--machine-identity"],
            3,
            "credential `x`: a GCP machine-identity credential needs --project PROJECT_ID",
            "INVALID_CREDENTIAL",
        ),
        Case::new(
            "a simulated machine identity",
            &["credentials", "new", "x", "--provider", "sim", "--machine-identity"],
            3,
            "credential `x`: --machine-identity (--provider aws or gcp) does not apply to --provider sim",
            "INVALID_ARGUMENT",
        ),
        Case::new(
            "a missing GCP key file",
            &["credentials", "new", "x", "--provider", "gcp", "--service-account-file", "/nonexistent/key.json"],
            3,
            "reading the service-account key file /nonexistent/key.json: No such file or directory",
            "INVALID_ARGUMENT",
        ),
        Case::new(
            "an endpoint that is not a URL",
            &["credentials", "new", "x", "--provider", "aws", "--access-key-id", KEY_ID, "--endpoint", "not a url"],
            3,
            "credential `x`: endpoint `not a url` is not an http(s) URL",
            "INVALID_CREDENTIAL",
        )
        .env("AWS_SECRET_ACCESS_KEY", &secret),
        Case::new(
            "no GCP key file at all",
            &["credentials", "new", "x", "--provider", "gcp"],
            3,
            "credential `x`: the GCP service-account key is missing; pass --service-account-file PATH",
            "INVALID_CREDENTIAL",
        ),
        Case::new(
            "a GCP key file that is not a service-account key",
            &["credentials", "new", "x", "--provider", "gcp", "--service-account-file", not_a_key],
            3,
            "credential `x`: the GCP key file is of type `authorized_user`; only service-account keys can be imported",
            "INVALID_CREDENTIAL",
        ),
        Case::new(
            "an upper-case name with an underscore",
            &["credentials", "new", "Bad_Name", "--provider", "aws", "--access-key-id", KEY_ID],
            3,
            not_a_label("Bad_Name"),
            "INVALID_CREDENTIAL",
        )
        .env("AWS_SECRET_ACCESS_KEY", &secret),
        Case::new(
            "a name starting with a hyphen",
            &["credentials", "new", "--provider", "sim", "--", "-x"],
            3,
            not_a_label("-x"),
            "INVALID_CREDENTIAL",
        ),
        Case::new(
            "a 64-character name",
            &["credentials", "new", &long_name, "--provider", "sim"],
            3,
            not_a_label(&long_name),
            "INVALID_CREDENTIAL",
        ),
        Case::new(
            "a duplicate name",
            &[
                "credentials",
                "new",
                "base-aws",
                "--provider",
                "aws",
                "--access-key-id",
                KEY_ID,
                "--secret-access-key",
                &secret,
            ],
            3,
            "credential `base-aws` already exists; delete it first with `anycloud credentials delete base-aws`",
            "CREDENTIAL_EXISTS",
        ),
        Case::new(
            "a request body over 64 KiB",
            &["credentials", "new", "huge", "--provider", "gcp", "--service-account-file", huge_key],
            3,
            "the request body is larger than the API accepts (64 KiB)",
            "BODY_TOO_LARGE",
        ),
        Case::new(
            "a key file over the CLI's limit, refused before it is read",
            &["credentials", "new", "big", "--provider", "gcp", "--service-account-file", oversized_key],
            3,
            "it should be at most 65536: is it the right file?",
            "INVALID_ARGUMENT",
        ),
        Case::new(
            "a --sim-* flag on an AWS credential",
            &["credentials", "new", "x", "--provider", "aws", "--access-key-id", KEY_ID, "--sim-fail-first", "3"],
            3,
            "credential `x`: --sim-fail-first (--provider sim) does not apply to --provider aws; remove it",
            "INVALID_ARGUMENT",
        )
        .env("AWS_SECRET_ACCESS_KEY", &secret),
        Case::new(
            "AWS flags on a simulated credential",
            &["credentials", "new", "x", "--provider", "sim", "--access-key-id", KEY_ID, "--region", "us-east-1"],
            3,
            "credential `x`: --access-key-id (--provider aws), --region (--provider aws) do not apply to --provider sim; \
             remove them",
            "INVALID_ARGUMENT",
        ),
        Case::new(
            "deleting an unknown credential",
            &["credentials", "delete", "nope"],
            2,
            "credential `nope` does not exist; `anycloud credentials list` shows the saved ones",
            "CREDENTIAL_NOT_FOUND",
        ),
        Case::new(
            "an unknown workflow id",
            &["workflow", "inspect", UNKNOWN_RUN],
            2,
            format!("workflow {UNKNOWN_RUN} does not exist; `anycloud workflow list` shows the workflows that do"),
            "WORKFLOW_NOT_FOUND",
        ),
        Case::new(
            "the timeline of an unknown workflow",
            &["workflow", "inspect", UNKNOWN_RUN, "--events"],
            2,
            format!("workflow {UNKNOWN_RUN} does not exist"),
            "WORKFLOW_NOT_FOUND",
        ),
        Case::new(
            "following an unknown workflow",
            &["workflow", "inspect", UNKNOWN_RUN, "--follow"],
            2,
            format!("workflow {UNKNOWN_RUN} does not exist"),
            "WORKFLOW_NOT_FOUND",
        ),
        Case::new(
            "cancelling an unknown workflow",
            &["workflow", "cancel", UNKNOWN_RUN],
            2,
            format!("workflow {UNKNOWN_RUN} does not exist"),
            "WORKFLOW_NOT_FOUND",
        ),
        Case::new(
            "retrying an unknown workflow",
            &["workflow", "retry", UNKNOWN_RUN],
            2,
            format!("workflow {UNKNOWN_RUN} does not exist"),
            "WORKFLOW_NOT_FOUND",
        ),
        Case::new(
            "a workflow id that is not a UUID",
            &["workflow", "inspect", "not-a-uuid"],
            3,
            "`not-a-uuid` is not a workflow id (a UUID); `anycloud workflow list` shows them",
            "INVALID_ARGUMENT",
        ),
        Case::new(
            "cancelling a workflow id that is not a UUID",
            &["workflow", "cancel", "base-sim"],
            3,
            "`base-sim` is not a workflow id (a UUID)",
            "INVALID_ARGUMENT",
        ),
        Case::new(
            "resuming a workflow that is not parked",
            &["workflow", "resume", &sim_run],
            3,
            format!("workflow run {sim_run} is succeeded: "),
            "INVALID_WORKFLOW_STATE",
        ),
        Case::new(
            "an unknown workflow status",
            &["workflow", "list", "--status", "sleeping"],
            3,
            "unknown run status `sleeping`; expected one of ",
            "INVALID_STATUS",
        ),
        Case::new(
            "a workflow list limit out of range",
            &["workflow", "list", "--limit", "0"],
            3,
            "limit 0 is out of range: use 1 to 1000",
            "INVALID_LIMIT",
        ),
        Case::new(
            "a deployment list limit out of range",
            &["job", "list", "--limit", "501"],
            3,
            "limit 501 is out of range: use 1 to 500",
            "INVALID_LIMIT",
        ),
    ];
    for case in &cases {
        check.cli(case);
    }

    // A CLI whose stored token is wrong: exit 2, nothing read, nothing changed.
    let stale = scratch.join("stale-config");
    std::fs::create_dir_all(&stale).unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(api.config_dir().join("config.json")).unwrap()).unwrap();
    let token = api.token();
    assert_eq!(config["apis"]["bad-input"]["token"], token.as_str());
    config["apis"]["bad-input"]["token"] = json!("0".repeat(token.len()));
    std::fs::write(stale.join("config.json"), config.to_string()).unwrap();
    let stale = stale.to_str().unwrap();
    let rejected = "rejected the CLI's token; restart it with `anycloud api serve --id bad-input --use`";
    for args in [
        vec!["credentials", "list"],
        vec!["credentials", "delete", "base-sim"],
        vec!["credentials", "new", "fresh", "--provider", "sim"],
        vec!["workflow", "list"],
        vec!["workflow", "inspect", &sim_run],
        vec!["workflow", "cancel", &sim_run],
    ] {
        let case = Case::new("a wrong token", &args, 2, rejected, "UNAUTHORIZED").env("ANYCLOUD_CONFIG_DIR", stale);
        check.cli(&case);
    }

    // ---- Raw HTTP.
    let health = e2e::http(&api.url, "GET", "/v1/health", &[], b"");
    assert_eq!(
        (health.status, health.json()),
        (200, json!({"status": "ok", "database": "reachable", "storage": "writable"})),
        "{health:?}"
    );
    let bearer = format!("Bearer {token}");
    let wrong = format!("Bearer {}", "f".repeat(token.len()));
    let auth = [("Authorization", bearer.as_str())];
    let json_auth = [("Authorization", bearer.as_str()), ("Content-Type", "application/json")];
    let fresh = json!({"name": "fresh", "provider": "sim"}).to_string();
    let run_path = |suffix: &str| format!("/v1/workflows/{sim_run}{suffix}");
    let routes: Vec<(&str, String, String)> = vec![
        ("GET", "/v1/status".into(), String::new()),
        ("GET", "/v1/credentials".into(), String::new()),
        ("POST", "/v1/credentials".into(), fresh.clone()),
        ("GET", "/v1/credentials/base-aws".into(), String::new()),
        ("DELETE", "/v1/credentials/base-sim".into(), String::new()),
        ("GET", "/v1/workflows".into(), String::new()),
        ("GET", run_path(""), String::new()),
        ("GET", run_path("/events"), String::new()),
        ("POST", run_path("/retry"), "{}".into()),
        ("POST", run_path("/resume"), "{}".into()),
        ("POST", run_path("/cancel"), "{}".into()),
    ];
    let mut unauthorized = Vec::new();
    for (method, path, body) in &routes {
        let without: [(&str, &str); 1] = [("Content-Type", "application/json")];
        for (label, headers) in [
            ("no token", without.to_vec()),
            ("a wrong token", vec![("Content-Type", "application/json"), ("Authorization", wrong.as_str())]),
            (
                "the token without `Bearer`",
                vec![("Content-Type", "application/json"), ("Authorization", token.as_str())],
            ),
            ("a Basic header", vec![("Content-Type", "application/json"), ("Authorization", "Basic YTpi")]),
        ] {
            let answer = check.http(
                &format!("{label}: {method} {path}"),
                (*method, path.as_str()),
                &headers,
                body.as_bytes(),
                401,
                "UNAUTHORIZED",
            );
            unauthorized.push(answer.body);
        }
    }
    // The same answer everywhere, revealing nothing.
    assert!(unauthorized.windows(2).all(|pair| pair[0] == pair[1]), "{unauthorized:#?}");
    for hidden in [token.as_str(), "base-aws", "base-sim", KEY_ID, &sim_run, "sqlite", "api-bad-input"] {
        assert!(!unauthorized[0].contains(hidden), "the 401 answer reveals {hidden:?}: {}", unauthorized[0]);
    }

    let too_big = json!({"name": "huge", "provider": "sim", "endpoint": "x".repeat(64 * 1024)}).to_string();
    check.http(
        "a body over 64 KiB",
        ("POST", "/v1/credentials"),
        &json_auth,
        too_big.as_bytes(),
        413,
        "BODY_TOO_LARGE",
    );
    let mut chunked = Vec::new();
    for piece in too_big.as_bytes().chunks(8192) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let chunked_headers = [json_auth[0], json_auth[1], ("Transfer-Encoding", "chunked")];
    check.http(
        "a chunked body over 64 KiB",
        ("POST", "/v1/credentials"),
        &chunked_headers,
        &chunked,
        413,
        "BODY_TOO_LARGE",
    );
    let malformed = format!(r#"{{"name": "x", "provider": "aws", "secret_access_key": "{secret}""#);
    let answer = check.http(
        "malformed JSON",
        ("POST", "/v1/credentials"),
        &json_auth,
        malformed.as_bytes(),
        400,
        "MALFORMED_JSON",
    );
    assert!(answer.json()["error"]["message"].as_str().unwrap().starts_with("the request body is not valid JSON"));
    check.http(
        "an unknown field",
        ("POST", "/v1/credentials"),
        &json_auth,
        br#"{"name": "x", "provider": "sim", "colour": "red"}"#,
        400,
        "INVALID_REQUEST",
    );
    check.http(
        "a name that is not a DNS label",
        ("POST", "/v1/credentials"),
        &json_auth,
        json!({"name": "Bad_Name", "provider": "aws", "access_key_id": KEY_ID, "secret_access_key": secret})
            .to_string()
            .as_bytes(),
        400,
        "INVALID_CREDENTIAL",
    );
    check.http(
        "a body without a JSON content type",
        ("POST", "/v1/credentials"),
        &auth,
        fresh.as_bytes(),
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    );
    check.http(
        "a duplicate name",
        ("POST", "/v1/credentials"),
        &json_auth,
        json!({"name": "base-sim", "provider": "sim"}).to_string().as_bytes(),
        409,
        "CREDENTIAL_EXISTS",
    );
    check.http(
        "a workflow id that is not a UUID",
        ("GET", "/v1/workflows/base-sim"),
        &auth,
        b"",
        400,
        "INVALID_WORKFLOW_ID",
    );
    check.http(
        "an unknown workflow",
        ("GET", &format!("/v1/workflows/{UNKNOWN_RUN}/events")),
        &auth,
        b"",
        404,
        "WORKFLOW_NOT_FOUND",
    );
    check.http("an unknown credential", ("DELETE", "/v1/credentials/nope"), &auth, b"", 404, "CREDENTIAL_NOT_FOUND");
    check.http("an unknown route", ("GET", "/v1/nodes"), &auth, b"", 404, "NOT_FOUND");

    // ---- Deleting a credential whose verification is still running: each call to the
    // simulated cloud takes 30 s. The heartbeat renews the run's lease meanwhile, so its
    // expiry is left out of the comparison.
    api.cli(&["credentials", "new", "slow", "--provider", "sim", "--sim-latency-ms", "30000"]).expect_code(0);
    let slow_run = api.credential("slow")["verify_run"].as_str().unwrap().to_owned();
    e2e::wait_until(Duration::from_secs(10), "the verification of `slow` to start", || {
        let detail = api.inspect(&slow_run, true);
        (detail["run"]["status"] == "running" && e2e::events(&detail).iter().any(|event| event["kind"] == "claimed"))
            .then_some(())
    });
    const MASKED: &[&str] = &["engine_runs.lease_expires_at"];
    let answers = std::mem::take(&mut check.answers);
    let mut check =
        Checker { api: &api, before: e2e::sqlite_snapshot(&api.sqlite_path(), MASKED), masked: MASKED, answers };
    check.cli(&Case::new(
        "deleting a credential whose verification runs",
        &["credentials", "delete", "slow"],
        3,
        format!(
            "credential `slow` is in use by workflow {slow_run} (running); wait for it to end, or cancel it with \
             `anycloud workflow cancel {slow_run}`, then delete again"
        ),
        "CREDENTIAL_IN_USE",
    ));
    check.http(
        "deleting a credential in use",
        ("DELETE", "/v1/credentials/slow"),
        &auth,
        b"",
        409,
        "CREDENTIAL_IN_USE",
    );

    // The snapshot does see a change: deleting a credential nothing uses works.
    api.cli(&["credentials", "delete", "base-sim"]).expect_code(0);
    let after = e2e::sqlite_snapshot(&api.sqlite_path(), MASKED);
    assert_eq!(after["credentials"].0, check.before["credentials"].0 - 1);
    assert!(!api.credentials().iter().any(|credential| credential["name"] == "base-sim"));

    // The secret went along with several refused requests; it is nowhere, including in what a
    // user sees of the AWS credential and its verification.
    for args in [
        vec!["credentials", "list"],
        vec!["--json", "credentials", "list"],
        vec!["workflow", "inspect", &aws_run, "--events"],
        vec!["--json", "workflow", "inspect", &aws_run, "--events"],
    ] {
        api.cli(&args).expect_code(0);
    }
    let answers = check.answers.join("\n");
    assert!(!answers.contains(&secret), "an HTTP answer echoes the secret:\n{answers}");
    api.kill();
    api.assert_secret_nowhere(&secret);
}

/// An API started as production runs (without `--allow-insecure-endpoints`) calls only `https://`
/// endpoints on public hosts: a credential's `--endpoint` in plain HTTP, on loopback or on the
/// metadata server's address is refused before anything is stored (through the CLI and as raw
/// HTTP: the setting is the operator's, never the request's), and so is its own
/// `--checkpoint-endpoint`. `api status` says which it is.
#[test]
fn an_api_calls_only_https_endpoints_unless_its_operator_allows_more() {
    let api =
        Api::start_opts(ApiOptions { id: "https-only".into(), https_endpoints_only: true, ..ApiOptions::default() });
    let status = api.cli(&["--json", "api", "status"]);
    assert_eq!(status.expect_code(0).json()["endpoints"], "https-only", "{status}");
    api.cli(&["api", "status"]).expect_code(0);
    assert!(api.cli(&["api", "status"]).stdout.contains("https:// to public hosts only"));
    let before = e2e::sqlite_snapshot(&api.sqlite_path(), &[]);
    for (endpoint, words) in [
        ("http://127.0.0.1:5000", "is plain HTTP"),
        ("http://ec2.eu-west-1.amazonaws.com", "is plain HTTP"),
        ("https://127.0.0.1:5000", "inner network"),
        ("https://169.254.169.254", "inner network"),
        ("https://[::1]:5000", "inner network"),
        ("https://localhost:5000", "inner network"),
    ] {
        let args = ["credentials", "new", "x", "--provider", "aws", "--access-key-id", KEY_ID, "--endpoint", endpoint];
        api.cli_env(&args, &[("AWS_SECRET_ACCESS_KEY", "badInputSecret")])
            .expect_code(3)
            .expect_stderr(&format!("credential `x`: endpoint `{endpoint}`"))
            .expect_stderr(words)
            .expect_stderr("--allow-insecure-endpoints");
        let body = json!({"name": "x", "provider": "gcp", "service_account_json": "{}", "endpoint": endpoint});
        let answer = api.post_json("/v1/credentials", &body);
        assert_eq!(answer.status, 400, "{endpoint}: {answer:?}");
        assert!(answer.body.contains("INVALID_CREDENTIAL"), "{endpoint}: {answer:?}");
    }
    assert_eq!(e2e::sqlite_snapshot(&api.sqlite_path(), &[]), before, "a refused endpoint changed the database");
    assert!(api.credentials().is_empty());

    // Its own bucket's endpoint, and the secret store's, are held to the same rule.
    for flag in ["--checkpoint-endpoint", "--secret-endpoint"] {
        let data = api.scratch().join(format!("fresh{flag}"));
        let mut args = vec!["api", "serve", "--id", "cp", "--port", "0", "--checkpoint-bucket", "s3://team-state"];
        if flag == "--secret-endpoint" {
            args.extend(["--hosted-by", "aws", "--keys-secret", "arn:aws:secretsmanager:x"]);
        }
        args.extend([flag, "http://127.0.0.1:1", "--data-dir", data.to_str().unwrap()]);
        let out = api.command().args(&args).stdin(std::process::Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{flag}: {stderr}");
        assert!(stderr.contains(&format!("API `cp`: {flag}: endpoint `http://127.0.0.1:1` is plain HTTP")), "{stderr}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("listening on"), "{flag}");
    }
    // Deploying takes the deploying API's setting: the flag does not apply there.
    api.cli(&["api", "serve", "--id", "prod", "--credentials", "aws-host", "--allow-insecure-endpoints"])
        .expect_code(3)
        .expect_stderr("takes its setting");

    // The test suite's APIs run with the operator's setting, and say so.
    let open = Api::start("insecure-allowed");
    let status = open.cli(&["--json", "api", "status"]);
    assert_eq!(status.expect_code(0).json()["endpoints"], "allow-insecure", "{status}");
    assert!(open.logs().contains("--allow-insecure-endpoints"), "the start warns");
}
