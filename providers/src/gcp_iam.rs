//! Who a GCP-hosted API's VM acts as: a service account made for that API alone
//! (`anycloud-<owner's alphanumerics>@P.iam.gserviceaccount.com`, through IAM Admin), given on
//! the project only the Compute Engine roles that place its clusters' control planes, each
//! narrowed by an IAM Condition to the resources anycloud names (`ac-...`) where Compute Engine
//! supports conditions on the resource's name (instances, disks, firewall rules; docs/hosting.md,
//! "The VM's service account", cites Google's pages). Its secrets are bound to it one by one
//! ([`super::gcp_secrets`]), its bucket on the bucket itself (`hosting/bucket.rs`); nothing else.
//!
//! | call                        | request                                                 | tolerated           |
//! |-----------------------------|---------------------------------------------------------|---------------------|
//! | make the account            | `POST /v1/projects/P/serviceAccounts`                   | 409: it exists      |
//! | read it                     | `GET /v1/projects/P/serviceAccounts/EMAIL`              |                     |
//! | grant / revoke project roles| `POST /v3/projects/P:getIamPolicy` then `:setIamPolicy` | 409 ABORTED: again  |
//! | delete the account          | `DELETE /v1/projects/P/serviceAccounts/EMAIL`           | 404: already gone   |
//!
//! The project's policy is read, changed and written back with the etag read (read-modify-write):
//! a policy someone changed in between is refused (409 `ABORTED`) and the whole cycle runs again,
//! so another administrator's bindings are never overwritten. Only this account's membership is
//! touched: it is added to exactly [`project_bindings`] and removed from every other binding. The
//! policy is asked for and written as version 3, the one that carries conditions.
//!
//! Every call tolerates "already exists" and "already gone", so a retried step finishes what an
//! earlier attempt began; the grant writes nothing when the policy already says what it should.

use std::time::Duration;

use google_cloud_gax::error::Error;
use google_cloud_iam_admin_v1::client::Iam;
use google_cloud_iam_admin_v1::model::ServiceAccount;
use google_cloud_iam_v1::model::{Binding, GetPolicyOptions, Policy};
use google_cloud_resourcemanager_v3::client::Projects;
use google_cloud_type::model::Expr;

use crate::cloud::CloudError;

/// Each attempt's deadline (the clients set none).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// How many read-modify-write cycles of the project's policy run before the step is retried.
const POLICY_CYCLES: u32 = 5;

/// The policy version that carries conditional bindings.
const POLICY_VERSION: i32 = 3;

/// The prefix of every Compute Engine resource anycloud names (`gcp_names::cluster_prefix`).
pub const RESOURCE_PREFIX: &str = "ac-";

/// The roles the account holds on its checkpoint bucket, when the bucket is on GCS: its objects
/// (read, write, delete, list; no IAM), and the bucket's metadata (`storage.buckets.get`, which the
/// hosted API's first call reads).
pub const BUCKET_ROLES: [&str; 2] = ["roles/storage.objectUser", "roles/storage.legacyBucketReader"];

/// What a deployer needs to make, bind and remove the account, named in every refusal.
pub const DEPLOYER_PERMISSIONS: &str = "iam.serviceAccounts.create, .get, .delete and .actAs on the new account \
     (roles/iam.serviceAccountAdmin and roles/iam.serviceAccountUser), resourcemanager.projects.getIamPolicy and \
     .setIamPolicy (roles/resourcemanager.projectIamAdmin)";

/// The service account's id in its project: `anycloud-` and the first 21 lowercase alphanumerics
/// of the owner id (`api-<uuid>` gives `anycloud-api` and 17 hex digits). IAM takes 6 to 30
/// characters matching `[a-z]([-a-z0-9]*[a-z0-9])`.
pub fn account_id(owner: &str) -> String {
    let short: String =
        owner.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).take(21).collect();
    format!("anycloud-{short}")
}

