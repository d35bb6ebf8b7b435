//! `Server-Timing: app;dur=<ms>` on every response: how long the API took to answer, from the
//! moment the router got the request (its head parsed by hyper) to the moment the response was
//! built (a JSON body is serialized by then). Writing the response to the socket is not
//! included. Operators see it in a browser's or `curl -v`'s output; the API benchmark
//! (`cli/benches/api.rs`) reads it to tell the server's time from the client's.

use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::http::header::HeaderName;
use axum::middleware::Next;
use axum::response::Response;

/// The header's name (lower case, as HTTP/2 and `HeaderName` want it).
pub const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

/// Times the rest of the stack and adds `Server-Timing: app;dur=<ms with 3 decimals>`.
pub async fn server_timing(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let mut response = next.run(request).await;
    let millis = started.elapsed().as_secs_f64() * 1000.0;
    if let Ok(value) = HeaderValue::from_str(&format!("app;dur={millis:.3}")) {
        response.headers_mut().append(SERVER_TIMING, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::routing::get;

    #[tokio::test]
    async fn every_response_says_how_long_it_took() {
        let app =
            Router::new().route("/", get(|| async { "hi" })).layer(axum::middleware::from_fn(super::server_timing));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = reqwest::Client::builder().no_proxy().build().expect("a client");
        let response = client.get(format!("http://{address}/")).send().await.expect("an answer");
        let value = response.headers().get("server-timing").expect("a Server-Timing header");
        let value = value.to_str().expect("ASCII").to_owned();
        let millis: f64 = value.strip_prefix("app;dur=").expect("app;dur=").parse().expect("a number");
        assert!(millis >= 0.0, "{value}");
        assert_eq!(value.split_once('.').map(|(_, decimals)| decimals.len()), Some(3), "{value}");
        assert_eq!(response.text().await.expect("a body"), "hi");
    }
}
