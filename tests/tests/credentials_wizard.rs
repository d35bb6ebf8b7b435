//! `anycloud credentials new NAME` without `--provider`: the wizard, driven through a real
//! pseudo-terminal as a person drives it.
//!
//! The real `anycloud` binary runs as the session leader of a fresh pty (`setsid --ctty`), so its
//! standard input is a terminal, `/dev/tty` is that terminal, and Ctrl-C (byte 0x03 typed on the
//! master) reaches it as SIGINT from the terminal driver, not from a `kill` the test sends.
//! Everything the terminal shows is read from the master side: a secret typed at the hidden
//! prompt must never appear there, and the terminal's own settings (read through the pty's
//! slave side) must have echo off at the hidden prompt and back on after it, also after Ctrl-C.
//!
//! - sim: a wrong provider is refused with why and asked again; each prompt with its default;
//!   the summary; saved and followed until `valid`.
//! - aws at moto, with `--json`: the secret never shows, the key id shows shortened, stdout holds
//!   JSON only (the prompts go to the terminal), the credential is valid and the secret is
//!   nowhere in the API's logs or files.
//! - gcp at the fake Google: a path that is not a service-account key is refused and asked
//!   again; the summary shows its client_email.
//! - Ctrl-C at the hidden prompt, and the end of input at the first: nothing saved, exit 130,
//!   the echo back on.
//! - Without a terminal: refused (`PROVIDER_REQUIRED`, exit 3) with the flags and variables to
//!   use; a key flag without `--provider` likewise; nothing saved.
//! - `secret new NAME` with its values typed on the terminal (the same hidden read): never
//!   shown, the echo off while typed; Ctrl-C sends nothing, exits 130 and gives the echo back;
//!   Ctrl-D ends the lines and saves them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anycloud_tests::e2e::{Api, Moto};
use anycloud_tests::fake_google::FakeGoogle;
use anycloud_tests::gcp_test_key::{CLIENT_EMAIL, service_account_json};
use rustix::termios::LocalModes;

/// How long any one thing the terminal should show may take to show.
const SHOWS_WITHIN: Duration = Duration::from_secs(60);

/// The `anycloud` binary run on a pseudo-terminal of its own.
struct Terminal {
    /// The master side: what the person types goes in, what the terminal shows comes out.
    master: File,
    /// The slave side's path, opened to read the terminal's settings.
    slave_path: PathBuf,
    /// Everything the terminal showed so far.
    shown: Arc<Mutex<Vec<u8>>>,
    /// How far [`Terminal::expect`] has read.
    seen: usize,
    child: Child,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Terminal {
    /// Starts `anycloud ARGS` against `api` with a new pty as its controlling terminal, its
    /// standard input and stderr, and its stdout too unless `stdout` names a file.
    fn start(api: &Api, args: &[&str], stdout: Option<&Path>) -> Self {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let slave_path = PathBuf::from(ptsname(&master, Vec::new()).unwrap().into_string().unwrap());
        let slave = open_slave(&slave_path);
        // `setsid --ctty`: a new session whose controlling terminal is its stdin, the pty; the
        // binary is exec'd in place, so its pid is the child's.
        let base = api.command();
        let mut command = Command::new("setsid");
        command.arg("--ctty").arg(base.get_program()).args(args);
        for (name, value) in base.get_envs() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command.env("TERM", "dumb");
        command.stdin(Stdio::from(slave.try_clone().unwrap())).stderr(Stdio::from(slave.try_clone().unwrap()));
        match stdout {
            Some(path) => command.stdout(File::create(path).unwrap()),
            None => command.stdout(Stdio::from(slave.try_clone().unwrap())),
        };
        let child = command.spawn().expect("starting setsid --ctty anycloud");
        // Only the child holds the slave now: when it exits, reading the master ends.
        drop(slave);
        let master = File::from(master);
        let shown = Arc::new(Mutex::new(Vec::new()));
        let mut reading = master.try_clone().unwrap();
        let sink = Arc::clone(&shown);
        let reader = std::thread::spawn(move || {
            let mut buffer = [0_u8; 4096];
            // Linux answers EIO once no process holds the slave side.
            while let Ok(count) = reading.read(&mut buffer) {
                if count == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buffer[..count]);
            }
        });
        Self { master, slave_path, shown, seen: 0, child, reader: Some(reader) }
    }

    /// Everything the terminal showed.
    fn transcript(&self) -> String {
        String::from_utf8_lossy(&self.shown.lock().unwrap()).into_owned()
    }