/// The account's e-mail in `project`.
pub fn email(owner: &str, project: &str) -> String {
    format!("{}@{project}.iam.gserviceaccount.com", account_id(owner))
}

/// The member an IAM binding names the account by.
pub fn member(email: &str) -> String {
    format!("serviceAccount:{email}")
}

/// Whether `id` is a service account id IAM accepts.
pub fn valid_account_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    (6..=30).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.last().is_some_and(|b| *b != b'-')
}

/// A condition that lets a binding act only on resources of `types` whose names start with
/// [`RESOURCE_PREFIX`], and leaves every other request of the role (lists, zones, machine types,
/// operations, the network) as the role grants it. `(resource type, collection in its name)`.
fn named_only(title: &str, types: &[(&str, &str)]) -> Expr {
    let clauses: Vec<String> = types
        .iter()
        .map(|(kind, collection)| {
            format!(
                "(resource.type != \"compute.googleapis.com/{kind}\" || \
                 resource.name.extract(\"/{collection}/{{name}}\").startsWith(\"{RESOURCE_PREFIX}\"))"
            )
        })
        .collect();
    Expr::new()
        .set_title(title)
        .set_description(format!("only the {RESOURCE_PREFIX}... resources anycloud names"))
        .set_expression(clauses.join(" && "))
}

/// The project-level roles of a hosted API's account, each with its condition: instances and
/// their disks (`instanceAdmin.v1`), firewall rules (`securityAdmin`: Compute Engine has no
/// narrower predefined role that creates them), and reserved addresses (`publicIpAdmin`, which
/// conditions cannot narrow: addresses have no resource attributes). No IAM role, no owner or
/// editor.
pub fn project_bindings() -> Vec<Binding> {
    vec![
        Binding::new()
            .set_role("roles/compute.instanceAdmin.v1")
            .set_condition(named_only("anycloud-instances", &[("Instance", "instances"), ("Disk", "disks")])),
        Binding::new()
            .set_role("roles/compute.securityAdmin")
            .set_condition(named_only("anycloud-firewalls", &[("Firewall", "firewalls")])),
        Binding::new().set_role("roles/compute.publicIpAdmin"),
    ]
}

/// The IAM Admin and Resource Manager clients of a credential, at its endpoint override.
pub struct VmIdentities {
    project: String,
    iam: Iam,
    projects: Projects,
}

impl VmIdentities {
    /// Clients with these credentials, at `endpoint` when given (a private endpoint, the tests'
    /// fake Google front).
    pub async fn new(
        project: &str,
        credentials: google_cloud_auth::credentials::Credentials,
        endpoint: Option<&str>,
    ) -> Result<Self, CloudError> {
        let mut iam = Iam::builder().with_credentials(credentials.clone()).with_attempt_timeout(ATTEMPT_TIMEOUT);
        let mut projects = Projects::builder().with_credentials(credentials).with_attempt_timeout(ATTEMPT_TIMEOUT);
        if let Some(endpoint) = endpoint {
            iam = iam.with_endpoint(endpoint.trim_end_matches('/'));
            projects = projects.with_endpoint(endpoint.trim_end_matches('/'));
        }
        Ok(Self {
            project: project.to_owned(),
            iam: iam.build().await.map_err(|err| CloudError::terminal("building the IAM client", &err))?,
            projects: projects
                .build()
                .await
                .map_err(|err| CloudError::terminal("building the Resource Manager client", &err))?,
        })
    }

