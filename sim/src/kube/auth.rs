//! Which cluster a request is for, and whether it may ask: the bearer token must be the one the
//! user-data of the control plane VM in its path installs (as k3s's token file would), and that
//! VM must run. A cluster's built-in namespaces exist from its first authenticated request on.
//!
//! The token is checked first, before anything else answers ([`token_first`], the routes'
//! outermost layer): without it every path under `/sim/kube/VM/` is 401, whether that VM exists,
//! runs, or has such a route, whatever the method, the media types or the body, so nothing can
//! be learnt or spent without it. With it, a VM that does not run is 503.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use anycloud_workflows::cluster::user_data;
use anycloud_workflows::secrets::constant_time_eq;
use axum::extract::{FromRequestParts, RawPathParams, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::status::ApiError;
use super::{Kube, Machine, defaults, resources};

tokio::task_local! {
    /// The control plane the request in hand was let in for by [`token_first`].
    static LET_IN: Machine;
}

/// The namespaces every cluster starts with.
const BUILT_IN_NAMESPACES: [&str; 4] = ["default", "kube-node-lease", "kube-public", "kube-system"];

/// The clusters whose built-in namespaces this process has made sure of.
pub(crate) struct Seeded(Mutex<HashSet<String>>);

impl Seeded {
    pub(crate) fn new() -> Self {
        Self(Mutex::new(HashSet::new()))
    }
}

/// The routes' outermost layer: lets a request in only with the token of the control plane VM
/// its path names (`/sim/kube/{vm}/...`), and only if that VM runs; the handlers then find the
/// VM in [`control_plane`] without looking it up again.
pub(crate) async fn token_first(State(kube): State<Arc<Kube>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let vm = match RawPathParams::from_request_parts(&mut parts, &()).await {
        Ok(params) => params.iter().find(|(name, _)| *name == "vm").map(|(_, vm)| vm.to_owned()),
        Err(_) => None,
    };
    let Some(vm) = vm else {
        return unauthorized().into_response();
    };
    match authenticate(&kube, &vm, &parts.headers).await {
        Ok(cp) => LET_IN.scope(cp, next.run(Request::from_parts(parts, body))).await,
        Err(err) => err.into_response(),
    }
}

/// The running control plane `vm`, when the caller holds its API token: the one [`token_first`]
/// let the request in for, else looked up and checked here.
pub(crate) async fn control_plane(kube: &Kube, vm: &str, headers: &HeaderMap) -> Result<Machine, ApiError> {
    let let_in = LET_IN.try_with(|cp| (cp.id == vm).then(|| cp.clone())).ok().flatten();
    match let_in {
        Some(cp) => Ok(cp),
        None => authenticate(kube, vm, headers).await,
    }
}

/// The one answer to a missing or wrong token, whether or not the VM exists.
fn unauthorized() -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
}

/// Checks the token against the control plane `vm`'s (a VM that is not a control plane has none),
/// then that the VM runs; seeds the cluster's namespaces.
async fn authenticate(kube: &Kube, vm: &str, headers: &HeaderMap) -> Result<Machine, ApiError> {
    let found = kube.machines.machine(vm).await.map_err(ApiError::internal)?;
    let cp = found.filter(|cp| cp.control_plane);
    let expected = cp.as_ref().and_then(|cp| user_data::parse_control_plane_token(&cp.user_data));
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let accepted = presented
        .zip(expected.as_deref())
        .is_some_and(|(presented, expected)| constant_time_eq(presented.as_bytes(), expected.as_bytes()));
    let (Some(cp), true) = (cp, accepted) else {
        return Err(unauthorized());
    };
    if !cp.running {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            format!("simulated control plane {vm} is {}: its Kubernetes API does not answer yet", cp.state),
        ));
    }
    seed(kube, vm).await?;
    Ok(cp)
}

/// Creates the cluster's built-in namespaces, once per process.
async fn seed(kube: &Kube, vm: &str) -> Result<(), ApiError> {
    let seeded = kube.seeded.0.lock().map(|seeded| seeded.contains(vm)).unwrap_or(false);
    if seeded {
        return Ok(());
    }
    for name in BUILT_IN_NAMESPACES {
        if kube.store.get(vm, &resources::NAMESPACES, "", name).await?.is_none() {
            kube.store.create(vm, &resources::NAMESPACES, defaults::namespace(name)).await?;
        }
    }
    if let Ok(mut seeded) = kube.seeded.0.lock() {
        seeded.insert(vm.to_owned());
    }
    Ok(())
}
