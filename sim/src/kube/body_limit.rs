//! Request bodies are bounded on every route, as the apiserver bounds them: at most
//! [`MAX_BODY_BYTES`] (its `MaxRequestBodyBytes`, 3 MiB), else `413` with reason
//! `RequestEntityTooLarge` and the apiserver's message (`Request entity too large: limit is
//! 3145728`). A body that says it is larger is refused before it is read; one that turns out
//! larger as it streams is read up to the limit, then refused. Runs after the token check.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::status::ApiError;

/// The largest request body, as the apiserver's default.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Reads the body up to the limit, or answers 413.
pub(crate) async fn bounded(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok())
        .and_then(|length| length.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return too_large().into_response();
    }
    let (parts, body) = request.into_parts();
    match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
        Err(err) if went_past_limit(&err) => too_large().into_response(),
        Err(err) => ApiError::bad_request(format!("reading the request body: {err}")).into_response(),
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {MAX_BODY_BYTES}"),
    )
}

fn went_past_limit(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = err.source();
    }
    false
}