    /// Makes the account of `owner` unless it exists; answers its e-mail.
    pub async fn ensure_account(&self, owner: &str) -> Result<String, CloudError> {
        let id = account_id(owner);
        if !valid_account_id(&id) {
            return Err(CloudError::Terminal(format!("owner id {owner} gives no valid service account id ({id})")));
        }
        let email = email(owner, &self.project);
        let account =
            ServiceAccount::new().set_display_name(format!("anycloud hosted API {owner}")).set_description(format!(
                "The VM of anycloud's hosted API {owner} acts as this account: it reads its own secrets and \
                 checkpoint bucket and places its clusters' control planes (ac-... resources). Made and deleted by \
                 anycloud."
            ));
        let created = self
            .iam
            .create_service_account()
            .set_name(format!("projects/{}", self.project))
            .set_account_id(&id)
            .set_service_account(account)
            .send()
            .await;
        match created {
            Ok(account) if account.email == email => Ok(email),
            Ok(account) => Err(CloudError::Terminal(format!(
                "IAM made service account {} for {owner}, not {email}",
                account.email
            ))),
            Err(err) if err.http_status_code() == Some(409) => {
                // Made by an earlier attempt: read it back, so that one being deleted is not taken.
                let name = format!("projects/{}/serviceAccounts/{email}", self.project);
                let found = self
                    .iam
                    .get_service_account()
                    .set_name(&name)
                    .send()
                    .await
                    .map_err(|err| classify(&format!("reading service account {email}"), &err))?;
                Ok(found.email)
            }
            Err(err) => Err(classify(&format!("creating service account {email}"), &err)),
        }
    }

    /// Deletes the account of `owner`; already gone is success.
    pub async fn delete_account(&self, owner: &str) -> Result<(), CloudError> {
        let email = email(owner, &self.project);
        let name = format!("projects/{}/serviceAccounts/{email}", self.project);
        match self.iam.delete_service_account().set_name(&name).send().await {
            Ok(()) => Ok(()),
            Err(err) if err.http_status_code() == Some(404) => Ok(()),
            Err(err) => Err(classify(&format!("deleting service account {email}"), &err)),
        }
    }

    /// Makes the project's policy bind `email` to exactly [`project_bindings`].
    pub async fn grant_project_roles(&self, email: &str) -> Result<(), CloudError> {
        let wanted = project_bindings();
        self.change_project_policy(&format!("granting {email} its roles"), |bindings| {
            with_exactly(bindings, &member(email), &wanted)
        })
        .await
    }

    /// Removes `email` from every binding of the project's policy.
    pub async fn revoke_project_roles(&self, email: &str) -> Result<(), CloudError> {
        self.change_project_policy(&format!("revoking the roles of {email}"), |bindings| {
            with_exactly(bindings, &member(email), &[])
        })
        .await
    }

    /// The bindings of the project's policy that name `email`, as IAM answers them.
    pub async fn project_roles(&self, email: &str) -> Result<Vec<Binding>, CloudError> {
        let policy = self.project_policy().await?;
        let member = member(email);
        Ok(policy.bindings.into_iter().filter(|b| b.members.contains(&member)).collect())
    }

    async fn project_policy(&self) -> Result<Policy, CloudError> {
        let resource = format!("projects/{}", self.project);
        self.projects
            .get_iam_policy()
            .set_resource(&resource)
            .set_options(GetPolicyOptions::new().set_requested_policy_version(POLICY_VERSION))
            .send()
            .await
            .map_err(|err| classify(&format!("reading the IAM policy of {resource}"), &err))
    }

    /// Reads the project's policy, lets `change` edit its bindings (`None`: nothing to change),
    /// and writes it back under the etag read; a concurrent change starts the cycle again.
    async fn change_project_policy(
        &self,
        what: &str,
        change: impl Fn(&[Binding]) -> Option<Vec<Binding>>,
    ) -> Result<(), CloudError> {
        let resource = format!("projects/{}", self.project);
        for cycle in 0..POLICY_CYCLES {
            let policy = self.project_policy().await?;
            let Some(bindings) = change(&policy.bindings) else { return Ok(()) };
            let written = Policy::new().set_version(POLICY_VERSION).set_bindings(bindings).set_etag(policy.etag);
            match self.projects.set_iam_policy().set_resource(&resource).set_policy(written).send().await {
                Ok(_) => return Ok(()),
                Err(err) if concurrent_change(&err) => {
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(cycle + 1))).await;
                }
                Err(err) => return Err(classify(&format!("{what} on {resource}"), &err)),
            }
        }
        Err(CloudError::Retryable(format!(
            "{what} on {resource}: the policy changed under each of {POLICY_CYCLES} read-modify-write cycles"
        )))
    }
}

