//! Field validation, as the apiserver does it on a write (`fieldValidation`, "Field
//! validation" in the Kubernetes API concepts): a field the kind's schema ([`super::schemas`])
//! does not declare is dropped from what is written, and
//!
//! - `Strict` (kubectl's default, which it sends once the OpenAPI v3 document lists the
//!   parameter) refuses the write: 400 `strict decoding error: unknown field "spec.foo"`;
//! - `Warn` (the apiserver's default) writes it and warns (`Warning: 299 - "unknown field
//!   \"spec.foo\""`);
//! - `Ignore` writes it silently.
//!
//! Patch directives (`$patch`, `$setElementOrder/...`) are not fields.

use axum::http::{HeaderValue, StatusCode};
use serde_json::{Map, Value};

use super::resources::Resource;
use super::schemas::{self, resolve};
use super::status::ApiError;

/// How a write treats unknown fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Validation {
    /// Refuse.
    Strict,
    /// Drop and warn.
    Warn,
    /// Drop.
    Ignore,
}

impl Validation {
    /// From the `fieldValidation` parameter (absent: `Warn`).
    pub(crate) fn parse(given: Option<&str>) -> Result<Self, ApiError> {
        match given {
            None | Some("" | "Warn") => Ok(Self::Warn),
            Some("Strict") => Ok(Self::Strict),
            Some("Ignore") => Ok(Self::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", not {other:?}"
            ))),
        }
    }

    /// Drops the fields of `body` that `resource`'s schema does not declare; their warnings,
    /// or the refusal of a `Strict` write.
    pub(crate) fn check(self, resource: &Resource, body: &mut Value) -> Result<Vec<HeaderValue>, ApiError> {
        let definitions = schemas::v3();
        let schema = serde_json::json!({ "$ref": format!("#/components/schemas/{}", schemas::definition(resource)) });
        let mut unknown = Vec::new();
        prune(definitions, &schema, body, "", &mut unknown);
        if unknown.is_empty() || self == Self::Ignore {
            return Ok(Vec::new());
        }
        if self == Self::Strict {
            let listed: Vec<String> = unknown.iter().map(|field| format!("unknown field \"{field}\"")).collect();
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!(
                    "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                    listed.join(", "),
                    kind = resource.kind,
                    version = resource.version,
                ),
            ));
        }
        Ok(unknown
            .iter()
            .filter_map(|field| HeaderValue::from_str(&format!("299 - \"unknown field \\\"{field}\\\"\"")).ok())
            .collect())
    }
}

fn prune(definitions: &Map<String, Value>, schema: &Value, value: &mut Value, path: &str, unknown: &mut Vec<String>) {
    let schema = resolve(definitions, schema);
    match value {
        Value::Object(object) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|extra| extra.is_object());
            if properties.is_none() && extra.is_none() {
                return;
            }
            object.retain(|key, child| {
                if key.starts_with('$') {
                    return true;
                }
                let here = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match properties.and_then(|properties| properties.get(key)).or(extra) {
                    Some(property) => {
                        prune(definitions, property, child, &here, unknown);
                        true
                    }
                    None => {
                        unknown.push(here);
                        false
                    }
                }
            });
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items") else { return };
            for (index, item) in items.iter_mut().enumerate() {
                prune(definitions, item_schema, item, &format!("{path}[{index}]"), unknown);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources::JOBS;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_dropped_warned_or_refused() {
        let body = json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": "j", "labels": { "a": "b" } },
            "spec": { "bogus": 1, "template": { "spec": { "containers": [{ "name": "m", "image": "i", "colour": "red" }] } } } });
        let mut warned = body.clone();
        let warnings = Validation::Warn.check(&JOBS, &mut warned).unwrap();
        assert_eq!(warnings.len(), 2);
        assert!(warned["spec"].get("bogus").is_none() && warned["metadata"]["labels"]["a"] == "b");
        assert!(warned["spec"]["template"]["spec"]["containers"][0].get("colour").is_none());
        let err = Validation::Strict.check(&JOBS, &mut body.clone()).unwrap_err();
        assert!(err.body()["message"].as_str().unwrap().contains("unknown field \"spec.bogus\""), "{:?}", err.body());
        assert!(Validation::Strict.check(&JOBS, &mut warned).unwrap().is_empty());
    }
}
