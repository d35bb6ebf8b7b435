//! The web console in a real browser (Debian's headless Chromium over WebDriver), against a
//! hosted API on the simulated cloud:
//!
//! - `anycloud ui`'s address signs the browser in, into an HttpOnly, SameSite=Strict cookie that
//!   page scripts cannot read, and the code is refused the second time; the token is nowhere in
//!   the page or the browser's storage;
//! - a cluster being created moves step by step to `succeeded` on its run's page, without a
//!   reload;
//! - a stuck run's page says why in its first lines; a cross-site POST (another Origin, or a form
//!   without the session's token) is refused and changes nothing; the Cancel button asks, then the
//!   run unwinds to `cancelled` on the same page;
//! - without a session every page and action is 401; every answer carries a
//!   Content-Security-Policy that allows no inline script.
//!
//! With `ANYCLOUD_CONSOLE_SCREENSHOTS=DIR` it saves a PNG of each page there (docs/console/).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use anycloud_tests::browser::Browser;
use anycloud_tests::e2e::{self, Api};
use serde_json::{Value, json};

fn sim_credential(api: &Api, name: &str, sim: Value) {
    let answer = api.post_json("/v1/credentials", &json!({ "name": name, "provider": "sim", "sim": sim }));
    assert_eq!(answer.status, 201, "saving credential {name}: {answer:?}");
    e2e::wait_until(Duration::from_secs(30), "the credential verified", || {
        (api.credential(name)["status"] == "valid").then_some(())
    });
}

/// Creates a cluster (without waiting) and answers its create run's id.
fn create_cluster(api: &Api, name: &str, credential: &str) -> String {
    api.cli(&e2e::sim_cluster_create(name, credential, "1")).expect_code(0);
    let status = api.cli(&["--json", "cluster", "status", name]);
    status.expect_code(0);
    status.json()["cluster"]["workflow_id"].as_str().unwrap().to_owned()
}

fn screenshot(browser: &Browser, name: &str) {
    if let Some(dir) = std::env::var_os("ANYCLOUD_CONSOLE_SCREENSHOTS") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        browser.screenshot(&dir.join(format!("{name}.png")));
    }
}

fn header<'a>(answer: &'a e2e::HttpResponse, name: &str) -> Option<&'a str> {
    answer.headers.iter().find(|(header, _)| header == name).map(|(_, value)| value.as_str())
}