/// Whether a `setIamPolicy` was refused for its stale etag: 409 `ABORTED` ("There were
/// concurrent policy changes").
fn concurrent_change(err: &Error) -> bool {
    err.http_status_code() == Some(409)
        || err.status().is_some_and(|s| s.code == google_cloud_gax::error::rpc::Code::Aborted)
}

/// `bindings` with `member` in exactly the bindings of `wanted` (role and condition alike) and in
/// no other, bindings left empty dropped; `None` when that is what `bindings` already say. The
/// form IAM gives a deleted account's member (`deleted:serviceAccount:EMAIL?uid=N`) goes too.
fn with_exactly(bindings: &[Binding], member: &str, wanted: &[Binding]) -> Option<Vec<Binding>> {
    let deleted = format!("deleted:{member}?uid=");
    let same =
        |a: &Binding, b: &Binding| a.role == b.role && same_condition(a.condition.as_ref(), b.condition.as_ref());
    let mut out: Vec<Binding> = Vec::with_capacity(bindings.len() + wanted.len());
    for binding in bindings {
        let mut binding = binding.clone();
        binding.members.retain(|m| m != member && !m.starts_with(&deleted));
        if wanted.iter().any(|w| same(w, &binding)) {
            binding.members.push(member.to_owned());
        }
        if !binding.members.is_empty() {
            out.push(binding);
        }
    }
    for want in wanted {
        if !bindings.iter().any(|b| same(want, b)) {
            out.push(want.clone().set_members([member]));
        }
    }
    let sorted = |list: &[Binding]| {
        let mut list: Vec<Binding> = list
            .iter()
            .map(|b| {
                let mut b = b.clone();
                b.members.sort();
                b
            })
            .collect();
        list.sort_by(|a, b| a.role.cmp(&b.role).then_with(|| condition_key(a).cmp(&condition_key(b))));
        list
    };
    (sorted(&out) != sorted(bindings)).then_some(out)
}

fn same_condition(a: Option<&Expr>, b: Option<&Expr>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.expression == b.expression && a.title == b.title,
        _ => false,
    }
}

fn condition_key(binding: &Binding) -> (String, String) {
    binding.condition.as_ref().map(|c| (c.title.clone(), c.expression.clone())).unwrap_or_default()
}

/// Retryable or terminal: 5xx, 429, and a service account IAM does not know yet (accounts are
/// eventually consistent: one just made may be refused for a few seconds) are worth another
/// attempt; a refusal names the permissions the deploy needs.
pub(super) fn classify(context: &str, err: &Error) -> CloudError {
    if let Some(code) = err.http_status_code() {
        let message = err.status().map_or_else(|| super::gcp_errors::not_google(err), |s| s.message.clone());
        let text = format!("{context}: Google IAM answered HTTP {code}: {message}");
        return if code == 429 || code >= 500 || not_yet_known(code, &message) {
            CloudError::Retryable(text)
        } else if code == 403 || code == 401 {
            CloudError::Terminal(format!(
                "{text}; hosting an API on GCP makes a service account for its VM and grants it its roles, which \
                 needs the IAM API and the Cloud Resource Manager API enabled and {DEPLOYER_PERMISSIONS}"
            ))
        } else {
            CloudError::Terminal(text)
        };
    }
    if err.is_binding() || err.is_serialization() || err.is_authentication() {
        return CloudError::terminal(context, err);
    }
    CloudError::retryable(context, err)
}

