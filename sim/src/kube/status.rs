//! Errors as the apiserver answers them: a `Status` object with its HTTP code, reason and
//! message in the apiserver's words (`jobs.batch "x" not found`), so that clients (kube's
//! `Error::Api`, kubectl) show what they would show against a real cluster.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::Resource;

/// One invalid field of a 422 Invalid, as a `StatusCause`: (field path, message, cause reason).
pub(crate) type Cause = (String, String, &'static str);

/// A failed request, answered as a `Status`.
#[derive(Debug)]
pub(crate) struct ApiError {
    code: StatusCode,
    reason: &'static str,
    message: String,
    details: Option<Value>,
}

impl ApiError {
    pub(crate) fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None }
    }

    /// 404: `{resource}.{group} "{name}" not found`.
    pub(crate) fn not_found(resource: &Resource, name: &str) -> Self {
        Self {
            details: Some(details(resource, name)),
            ..Self::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{} \"{name}\" not found", resource.group_resource()),
            )
        }
    }

    /// 409 on creating a name that exists.
    pub(crate) fn already_exists(resource: &Resource, name: &str) -> Self {
        Self {
            details: Some(details(resource, name)),
            ..Self::new(
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", resource.group_resource()),
            )
        }
    }

    /// 409 when an object changed under a write, as an optimistic-concurrency conflict.
    pub(crate) fn conflict(resource: &Resource, name: &str) -> Self {
        Self {
            details: Some(details(resource, name)),
            ..Self::new(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your \
                     changes to the latest version and try again",
                    resource.group_resource()
                ),
            )
        }
    }

    /// 422 with one cause per invalid field (`field: message`).
    pub(crate) fn invalid(resource: &Resource, name: &str, causes: &[Cause]) -> Self {
        let listed: Vec<String> = causes.iter().map(|(field, message, _)| format!("{field}: {message}")).collect();
        let summary = if listed.len() == 1 { listed[0].clone() } else { format!("[{}]", listed.join(", ")) };
        let group_kind = if resource.group.is_empty() {
            resource.kind.to_owned()
        } else {
            format!("{}.{}", resource.kind, resource.group)
        };
        let mut details = details(resource, name);
        details["kind"] = json!(resource.kind);
        details["causes"] = causes
            .iter()
            .map(|(field, message, reason)| json!({ "reason": reason, "message": message, "field": field }))
            .collect();
        Self {
            details: Some(details),
            ..Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!("{group_kind} \"{name}\" is invalid: {summary}"),
            )
        }
    }

    /// 400.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    /// 500, for the simulation's own failures (its database).
    pub(crate) fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            format!("Internal error occurred: simulated Kubernetes: {message}"),
        )
    }

    /// Its HTTP status.
    #[cfg(test)]
    pub(crate) fn code(&self) -> StatusCode {
        self.code
    }

    /// The `Status` body.
    pub(crate) fn body(&self) -> Value {
        let mut body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code.as_u16(),
        });
        if let Some(details) = &self.details {
            body["details"] = details.clone();
        }
        body
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        Self::internal(format!("its object store: {err}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.code, axum::Json(self.body())).into_response()
    }
}

fn details(resource: &Resource, name: &str) -> Value {
    let mut details = json!({ "name": name, "kind": resource.plural });
    if !resource.group.is_empty() {
        details["group"] = json!(resource.group);
    }
    details
}
