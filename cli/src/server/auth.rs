//! Bearer-token authentication for every route but the health check.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;

/// Lets the request through only with `Authorization: Bearer <the API's token>`. The answer
/// to a missing or wrong token is the same and says nothing else.
pub async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if !has_token(&state, request.headers()) {
        return unauthorized().into_response();
    }
    next.run(request).await
}

/// The one answer to a missing or wrong token.
pub fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
        "missing or wrong bearer token; the CLI sends the token stored by `anycloud api serve --use`",
    )
}

/// Whether the request carries the API's token. The scheme is case-insensitive (RFC 9110).
pub fn has_token(state: &AppState, headers: &HeaderMap) -> bool {
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, token)| token.trim());
    anycloud_workflows::secrets::constant_time_eq(presented.as_bytes(), state.token.as_bytes())
}
