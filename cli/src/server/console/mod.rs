//! The web console at `/ui`, served by the API itself: server-rendered pages ([`pages`]) with
//! one stylesheet and one script embedded in the binary, so it works with no internet and no
//! build step.
//!
//! Sign-in fits a browser: `anycloud ui` asks `POST /v1/console/codes` (bearer token) for a
//! code that works once, within a minute; `GET /ui/sign-in?code=` trades it for a session of 12
//! hours (`anycloud_workflows::operations::console_sessions`) in an `HttpOnly`, `SameSite=Strict`
//! cookie (`Secure` when the API serves HTTPS) and redirects to `/ui`, so the code leaves the
//! address bar. The bearer token never reaches a URL, a page or the browser's storage.
//!
//! Every page and action is refused without a session (401). An action is a `POST` of a form
//! that carries the session's CSRF token (a hash of the session id, which the page holds and a
//! cross-site page cannot read) and whose `Origin` is this API's own: both are checked, besides
//! the cookie's `SameSite`. Every answer carries a `Content-Security-Policy` that allows no
//! inline script and nothing from elsewhere, forbids framing, and keeps forms on this origin.

mod api_docs;
mod html;
mod pages;
mod resources;
mod time_axis;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use anycloud_workflows::db::console_sessions::hash;
use anycloud_workflows::refusal::OperationError;
use anycloud_workflows::wire::{ConsoleCode, WorkflowAction, WorkflowQuery};

use super::AppState;
use super::error::ApiError;

/// The session cookie's name.
const COOKIE: &str = "anycloud_console";

/// What every console answer may load: its own stylesheet, script and images, nothing inline,
/// nothing from elsewhere, never inside a frame.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The console's routes (merged into the API's router, outside the bearer-token layer).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui", get(overview))
        .route("/ui/", get(overview))
        .route("/ui/sign-in", get(sign_in))
        .route("/ui/sign-out", post(sign_out))
        .route("/ui/workflows", get(workflows))
        .route("/ui/workflows/{id}", get(workflow))
        .route("/ui/workflows/{id}/{action}", post(act))
        .route("/ui/clusters/{name}", get(cluster))
        .route("/ui/clusters/{name}/delete", post(delete_cluster))
        .route("/ui/deployments/{id}", get(deployment))
        .route("/ui/deployments/{id}/terminate", post(terminate))
        .route("/ui/deployments/{id}/logs", get(logs))
        .route("/ui/api", get(api_docs))
        .route("/ui/openapi.json", get(openapi))
        .route("/ui/assets/{file}", get(asset))
        .layer(axum::middleware::map_response(secure_headers))
}

/// `POST /v1/console/codes` (bearer token): a single-use sign-in code.
pub async fn new_code(State(state): State<AppState>) -> Result<(StatusCode, axum::Json<ConsoleCode>), ApiError> {
    Ok((StatusCode::CREATED, axum::Json(state.ops.console_code().await?)))
}

async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // Not `no-referrer`: under it a browser sends `Origin: null` with a form, and actions check it.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

/// An HTML answer.
fn html(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

/// The refusal of a request without a session.
fn signed_out() -> Response {
    html(
        StatusCode::UNAUTHORIZED,
        pages::refused(
            "Sign in",
            "This page needs a console session: run `anycloud ui` and open the address it prints.",
        ),
    )
}

/// An operation that failed, as a page.
fn failed(err: OperationError) -> Response {
    let err = ApiError::from(err);
    html(err.status, pages::refused("Refused", &format!("{} ({})", err.message, err.code)))
}

/// The session id the request's cookie carries, if it is of an open session.
async fn session(state: &AppState, headers: &HeaderMap) -> Result<String, Response> {
    let cookies = headers.get_all(header::COOKIE).iter().filter_map(|value| value.to_str().ok());
    let id = cookies
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned());
    let Some(id) = id else { return Err(signed_out()) };
    match state.ops.console_session_open(&id).await {
        Ok(true) => Ok(id),
        Ok(false) => Err(signed_out()),
        Err(err) => Err(failed(err)),
    }
}

/// An open console session (its id), from the request's cookie: a handler that takes one is
/// refused with 401 without it, before anything else is read.
struct Session(String);

impl FromRequestParts<AppState> for Session {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        session(state, &parts.headers).await.map(Session)
    }
}

/// The refusal of an action that failed its checks, saying why.
fn forbidden(why: &str) -> Response {
    html(StatusCode::FORBIDDEN, pages::refused("Refused", why))
}

