//! The HTTP client of the API: bearer token, JSON, and errors mapped to exit codes.
//!
//! An API whose certificate the CLI config pins is reached trusting that certificate and
//! nothing else; a pinned certificate that does not load stops the command (`PINNED_CA_INVALID`)
//! rather than falling back to the system's roots. Every request has a deadline: JSON requests
//! 30 s, an upload as long as its size takes at [`UPLOAD_RATE`], a stream or a WebSocket until it
//! opens; a stream that opened may then be silent for as long as its source is.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use anycloud_workflows::wire::ErrorBody;

use crate::config::{ApiEntry, Config};
use crate::exit::{BAD_INPUT, CliError, ENDED_OTHERWISE, NOT_OBSERVED};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an idle connection is kept for the next request: shorter than the API's own idle
/// limit (`server::listener::HEADER_READ_TIMEOUT`, 10 s), so that the CLI never sends a request on
/// a connection the API is closing.
const IDLE_CONNECTION: Duration = Duration::from_secs(5);
/// How long a JSON request may take in all.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stream or a WebSocket may take to open (its answer's head).
const OPEN_TIMEOUT: Duration = Duration::from_secs(60);
/// The slowest upload waited for, in bytes a second, beyond [`REQUEST_TIMEOUT`].
const UPLOAD_RATE: u64 = 128 * 1024;

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
        Self::new(name, entry)
    }

    /// A client of this API; refused when the certificate the config pins for it does not load.
    pub fn new(name: String, entry: ApiEntry) -> Result<Self, CliError> {
        let http = http_client(&name, &entry, reqwest::Client::builder().timeout(REQUEST_TIMEOUT))?;
        Ok(Self { name, entry, http })
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

    /// PUT a JSON body (a resource's next version).
    pub async fn put<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, CliError> {
        self.send(self.http.put(self.endpoint(path)).json(body)).await
    }

    /// POST with no body (an action on a resource).
    pub async fn post_empty<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        self.send(self.http.post(self.endpoint(path))).await
    }

    /// PUT a large binary body (`application/octet-stream`), within the time its size takes at
    /// [`UPLOAD_RATE`] (plus [`REQUEST_TIMEOUT`]).
    pub async fn put_octets<T: DeserializeOwned>(&self, path: &str, body: Vec<u8>) -> Result<T, CliError> {
        let size = u64::try_from(body.len()).unwrap_or(u64::MAX);
        let timeout = REQUEST_TIMEOUT + Duration::from_secs(size / UPLOAD_RATE);
        let http = http_client(&self.name, &self.entry, reqwest::Client::builder().timeout(timeout))?;
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

    /// GET a streamed body (`text/plain`), handing each chunk to `write` as it arrives. It must
    /// open within [`OPEN_TIMEOUT`]; then, unlike the JSON requests, it has no time limit: a
    /// followed stream lasts (and may be silent) as long as its source.
    pub async fn get_streamed<Q: Serialize>(
        &self,
        path: &str,
        query: &Q,
        mut write: impl FnMut(&[u8]),
    ) -> Result<(), CliError> {
        let http = http_client(&self.name, &self.entry, reqwest::Client::builder())?;
        let request = http.get(self.endpoint(path)).query(query).bearer_auth(&self.entry.token);
        let mut response = match tokio::time::timeout(OPEN_TIMEOUT, request.send()).await {
            Ok(sent) => sent.map_err(|err| self.unreachable(&err))?,
            Err(elapsed) => return Err(self.unreachable(&elapsed)),
        };
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
        let connector = match pinned(&self.name, &self.entry)? {
            Some(certificates) => {
                let mut roots = rustls::RootCertStore::empty();
                let (added, _) = roots.add_parsable_certificates(certificates);
                if added == 0 {
                    return Err(invalid_pin(&self.name, "it holds no certificate TLS can trust"));
                }
                let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
                let config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map(|builder| builder.with_root_certificates(roots).with_no_client_auth())
                    .map_err(|err| self.unreachable(&err))?;
                Some(tokio_tungstenite::Connector::Rustls(std::sync::Arc::new(config)))
            }
            None => None,
        };
        let connect = tokio_tungstenite::connect_async_tls_with_config(request, None, false, connector);
        match tokio::time::timeout(OPEN_TIMEOUT, connect).await {
            Err(elapsed) => Err(self.unreachable(&elapsed)),
            Ok(Ok((socket, _))) => Ok(socket),
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
                Err(self.refused(response.status().as_u16(), response.body().as_deref().unwrap_or_default()))
            }
            Ok(Err(err)) => Err(self.unreachable(&err)),
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

/// An HTTP client for API `name` at `entry`, opening connections within [`CONNECT_TIMEOUT`]: for
/// an API with a pinned certificate, one that trusts that certificate and nothing else, or none.
fn http_client(name: &str, entry: &ApiEntry, builder: reqwest::ClientBuilder) -> Result<reqwest::Client, CliError> {
    let mut builder = builder.connect_timeout(CONNECT_TIMEOUT).pool_idle_timeout(IDLE_CONNECTION);
    if let Some(certificates) = pinned(name, entry)? {
        let mut trusted = Vec::new();
        for der in certificates {
            trusted.push(reqwest::Certificate::from_der(&der).map_err(|err| invalid_pin(name, &err.to_string()))?);
        }
        builder = builder.tls_certs_only(trusted);
    }
    builder.build().map_err(|err| {
        CliError::new(
            NOT_OBSERVED,
            "CLIENT_FAILED",
            format!("making the HTTP client of API `{name}`: {}", anycloud_engine::error_chain(&err)),
        )
    })
}

/// The certificates the CLI config pins for API `name`, if it pins any; a pin with no
/// certificate that parses is refused.
fn pinned(name: &str, entry: &ApiEntry) -> Result<Option<Vec<rustls::pki_types::CertificateDer<'static>>>, CliError> {
    let Some(pem) = &entry.ca_pem else { return Ok(None) };
    let certificates = anycloud_workflows::hosting::identity::pem_certificates(pem);
    if certificates.is_empty() {
        return Err(invalid_pin(name, "it holds no PEM certificate that parses"));
    }
    // What rustls will not take as a trust anchor would leave the pin empty: refused here.
    for certificate in &certificates {
        rustls::RootCertStore::empty()
            .add(certificate.clone())
            .map_err(|err| invalid_pin(name, &format!("a certificate in it is not one TLS can trust: {err}")))?;
    }
    Ok(Some(certificates))
}

/// The error of a pinned certificate that does not load: the CLI trusts nothing else for that
/// API, so it sends nothing to it.
fn invalid_pin(name: &str, why: &str) -> CliError {
    CliError::new(
        NOT_OBSERVED,
        "PINNED_CA_INVALID",
        format!(
            "the certificate the CLI config ({}) pins for API `{name}` (`apis.{name}.ca_pem`) does not load: {why}. \
             The CLI trusts nothing else for that API, so it sent nothing. Pin its CA again: restart an API you run \
             with `anycloud api serve --id {name} --use` (and its --tls-cert), or put back the PEM certificate of its \
             CA; a deployed API's CA is also the `ca_pem` of `GET /v1/apis/{name}/access` on the API that deployed it",
            crate::config::config_dir().join("config.json").display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ca_pem: Option<&str>) -> ApiEntry {
        ApiEntry {
            url: "http://127.0.0.1:1".into(),
            token: "t".into(),
            kind: "local".into(),
            ca_pem: ca_pem.map(str::to_owned),
            deployed_by: None,
        }
    }

    /// A pin that does not load must not fall back to the system's roots (or to no TLS at all):
    /// the client is not made, and the error names the API and what to do.
    #[test]
    fn a_pinned_certificate_that_does_not_load_refuses_the_client() {
        let garbage = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
        for pem in ["not a certificate at all", "", garbage] {
            let err =
                Client::new("team-api".into(), entry(Some(pem))).err().unwrap_or_else(|| panic!("{pem:?} loaded"));
            assert_eq!(err.error_code, "PINNED_CA_INVALID", "{pem:?}");
            assert!(
                err.message.contains("API `team-api`")
                    && err.message.contains("apis.team-api.ca_pem")
                    && err.message.contains("anycloud api serve --id team-api --use"),
                "{}",
                err.message
            );
        }
        let ca = anycloud_workflows::hosting::identity::ApiIdentity::generate("team-api")
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(Client::new("team-api".into(), entry(Some(&ca.ca_cert_pem))).is_ok());
        assert!(Client::new("local".into(), entry(None)).is_ok());
    }

    #[test]
    fn path_segments_cannot_escape_their_route() {
        assert_eq!(segment("hello-1"), "hello-1");
        assert_eq!(segment("../clusters?x=1"), "..%2Fclusters%3Fx%3D1");
    }
}
