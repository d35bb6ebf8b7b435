//! Secrets, as the apiserver stores and checks them
//! (<https://kubernetes.io/docs/concepts/configuration/secret/>, and `ValidateSecret` /
//! `ValidateSecretUpdate` of `pkg/apis/core/validation`):
//!
//! - `data` values are base64: one that is not is refused as the JSON decoder refuses it
//!   (400 `BadRequest`, `Secret in version "v1" cannot be handled as a Secret: illegal base64
//!   data at input byte N`);
//! - `stringData` is write-only: its keys are merged into `data` (base64, over any `data` entry of
//!   the same key) and it is never stored nor returned;
//! - `type` defaults to `Opaque` and cannot change on update; neither can `data` once
//!   `immutable: true`;
//! - 422 `Invalid` for a key that is not `[-._a-zA-Z0-9]+` of at most 253 characters (nor `.`,
//!   `..` or `..`-prefixed), for `data` of more than 1 MiB (1048576 bytes, decoded) in all, and for
//!   a `kubernetes.io/dockerconfigjson` Secret whose `.dockerconfigjson` is missing or not JSON.
//!
//! The kubelet reads them through [`value`] (`envFrom`/`secretKeyRef`) and [`registry_hosts`]
//! (`imagePullSecrets`).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use super::status::{ApiError, Cause};

/// The most a Secret's `data` may hold, decoded (`MaxSecretSize`).
pub(crate) const MAX_SIZE: usize = 1024 * 1024;
/// The type of a registry Secret.
pub(crate) const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// Its one required key.
pub(crate) const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";

const CONFIG_KEY: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. \
     'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// What the apiserver does to a Secret it is sent, before validation: checks that `data` is
/// base64, merges `stringData` into it and drops it, and defaults `type`.
pub(crate) fn normalize(secret: &mut Value) -> Result<(), ApiError> {
    let Some(object) = secret.as_object_mut() else { return Ok(()) };
    let mut data = match object.remove("data") {
        Some(Value::Object(data)) => data,
        None | Some(Value::Null) => Map::new(),
        Some(other) => return Err(undecodable(&format!("data must be an object of strings, not {other}"))),
    };
    for (key, value) in &data {
        let Some(text) = value.as_str() else {
            return Err(undecodable(&format!("data[{key}] must be a base64 string, not {value}")));
        };
        if let Err(err) = STANDARD.decode(text) {
            let at = match err {
                base64::DecodeError::InvalidByte(at, _)
                | base64::DecodeError::InvalidLength(at)
                | base64::DecodeError::InvalidLastSymbol { offset: at, .. } => at,
                base64::DecodeError::InvalidPadding => text.len(),
            };
            return Err(undecodable(&format!("illegal base64 data at input byte {at}")));
        }
    }
    match object.remove("stringData") {
        Some(Value::Object(strings)) => {
            for (key, value) in strings {
                let Some(text) = value.as_str() else {
                    return Err(undecodable(&format!("stringData[{key}] must be a string, not {value}")));
                };
                data.insert(key, json!(STANDARD.encode(text)));
            }
        }
        None | Some(Value::Null) => {}
        Some(other) => return Err(undecodable(&format!("stringData must be an object of strings, not {other}"))),
    }
    if !data.is_empty() {
        object.insert("data".into(), Value::Object(data));
    }
    if object.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
        object.insert("type".into(), json!("Opaque"));
    }
    Ok(())
}

fn undecodable(detail: &str) -> ApiError {
    ApiError::bad_request(format!("Secret in version \"v1\" cannot be handled as a Secret: {detail}"))
}

