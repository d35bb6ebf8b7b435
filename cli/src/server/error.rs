//! API errors: a stable code, a message that names the resource and the next step, and the
//! right HTTP status, as `{"error": {"code": ..., "message": ...}}`.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use anycloud_engine::EngineError;

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable, machine-readable code.
    pub code: &'static str,
    /// What happened to which resource, and what to do.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }

    /// 400 with this code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404 with this code.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 409 with this code.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 500: the API's own failure, logged whole; the answer says nothing of internals.
    pub fn internal(err: &dyn std::error::Error) -> Self {
        tracing::error!(error = %anycloud_engine::error_chain(err), "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            "the API failed to handle the request; its log has the cause. Try again",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        Self::internal(&err)
    }
}

impl From<EngineError> for ApiError {
    fn from(err: EngineError) -> Self {
        match &err {
            EngineError::UnknownRun(id) => Self::not_found(
                "WORKFLOW_NOT_FOUND",
                format!("workflow {id} does not exist; `anycloud workflow list` shows the workflows that do"),
            ),
            EngineError::InvalidState { .. } => Self::conflict("INVALID_WORKFLOW_STATE", err.to_string()),
            EngineError::ShuttingDown => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "SHUTTING_DOWN",
                "the API is shutting down; try again when it is back",
            ),
            _ => Self::internal(&err),
        }
    }
}

/// A JSON request body whose rejections (too large, malformed, wrong shape) are API errors.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    axum::Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(match rejection {
                JsonRejection::JsonSyntaxError(err) => {
                    ApiError::bad_request("MALFORMED_JSON", format!("the request body is not valid JSON: {err}"))
                }
                JsonRejection::JsonDataError(err) => {
                    ApiError::bad_request("INVALID_REQUEST", format!("the request body has the wrong shape: {err}"))
                }
                JsonRejection::MissingJsonContentType(_) => ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UNSUPPORTED_MEDIA_TYPE",
                    "send the body as JSON with `Content-Type: application/json`",
                ),
                other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "BODY_TOO_LARGE",
                    format!("the request body is larger than the API accepts ({} KiB)", super::BODY_LIMIT / 1024),
                ),
                other => ApiError::bad_request("INVALID_REQUEST", other.body_text()),
            }),
        }
    }
}
