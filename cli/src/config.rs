//! The CLI's configuration: the APIs it knows and which one is active. Kept as JSON in the XDG
//! config directory (`$ANYCLOUD_CONFIG_DIR`, else `$XDG_CONFIG_HOME/anycloud`, else
//! `~/.config/anycloud`), mode 0600, since it holds bearer tokens.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::exit::{CliError, NOT_OBSERVED};

/// An API the CLI can talk to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiEntry {
    /// Base URL, e.g. `http://127.0.0.1:7878`.
    pub url: String,
    /// Bearer token.
    pub token: String,
    /// `local` or `hosted`.
    pub kind: String,
    /// For an HTTPS API: the certificate (PEM) trusted for it, and nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pem: Option<String>,
    /// For an API deployed on a cloud VM: the API (in this config) that deployed it, and removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_by: Option<String>,
}

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Config {
    /// The API commands go to.
    pub active: Option<String>,
    /// Known APIs by name.
    pub apis: BTreeMap<String, ApiEntry>,
}

/// Where the configuration lives.
pub fn config_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ANYCLOUD_CONFIG_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CONFIG_HOME") {
        return PathBuf::from(dir).join("anycloud");
    }
    home().join(".config").join("anycloud")
}

/// Where local APIs keep their data by default.
pub fn data_home() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(dir).join("anycloud");
    }
    home().join(".local").join("share").join("anycloud")
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from)
}

impl Config {
    /// Reads the configuration; a missing file is an empty configuration.
    pub fn load() -> Result<Self, CliError> {
        let path = config_dir().join("config.json");
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|err| {
                CliError::new(
                    NOT_OBSERVED,
                    "CONFIG_INVALID",
                    format!("the CLI config {} is not valid JSON: {err}", path.display()),
                )
            }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(err) => {
                Err(CliError::new(NOT_OBSERVED, "CONFIG_UNREADABLE", format!("reading {}: {err}", path.display())))
            }
        }
    }

    /// Writes the configuration (mode 0600), replacing the file atomically.
    pub fn save(&self) -> Result<(), CliError> {
        let dir = config_dir();
        let fail = |err: std::io::Error| {
            CliError::new(
                NOT_OBSERVED,
                "CONFIG_UNWRITABLE",
                format!("writing the CLI config in {}: {err}", dir.display()),
            )
        };
        std::fs::create_dir_all(&dir).map_err(fail)?;
        let temporary = dir.join(format!(".config.json.{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)
            .map_err(fail)?;
        let text = serde_json::to_string_pretty(self)
            .map_err(|err| CliError::new(NOT_OBSERVED, "CONFIG_UNWRITABLE", err.to_string()))?;
        file.write_all(text.as_bytes()).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&temporary, dir.join("config.json")).map_err(fail)
    }

    /// The active API, or an error that says how to get one.
    pub fn active(&self) -> Result<(String, ApiEntry), CliError> {
        let name = self.active.clone().ok_or_else(|| {
            CliError::new(
                NOT_OBSERVED,
                "NO_ACTIVE_API",
                "no active API: start a local one with `anycloud api serve --use`, or pick a known one with \
                 `anycloud api use NAME` (`anycloud api list` shows them)",
            )
        })?;
        let entry = self.apis.get(&name).cloned().ok_or_else(|| {
            CliError::new(
                NOT_OBSERVED,
                "NO_ACTIVE_API",
                format!("the active API `{name}` is not in the CLI config; run `anycloud api use NAME`"),
            )
        })?;
        Ok((name, entry))
    }
}
