//! A fake Secret Manager (`secretmanager.googleapis.com/v1`), served behind the fake Google front
//! ([`crate::fake_google::FakeGoogle`]) on `/v1/projects/...`, for the tests of a hosted API on GCP
//! whose checkpoint bucket is on another provider: the deployer stores the bucket's key in a
//! secret, and the VM reads it as its service account. It answers the REST requests
//! google-cloud-secretmanager-v1 sends, as the real API answers them where a client can tell:
//!
//! - `POST /v1/projects/P/secrets?secretId=ID` (a `Secret`): the secret, with `name` and
//!   `createTime`; 409 `ALREADY_EXISTS` if it exists;
//! - `GET` and `DELETE /v1/projects/P/secrets/ID`: the secret, or `{}` once deleted with every
//!   version; 404 `NOT_FOUND` if absent;
//! - `POST .../secrets/ID:addVersion` (`{"payload":{"data":BASE64}}`): a new version numbered
//!   from 1, `state` enabled (1), the secret's latest;
//! - `GET .../secrets/ID/versions/{N|latest}:access`: `{"name", "payload": {"data"}}`; 404 when the
//!   secret or the version is absent. The caller (the issuer of its bearer JWT, a service
//!   account's e-mail) must hold `roles/secretmanager.secretAccessor` in the secret's policy, or
//!   (behind the front) `roles/owner`, `roles/secretmanager.admin` or the accessor role,
//!   unconditioned, in the fake IAM's policy of the project, which the secret inherits:
//!   otherwise 403 `PERMISSION_DENIED` naming the permission, as Secret Manager answers;
//! - `POST .../secrets/ID:setIamPolicy` (`{"policy"}`) and `:getIamPolicy`: the policy, replaced
//!   whole, with a new `etag`; behind the front, a `serviceAccount:` member the fake IAM does not
//!   hold is 400 `INVALID_ARGUMENT` ("Service account ... does not exist."), as Secret Manager
//!   answers (an account must exist before it is bound);
//! - `GET .../secrets/ID/versions`: `{"versions": [{"name", "state"}]}`, newest first (no paging,
//!   no filter); `POST .../versions/N:destroy`: the version `DESTROYED`, its data gone (400
//!   `FAILED_PRECONDITION` if it already is); accessing a destroyed version is 400
//!   `FAILED_PRECONDITION`, as Secret Manager answers;
//! - every request must carry `Authorization: Bearer <token>` (401 `UNAUTHENTICATED` otherwise);
//!   errors in Google's shape (`{"error":{"code","message","status"}}`).
//!
//! What it does not: locations (regional secrets), listing secrets, version disable/enable,
//! rotation, CMEK, etags on writes, checksums (`dataCrc32c` is ignored), and any permission but
//! the accessor's: the deployer may do everything else.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as BASE64, URL_SAFE_NO_PAD};
use serde_json::{Value, json};

/// The accessor role.
const ACCESSOR: &str = "roles/secretmanager.secretAccessor";

/// The project roles that read every secret of the project (`secretmanager.versions.access`).
const PROJECT_READERS: [&str; 3] = ["roles/owner", "roles/secretmanager.admin", ACCESSOR];

/// One secret.
#[derive(Clone, Debug, Default)]
struct Secret {
    resource: Value,
    /// Each version's data; `None` once destroyed.
    versions: Vec<Option<Vec<u8>>>,
    policy: Value,
    etag: u64,
}

/// The fake's state; the front calls [`FakeSecretManager::handle`].
#[derive(Default)]
pub struct FakeSecretManager {
    secrets: Mutex<BTreeMap<String, Secret>>,
    /// The accounts a policy's `serviceAccount:` members must be, when set.
    iam: std::sync::OnceLock<Arc<crate::fake_iam::FakeIam>>,
}

impl FakeSecretManager {
    /// An empty one.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Refuses, from now on, a policy naming a service account `iam` does not hold (400, as
    /// Secret Manager answers).
    pub fn check_members_at(&self, iam: Arc<crate::fake_iam::FakeIam>) {
        let _ = self.iam.set(iam);
    }

    /// The names (`projects/P/secrets/ID`) of the secrets it holds.
    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// The latest version's bytes of secret `name` (`projects/P/secrets/ID`), as text.
    pub fn latest(&self, name: &str) -> Option<String> {
        self.lock()
            .get(name)
            .and_then(|s| s.versions.last().cloned().flatten())
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    }

