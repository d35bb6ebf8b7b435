//! The progress display of `--wait`, seen as a person and as a script see it, through the real
//! binary and a hosted API on the simulated cloud:
//!
//! - under a pseudo-terminal (util-linux `script`), `cluster create --wait` redraws one status
//!   line in place (`\r` + erase-line) with a spinner and `step N/M`, colours its lines, erases
//!   the status line and ends with the cluster's phase;
//! - with stdout a pipe, the same command prints its usual lines and not one escape byte;
//! - under a pseudo-terminal with `NO_COLOR=1`, no colour code at all.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::Duration;

use anycloud_tests::e2e::{self, Api};

/// How long a `--wait` may take before the test fails.
const WAIT: Duration = Duration::from_secs(180);
/// Back to the start of the line and erase it: the status line's redraw.
const REDRAW: &str = "\r\x1b[2K";
/// The spinner's frames.
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// `arg` quoted for `sh`.
fn quoted(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// Runs `anycloud ARGS` against `api` with stdout and stderr on a pseudo-terminal (`script`),
/// NO_COLOR as given: exit code and everything the terminal received.
fn on_a_terminal(api: &Api, args: &[&str], no_color: Option<&str>) -> (i32, String) {
    let cli = api.command();
    let line: Vec<String> = std::iter::once(cli.get_program().to_string_lossy().into_owned())
        .chain(args.iter().map(|a| (*a).to_owned()))
        .collect();
    let line = line.iter().map(|arg| quoted(arg)).collect::<Vec<_>>().join(" ");
    let mut command = Command::new("script");
    command.args(["-qfec", &line, "/dev/null"]);
    for (name, value) in cli.get_envs() {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    match no_color {
        Some(value) => command.env("NO_COLOR", value),
        None => command.env_remove("NO_COLOR"),
    };
    command.env("TERM", "xterm-256color").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    let child = command.spawn().expect("running `script` (util-linux)");
    let output = wait_output(child, WAIT);
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Waits for `child` to end, killing it (and failing) after `timeout`.
fn wait_output(mut child: std::process::Child, timeout: Duration) -> std::process::Output {
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut { stdout }, &mut bytes).unwrap();
        bytes
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the command under `script` did not end within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = reader.join().unwrap();
    std::process::Output { status, stdout, stderr: Vec::new() }
}

/// Every colour code (`ESC [ 3X m`) in `text`.
fn colour_codes(text: &str) -> Vec<&str> {
    text.match_indices("\x1b[3").map(|(at, _)| &text[at..(at + 6).min(text.len())]).collect()
}

#[test]
fn wait_shows_a_live_status_line_on_a_terminal_and_plain_lines_elsewhere() {
    assert!(Command::new("script").arg("--version").output().is_ok(), "util-linux `script` is needed");
    let api = Api::start_hosted("progress");
    api.cli(&["credentials", "new", "sim", "--provider", "sim", "--wait"]).expect_code(0);

    // A person at a terminal.
    let mut create = e2e::sim_cluster_create("live", "sim", "2");
    create.push("--wait");
    let (code, seen) = on_a_terminal(&api, &create, None);
    assert_eq!(code, 0, "{seen}\n{}", api.transcript());
    assert!(seen.contains(REDRAW), "no redraw of a status line:\n{seen:?}");
    assert!(seen.contains("cluster.create"), "the status line names the workflow:\n{seen:?}");
    let step = seen.match_indices("step ").any(|(at, _)| {
        let rest = &seen[at + 5..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && rest[digits..].starts_with('/') && rest[digits + 1..].starts_with(|c: char| c.is_ascii_digit())
    });
    assert!(step, "no `step N/M` on the status line:\n{seen:?}");
    assert!(SPINNER.iter().any(|frame| seen.contains(*frame)), "no spinner:\n{seen:?}");
    assert!(seen.contains("\x1b[32m"), "succeeded steps are green on a colour terminal:\n{seen:?}");
    assert!(seen.contains("step-succeeded"), "the words stay with the colour:\n{seen:?}");
    // The status line is erased before the outcome, which is the last thing said.
    let outcome = seen.rfind("cluster live is ready").unwrap_or_else(|| panic!("no outcome:\n{seen:?}"));
    let erased = seen[..outcome].rfind(REDRAW).unwrap();
    assert!(
        !seen[erased + REDRAW.len()..outcome].contains(SPINNER),
        "a status line is left before the outcome:\n{seen:?}"
    );
    assert!(!seen[outcome..].contains(SPINNER), "a status line is drawn after the outcome:\n{seen:?}");

    // A script reading a pipe: today's lines, not one escape byte.
    let mut create = e2e::sim_cluster_create("piped", "sim", "2");
    create.push("--wait");
    let mut command = api.command();
    command.env_remove("NO_COLOR").args(&create).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    let output = wait_output(command.spawn().unwrap(), WAIT);
    let plain = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{plain}");
    assert!(!plain.contains('\x1b'), "an escape byte without a terminal:\n{plain:?}");
    assert!(!plain.contains('\r'), "a carriage return without a terminal:\n{plain:?}");
    assert!(plain.starts_with("cluster piped accepted: "), "{plain}");
    assert!(plain.lines().any(|line| line.starts_with("  ") && line.contains("step-succeeded")), "{plain}");
    assert!(plain.ends_with("cluster piped is ready\n"), "{plain}");

    // NO_COLOR (any non-empty value): the status line may be redrawn, but nothing is coloured.
    let (code, seen) = on_a_terminal(&api, &["cluster", "delete", "piped", "--wait"], Some("1"));
    assert_eq!(code, 0, "{seen}");
    assert!(colour_codes(&seen).is_empty(), "colour with NO_COLOR=1: {:?}\n{seen:?}", colour_codes(&seen));
    assert!(seen.contains("cluster piped is deleted"), "{seen:?}");
}
