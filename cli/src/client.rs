//! The HTTP client of the API: bearer token, JSON, and errors mapped to exit codes.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use anycloud_workflows::api::ErrorBody;

use crate::config::{ApiEntry, Config};
use crate::exit::{BAD_INPUT, CliError, ENDED_OTHERWISE, NOT_OBSERVED};

/// An open WebSocket to the API.
pub type WebSocket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A name or id as one segment of a URL path: anything but unreserved characters is
/// percent-encoded, so that what a person types can never reach another route.
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A client of one API.
pub struct Client {
    name: String,
    entry: ApiEntry,
    http: reqwest::Client,
}

impl Client {
    /// A client of the active API.
    pub fn active() -> Result<Self, CliError> {
        let (name, entry) = Config::load()?.active()?;
        Ok(Self::new(name, entry))
    }

    /// A client of this API.
    pub fn new(name: String, entry: ApiEntry) -> Self {
        let http = http_client(&entry, reqwest::Client::builder().timeout(Duration::from_secs(30)));
        Self { name, entry, http }
    }

    /// The API's name in the CLI config.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The API's URL.
    pub fn url(&self) -> &str {
        &self.entry.url
    }

    /// `local` or `hosted`.
    pub fn kind(&self) -> &str {
        &self.entry.kind
    }