    /// How many versions secret `name` has.
    pub fn version_count(&self, name: &str) -> usize {
        self.lock().get(name).map_or(0, |s| s.versions.len())
    }

    /// The data of every version of secret `name` not destroyed, oldest first.
    pub fn live_versions(&self, name: &str) -> Vec<String> {
        self.lock()
            .get(name)
            .map(|s| s.versions.iter().flatten().map(|v| String::from_utf8_lossy(v).into_owned()).collect())
            .unwrap_or_default()
    }

    /// The IAM policy of secret `name`.
    pub fn policy(&self, name: &str) -> Option<Value> {
        self.lock().get(name).map(|s| s.policy.clone())
    }

    /// Replaces the bindings of secret `name`'s policy, as another administrator's
    /// `setIamPolicy` would.
    pub fn set_bindings(&self, name: &str, bindings: Value) {
        if let Some(secret) = self.lock().get_mut(name) {
            secret.policy["bindings"] = bindings;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Secret>> {
        self.secrets.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Answers one request whose path starts with `/v1/`.
    pub fn handle(&self, method: &Method, path: &str, query: &str, headers: &HeaderMap, body: &[u8]) -> Response {
        let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|t| !t.trim().is_empty())
        else {
            return error(401, "UNAUTHENTICATED", "Request is missing required authentication credential.");
        };
        let body: Value = if body.is_empty() {
            json!({})
        } else {
            match serde_json::from_slice(body) {
                Ok(body) => body,
                Err(err) => return error(400, "INVALID_ARGUMENT", &format!("Invalid JSON payload received. {err}")),
            }
        };
        let path = path.trim_start_matches("/v1/");
        let (resource, verb) = match path.rsplit_once(':') {
            Some((resource, verb)) => (resource, Some(verb)),
            None => (path, None),
        };
        let parts: Vec<&str> = resource.split('/').collect();
        let mut secrets = self.lock();
        match (method.clone(), parts.as_slice(), verb) {
            (Method::POST, ["projects", project, "secrets"], None) => {
                let Some(id) = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "secretId").map(|(_, v)| v)
                else {
                    return error(400, "INVALID_ARGUMENT", "secretId is required");
                };
                let valid = !id.is_empty()
                    && id.len() <= 255
                    && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
                if !valid {
                    return error(400, "INVALID_ARGUMENT", &format!("Secret ID [{id}] is invalid."));
                }
                let name = format!("projects/{project}/secrets/{id}");
                if secrets.contains_key(&name) {
                    return error(409, "ALREADY_EXISTS", &format!("Secret [{name}] already exists."));
                }
                let mut resource = body;
                resource["name"] = json!(name);
                resource["createTime"] = json!(crate::rfc3339::at_offset(std::time::SystemTime::now(), 0));
                secrets.insert(name, Secret { resource: resource.clone(), ..Secret::default() });
                ok(resource)
            }
            (_, ["projects", _, "secrets", _], _) => {
                let Some(secret) = secrets.get_mut(resource) else {
                    return error(404, "NOT_FOUND", &format!("Secret [{resource}] not found."));
                };
                match (method.clone(), verb) {
                    (Method::GET, None) => ok(secret.resource.clone()),
                    (Method::DELETE, None) => {
                        secrets.remove(resource);
                        ok(json!({}))
                    }
                    (Method::POST, Some("addVersion")) => {
                        let data = body["payload"]["data"].as_str().unwrap_or_default();
                        let Ok(bytes) = BASE64.decode(data) else {
                            return error(400, "INVALID_ARGUMENT", "payload.data is not base64");
                        };
                        secret.versions.push(Some(bytes));
                        ok(json!({
                            "name": format!("{resource}/versions/{}", secret.versions.len()),
                            "createTime": crate::rfc3339::at_offset(std::time::SystemTime::now(), 0),
                            "state": 1,
                        }))
                    }
                    (Method::POST, Some("setIamPolicy")) => {
                        let members = body["policy"]["bindings"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .flat_map(|b| b["members"].as_array().cloned().unwrap_or_default());
                        for member in members {
                            let email = member.as_str().and_then(|m| m.strip_prefix("serviceAccount:"));
                            if let (Some(iam), Some(email)) = (self.iam.get(), email)
                                && !iam.exists(email)
                            {
                                return error(
                                    400,
                                    "INVALID_ARGUMENT",
                                    &format!("Service account {email} does not exist."),
                                );
                            }
                        }
                        secret.etag += 1;
                        let mut policy = body["policy"].clone();
                        policy["etag"] = json!(BASE64.encode(secret.etag.to_be_bytes()));
                        policy["version"] = json!(1);
                        secret.policy = policy.clone();
                        ok(policy)
                    }
                    (Method::POST | Method::GET, Some("getIamPolicy")) => ok(secret.policy.clone()),
                    _ => error(404, "NOT_FOUND", "Not Found"),
                }
            }
            (Method::GET, ["projects", project, "secrets", id, "versions", version], Some("access")) => {
                let name = format!("projects/{project}/secrets/{id}");
                let Some(secret) = secrets.get(&name) else {
                    return error(404, "NOT_FOUND", &format!("Secret [{name}] not found or has no versions."));
                };
                let caller = caller(token);
                let member = format!("serviceAccount:{caller}");
                let allowed = secret.policy["bindings"].as_array().into_iter().flatten().any(|binding| {
                    binding["role"] == ACCESSOR
                        && binding["members"].as_array().into_iter().flatten().any(|m| m == member.as_str())
                });
                // Or granted on the project, which the secret inherits (behind the front).
                let inherited = self.iam.get().is_some_and(|iam| {
                    iam.bindings_of(project, &member)
                        .iter()
                        .any(|(role, condition)| condition.is_null() && PROJECT_READERS.contains(&role.as_str()))
                });
                let allowed = allowed || inherited;
                if !allowed {
                    return error(
                        403,
                        "PERMISSION_DENIED",
                        &format!(
                            "Permission 'secretmanager.versions.access' denied for resource '{name}/versions/{version}' \
                             (or it may not exist)."
                        ),
                    );
                }
                let index = match *version {
                    "latest" => secret.versions.len(),
                    number => number.parse().unwrap_or(0),
                };
                let Some(kept) = index.checked_sub(1).and_then(|i| secret.versions.get(i)) else {
                    return error(404, "NOT_FOUND", &format!("Secret Version [{name}/versions/{version}] not found."));
                };
                let Some(bytes) = kept else {
                    return error(
                        400,
                        "FAILED_PRECONDITION",
                        &format!("Secret Version [{name}/versions/{index}] is in DESTROYED state."),
                    );
                };
                ok(json!({
                    "name": format!("{name}/versions/{index}"),
                    "payload": { "data": BASE64.encode(bytes) },
                }))
            }
            (Method::GET, ["projects", project, "secrets", id, "versions"], None) => {
                let name = format!("projects/{project}/secrets/{id}");
                let Some(secret) = secrets.get(&name) else {
                    return error(404, "NOT_FOUND", &format!("Secret [{name}] not found."));
                };
                let versions: Vec<Value> = (1..=secret.versions.len())
                    .rev()
                    .map(|n| {
                        let state = if secret.versions[n - 1].is_some() { "ENABLED" } else { "DESTROYED" };
                        json!({ "name": format!("{name}/versions/{n}"), "state": state })
                    })
                    .collect();
                ok(json!({ "versions": versions, "totalSize": versions.len() }))
            }
            (Method::POST, ["projects", project, "secrets", id, "versions", version], Some("destroy")) => {
                let name = format!("projects/{project}/secrets/{id}/versions/{version}");
                let secret = secrets.get_mut(&format!("projects/{project}/secrets/{id}"));
                let Some(kept) =
                    version.parse::<usize>().ok().and_then(|n| secret?.versions.get_mut(n.checked_sub(1)?))
                else {
                    return error(404, "NOT_FOUND", &format!("Secret Version [{name}] not found."));
                };
                if kept.take().is_none() {
                    return error(
                        400,
                        "FAILED_PRECONDITION",
                        &format!("Secret Version [{name}] is in DESTROYED state."),
                    );
                }
                ok(json!({ "name": name, "state": "DESTROYED" }))
            }
            _ => error(404, "NOT_FOUND", "Not Found"),
        }
    }
}

/// The issuer of a bearer JWT (a service account's e-mail), or `unknown`.
fn caller(token: &str) -> String {
    token
        .split('.')
        .nth(1)
        .and_then(|claims| URL_SAFE_NO_PAD.decode(claims).ok())
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .and_then(|claims| claims["iss"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn ok(body: Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn error(code: u16, status: &str, message: &str) -> Response {
    let body = json!({ "error": { "code": code, "message": message, "status": status } });
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}
