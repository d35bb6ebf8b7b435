//! API errors: a stable code, a message that names the resource and the next step, and the
//! right HTTP status, as `{"error": {"code": ..., "message": ...}}`. The one place where a
//! domain refusal becomes an HTTP status, and where the transport's own failures (a malformed
//! body, no token, no route) get their codes.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use anycloud_workflows::api::{ErrorBody, ErrorDetail};
use anycloud_workflows::refusal::{Class, OperationError, Refusal};

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

    /// The API's own failure, logged whole; the answer says nothing of internals.
    fn internal(err: &dyn std::error::Error) -> Self {
        tracing::error!(error = %anycloud_engine::error_chain(err), "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            "the API failed to handle the request; its log has the cause. Try again",
        )
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        let status = match refusal.code.class() {
            Class::BadInput => StatusCode::BAD_REQUEST,
            Class::NotFound => StatusCode::NOT_FOUND,
            Class::Conflict => StatusCode::CONFLICT,
            Class::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self::new(status, refusal.code.as_str(), refusal.message)
    }
}

impl From<OperationError> for ApiError {
    fn from(err: OperationError) -> Self {
        match err {
            OperationError::Refused(refusal) => refusal.into(),
            OperationError::Failed(cause) => Self::internal(&*cause),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody { error: ErrorDetail { code: self.code.to_owned(), message: self.message } };
        (self.status, axum::Json(body)).into_response()
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