/// The CSRF token of a session: derived from its id, which only the cookie carries.
fn csrf_token(session: &str) -> String {
    hash(&format!("csrf:{session}"))
}

/// An action's checks besides the session: the form's CSRF token and the request's `Origin`;
/// a refusal says why.
fn same_site_form(session: &str, headers: &HeaderMap, form: &Bytes) -> Result<(), &'static str> {
    let host = headers.get(header::HOST).and_then(|host| host.to_str().ok()).unwrap_or_default();
    let origin = headers.get(header::ORIGIN).and_then(|origin| origin.to_str().ok()).unwrap_or_default();
    let own = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) == Some(host);
    if host.is_empty() || !own {
        return Err("This action came from another site (its Origin is not this API's): nothing was done.");
    }
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(form).unwrap_or_default();
    let sent = fields.iter().find(|(name, _)| name == "csrf").map(|(_, value)| value.as_str());
    if sent != Some(csrf_token(session).as_str()) {
        return Err(
            "This action's form is not from this session's page: nothing was done. Reload the page and try again.",
        );
    }
    Ok(())
}

#[derive(Deserialize)]
struct SignIn {
    code: String,
}

/// `GET /ui/sign-in?code=`: trades the code for a session cookie and goes to the overview.
async fn sign_in(State(state): State<AppState>, query: Result<Query<SignIn>, QueryRejection>) -> Response {
    let refused = || {
        html(
            StatusCode::UNAUTHORIZED,
            pages::refused(
                "Sign-in refused",
                "This sign-in code was already used, has expired, or was never given: run `anycloud ui` again.",
            ),
        )
    };
    let Ok(Query(SignIn { code })) = query else { return refused() };
    match state.ops.console_sign_in(&code).await {
        Ok(Some(session)) => {
            let secure = if state.tls.is_some() { "; Secure" } else { "" };
            let max_age = anycloud_workflows::operations::console_sessions::SESSION_LIFETIME_MS / 1000;
            let cookie = format!("{COOKIE}={session}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
            ([(header::SET_COOKIE, cookie)], Redirect::to("/ui")).into_response()
        }
        Ok(None) => refused(),
        Err(err) => failed(err),
    }
}

/// `POST /ui/sign-out`: ends the session and clears the cookie.
async fn sign_out(
    State(state): State<AppState>,
    Session(session): Session,
    headers: HeaderMap,
    form: Bytes,
) -> Response {
    if let Err(why) = same_site_form(&session, &headers, &form) {
        return forbidden(why);
    }
    if let Err(err) = state.ops.console_sign_out(&session).await {
        return failed(err);
    }
    let cookie = format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0");
    (
        [(header::SET_COOKIE, cookie)],
        html(StatusCode::OK, pages::refused("Signed out", "Run `anycloud ui` to sign in again.")),
    )
        .into_response()
}

async fn overview(State(state): State<AppState>, Session(session): Session) -> Response {
    match pages::overview(&state.ops).await {
        Ok(content) => html(StatusCode::OK, html::page("Overview", Some(&csrf_token(&session)), true, &content)),
        Err(err) => failed(err),
    }
}

async fn workflows(
    State(state): State<AppState>,
    Session(session): Session,
    query: Result<Query<WorkflowQuery>, QueryRejection>,
) -> Response {
    let mut query = query.map(|Query(query)| query).unwrap_or_default();
    for filter in [&mut query.kind, &mut query.status, &mut query.resource] {
        if filter.as_deref() == Some("") {
            *filter = None;
        }
    }
    match pages::workflows(&state.ops, query).await {
        Ok(content) => html(StatusCode::OK, html::page("Workflows", Some(&csrf_token(&session)), true, &content)),
        Err(err) => failed(err),
    }
}

async fn workflow(State(state): State<AppState>, Session(session): Session, Path(id): Path<String>) -> Response {
    let csrf = csrf_token(&session);
    match pages::workflow(&state.ops, &id, &csrf).await {
        Ok((title, content)) => html(StatusCode::OK, html::page(&title, Some(&csrf), true, &content)),
        Err(err) => failed(err),
    }
}

/// `POST /ui/workflows/{id}/{retry|resume|cancel}`: the action, then the run's page.
async fn act(
    State(state): State<AppState>,
    Session(session): Session,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    form: Bytes,
) -> Response {
    if let Err(why) = same_site_form(&session, &headers, &form) {
        return forbidden(why);
    }
    let action = match action.as_str() {
        "retry" => WorkflowAction::Retry,
        "resume" => WorkflowAction::Resume,
        "cancel" => WorkflowAction::Cancel,
        _ => {
            return html(
                StatusCode::NOT_FOUND,
                pages::refused("Not found", "No such action: retry, resume or cancel."),
            );
        }
    };
    match state.ops.act_on_workflow(&id, action).await {
        Ok(_) => Redirect::to(&format!("/ui/workflows/{id}")).into_response(),
        Err(err) => failed(err),
    }
}

async fn cluster(State(state): State<AppState>, Session(session): Session, Path(name): Path<String>) -> Response {
    let csrf = csrf_token(&session);
    match resources::cluster(&state.ops, &name, &csrf).await {
        Ok(content) => html(StatusCode::OK, html::page(&format!("Cluster {name}"), Some(&csrf), true, &content)),
        Err(err) => failed(err),
    }
}

/// `POST /ui/clusters/{name}/delete`: starts the delete, then shows its run.
async fn delete_cluster(
    State(state): State<AppState>,
    Session(session): Session,
    headers: HeaderMap,
    Path(name): Path<String>,
    form: Bytes,
) -> Response {
    if let Err(why) = same_site_form(&session, &headers, &form) {
        return forbidden(why);
    }
    match state.ops.delete_cluster(&name).await {
        Ok(detail) => match detail.workflow {
            Some(run) => Redirect::to(&format!("/ui/workflows/{}", run.id)).into_response(),
            None => Redirect::to(&format!("/ui/clusters/{name}")).into_response(),
        },
        Err(err) => failed(err),
    }
}

async fn deployment(State(state): State<AppState>, Session(session): Session, Path(id): Path<String>) -> Response {
    let csrf = csrf_token(&session);
    match resources::deployment(&state.ops, &id, &csrf).await {
        Ok((title, content)) => html(StatusCode::OK, html::page(&title, Some(&csrf), true, &content)),
        Err(err) => failed(err),
    }
}

/// `POST /ui/deployments/{id}/terminate`: starts the termination, then shows its run.
async fn terminate(
    State(state): State<AppState>,
    Session(session): Session,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Bytes,
) -> Response {
    if let Err(why) = same_site_form(&session, &headers, &form) {
        return forbidden(why);
    }
    match state.ops.terminate_deployment(&id).await {
        Ok(detail) => match detail.workflow {
            Some(run) => Redirect::to(&format!("/ui/workflows/{}", run.id)).into_response(),
            None => Redirect::to(&format!("/ui/deployments/{id}")).into_response(),
        },
        Err(err) => failed(err),
    }
}

/// `GET /ui/deployments/{id}/logs`: a job's output, followed until it ends, as `text/plain`
/// (the page's script appends it as it comes); it holds one of the API's stream places.
async fn logs(State(state): State<AppState>, _: Session, Path(id): Path<String>) -> Response {
    let slot = match state.streams.hold(&format!("a follow of `{}`'s logs", anycloud_workflows::names::shown(&id))) {
        Ok(slot) => slot,
        Err(err) => return err.into_response(),
    };
    let query = anycloud_workflows::wire::LogsQuery { follow: true, ..Default::default() };
    match state.ops.deployment_logs(&id, &query).await {
        Ok(stream) => {
            let stream = futures::StreamExt::map(stream, move |chunk| {
                let _held = &slot;
                chunk
            });
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], axum::body::Body::from_stream(stream))
                .into_response()
        }
        Err(err) => failed(err),
    }
}

/// `GET /ui/api`: the HTTP API's reference, from its OpenAPI document.
async fn api_docs(Session(session): Session) -> Response {
    html(StatusCode::OK, html::page("HTTP API", Some(&csrf_token(&session)), false, api_docs::content()))
}

/// `GET /ui/openapi.json`: the OpenAPI document, for a signed-in browser (the API's own route
/// needs the bearer token, which a browser never holds).
async fn openapi(_: Session) -> Response {
    super::openapi::serve().await.into_response()
}

/// The embedded stylesheet, script and icon.
async fn asset(Path(file): Path<String>) -> Response {
    let (kind, body) = match file.as_str() {
        "console.css" => ("text/css; charset=utf-8", include_str!("assets/console.css")),
        "console.js" => ("text/javascript; charset=utf-8", include_str!("assets/console.js")),
        "icon.svg" => ("image/svg+xml", include_str!("assets/icon.svg")),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "public, max-age=300")], body).into_response()
}