/// Whether an answer refuses a member for naming a service account IAM does not know (yet).
pub(super) fn not_yet_known(code: u16, message: &str) -> bool {
    code == 400 && message.contains("ervice account") && message.contains("does not exist")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_id_is_valid_and_its_owners() {
        let owner = "api-3f2a9c1e-77b0-4d2e-9a8b-0c1d2e3f4a5b";
        let id = account_id(owner);
        assert_eq!(id, "anycloud-api3f2a9c1e77b04d2e9a");
        assert!(valid_account_id(&id), "{id}");
        assert_eq!(email(owner, "p1"), "anycloud-api3f2a9c1e77b04d2e9a@p1.iam.gserviceaccount.com");
        assert!(valid_account_id(&account_id("api-x")));
        assert!(!valid_account_id("short"));
        assert!(!valid_account_id("1abcdef"));
        assert!(!valid_account_id("abcdef-"));
        assert!(!valid_account_id(&"a".repeat(31)));
    }

    #[test]
    fn the_roles_are_compute_only_and_named_resources_only() {
        let bindings = project_bindings();
        let roles: Vec<&str> = bindings.iter().map(|b| b.role.as_str()).collect();
        assert_eq!(
            roles,
            ["roles/compute.instanceAdmin.v1", "roles/compute.securityAdmin", "roles/compute.publicIpAdmin"]
        );
        for binding in &bindings {
            assert!(
                !binding.role.contains("iam") && !binding.role.contains("owner") && !binding.role.contains("editor")
            );
        }
        let instances = bindings[0].condition.as_ref().map(|c| c.expression.clone()).unwrap_or_default();
        assert_eq!(
            instances,
            "(resource.type != \"compute.googleapis.com/Instance\" || \
             resource.name.extract(\"/instances/{name}\").startsWith(\"ac-\")) && \
             (resource.type != \"compute.googleapis.com/Disk\" || \
             resource.name.extract(\"/disks/{name}\").startsWith(\"ac-\"))"
        );
    }

    #[test]
    fn the_member_ends_in_exactly_its_bindings_and_others_are_kept() {
        let me = "serviceAccount:a@p.iam.gserviceaccount.com";
        let wanted = project_bindings();
        let others = vec![
            Binding::new().set_role("roles/owner").set_members(["user:boss@example.com"]),
            Binding::new().set_role("roles/viewer").set_members([me, "group:ops@example.com"]),
            Binding::new().set_role("roles/compute.publicIpAdmin").set_members(["user:net@example.com"]),
        ];
        let granted = with_exactly(&others, me, &wanted).unwrap_or_else(|| panic!("a change"));
        let mine: Vec<(&str, Option<&str>)> = granted
            .iter()
            .filter(|b| b.members.iter().any(|m| m == me))
            .map(|b| (b.role.as_str(), b.condition.as_ref().map(|c| c.title.as_str())))
            .collect();
        assert_eq!(
            mine,
            [
                ("roles/compute.publicIpAdmin", None),
                ("roles/compute.instanceAdmin.v1", Some("anycloud-instances")),
                ("roles/compute.securityAdmin", Some("anycloud-firewalls")),
            ]
        );
        assert!(granted.iter().any(|b| b.role == "roles/owner" && b.members == ["user:boss@example.com"]));
        assert!(granted.iter().any(|b| b.role == "roles/viewer" && b.members == ["group:ops@example.com"]));
        assert!(with_exactly(&granted, me, &wanted).is_none(), "a second grant writes nothing");
        let revoked = with_exactly(&granted, me, &[]).unwrap_or_else(|| panic!("a change"));
        assert!(revoked.iter().all(|b| !b.members.iter().any(|m| m == me)), "{revoked:?}");
        assert_eq!(revoked.len(), 3, "the others' bindings stay, ours go: {revoked:?}");
        let gone = vec![Binding::new().set_role("roles/viewer").set_members([format!("deleted:{me}?uid=1")])];
        assert_eq!(with_exactly(&gone, me, &[]), Some(vec![]), "a deleted account's member goes too");
    }
}
