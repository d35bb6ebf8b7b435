//! The HTTP client of the API: bearer token, JSON, and errors mapped to exit codes.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use anycloud_workflows::api::ErrorBody;

use crate::config::{ApiEntry, Config};
use crate::exit::{BAD_INPUT, CliError, ENDED_OTHERWISE, NOT_OBSERVED};

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
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
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
        let (error_code, message) = match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(ErrorBody { error }) => (error.code, error.message),
            Err(_) => ("UNKNOWN".to_owned(), String::from_utf8_lossy(&body).into_owned()),
        };
        let code = match status.as_u16() {
            401 => {
                return Err(CliError {
                    code: NOT_OBSERVED,
                    error_code,
                    message: format!(
                        "API `{}` at {} rejected the CLI's token; restart it with `anycloud api serve --id {} --use` \
                         to store its current token",
                        self.name,
                        self.url(),
                        self.name
                    ),
                });
            }
            404 => NOT_OBSERVED,
            400..=499 => BAD_INPUT,
            _ => ENDED_OTHERWISE,
        };
        Err(CliError { code, error_code, message })
    }

    fn unreachable(&self, err: &reqwest::Error) -> CliError {
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
