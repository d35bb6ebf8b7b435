//! API errors: a stable code, a message that names the resource and the next step, and the
//! right HTTP status, as `{"error": {"code": ..., "message": ...}}`. The one place where a
//! domain refusal becomes an HTTP status, and where the transport's own failures (a malformed
//! body, no token, no route) get their codes.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::RETRY_AFTER;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use anycloud_engine::{Store, StoreFault};
use anycloud_workflows::refusal::{Class, Code, OperationError, Refusal};
use anycloud_workflows::wire::{ErrorBody, ErrorDetail};

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable, machine-readable code.
    pub code: &'static str,
    /// What happened to which resource, and what to do.
    pub message: String,
    /// Seconds after which trying again may succeed (the `Retry-After` header).
    pub retry_after: Option<u32>,
}

/// `Retry-After` of a `DATABASE_UNAVAILABLE` answer: a restarting PostgreSQL is usually back
/// within a few seconds.
const DATABASE_RETRY_AFTER: u32 = 2;

/// `Retry-After` of a `STORAGE_FULL` or `STORAGE_READ_ONLY` answer: a person has to make room
/// on the disk, which takes longer than a database restart.
const STORAGE_RETRY_AFTER: u32 = 10;

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), retry_after: None }
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
        let retry_after = match refusal.code {
            Code::DatabaseUnavailable => Some(DATABASE_RETRY_AFTER),
            Code::StorageFull | Code::StorageReadOnly => Some(STORAGE_RETRY_AFTER),
            _ => None,
        };
        Self { retry_after, ..Self::new(status, refusal.code.as_str(), refusal.message) }
    }
}

impl From<OperationError> for ApiError {
    fn from(err: OperationError) -> Self {
        match err {
            OperationError::Refused(refusal) => refusal.into(),
            // A failure built without `OperationError::failed` may still be the database's.
            OperationError::Failed(cause) if StoreFault::of(&*cause).is_some() => OperationError::failed(cause).into(),
            OperationError::Failed(cause) if Store::is_unreachable(&*cause) => {
                tracing::warn!(error = %anycloud_engine::error_chain(&*cause), "the database is unreachable");
                Refusal::database_unavailable().into()
            }
            OperationError::Failed(cause) => Self::internal(&*cause),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody { error: ErrorDetail { code: self.code.to_owned(), message: self.message } };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
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

/// A query string whose rejections (an unknown field, a value of the wrong type) are API errors.
pub struct QueryParams<T>(pub T);

impl<S, T> FromRequestParts<S> for QueryParams<T>
where
    axum::extract::Query<T>: FromRequestParts<S, Rejection = QueryRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError::bad_request(
                "INVALID_REQUEST",
                format!("the query string is not valid: {}", rejection.body_text()),
            )),
        }
    }
}

/// A path parameter whose rejections (percent-encoding that is not UTF-8) are API errors.
pub struct PathParam<T>(pub T);

impl<S, T> FromRequestParts<S> for PathParam<T>
where
    axum::extract::Path<T>: FromRequestParts<S, Rejection = PathRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError::bad_request(
                "INVALID_REQUEST",
                format!("the request's path is not valid: {}", rejection.body_text()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    use super::ApiError;
    use anycloud_workflows::refusal::OperationError;

    #[test]
    fn an_unreachable_database_is_503_with_retry_after_not_500() {
        for err in [
            OperationError::from(sqlx::Error::PoolTimedOut),
            OperationError::Failed(Box::new(anycloud_engine::EngineError::Store(sqlx::Error::Io(
                std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            )))),
        ] {
            let error = ApiError::from(err);
            assert_eq!((error.status, error.code), (StatusCode::SERVICE_UNAVAILABLE, "DATABASE_UNAVAILABLE"));
            assert!(error.message.contains("changed nothing"), "{}", error.message);
            let response = error.into_response();
            assert_eq!(response.headers()["retry-after"], "2");
        }
        let other = ApiError::from(OperationError::from(sqlx::Error::RowNotFound));
        assert_eq!(other.status, StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn a_full_or_read_only_disk_is_503_with_its_own_code() {
        let io = |kind| sqlx::Error::Io(std::io::Error::from(kind));
        for (err, code) in [
            (OperationError::from(io(std::io::ErrorKind::StorageFull)), "STORAGE_FULL"),
            (
                OperationError::Failed(Box::new(anycloud_engine::EngineError::from(io(
                    std::io::ErrorKind::ReadOnlyFilesystem,
                )))),
                "STORAGE_READ_ONLY",
            ),
        ] {
            let error = ApiError::from(err);
            assert_eq!((error.status, error.code), (StatusCode::SERVICE_UNAVAILABLE, code));
            assert!(error.message.contains("changed nothing"), "{}", error.message);
            assert_eq!(error.into_response().headers()["retry-after"], "10");
        }
    }
}