/// Why the apiserver refuses this (normalized) Secret.
pub(crate) fn validate(secret: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let data = secret["data"].as_object();
    let mut total = 0;
    for (key, value) in data.into_iter().flatten() {
        for problem in config_key_problems(key) {
            causes.push((format!("data[{key}]"), format!("Invalid value: \"{key}\": {problem}"), "FieldValueInvalid"));
        }
        total += decoded(value).map_or(0, |bytes| bytes.len());
    }
    if total > MAX_SIZE {
        causes.push(("data".into(), format!("Too long: may not be more than {MAX_SIZE} bytes"), "FieldValueTooLong"));
    }
    if secret["type"] == DOCKER_CONFIG_JSON {
        let field = format!("data[{DOCKER_CONFIG_JSON_KEY}]");
        match data.and_then(|data| data.get(DOCKER_CONFIG_JSON_KEY)).and_then(decoded) {
            None => causes.push((field, "Required value".into(), "FieldValueRequired")),
            Some(bytes) => {
                if let Err(err) = serde_json::from_slice::<Map<String, Value>>(&bytes) {
                    causes.push((
                        field,
                        format!("Invalid value: \"<secret contents redacted>\": {err}"),
                        "FieldValueInvalid",
                    ));
                }
            }
        }
    }
    causes
}

/// Why the apiserver refuses this change to a Secret: its `type`, and the `data` of an
/// `immutable` one, cannot change.
pub(crate) fn validate_update(current: &Value, changed: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if changed["type"] != current["type"] {
        let given = changed["type"].as_str().unwrap_or_default();
        causes.push(("type".into(), format!("Invalid value: \"{given}\": field is immutable"), "FieldValueInvalid"));
    }
    if current["immutable"] == true {
        if changed["data"] != current["data"] {
            causes.push((
                "data".into(),
                "Forbidden: field is immutable when `immutable` is set".into(),
                "FieldValueForbidden",
            ));
        }
        if changed["immutable"] != true {
            causes.push((
                "immutable".into(),
                "Forbidden: field is immutable when `immutable` is set".into(),
                "FieldValueForbidden",
            ));
        }
    }
    causes
}

/// `IsConfigMapKey`'s problems with a key.
fn config_key_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if key.len() > 253 {
        problems.push("must be no more than 253 characters".to_owned());
    }
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')) {
        problems.push(CONFIG_KEY.to_owned());
    }
    if key == "." {
        problems.push("must not be '.'".to_owned());
    } else if key == ".." {
        problems.push("must not be '..'".to_owned());
    } else if key.starts_with("..") {
        problems.push("must not start with '..'".to_owned());
    }
    problems
}

fn decoded(value: &Value) -> Option<Vec<u8>> {
    STANDARD.decode(value.as_str()?).ok()
}

/// The value of `key` in a Secret's `data`, decoded (as the kubelet puts it in an environment
/// variable: bytes as UTF-8, lossily).
pub(crate) fn value(secret: &Value, key: &str) -> Option<String> {
    let bytes = decoded(secret["data"].get(key)?)?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The registry hosts a `kubernetes.io/dockerconfigjson` Secret holds credentials for: the keys
/// of its `auths` (`ghcr.io`, `https://ghcr.io`, `https://index.docker.io/v1/`, as a host) whose
/// entry has a username and password, or an `auth`.
pub(crate) fn registry_hosts(secret: &Value) -> Vec<String> {
    if secret["type"] != DOCKER_CONFIG_JSON {
        return Vec::new();
    }
    let config: Value = secret["data"]
        .get(DOCKER_CONFIG_JSON_KEY)
        .and_then(decoded)
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let filled = |entry: &Value, field: &str| entry[field].as_str().is_some_and(|text| !text.is_empty());
    config["auths"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, entry)| (filled(entry, "username") && filled(entry, "password")) || filled(entry, "auth"))
        .map(|(server, _)| registry_host(server))
        .collect()
}

/// The host of a registry as a docker config names it: without scheme or path, and
/// `index.docker.io` as `docker.io`.
fn registry_host(server: &str) -> String {
    let bare = server.split_once("://").map_or(server, |(_, rest)| rest);
    let host = bare.split('/').next().unwrap_or(bare).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        _ => host,
    }
}

/// The registry an image is pulled from, by Docker's rule
/// (<https://github.com/distribution/reference>, `splitDockerDomain`): the first path component
/// when it has a `.` or a `:` or is `localhost`, else Docker Hub (`docker.io`).
pub(crate) fn image_registry(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            let host = first.to_ascii_lowercase();
            if host == "index.docker.io" { "docker.io".to_owned() } else { host }
        }
        _ => "docker.io".to_owned(),
    }
}

