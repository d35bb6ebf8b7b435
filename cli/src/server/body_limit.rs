//! Every route's request body is bounded, whether its handler reads it or not: at most
//! [`BODY_LIMIT`], but a secret's values (`POST /v1/secrets`, `PUT /v1/secrets/NAME`), at most
//! [`SECRET_BODY_LIMIT`], and a binary to ship (`PUT /v1/binaries/SHA256`), at most
//! [`MAX_BINARY_BYTES`]. A body that says it is larger (`Content-Length`) is refused with
//! `413 BODY_TOO_LARGE` before the handler runs. Any other body is read here, up to the limit,
//! before the handler runs, and refused with the same 413 once it goes past; but a binary, which
//! streams to disk, is cut at its limit as it streams, and its handler answers the 413. It runs
//! after the token check: without the token, every route but health answers 401 whatever it is
//! sent.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use anycloud_workflows::hosting::binary::MAX_BINARY_BYTES;
use anycloud_workflows::operations::MAX_SECRET_BYTES;

use super::error::ApiError;

/// Largest request body accepted, on every route but the binary upload.
pub const BODY_LIMIT: usize = 64 * 1024;

/// Largest body of a secret's values: a Kubernetes Secret's 1 MiB ([`MAX_SECRET_BYTES`]) as
/// JSON strings may escape it, with room to spare, so that a secret too large is told so by
/// the secret's own check (`INVALID_SECRET`, naming its size) rather than by this 413.
pub const SECRET_BODY_LIMIT: usize = 4 * MAX_SECRET_BYTES;

/// A route's limit: the state of [`bounded`].
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    /// [`BODY_LIMIT`].
    Request,
    /// [`SECRET_BODY_LIMIT`].
    Secret,
    /// [`MAX_BINARY_BYTES`].
    Binary,
}

impl Limit {
    /// The limit in bytes.
    pub fn bytes(self) -> usize {
        match self {
            Self::Request => BODY_LIMIT,
            Self::Secret => SECRET_BODY_LIMIT,
            Self::Binary => usize::try_from(MAX_BINARY_BYTES).unwrap_or(usize::MAX),
        }
    }
}

/// Refuses or bounds the request's body, by its route's limit.
pub async fn bounded(State(route): State<Limit>, request: Request, next: Next) -> Response {
    let binary = matches!(route, Limit::Binary);
    let limit = route.bytes();
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok())
        .and_then(|length| length.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return too_large(route).into_response();
    }
    if binary {
        return next.run(request.map(|body| Body::new(http_body_util::Limited::new(body, limit)))).await;
    }
    let (parts, body) = request.into_parts();
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
        Err(err) if went_past_limit(&err) => too_large(route).into_response(),
        Err(err) => ApiError::bad_request("INVALID_REQUEST", format!("the request body could not be read: {err}"))
            .into_response(),
    }
}

/// `413 BODY_TOO_LARGE`, naming the limit.
pub fn too_large(route: Limit) -> ApiError {
    let message = match route {
        Limit::Binary => format!("the binary is larger than the API accepts ({} MiB)", MAX_BINARY_BYTES / 1024 / 1024),
        Limit::Secret => format!(
            "the secret's request is larger than the API accepts ({} MiB); a secret holds at most 1 MiB",
            SECRET_BODY_LIMIT / 1024 / 1024
        ),
        Limit::Request => format!("the request body is larger than the API accepts ({} KiB)", BODY_LIMIT / 1024),
    };
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_LARGE", message)
}

/// Whether reading a body failed because it went past its limit.
pub fn went_past_limit(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::{get, put};
    use tower::ServiceExt as _;

    async fn read_all(body: Body) -> Result<String, StatusCode> {
        match axum::body::to_bytes(body, usize::MAX).await {
            Ok(bytes) => Ok(format!("{} bytes", bytes.len())),
            Err(err) if super::went_past_limit(&err) => Err(StatusCode::PAYLOAD_TOO_LARGE),
            Err(_) => Err(StatusCode::BAD_REQUEST),
        }
    }

    fn app() -> Router {
        use axum::middleware::from_fn_with_state;
        Router::new()
            .route("/small", get(|| async { "ignored the body" }).post(|body: Body| read_all(body)))
            .route_layer(from_fn_with_state(super::Limit::Request, super::bounded))
            .route(
                "/binary",
                put(|body: Body| read_all(body)).layer(from_fn_with_state(super::Limit::Binary, super::bounded)),
            )
    }

    async fn send(method: &str, path: &str, body: Body, length: Option<usize>) -> (StatusCode, String) {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(length) = length {
            request = request.header("content-length", length);
        }
        let response = app().oneshot(request.body(body).unwrap()).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    fn chunked(bytes: usize) -> Body {
        let chunks = (0..bytes.div_ceil(8192)).map(|_| Ok::<_, std::io::Error>(vec![b'x'; 8192]));
        Body::from_stream(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413_whether_declared_or_streamed() {
        let limit = super::BODY_LIMIT;
        let (status, body) = send("GET", "/small", Body::from(vec![b'x'; limit + 1]), Some(limit + 1)).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        assert!(body.contains("BODY_TOO_LARGE") && body.contains("64 KiB"), "{body}");
        let (status, body) = send("POST", "/small", Body::from(vec![b'x'; limit]), Some(limit)).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "65536 bytes"));
        let (status, _) = send("POST", "/small", chunked(limit + 8192), None).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        let (status, body) = send("GET", "/small", chunked(limit + 8192), None).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "a route that does not read its body: {body}");
        // The binary upload takes far more, and only it.
        let (status, body) = send("PUT", "/binary", chunked(limit * 4), None).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "262144 bytes"));
        let too_big = usize::try_from(anycloud_workflows::hosting::binary::MAX_BINARY_BYTES).unwrap() + 1;
        let (status, body) = send("PUT", "/binary", Body::empty(), Some(too_big)).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        assert!(body.contains("1024 MiB"), "{body}");
    }
}
