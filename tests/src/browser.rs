//! A headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`, which
//! `scripts/test` installs): just the commands the console's tests need, spoken as JSON over
//! HTTP/1.1 to `chromedriver` ([`request`]).
//!
//! Everything it starts names its temporary directory (`--user-data-dir`, `--log-path`), and
//! dropping it ends the session and kills whatever still names the directory
//! ([`crate::e2e::kill_all_under`]): no browser process outlives the test.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::e2e::{self, free_port};

/// The WebDriver id of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One browser session.
pub struct Browser {
    driver: Child,
    url: String,
    session: String,
    dir: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a fresh profile.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("anycloud-browser-")
            .tempdir()
            .expect("a temporary directory for the browser");
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", dir.path().join("chromedriver.log").display()))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver is required (scripts/test installs Debian's chromium-driver)");
        let url = format!("http://127.0.0.1:{port}");
        e2e::wait_until(Duration::from_secs(20), "chromedriver to answer", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        let mut browser = Self { driver, url, session: String::new(), dir };
        let profile = browser.dir.path().join("profile");
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,1000", format!("--user-data-dir={}", profile.display())],
            },
        } } });
        let answer = browser.call("POST", "/session", &capabilities);
        browser.session = answer["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {answer}")).to_owned();
        browser
    }

    /// A WebDriver command: its `value`, or a panic with the driver's error.
    pub fn call(&self, method: &str, path: &str, body: &Value) -> Value {
        let path = if path == "/session" { path.to_owned() } else { format!("/session/{}{path}", self.session) };
        let body = if method == "GET" || method == "DELETE" { Vec::new() } else { body.to_string().into_bytes() };
        let (status, value) = request(&self.url, method, &path, &body);
        assert!(status == 200, "WebDriver {method} {path}: {status} {value}");
        value["value"].clone()
    }

    /// Opens `url`.
    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", &json!({ "url": url }));
    }

    /// The page's title.
    pub fn title(&self) -> String {
        self.call("GET", "/title", &Value::Null).as_str().unwrap_or_default().to_owned()
    }

    /// The page's URL.
    pub fn current_url(&self) -> String {
        self.call("GET", "/url", &Value::Null).as_str().unwrap_or_default().to_owned()
    }

    /// The rendered text of the first element `css` selects, if any (read in one step, so that a
    /// live page swapping its content meanwhile cannot make it stale).
    pub fn text(&self, css: &str) -> Option<String> {
        let found = self.script_with(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null",
            &[json!(css)],
        );
        found.as_str().map(str::to_owned)
    }

    /// The element `css` selects, if any.
    pub fn find(&self, css: &str) -> Option<String> {
        let path = format!("/session/{}/element", self.session);
        let body = json!({ "using": "css selector", "value": css }).to_string();
        let (_, value) = request(&self.url, "POST", &path, body.as_bytes());
        value["value"][ELEMENT].as_str().map(str::to_owned)
    }

    /// A property of the element `css` selects (`value`, `href`).
    pub fn attribute(&self, css: &str, name: &str) -> Option<String> {
        let found = self.script_with(
            "const e = document.querySelector(arguments[0]); return e ? String(e[arguments[1]]) : null",
            &[json!(css), json!(name)],
        );
        found.as_str().map(str::to_owned)
    }

    /// Clicks the element `css` selects, as a person would (found again if the page swapped it).
    pub fn click(&self, css: &str) {
        for _ in 0..5 {
            let id = self.find(css).unwrap_or_else(|| panic!("nothing to click at {css}"));
            let path = format!("/session/{}/element/{id}/click", self.session);
            if request(&self.url, "POST", &path, b"{}").0 == 200 {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("could not click {css}");
    }

    /// Presses Tab `times` times and answers the focused element's text.
    pub fn tab(&self, times: usize) -> String {
        let keys: Vec<Value> = (0..times)
            .flat_map(|_| {
                [json!({"type": "keyDown", "value": "\u{E004}"}), json!({"type": "keyUp", "value": "\u{E004}"})]
            })
            .collect();
        self.call("POST", "/actions", &json!({ "actions": [{ "type": "key", "id": "keyboard", "actions": keys }] }));
        self.script("return document.activeElement ? document.activeElement.textContent : ''")
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Accepts the open `confirm()` dialog.
    pub fn accept_dialog(&self) {
        self.call("POST", "/alert/accept", &json!({}));
    }

    /// Runs a script in the page and answers its return value.
    pub fn script(&self, script: &str) -> Value {
        self.script_with(script, &[])
    }

    /// Runs a script with `arguments` in the page and answers its return value.
    pub fn script_with(&self, script: &str, arguments: &[Value]) -> Value {
        self.call("POST", "/execute/sync", &json!({ "script": script, "args": arguments }))
    }

    /// The value of the cookie `name`, HttpOnly ones included.
    pub fn cookie(&self, name: &str) -> Option<String> {
        let cookies = self.call("GET", "/cookie", &Value::Null);
        cookies.as_array()?.iter().find(|cookie| cookie["name"] == name)?["value"].as_str().map(str::to_owned)
    }

    /// Every cookie, as the browser keeps them.
    pub fn cookies(&self) -> Value {
        self.call("GET", "/cookie", &Value::Null)
    }

    /// Saves a PNG of the page to `path`.
    pub fn screenshot(&self, path: &Path) {
        let png = self.call("GET", "/screenshot", &Value::Null);
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap_or_default()).expect("a base64 PNG");
        std::fs::write(path, bytes).expect("writing the screenshot");
    }

    /// Waits up to `timeout` for `check` to give a value, polling every 200 ms.
    pub fn wait_for<T>(&self, timeout: Duration, what: &str, mut check: impl FnMut(&Self) -> Option<T>) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(value) = check(self) {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; the page says:\n{:?}", self.text("body"));
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = std::panic::catch_unwind(|| request(&self.url, "DELETE", &path, b""));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        e2e::kill_all_under(self.dir.path());
    }
}

/// One WebDriver request on a fresh connection: the status and the JSON answer, read up to its
/// `Content-Length` (chromedriver keeps the connection open after answering).
fn request(base: &str, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let authority = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(authority).expect("connecting to chromedriver");
    stream.set_read_timeout(Some(Duration::from_secs(120))).expect("a read timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).expect("writing to chromedriver");
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).expect("chromedriver's status line");
    let status = line.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let mut length = 0;
    loop {
        line.clear();
        reader.read_line(&mut line).expect("chromedriver's headers");
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut answer = vec![0; length];
    reader.read_exact(&mut answer).expect("chromedriver's answer");
    (status, serde_json::from_slice(&answer).unwrap_or(Value::Null))
}