#[test]
fn the_console_signs_in_once_follows_runs_live_and_cancels_from_a_page() {
    let api = Api::start_hosted("console");
    sim_credential(&api, "sim", json!({ "boot_ms": 2500 }));
    sim_credential(&api, "never", json!({ "never_ready": true }));
    let browser = Browser::start();

    // ---- Sign in with `anycloud ui`'s address; the code works once.
    let out = api.cli(&["ui", "--no-open"]);
    out.expect_code(0);
    let address = out.stdout.trim().to_owned();
    assert!(address.starts_with(&format!("{}/ui/sign-in?code=", api.url)), "{address}");
    browser.goto(&address);
    assert_eq!(browser.current_url(), format!("{}/ui", api.url), "the code leaves the address bar");
    assert_eq!(browser.title(), "Overview · Anycloud");
    let cookies = browser.cookies();
    let session = cookies.as_array().unwrap().iter().find(|cookie| cookie["name"] == "anycloud_console").unwrap();
    assert_eq!(
        (session["httpOnly"].as_bool(), session["sameSite"].as_str()),
        (Some(true), Some("Strict")),
        "{session}"
    );
    assert_eq!(browser.script("return document.cookie"), "", "page scripts cannot read the session");
    let page = browser.script("return document.documentElement.outerHTML").as_str().unwrap().to_owned();
    assert!(!page.contains(&api.token()), "the bearer token is in the page");
    assert_eq!(browser.script("return localStorage.length + sessionStorage.length"), 0);
    assert_eq!(browser.tab(1), "Anycloud", "the first Tab reaches the console's first link");
    browser.goto(&address);
    let main = browser
        .text("main")
        .unwrap_or_else(|| panic!("{}", browser.script("return document.documentElement.outerHTML")));
    assert!(main.contains("already used"), "{main}");
    screenshot(&browser, "sign-in-refused");
    let again = e2e::http(&api.url, "GET", address.trim_start_matches(&api.url), &[], b"");
    assert_eq!(again.status, 401);
    let cookie = format!("anycloud_console={}", browser.cookie("anycloud_console").unwrap());

    // ---- A cluster being created, step by step to the end, on one page that never reloads.
    let run = create_cluster(&api, "demo", "sim");
    browser.goto(&format!("{}/ui/workflows/{run}", api.url));
    browser.script("window.anycloudStayed = true");
    let mut steps_seen: Vec<String> = Vec::new();
    browser.wait_for(Duration::from_secs(120), "the cluster's run to succeed", |browser| {
        let lines = browser.text(".lines")?;
        let step = lines.split('`').nth(1).map(str::to_owned);
        if let Some(step) = step.filter(|step| steps_seen.last() != Some(step)) {
            steps_seen.push(step);
        }
        lines.starts_with("succeeded").then_some(())
    });
    assert_eq!(browser.script("return window.anycloudStayed === true"), true, "the page reloaded");
    assert!(steps_seen.len() >= 3, "the page showed too few of the run's steps live: {steps_seen:?}");
    let axis = browser.text("main section").unwrap();
    assert!(axis.contains("wait_for_nodes: succeeded"), "{axis}");
    screenshot(&browser, "workflow-succeeded");
    browser.goto(&format!("{}/ui/workflows?kind=cluster.create", api.url));
    assert!(browser.text("table").unwrap().contains("cluster.create"));
    screenshot(&browser, "workflows");

    // ---- The cluster's page lists its VMs; a job's page follows its logs live.
    browser.goto(&format!("{}/ui/clusters/demo", api.url));
    let vms = browser.text("table").unwrap();
    assert!(vms.contains("control-plane") && vms.contains("worker"), "{vms}");
    screenshot(&browser, "cluster");
    let ticker = "for i in 1 2 3 4 5 6; do echo line $i; sleep 1; done";
    api.cli(&["job", "busybox:1.36", "--cluster", "demo", "-i", "ticker", "--", "sh", "-c", ticker]).expect_code(0);
    browser.goto(&format!("{}/ui/deployments/ticker", api.url));
    browser.script("window.anycloudStayed = true");
    let first = browser.wait_for(Duration::from_secs(60), "the job's first lines", |browser| {
        browser.text("#logs").filter(|logs| logs.contains("line 1"))
    });
    assert!(!first.contains("line 6"), "the logs came all at once, not as they were written: {first}");
    browser.wait_for(Duration::from_secs(60), "the job's last line and its end", |browser| {
        let logs = browser.text("#logs")?;
        let done = browser.text("dl")?.contains("completed");
        (logs.contains("line 6") && done).then_some(())
    });
    assert_eq!(browser.text("#logs").unwrap().matches("line 3").count(), 1, "a line shown twice");
    assert_eq!(browser.script("return window.anycloudStayed === true"), true, "the job's page reloaded");
    screenshot(&browser, "job");

    // ---- A stuck run says why first; cross-site actions are refused; Cancel unwinds it.
    let stuck = create_cluster(&api, "stuck", "never");
    let stuck_page = format!("{}/ui/workflows/{stuck}", api.url);
    browser.goto(&stuck_page);
    let why = browser.wait_for(Duration::from_secs(90), "the run to wait on its nodes", |browser| {
        browser.text(".lines").filter(|lines| lines.contains("wait_for_nodes") && lines.contains("nodes Ready"))
    });
    assert!(why.starts_with("waiting"), "{why}");
    assert!(why.contains(&format!("anycloud workflow cancel {stuck}")), "the first lines say what to do: {why}");
    // Its time axis draws the poll's wait as its own bar, and the next check after now.
    let axis = browser.wait_for(Duration::from_secs(30), "the wait's bar on the time axis", |browser| {
        browser.text("main section").filter(|axis| axis.contains("waited ") && axis.contains("next check in"))
    });
    assert!(axis.contains("wait_for_nodes: waiting now"), "{axis}");
    let count = |css: &str| browser.script_with("return document.querySelectorAll(arguments[0]).length", &[json!(css)]);
    assert!(count("svg.axis rect.wait").as_u64() >= Some(1), "{axis}");
    assert_eq!(count("svg.axis rect.planned"), 1, "{axis}");
    screenshot(&browser, "workflow-stuck");
    // A resource's run says which step of how many it is on (what followers show as `step N/M`).
    let plan = api.inspect(&stuck, false)["plan"].as_array().unwrap().clone();
    let number = plan.iter().position(|step| step == "wait_for_nodes").unwrap() + 1;
    let shown = api.cli(&["--json", "cluster", "status", "stuck"]);
    let workflow = &shown.json()["workflow"];
    assert_eq!(
        (workflow["step_number"].as_u64(), workflow["steps"].as_u64()),
        (Some(number as u64), Some(plan.len() as u64)),
        "{workflow}"
    );
    let csrf = browser.attribute("form[action$='/cancel'] input[name=csrf]", "value").unwrap();
    let cancel = format!("/ui/workflows/{stuck}/cancel");
    let form = format!("csrf={csrf}");
    let form_type = ("Content-Type", "application/x-www-form-urlencoded");
    let foreign = e2e::http(
        &api.url,
        "POST",
        &cancel,
        &[("Cookie", &cookie), ("Origin", "http://attacker.example"), form_type],
        form.as_bytes(),
    );
    assert_eq!(foreign.status, 403, "{foreign:?}");
    let own_origin = api.url.clone();
    let tokenless = e2e::http(
        &api.url,
        "POST",
        &cancel,
        &[("Cookie", &cookie), ("Origin", &own_origin), form_type],
        b"csrf=forged",
    );
    assert_eq!(tokenless.status, 403, "{tokenless:?}");
    assert_eq!(api.inspect(&stuck, false)["run"]["cancel_requested"], false, "a refused action changed the run");
    browser.click("form[action$='/cancel'] button");
    browser.accept_dialog();
    browser.wait_for(Duration::from_secs(120), "the run to unwind to cancelled", |browser| {
        browser.text(".lines").filter(|lines| lines.starts_with("cancelled"))
    });
    assert_eq!(browser.current_url(), stuck_page);
    assert_eq!(api.inspect(&stuck, false)["run"]["status"], "cancelled");
    let axis = browser.text("main section").unwrap();
    assert!(axis.contains("undo launch_workers: undone"), "the undos are bars of their own: {axis}");
    screenshot(&browser, "workflow-cancelled");

    // ---- The API's reference, from its OpenAPI document; the document itself for the session.
    browser.goto(&format!("{}/ui/api", api.url));
    let reference = browser.text("main").unwrap();
    assert!(reference.contains("GET /v1/workflows/{id}") && reference.contains("WorkflowDetail"), "{reference}");
    screenshot(&browser, "api");
    browser.click("a[href='#schema-WorkflowDetail']");
    assert!(browser.current_url().ends_with("#schema-WorkflowDetail"));
    let document = e2e::http(&api.url, "GET", "/ui/openapi.json", &[("Cookie", &cookie)], b"");
    assert_eq!(document.status, 200);
    assert_eq!(serde_json::from_str::<Value>(&document.body).unwrap()["openapi"], "3.1.0");

    // ---- Without a session: every page and action is refused. Every answer has the CSP.
    for path in ["/ui", "/ui/workflows", &format!("/ui/workflows/{run}"), "/ui/api", "/ui/openapi.json"] {
        let answer = e2e::http(&api.url, "GET", path, &[], b"");
        assert_eq!(answer.status, 401, "GET {path} without a session: {answer:?}");
        let signed_in = e2e::http(&api.url, "GET", path, &[("Cookie", &cookie)], b"");
        assert_eq!(signed_in.status, 200, "GET {path} with the session");
        let policy = header(&signed_in, "content-security-policy").unwrap();
        assert!(policy.contains("script-src 'self'") && !policy.contains("unsafe-inline"), "{policy}");
        assert_eq!(header(&signed_in, "cache-control"), Some("no-store"));
    }
    for action in ["cancel", "retry", "resume"] {
        let path = format!("/ui/workflows/{run}/{action}");
        let answer = e2e::http(&api.url, "POST", &path, &[("Origin", &own_origin), form_type], form.as_bytes());
        assert_eq!(answer.status, 401, "POST {path} without a session: {answer:?}");
    }
    let forged = e2e::http(&api.url, "GET", "/ui", &[("Cookie", "anycloud_console=forged")], b"");
    assert_eq!(forged.status, 401);

    // ---- The overview lists the clusters and the runs; signing out ends the session.
    browser.goto(&format!("{}/ui", api.url));
    let overview = browser.text("main").unwrap();
    assert!(overview.contains("demo") && overview.contains("1 of 1 VMs running"), "{overview}");
    screenshot(&browser, "overview");
    browser.click("form[action='/ui/sign-out'] button");
    browser.wait_for(Duration::from_secs(10), "the signed-out page", |browser| {
        browser.text("main").filter(|text| text.contains("Signed out"))
    });
    let after = e2e::http(&api.url, "GET", "/ui", &[("Cookie", &cookie)], b"");
    assert_eq!(after.status, 401, "the session outlived its sign-out");
}