    /// GET a JSON resource.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        self.send(self.http.get(self.endpoint(path))).await
    }

    /// GET a JSON resource with a query string.
    pub async fn get_query<Q: Serialize, T: DeserializeOwned>(&self, path: &str, query: &Q) -> Result<T, CliError> {
        self.send(self.http.get(self.endpoint(path)).query(query)).await
    }

    /// POST a JSON body.
    pub async fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, CliError> {
        self.send(self.http.post(self.endpoint(path)).json(body)).await
    }

    /// POST with no body (an action on a resource).
    pub async fn post_empty<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        self.send(self.http.post(self.endpoint(path))).await
    }

    /// PUT a large binary body (`application/octet-stream`), with no overall time limit: it
    /// takes as long as the bytes take to cross.
    pub async fn put_octets<T: DeserializeOwned>(&self, path: &str, body: Vec<u8>) -> Result<T, CliError> {
        let http = http_client(&self.entry, reqwest::Client::builder().connect_timeout(Duration::from_secs(10)));
        let request = http.put(self.endpoint(path)).header("content-type", "application/octet-stream").body(body);
        self.send(request).await
    }

    /// DELETE a resource.
    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        self.send(self.http.delete(self.endpoint(path))).await
    }

    fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.entry.url.trim_end_matches('/'))
    }

    async fn send<T: DeserializeOwned>(&self, request: reqwest::RequestBuilder) -> Result<T, CliError> {
        let response = request.bearer_auth(&self.entry.token).send().await.map_err(|err| self.unreachable(&err))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|err| self.unreachable(&err))?;
        if status.is_success() {
            return serde_json::from_slice(&body).map_err(|err| {
                CliError::new(
                    NOT_OBSERVED,
                    "UNREADABLE_ANSWER",
                    format!("API `{}` at {} sent an unreadable answer: {err}", self.name, self.url()),
                )
            });
        }
        Err(self.refused(status.as_u16(), &body))
    }

    /// GET a streamed body (`text/plain`), handing each chunk to `write` as it arrives. Unlike
    /// the JSON requests it has no overall time limit: a followed stream lasts as long as its
    /// source.
    pub async fn get_streamed<Q: Serialize>(
        &self,
        path: &str,
        query: &Q,
        mut write: impl FnMut(&[u8]),
    ) -> Result<(), CliError> {
        let http = http_client(&self.entry, reqwest::Client::builder().connect_timeout(Duration::from_secs(10)));
        let request = http.get(self.endpoint(path)).query(query).bearer_auth(&self.entry.token);
        let mut response = request.send().await.map_err(|err| self.unreachable(&err))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.bytes().await.map_err(|err| self.unreachable(&err))?;
            return Err(self.refused(status.as_u16(), &body));
        }
        while let Some(chunk) = response.chunk().await.map_err(|err| self.broken(&err))? {
            write(&chunk);
        }
        Ok(())
    }

    /// Opens a WebSocket to `path` (ws://, or wss:// for an https API), with the bearer token
    /// in the upgrade request. A refused upgrade is an error as any other request's.
    pub async fn websocket(&self, path: &str) -> Result<WebSocket, CliError> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        use tokio_tungstenite::tungstenite::http::HeaderValue;

        let endpoint = self.endpoint(path);
        let url = match endpoint.split_once("://") {
            Some(("https", rest)) => format!("wss://{rest}"),
            Some((_, rest)) => format!("ws://{rest}"),
            None => endpoint,
        };
        if url.starts_with("wss://") {
            // Two rustls providers are linked in (ring, and aws-lc-rs through the AWS SDK): say
            // which one TLS uses, as the Kubernetes client does.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut request = url.as_str().into_client_request().map_err(|err| {
            CliError::new(
                NOT_OBSERVED,
                "INVALID_API_URL",
                format!("API `{}` has an unusable URL {url}: {err}", self.name),
            )
        })?;
        let token = HeaderValue::from_str(&format!("Bearer {}", self.entry.token)).map_err(|_| {
            CliError::new(
                NOT_OBSERVED,
                "INVALID_TOKEN",
                format!("the CLI config holds an unusable token for API `{}`", self.name),
            )
        })?;
        request.headers_mut().insert("authorization", token);
        let connector = self.entry.ca_pem.as_deref().map(|pem| {
            let mut roots = rustls::RootCertStore::empty();
            for cert in anycloud_workflows::api_identity::pem_certificates(pem) {
                let _ = roots.add(cert);
            }
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|builder| builder.with_root_certificates(roots).with_no_client_auth());
            config.map(|config| tokio_tungstenite::Connector::Rustls(std::sync::Arc::new(config)))
        });
        let connector = match connector {
            Some(Ok(connector)) => Some(connector),
            Some(Err(err)) => return Err(self.unreachable(&err)),
            None => None,
        };
        match tokio_tungstenite::connect_async_tls_with_config(request, None, false, connector).await {
            Ok((socket, _)) => Ok(socket),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                Err(self.refused(response.status().as_u16(), response.body().as_deref().unwrap_or_default()))
            }
            Err(err) => Err(self.unreachable(&err)),
        }
    }

    /// The error of a non-2xx answer: the API's code and message, and the exit code of its class.
    fn refused(&self, status: u16, body: &[u8]) -> CliError {
        let (error_code, message) = match serde_json::from_slice::<ErrorBody>(body) {
            Ok(ErrorBody { error }) => (error.code, error.message),
            Err(_) => ("UNKNOWN".to_owned(), String::from_utf8_lossy(body).into_owned()),
        };
        let code = match status {
            401 => {
                return CliError {
                    code: NOT_OBSERVED,
                    error_code,
                    message: format!(
                        "API `{}` at {} rejected the CLI's token; restart it with `anycloud api serve --id {} --use` \
                         to store its current token",
                        self.name,
                        self.url(),
                        self.name
                    ),
                };
            }
            404 => NOT_OBSERVED,
            400..=499 => BAD_INPUT,
            _ => ENDED_OTHERWISE,
        };
        CliError { code, error_code, message }
    }

    /// A stream that broke after it started.
    fn broken(&self, err: &reqwest::Error) -> CliError {
        CliError::new(
            NOT_OBSERVED,
            "STREAM_BROKEN",
            format!(
                "the stream from API `{}` at {} broke: {}; run the command again",
                self.name,
                self.url(),
                anycloud_engine::error_chain(err)
            ),
        )
    }

    fn unreachable(&self, err: &(dyn std::error::Error + 'static)) -> CliError {
        CliError {
            code: NOT_OBSERVED,
            error_code: "API_UNREACHABLE".into(),
            message: format!(
                "API `{}` is unreachable at {} ({}); is it running? Start it with `anycloud api serve --id {} --use`",
                self.name,
                self.url(),
                anycloud_engine::error_chain(err),
                self.name
            ),
        }
    }
}

/// An HTTP client for `entry`: for an HTTPS API with a pinned certificate, one that trusts that
/// certificate and nothing else.
fn http_client(entry: &ApiEntry, builder: reqwest::ClientBuilder) -> reqwest::Client {
    let builder = match &entry.ca_pem {
        Some(pem) => anycloud_workflows::api_identity::trusting_only(builder, pem),
        None => builder,
    };
    builder.build().unwrap_or_else(|_| reqwest::Client::new())
}

#[cfg(test)]
mod tests {
    use super::segment;

    #[test]
    fn path_segments_cannot_escape_their_route() {
        assert_eq!(segment("hello-1"), "hello-1");
        assert_eq!(segment("../clusters?x=1"), "..%2Fclusters%3Fx%3D1");
    }
}