/// An image reference as containerd names it: with its registry (`docker.io/library/` for an
/// official image) and `:latest` when it has neither tag nor digest.
pub(crate) fn normalized_image(image: &str) -> String {
    let registry = image_registry(image);
    let explicit = image
        .split_once('/')
        .is_some_and(|(first, _)| first.contains('.') || first.contains(':') || first == "localhost");
    let path =
        if explicit { image.split_once('/').map_or(image, |(_, rest)| rest).to_owned() } else { image.to_owned() };
    let path = if registry == "docker.io" && !path.contains('/') { format!("library/{path}") } else { path };
    let last = path.rsplit('/').next().unwrap_or(&path);
    let tagged = last.contains(':') || last.contains('@');
    format!("{registry}/{path}{}", if tagged { "" } else { ":latest" })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn string_data_becomes_data_and_type_defaults() {
        let mut secret = json!({ "metadata": { "name": "s" }, "data": { "a": "eA==" }, "stringData": { "b": "hi" } });
        normalize(&mut secret).unwrap();
        assert_eq!(secret["data"], json!({ "a": "eA==", "b": "aGk=" }));
        assert!(secret.get("stringData").is_none());
        assert_eq!(secret["type"], "Opaque");
        let mut bad = json!({ "data": { "a": "no!!" } });
        let err = normalize(&mut bad).unwrap_err();
        assert_eq!(err.code(), axum::http::StatusCode::BAD_REQUEST);
        assert!(err.body()["message"].as_str().unwrap().contains("illegal base64 data at input byte 2"));
    }

    #[test]
    fn keys_size_and_registry_secrets_are_checked() {
        let fields = |secret: Value| -> Vec<String> {
            let mut fields: Vec<String> = validate(&secret).into_iter().map(|(f, _, _)| f).collect();
            fields.sort();
            fields
        };
        assert_eq!(
            fields(json!({ "type": "Opaque", "data": { "bad key": "", "..x": "", "ok.K-_1": "" } })),
            ["data[..x]", "data[bad key]"]
        );
        let big = STANDARD.encode(vec![b'x'; MAX_SIZE + 1]);
        assert_eq!(fields(json!({ "type": "Opaque", "data": { "a": big } })), ["data"]);
        assert_eq!(fields(json!({ "type": DOCKER_CONFIG_JSON, "data": {} })), ["data[.dockerconfigjson]"]);
        let not_json = STANDARD.encode("{");
        assert_eq!(
            fields(json!({ "type": DOCKER_CONFIG_JSON, "data": { ".dockerconfigjson": not_json } })),
            ["data[.dockerconfigjson]"]
        );
    }

    #[test]
    fn registries_are_named_as_docker_names_them() {
        assert_eq!(image_registry("busybox:1.36"), "docker.io");
        assert_eq!(image_registry("acme/app"), "docker.io");
        assert_eq!(image_registry("ghcr.io/acme/batch:latest"), "ghcr.io");
        assert_eq!(image_registry("registry.local:5000/app"), "registry.local:5000");
        assert_eq!(image_registry("localhost/app"), "localhost");
        assert_eq!(normalized_image("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(normalized_image("ghcr.io/acme/batch:v1"), "ghcr.io/acme/batch:v1");
        assert_eq!(normalized_image("registry.local:5000/app"), "registry.local:5000/app:latest");
        let config = json!({ "auths": {
            "https://ghcr.io": { "username": "u", "password": "p" },
            "quay.io": { "auth": "dTpw" },
            "empty.example": { "username": "", "password": "" },
            "https://index.docker.io/v1/": { "auth": "dTpw" },
        } });
        let secret =
            json!({ "type": DOCKER_CONFIG_JSON, "data": { ".dockerconfigjson": STANDARD.encode(config.to_string()) } });
        let mut hosts = registry_hosts(&secret);
        hosts.sort();
        assert_eq!(hosts, ["docker.io", "ghcr.io", "quay.io"]);
    }
}