    /// Waits until the terminal shows `text` after what was already expected, and moves past it.
    #[track_caller]
    fn expect(&mut self, text: &str) {
        let deadline = Instant::now() + SHOWS_WITHIN;
        loop {
            let found = {
                let shown = self.shown.lock().unwrap();
                let rest = String::from_utf8_lossy(&shown[self.seen.min(shown.len())..]).into_owned();
                rest.find(text).map(|at| self.seen + rest[..at].len() + text.len())
            };
            if let Some(end) = found {
                self.seen = end;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the terminal did not show {text:?} within {SHOWS_WITHIN:?}; it showed:\n{}",
                self.transcript()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `keys` (a line ends with `\r`, as the Enter key sends it).
    fn type_keys(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
        self.master.flush().unwrap();
    }

    /// Whether the terminal echoes what is typed now.
    fn echoes(&self) -> bool {
        let slave = open_slave(&self.slave_path);
        rustix::termios::tcgetattr(&slave).unwrap().local_modes.contains(LocalModes::ECHO)
    }

    /// Waits for the binary to exit and for the terminal's last output.
    fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + SHOWS_WITHIN * 3;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("anycloud did not exit; the terminal showed:\n{}", self.transcript());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        status
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The pty's slave side, opened without making it anyone's controlling terminal.
fn open_slave(path: &Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
        .open(path)
        .unwrap()
}

/// The process's exit code.
#[track_caller]
fn code(status: ExitStatus, terminal: &Terminal) -> i32 {
    status.code().unwrap_or_else(|| panic!("anycloud died of a signal: {status}\n{}", terminal.transcript()))
}

#[test]
fn a_sim_credential_is_asked_for_shown_saved_and_verified() {
    let api = Api::start("wizard-sim");
    let mut terminal = Terminal::start(&api, &["credentials", "new", "wiz-sim"], None);
    terminal.expect("Provider (aws, gcp, sim): ");
    terminal.type_keys("azure\r");
    terminal
        .expect("`azure` is not a provider Anycloud knows; type aws (Amazon EC2), gcp (Google Compute Engine) or sim");
    terminal.expect("Provider (aws, gcp, sim): ");
    terminal.type_keys("sim\r");
    terminal.expect("Simulated call latency in ms [0]: ");
    terminal.type_keys("99999999\r");
    terminal.expect("`99999999` is not a number of milliseconds from 0 to 60000");
    terminal.expect("Simulated call latency in ms [0]: ");
    terminal.type_keys("\r");
    terminal.expect("Simulated VM boot time in ms [300]: ");
    terminal.type_keys("250\r");
    terminal.expect("Credential `wiz-sim` will be saved on the active API:");
    for line in ["name          wiz-sim", "provider      sim", "call latency  0 ms", "VM boot time  250 ms"] {
        terminal.expect(line);
    }
    terminal.expect("Save it and verify it with the provider? [Y/n]: ");
    assert!(api.credentials().is_empty(), "saved before the person confirmed");
    terminal.type_keys("\r");
    terminal.expect("credential wiz-sim (sim) saved; verifying it with workflow ");
    terminal.expect("credential wiz-sim is valid");
    let status = terminal.wait();
    assert_eq!(code(status, &terminal), 0, "{}", terminal.transcript());
    let credential = api.credential("wiz-sim");
    assert_eq!(credential["status"], "valid");
    assert_eq!(credential["provider"], "sim");
    assert_eq!(credential["public"]["sim"]["boot_ms"], 250, "{credential:#}");
}

#[test]
fn an_aws_secret_is_typed_hidden_and_never_shown() {
    let moto = Moto::start();
    let api = Api::start("wizard-aws");
    let secret = format!("wizardSecret/{}+Zz", uuid::Uuid::new_v4().simple());
    let stdout = api.scratch().join("wizard.stdout");
    let args = ["--json", "credentials", "new", "wiz-aws", "--endpoint", &moto.endpoint];
    let mut terminal = Terminal::start(&api, &args, Some(&stdout));
    terminal.expect("Provider (aws, gcp, sim): ");
    terminal.type_keys("aws\r");
    terminal.expect("AWS access key id: ");
    assert!(terminal.echoes(), "the key id prompt should echo");
    terminal.type_keys("AKIAWIZARDTESTKEY123\r");
    terminal.expect("AKIAWIZARDTESTKEY123");
    terminal.expect("AWS secret access key (hidden as you type): ");
    assert!(!terminal.echoes(), "the terminal echoes at the secret's prompt");
    terminal.type_keys(&format!("{secret}\r"));
    terminal.expect("AWS region [us-east-1]: ");
    assert!(terminal.echoes(), "the echo did not come back after the secret");
    terminal.type_keys("\r");
    terminal.expect("Credential `wiz-aws` will be saved on the active API:");
    for line in [
        "provider           aws",
        "access key id      AKIA…Y123",
        "secret access key  (hidden)",
        "region             us-east-1",
    ] {
        terminal.expect(line);
    }
    terminal.expect("[Y/n]: ");
    terminal.type_keys("yes\r");
    let status = terminal.wait();
    assert_eq!(code(status, &terminal), 0, "{}", terminal.transcript());
    let transcript = terminal.transcript();
    assert!(!transcript.contains(&secret), "the secret showed on the terminal:\n{transcript}");
    assert!(!transcript.contains("wizardSecret"), "part of the secret showed on the terminal:\n{transcript}");
    // stdout is the answer alone: the verification's events and the credential, as JSON.
    let out = std::fs::read_to_string(&stdout).unwrap();
    assert!(!out.contains("Provider (") && !out.contains("[Y/n]") && !out.contains(&secret), "{out}");
    assert!(out.contains("\"status\": \"valid\""), "{out}");
    let credential = api.credential("wiz-aws");
    assert_eq!(credential["status"], "valid", "{credential:#}");
    assert_eq!(credential["public"]["identity"], "AKIAWIZARDTESTKEY123", "{credential:#}");
    api.assert_secret_nowhere(&secret);
}

#[test]
fn a_gcp_key_file_that_is_not_a_service_account_key_is_asked_again() {
    let google = FakeGoogle::start();
    let api = Api::start("wizard-gcp");
    let adc = api.scratch().join("adc.json");
    std::fs::write(&adc, r#"{"type": "authorized_user", "client_id": "x", "refresh_token": "y"}"#).unwrap();
    let key = api.scratch().join("service-account.json");
    std::fs::write(&key, service_account_json()).unwrap();
    let endpoint = google.endpoint();
    let mut terminal = Terminal::start(&api, &["credentials", "new", "wiz-gcp", "--endpoint", &endpoint], None);
    terminal.expect("Provider (aws, gcp, sim): ");
    terminal.type_keys("gcp\r");
    terminal.expect("GCP service-account key file (path to its JSON): ");
    terminal.type_keys(&format!("{}\r", adc.display()));
    terminal.expect("of type `authorized_user`; only service-account keys can be imported");
    terminal.expect("GCP service-account key file (path to its JSON): ");
    terminal.type_keys(&format!("{}\r", key.display()));
    terminal.expect(&format!("client_email  {CLIENT_EMAIL}"));
    terminal.expect("[Y/n]: ");
    terminal.type_keys("y\r");
    terminal.expect("credential wiz-gcp is valid");
    let status = terminal.wait();
    assert_eq!(code(status, &terminal), 0, "{}", terminal.transcript());
    assert!(!terminal.transcript().contains("PRIVATE KEY"), "{}", terminal.transcript());
    assert_eq!(api.credential("wiz-gcp")["public"]["identity"], CLIENT_EMAIL);
}

#[test]
fn ctrl_c_or_the_end_of_input_saves_nothing_and_gives_the_echo_back() {
    let api = Api::start("wizard-stop");
    let mut terminal = Terminal::start(&api, &["credentials", "new", "wiz-stop"], None);
    terminal.expect("Provider (aws, gcp, sim): ");
    terminal.type_keys("aws\r");
    terminal.expect("AWS access key id: ");
    terminal.type_keys("AKIAWIZARDTESTKEY123\r");
    terminal.expect("AWS secret access key (hidden as you type): ");
    assert!(!terminal.echoes(), "the terminal echoes at the secret's prompt");
    // Half a secret, then Ctrl-C: the terminal driver sends SIGINT.
    terminal.type_keys("halfTypedSecret");
    terminal.type_keys("\x03");
    terminal.expect("error[INTERRUPTED]: interrupted: credential `wiz-stop` was not saved");
    let status = terminal.wait();
    assert_eq!(code(status, &terminal), 130, "{}", terminal.transcript());
    assert!(terminal.echoes(), "Ctrl-C at the hidden prompt left the terminal's echo off");
    assert!(!terminal.transcript().contains("halfTypedSecret"), "{}", terminal.transcript());
    assert!(api.credentials().is_empty(), "{:?}", api.credentials());

    // Ctrl-D at the first prompt: the input ended.
    let mut terminal = Terminal::start(&api, &["credentials", "new", "wiz-stop"], None);
    terminal.expect("Provider (aws, gcp, sim): ");
    terminal.type_keys("\x04");
    terminal.expect("error[INTERRUPTED]: the input ended before every answer: credential `wiz-stop` was not saved");
    let status = terminal.wait();
    assert_eq!(code(status, &terminal), 130, "{}", terminal.transcript());
    assert!(terminal.echoes());

    // `no` at the summary.
    let mut terminal = Terminal::start(&api, &["credentials", "new", "wiz-stop"], None);
    terminal.expect("Provider (aws, gcp, sim): ");
    terminal.type_keys("sim\r\r\r");
    terminal.expect("[Y/n]: ");
    terminal.type_keys("n\r");
    terminal.expect("error[CANCELLED]: credential `wiz-stop` was not saved: you answered no");
    let status = terminal.wait();
    assert_eq!(code(status, &terminal), 1, "{}", terminal.transcript());
    let out = api.cli(&["credentials", "list"]);
    out.expect_code(0);
    assert!(out.stdout.contains("no credentials yet"), "{out}");
}

#[test]
fn secret_values_typed_on_a_terminal_are_hidden_and_ctrl_c_sends_nothing() {
    let api = Api::start("secret-tty");
    let secrets = |api: &Api| {
        let out = api.cli(&["--json", "secret", "list"]);
        out.expect_code(0);
        out.json().as_array().map(Vec::len).unwrap_or_else(|| panic!("{out}"))
    };
    let mut terminal = Terminal::start(&api, &["secret", "new", "db"], None);
    terminal.expect("type KEY=VALUE lines (end with Ctrl-D); it is not echoed:");
    assert!(!terminal.echoes(), "the terminal echoes while a secret's values are typed");
    terminal.type_keys("PASSWORD=halfTypedSecret\r");
    terminal.type_keys("\x03");
    terminal.expect("error[INTERRUPTED]: interrupted: the secret was not saved");
    let status = terminal.wait();
    assert_eq!(code(status, &terminal), 130, "{}", terminal.transcript());
    assert!(terminal.echoes(), "Ctrl-C while a secret was typed left the terminal's echo off");
    assert!(!terminal.transcript().contains("halfTypedSecret"), "{}", terminal.transcript());
    assert_eq!(secrets(&api), 0);

    let mut terminal = Terminal::start(&api, &["secret", "new", "db"], None);
    terminal.expect("it is not echoed:");
    terminal.type_keys("PASSWORD=typedSecretValue\rUSER=app\r\x04");
    terminal.expect("secret db is at version 1 (keys PASSWORD, USER)");
    let status = terminal.wait();
    assert_eq!(code(status, &terminal), 0, "{}", terminal.transcript());
    assert!(terminal.echoes());
    assert!(!terminal.transcript().contains("typedSecretValue"), "{}", terminal.transcript());
    assert_eq!(secrets(&api), 1);
}

#[test]
fn without_a_terminal_it_refuses_and_names_the_flags_to_use() {
    let api = Api::start("wizard-script");
    // Standard input is /dev/null: nobody to ask.
    let out = api.cli(&["credentials", "new", "scripted"]);
    out.expect_code(3);
    assert!(out.stderr.starts_with("error[PROVIDER_REQUIRED]: credential `scripted`: --provider is required"), "{out}");
    for words in [
        "`--provider aws` with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        "`--provider gcp --service-account-file FILE` or GOOGLE_APPLICATION_CREDENTIALS=FILE",
        "--machine-identity",
        "`--provider sim`",
    ] {
        assert!(out.stderr.contains(words), "stderr lacks {words:?}\n{out}");
    }
    assert!(out.stdout.is_empty(), "{out}");
    let out = api.cli(&["--json", "credentials", "new", "scripted"]);
    out.expect_code(3);
    assert_eq!(out.json_error()["error"]["code"], "PROVIDER_REQUIRED", "{out}");
    // A key flag says which provider it needs, terminal or not.
    let out = api.cli(&["credentials", "new", "scripted", "--access-key-id", "AKIAWIZARDTESTKEY123"]);
    out.expect_code(3);
    assert!(
        out.stderr.starts_with("error[PROVIDER_REQUIRED]: credential `scripted`: --access-key-id needs --provider"),
        "{out}"
    );
    // With --provider nothing changed: it saves as before.
    api.cli(&["credentials", "new", "scripted", "--provider", "sim", "--wait"]).expect_code(0);
    assert_eq!(api.credentials().len(), 1);
}
