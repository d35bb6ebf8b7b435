//! Which cluster a request is for, and whether it may ask: the control plane VM in its path must
//! run, and the bearer token must be the one its user-data installs (as k3s's token file
//! would). A cluster's built-in namespaces exist from its first authenticated request on.

use std::collections::HashSet;
use std::sync::Mutex;

use anycloud_workflows::secrets::constant_time_eq;
use anycloud_workflows::user_data;
use axum::http::{HeaderMap, StatusCode};

use super::status::ApiError;
use super::{Kube, Machine, defaults, resources};

/// The namespaces every cluster starts with.
const BUILT_IN_NAMESPACES: [&str; 4] = ["default", "kube-node-lease", "kube-public", "kube-system"];

/// The clusters whose built-in namespaces this process has made sure of.
pub(crate) struct Seeded(Mutex<HashSet<String>>);

impl Seeded {
    pub(crate) fn new() -> Self {
        Self(Mutex::new(HashSet::new()))
    }
}

/// The running control plane `vm`, when the caller holds its API token.
pub(crate) async fn control_plane(kube: &Kube, vm: &str, headers: &HeaderMap) -> Result<Machine, ApiError> {
    let found = kube.machines.machine(vm).await.map_err(ApiError::internal)?;
    let Some(cp) = found.filter(|cp| cp.control_plane) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("simulated cloud: no control plane VM {vm}"),
        ));
    };
    if !cp.running {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            format!("simulated control plane {vm} is {}: its Kubernetes API does not answer yet", cp.state),
        ));
    }
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let expected = user_data::parse_control_plane_token(&cp.user_data);
    let accepted = presented
        .zip(expected.as_deref())
        .is_some_and(|(presented, expected)| constant_time_eq(presented.as_bytes(), expected.as_bytes()));
    if !accepted {
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized"));
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
