//! Content negotiation, as the apiserver does it for the media types the simulation speaks
//! (JSON out; JSON and YAML in):
//!
//! - `Accept`: a client that lists JSON anywhere (client-go sends
//!   `application/vnd.kubernetes.protobuf,application/json`, kubectl's discovery adds the
//!   aggregated-discovery profiles before `application/json`) is answered in JSON, and decodes
//!   it by the answer's `Content-Type`; a client that accepts only media types the simulation
//!   does not write (protobuf, CBOR) gets 406 `NotAcceptable`.
//! - `Content-Type` of a body: `application/json` (or none), `application/yaml` and
//!   `application/vnd.kubernetes.protobuf` (kubectl's typed clients send it and do not retry in
//!   JSON; read by [`super::protobuf`]) are read; a CBOR body, or protobuf the simulation does
//!   not read, gets 415 `UnsupportedMediaType`, listing what is accepted.
//! - A `PATCH` takes `application/apply-patch+yaml` (YAML, of which JSON is a subset),
//!   `application/merge-patch+json`, `application/strategic-merge-patch+json` and
//!   `application/json-patch+json`; anything else is 415.

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::protobuf;
use super::resources::Resource;
use super::status::ApiError;

/// What the simulation reads and writes, in the apiserver's error messages.
const READS: &str = "application/json, application/yaml";

/// The kind of patch a `PATCH` request sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    /// Server-side apply.
    Apply,
    /// RFC 7386.
    Merge,
    /// Kubernetes' strategic merge patch.
    Strategic,
    /// RFC 6902.
    Json,
}

/// Whether the client accepts a JSON answer.
pub(crate) fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|accept| accept.to_str().ok()) else { return true };
    accept
        .split(',')
        .map(|range| range.split(';').next().unwrap_or_default().trim())
        .any(|media| media.is_empty() || matches!(media, "*/*" | "application/*" | "application/json"))
}

/// Answers 406 to a request that accepts no JSON, before any route reads it.
pub(crate) async fn refuse_unacceptable(request: Request, next: Next) -> Response {
    if accepts_json(request.headers()) { next.run(request).await } else { not_acceptable().into_response() }
}

/// 406, as the apiserver answers a media type it does not serve.
pub(crate) fn not_acceptable() -> ApiError {
    ApiError::new(
        StatusCode::NOT_ACCEPTABLE,
        "NotAcceptable",
        "only the following media types are accepted: application/json",
    )
}

fn unsupported(media: &str, accepted: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format ({media}) - accepted media types include: {accepted}"
        ),
    )
}

fn media_type(headers: &HeaderMap) -> String {
    let value = headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).unwrap_or_default();
    value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

/// The object a `POST` or `PUT` sends, read by its `Content-Type`.
pub(crate) fn object(resource: &Resource, headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    match media_type(headers).as_str() {
        "" | "application/json" | "*/*" => parse(resource, body, false),
        "application/yaml" => parse(resource, body, true),
        "application/vnd.kubernetes.protobuf" => {
            let object = protobuf::decode(body).map_err(|err| {
                unsupported(
                    &format!("application/vnd.kubernetes.protobuf: {err}"),
                    "application/json, application/yaml",
                )
            })?;
            if object["kind"] != resource.kind {
                return Err(ApiError::bad_request(format!(
                    "the object provided is unrecognized (must be of type {}): {} sent",
                    resource.kind, object["kind"]
                )));
            }
            Ok(object)
        }
        other => Err(unsupported(other, READS)),
    }
}

/// The kind of a `PATCH` and its body.
pub(crate) fn patch(resource: &Resource, headers: &HeaderMap, body: &[u8]) -> Result<(PatchKind, Value), ApiError> {
    let media = media_type(headers);
    let kind = match media.as_str() {
        "application/apply-patch+yaml" => PatchKind::Apply,
        "application/merge-patch+json" => PatchKind::Merge,
        "application/strategic-merge-patch+json" => PatchKind::Strategic,
        "application/json-patch+json" => PatchKind::Json,
        other => {
            return Err(unsupported(
                other,
                "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, \
                 application/apply-patch+yaml",
            ));
        }
    };
    let value = if kind == PatchKind::Json {
        serde_json::from_slice(body).map_err(|err| ApiError::bad_request(format!("error decoding patch: {err}")))?
    } else {
        parse(resource, body, kind == PatchKind::Apply)?
    };
    Ok((kind, value))
}

fn parse(resource: &Resource, body: &[u8], yaml: bool) -> Result<Value, ApiError> {
    let parsed = match serde_json::from_slice::<Value>(body) {
        Ok(value) => Ok(value),
        Err(err) if !yaml => Err(err.to_string()),
        Err(_) => std::str::from_utf8(body)
            .map_err(|err| err.to_string())
            .and_then(|text| serde_saphyr::from_str::<Value>(text).map_err(|err| err.to_string())),
    };
    let value = parsed.map_err(|err| {
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; {} parse error: {err}",
            resource.kind,
            if yaml { "yaml" } else { "json" }
        ))
    })?;
    if !value.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is not a {}: expected an object",
            resource.kind
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources::JOBS;
    use axum::http::HeaderValue;

    fn with(name: header::HeaderName, value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn protobuf_with_a_json_fallback_is_answered_in_json() {
        assert!(accepts_json(&with(header::ACCEPT, "application/vnd.kubernetes.protobuf, application/json")));
        assert!(accepts_json(&HeaderMap::new()));
        assert!(!accepts_json(&with(header::ACCEPT, "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")));
    }

    #[test]
    fn bodies_are_read_by_their_content_type() {
        let yaml = with(header::CONTENT_TYPE, "application/yaml");
        let object = object(&JOBS, &yaml, b"metadata:\n  name: a\n").unwrap();
        assert_eq!(object["metadata"]["name"], "a");
        let cbor = with(header::CONTENT_TYPE, "application/cbor");
        let err = super::object(&JOBS, &cbor, b"\xa0").unwrap_err();
        assert_eq!(err.code(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let apply = with(header::CONTENT_TYPE, "application/apply-patch+yaml");
        assert_eq!(
            patch(&JOBS, &apply, b"kind: Job\n").unwrap(),
            (PatchKind::Apply, serde_json::json!({ "kind": "Job" }))
        );
    }
}
