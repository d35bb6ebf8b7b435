//! `anycloud ui`: the web console of the active API. It asks the API (with the bearer token)
//! for a sign-in code that works once, within a minute, and prints the address that trades it
//! for a browser session; on a desktop it also opens it. The token itself never goes to the
//! browser (docs/console.md).

use std::io::IsTerminal as _;

use anycloud_workflows::wire::ConsoleCode;
use serde_json::json;

use super::print_json;
use crate::client::Client;
use crate::exit::{CliResult, OK};
use crate::output::say;

/// `anycloud ui`, with `--no-open` to print the address only.
pub async fn ui(no_open: bool, json: bool) -> CliResult {
    let client = Client::active()?;
    let code: ConsoleCode = client.post_empty("/v1/console/codes").await?;
    let url = format!("{}{}", client.url().trim_end_matches('/'), code.path);
    if json {
        print_json(&json!({ "url": url, "expires_at": code.expires_at }));
        return Ok(OK);
    }
    say!("{url}");
    eprintln!("Open this address within a minute; it signs one browser in, once (a session of 12 hours).");
    if !no_open && std::io::stdout().is_terminal() && desktop() {
        // Best effort: where no opener runs, the printed address is the way in.
        let _ = std::process::Command::new("xdg-open")
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
    Ok(OK)
}

/// Whether a graphical session runs, where `xdg-open` can start a browser.
fn desktop() -> bool {
    std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some()
}
