//! `anycloud api list | use | status`.

use serde_json::Value;

use super::print_json;
use crate::client::Client;
use crate::config::Config;
use crate::exit::{CliError, CliResult, NOT_OBSERVED, OK};
use crate::render;

/// Lists the APIs the CLI knows, marking the active one.
pub fn list(json: bool) -> CliResult {
    let config = Config::load()?;
    if json {
        let apis: Vec<Value> = config
            .apis
            .iter()
            .map(|(name, entry)| {
                serde_json::json!({
                    "name": name, "url": entry.url, "kind": entry.kind,
                    "active": config.active.as_deref() == Some(name),
                })
            })
            .collect();
        print_json(&apis);
        return Ok(OK);
    }
    if config.apis.is_empty() {
        println!("no APIs yet: start a local one with `anycloud api serve --use`");
        return Ok(OK);
    }
    let rows: Vec<Vec<String>> = config
        .apis
        .iter()
        .map(|(name, entry)| {
            let mark = if config.active.as_deref() == Some(name) { "*" } else { "" };
            vec![mark.to_owned(), name.clone(), entry.kind.clone(), entry.url.clone()]
        })
        .collect();
    render::table(&["", "NAME", "KIND", "URL"], &rows);
    Ok(OK)
}

/// Makes a known API the active one.
pub fn use_api(name: &str) -> CliResult {
    let mut config = Config::load()?;
    if !config.apis.contains_key(name) {
        let known: Vec<&str> = config.apis.keys().map(String::as_str).collect();
        return Err(CliError::new(
            NOT_OBSERVED,
            format!(
                "no API named `{name}` in the CLI config (known: {}); start it with `anycloud api serve --id {name} --use`",
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ),
        ));
    }
    config.active = Some(name.to_owned());
    config.save()?;
    println!("active API: {name}");
    Ok(OK)
}

/// Shows the active API and whether it answers.
pub async fn status(json: bool) -> CliResult {
    let client = Client::active()?;
    let status: Value = client.get("/v1/status").await?;
    if json {
        print_json(&status);
    } else {
        println!("active API  {} ({})", client.name(), client.kind());
        println!("url         {}", client.url());
        println!("answers     yes, version {}", status["version"].as_str().unwrap_or("?"));
        println!("store       {}", status["store"].as_str().unwrap_or("?"));
        println!("engine      {}", status["engine_owner"].as_str().unwrap_or("?"));
    }
    Ok(OK)
}
