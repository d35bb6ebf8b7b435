//! A fake IAM Admin API (`iam.googleapis.com/v1`, service accounts) and a fake Cloud Resource
//! Manager (`cloudresourcemanager.googleapis.com/v3`, a project's IAM policy), served behind the
//! fake Google front ([`crate::fake_google::FakeGoogle`]) on `/v1/projects/P/serviceAccounts...`
//! and `/v3/projects/P:...`, for the tests of a hosted API on GCP whose VM acts as a service
//! account made for it. It answers the REST requests google-cloud-iam-admin-v1 and
//! google-cloud-resourcemanager-v3 send, as the real APIs answer them where a client can tell:
//!
//! - `POST /v1/projects/P/serviceAccounts` (`{"accountId", "serviceAccount": {"displayName",
//!   "description"}}`): the account (`name` `projects/P/serviceAccounts/EMAIL`, `email`
//!   `ID@P.iam.gserviceaccount.com`, `uniqueId`, `projectId`, `oauth2ClientId`, `etag`); 400
//!   `INVALID_ARGUMENT` for an id that is not 6-30 characters of `[a-z]([-a-z0-9]*[a-z0-9])`;
//!   409 `ALREADY_EXISTS` if the project has it;
//! - `GET` and `DELETE /v1/projects/P/serviceAccounts/{EMAIL|UNIQUE_ID}` (`P` may be `-`): the
//!   account, or `{}` once deleted; 404 `NOT_FOUND` if there is none. Deleting an account turns
//!   its members in the project's policy into `deleted:serviceAccount:EMAIL?uid=N`, as IAM does;
//! - `POST /v3/projects/P:getIamPolicy` (`{"options": {"requestedPolicyVersion"}}`): the policy
//!   (`version`, `etag`, `bindings`). A policy with conditional bindings asked for at a version
//!   below 3 is answered as IAM answers it: version 1, each conditional binding's role suffixed
//!   `_withcond_<hash>` and its condition left out (such a policy cannot be written back);
//! - `POST /v3/projects/P:setIamPolicy` (`{"policy"}`): the policy replaced (`bindings` and
//!   `etag` only, as the default update mask says), with a new etag. A policy whose `etag` is
//!   not the current one is 409 `ABORTED` ("There were concurrent policy changes"), as Resource
//!   Manager answers; a conditional binding needs `version` 3 and a `title` and `expression`
//!   (400); a `serviceAccount:` member of a project this fake serves must exist (400 "Service
//!   account ... does not exist."), and a role suffixed `_withcond_` is refused (400);
//! - every request must carry `Authorization: Bearer <token>` (401 `UNAUTHENTICATED`
//!   otherwise); errors in Google's shape (`{"error":{"code","message","status"}}`).
//!
//! What it does not: keys, disable/enable/undelete, listing accounts, folders and organizations,
//! audit configs, roles' contents, and any permission check: the deployer may do everything.
//! [`FakeIam::seed_binding`] puts another administrator's binding in a project's policy; a
//! project's policy starts with the deployer's `roles/owner`, and the deployer's account exists.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The suffix IAM gives a conditional binding's role in a policy read below version 3.
const WITH_CONDITION: &str = "_withcond_";

#[derive(Default)]
struct State {
    /// Accounts by e-mail.
    accounts: BTreeMap<String, Value>,
    /// Each project's bindings and the count its etag is made of.
    policies: BTreeMap<String, (Vec<Value>, u64)>,
    next_unique_id: u64,
    /// A binding another administrator adds right after the next `getIamPolicy` answers.
    interference: Option<(String, Value)>,
}

/// The fake's state; the front calls [`FakeIam::handle`].
pub struct FakeIam {
    state: Mutex<State>,
    /// The account whose key the tests' credentials hold: `roles/owner` in every new policy.
    deployer: String,
}

