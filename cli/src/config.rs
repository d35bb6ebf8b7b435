//! The CLI's configuration: the APIs it knows and which one is active. Kept as JSON in the XDG
//! config directory (`$ANYCLOUD_CONFIG_DIR`, else `$XDG_CONFIG_HOME/anycloud`, else
//! `~/.config/anycloud`), since it holds bearer tokens and the certificates the CLI pins: the
//! directory is made (or brought back to) mode 0700, and the file is written 0600 through a
//! temporary that is opened only if nothing, not even a symbolic link, has its name
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`), then renamed over it.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

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

/// Creates `path` for writing, mode 0600, only if nothing has its name: not a file, not a
/// symbolic link (which would otherwise be followed to wherever it points).
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
        .open(path)
}

/// Where local APIs keep their data by default.
pub fn data_home() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(dir).join("anycloud");
    }
    home().join(".local").join("share").join("anycloud")
}

/// The data directory of local API `id` when `--data-dir` names none.
pub fn api_data_dir(id: &str) -> PathBuf {
    data_home().join("apis").join(id)
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

    /// Writes the configuration (mode 0600, its directory 0700), replacing the file atomically.
    pub fn save(&self) -> Result<(), CliError> {
        self.save_in(&config_dir())
    }

    fn save_in(&self, dir: &Path) -> Result<(), CliError> {
        let fail = |what: &str, err: std::io::Error| {
            CliError::new(
                NOT_OBSERVED,
                "CONFIG_UNWRITABLE",
                format!("{what} the CLI config directory {}: {err}", dir.display()),
            )
        };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|err| fail("creating", err))?;
        // An existing directory keeps its mode through create: others must not list or swap its files.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|err| fail("restricting (chmod 0700)", err))?;
        let text = serde_json::to_string_pretty(self)
            .map_err(|err| CliError::new(NOT_OBSERVED, "CONFIG_UNWRITABLE", err.to_string()))?;
        let temporary = dir.join(format!(".config.json.{}.{}", std::process::id(), uuid::Uuid::new_v4().simple()));
        let written = create_private(&temporary).and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_all()
        });
        let renamed = written.and_then(|()| std::fs::rename(&temporary, dir.join("config.json")));
        if let Err(err) = renamed {
            let _ = std::fs::remove_file(&temporary);
            return Err(fail("writing config.json in", err));
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_directory_is_forced_to_0700_and_the_file_written_0600() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("anycloud");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let config = Config { active: Some("local".into()), ..Config::default() };
        config.save_in(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("config.json")), 0o600);
        // Only config.json is left: no temporary.
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["config.json"]);
        // A directory made by the save is 0700 too.
        let fresh = home.path().join("a").join("b");
        config.save_in(&fresh).unwrap();
        assert_eq!(mode(&fresh), 0o700);
    }

    #[test]
    fn a_planted_link_or_file_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, "keep me").unwrap();
        let planted = dir.path().join("planted");
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        let err = create_private(&planted).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists, "{err}");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(create_private(&dangling).is_err());
        assert!(!dir.path().join("nowhere").exists(), "the link was followed");
        std::fs::write(dir.path().join("existing"), "x").unwrap();
        assert!(create_private(&dir.path().join("existing")).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
        drop(create_private(&dir.path().join("new")).unwrap());
        assert_eq!(mode(&dir.path().join("new")), 0o600);
    }
}