impl FakeIam {
    /// One that holds the deployer's account (`deployer`, an e-mail), the owner of every
    /// project's policy.
    pub fn new(deployer: &str) -> Arc<Self> {
        let state = State { next_unique_id: 100_000_000_000_000_000, ..State::default() };
        let fake = Arc::new(Self { state: Mutex::new(state), deployer: deployer.to_owned() });
        if let Some((id, domain)) = deployer.split_once('@') {
            let project = domain.trim_end_matches(".iam.gserviceaccount.com");
            let body = json!({"accountId": id, "serviceAccount": {"displayName": "the deployer"}});
            let _ = fake.create(project, &body);
        }
        fake
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The e-mails of the accounts of `project`.
    pub fn accounts(&self, project: &str) -> Vec<String> {
        let suffix = format!("@{project}.iam.gserviceaccount.com");
        self.lock().accounts.keys().filter(|email| email.ends_with(&suffix)).cloned().collect()
    }

    /// The account of `email`, as `GET` answers it.
    pub fn account(&self, email: &str) -> Option<Value> {
        self.lock().accounts.get(email).cloned()
    }

    /// Whether the account of `email` exists.
    pub fn exists(&self, email: &str) -> bool {
        self.lock().accounts.contains_key(email)
    }

    /// The bindings of `project`'s policy (version 3: conditions included).
    pub fn project_bindings(&self, project: &str) -> Vec<Value> {
        let mut state = self.lock();
        self.policy_of(&mut state, project).0.clone()
    }

    /// The bindings of `project` that name `member`, as `(role, condition)`.
    pub fn bindings_of(&self, project: &str, member: &str) -> Vec<(String, Value)> {
        self.project_bindings(project)
            .into_iter()
            .filter(|b| b["members"].as_array().is_some_and(|m| m.iter().any(|m| m == member)))
            .map(|b| (b["role"].as_str().unwrap_or_default().to_owned(), b["condition"].clone()))
            .collect()
    }

    /// Adds a binding to `project`'s policy, as another administrator would (a new etag).
    pub fn seed_binding(&self, project: &str, binding: Value) {
        let mut state = self.lock();
        let policy = self.policy_of(&mut state, project);
        policy.0.push(binding);
        policy.1 += 1;
    }

    /// How many times `project`'s policy was written (its etag's count).
    pub fn policy_writes(&self, project: &str) -> u64 {
        let mut state = self.lock();
        self.policy_of(&mut state, project).1
    }

    /// Adds `binding` to `project`'s policy right after the next `getIamPolicy` answers, as
    /// another administrator changing the policy between a caller's read and its write would:
    /// that write then carries a stale etag.
    pub fn change_after_next_read(&self, project: &str, binding: Value) {
        self.lock().interference = Some((project.to_owned(), binding));
    }

    fn policy_of<'a>(&self, state: &'a mut State, project: &str) -> &'a mut (Vec<Value>, u64) {
        state.policies.entry(project.to_owned()).or_insert_with(|| {
            (vec![json!({"role": "roles/owner", "members": [format!("serviceAccount:{}", self.deployer)]})], 1)
        })
    }

    /// Answers one request for `/v1/projects/P/serviceAccounts...` or `/v3/projects/P:...`.
    pub fn handle(&self, method: &Method, path: &str, headers: &HeaderMap, body: &[u8]) -> Response {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| !t.trim().is_empty());
        if !bearer {
            return error(401, "UNAUTHENTICATED", "Request is missing required authentication credential.");
        }
        let body: Value = if body.is_empty() {
            json!({})
        } else {
            match serde_json::from_slice(body) {
                Ok(body) => body,
                Err(err) => return error(400, "INVALID_ARGUMENT", &format!("Invalid JSON payload received. {err}")),
            }
        };
        if let Some(rest) = path.strip_prefix("/v3/projects/") {
            return match (method.clone(), rest.split_once(':')) {
                (Method::POST, Some((project, "getIamPolicy"))) => self.get_policy(project, &body),
                (Method::POST, Some((project, "setIamPolicy"))) => self.set_policy(project, &body),
                _ => error(404, "NOT_FOUND", "Not Found"),
            };
        }
        let parts: Vec<&str> = path.trim_start_matches("/v1/").split('/').collect();
        match (method.clone(), parts.as_slice()) {
            (Method::POST, ["projects", project, "serviceAccounts"]) => self.create(project, &body),
            (Method::GET, ["projects", _, "serviceAccounts", key]) => match self.find(key) {
                Some(account) => ok(account),
                None => not_found(key),
            },
            (Method::DELETE, ["projects", _, "serviceAccounts", key]) => self.delete(key),
            _ => error(404, "NOT_FOUND", "Not Found"),
        }
    }

    fn create(&self, project: &str, body: &Value) -> Response {
        let id = body["accountId"].as_str().unwrap_or_default();
        let valid = (6..=30).contains(&id.len())
            && id.starts_with(|c: char| c.is_ascii_lowercase())
            && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !id.ends_with('-');
        if !valid {
            return error(
                400,
                "INVALID_ARGUMENT",
                &format!(
                    "Invalid account ID '{id}': it must be 6 to 30 characters, start with a lowercase letter and \
                     contain only lowercase letters, digits and hyphens, ending with a letter or digit."
                ),
            );
        }
        let email = format!("{id}@{project}.iam.gserviceaccount.com");
        let mut state = self.lock();
        if state.accounts.contains_key(&email) {
            return error(
                409,
                "ALREADY_EXISTS",
                &format!("Service account {id} already exists within project projects/{project}."),
            );
        }
        state.next_unique_id += 1;
        let unique_id = state.next_unique_id.to_string();
        let given = &body["serviceAccount"];
        let account = json!({
            "name": format!("projects/{project}/serviceAccounts/{email}"),
            "projectId": project,
            "uniqueId": unique_id,
            "email": email,
            "displayName": given["displayName"].as_str().unwrap_or_default(),
            "description": given["description"].as_str().unwrap_or_default(),
            "etag": "MDEwMjE5MjA=",
            "oauth2ClientId": unique_id,
        });
        state.accounts.insert(email, account.clone());
        ok(account)
    }

    fn find(&self, key: &str) -> Option<Value> {
        let state = self.lock();
        state.accounts.get(key).cloned().or_else(|| state.accounts.values().find(|a| a["uniqueId"] == key).cloned())
    }

    fn delete(&self, key: &str) -> Response {
        let Some(account) = self.find(key) else { return not_found(key) };
        let email = account["email"].as_str().unwrap_or_default().to_owned();
        let uid = account["uniqueId"].as_str().unwrap_or_default().to_owned();
        let mut state = self.lock();
        state.accounts.remove(&email);
        let member = format!("serviceAccount:{email}");
        for (bindings, _) in state.policies.values_mut() {
            for binding in bindings.iter_mut() {
                if let Some(members) = binding["members"].as_array_mut() {
                    for m in members.iter_mut().filter(|m| **m == member.as_str()) {
                        *m = json!(format!("deleted:{member}?uid={uid}"));
                    }
                }
            }
        }
        ok(json!({}))
    }

    fn get_policy(&self, project: &str, body: &Value) -> Response {
        let requested = body["options"]["requestedPolicyVersion"].as_i64().unwrap_or(0);
        let mut state = self.lock();
        let (bindings, etag) = self.policy_of(&mut state, project).clone();
        if let Some((_, binding)) = state.interference.take_if(|(p, _)| p.as_str() == project) {
            let policy = self.policy_of(&mut state, project);
            policy.0.push(binding);
            policy.1 += 1;
        }
        let conditional = bindings.iter().any(|b| !b["condition"].is_null());
        if conditional && requested < 3 {
            let bindings: Vec<Value> = bindings
                .iter()
                .map(|b| {
                    if b["condition"].is_null() {
                        return b.clone();
                    }
                    let hash: u32 =
                        b["condition"].to_string().bytes().fold(7, |h, c| h.wrapping_mul(31) ^ u32::from(c));
                    json!({"role": format!("{}{WITH_CONDITION}{hash:08x}", b["role"].as_str().unwrap_or_default()),
                           "members": b["members"]})
                })
                .collect();
            return ok(json!({"version": 1, "etag": etag_text(etag), "bindings": bindings}));
        }
        let version = if conditional { 3 } else { 1 };
        ok(json!({"version": version, "etag": etag_text(etag), "bindings": bindings}))
    }

    fn set_policy(&self, project: &str, body: &Value) -> Response {
        let policy = &body["policy"];
        let bindings = policy["bindings"].as_array().cloned().unwrap_or_default();
        let mut state = self.lock();
        let accounts: Vec<String> = state.accounts.keys().cloned().collect();
        let current = self.policy_of(&mut state, project).1;
        if let Some(etag) = policy["etag"].as_str()
            && etag != etag_text(current)
        {
            return error(
                409,
                "ABORTED",
                "There were concurrent policy changes. Please retry the whole read-modify-write with exponential \
                 backoff.",
            );
        }
        for binding in &bindings {
            let role = binding["role"].as_str().unwrap_or_default();
            if (!role.starts_with("roles/") && !role.starts_with("projects/")) || role.contains(WITH_CONDITION) {
                return error(400, "INVALID_ARGUMENT", &format!("Role {role} is not supported for this resource."));
            }
            let condition = &binding["condition"];
            if !condition.is_null() {
                if policy["version"].as_i64() != Some(3) {
                    return error(
                        400,
                        "INVALID_ARGUMENT",
                        "Policy version must be 3 when the policy contains conditional role bindings.",
                    );
                }
                let filled = |field: &str| condition[field].as_str().is_some_and(|v| !v.trim().is_empty());
                if !filled("title") || !filled("expression") {
                    return error(400, "INVALID_ARGUMENT", "A condition needs a title and an expression.");
                }
            }
            for member in binding["members"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if let Some(email) = member.strip_prefix("serviceAccount:")
                    && email.ends_with(".iam.gserviceaccount.com")
                    && !accounts.iter().any(|a| a == email)
                {
                    return error(400, "INVALID_ARGUMENT", &format!("Service account {email} does not exist."));
                }
            }
        }
        let stored = self.policy_of(&mut state, project);
        stored.0 = bindings.clone();
        stored.1 += 1;
        let version = if bindings.iter().any(|b| !b["condition"].is_null()) { 3 } else { 1 };
        ok(json!({"version": version, "etag": etag_text(stored.1), "bindings": bindings}))
    }
}

/// An etag as Resource Manager writes one (base64 bytes).
fn etag_text(count: u64) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(count.to_be_bytes())
}

fn not_found(key: &str) -> Response {
    error(404, "NOT_FOUND", &format!("Unknown service account {key}"))
}

fn ok(body: Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn error(code: u16, status: &str, message: &str) -> Response {
    let body = json!({ "error": { "code": code, "message": message, "status": status } });
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}
