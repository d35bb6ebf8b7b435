//! Saving a credential: its secret sealed, and its `credentials.verify` run, in one transaction.

use crate::cloud::ProviderKind;
use crate::db::credentials::{self, MACHINE_IDENTITY, NewRecord, PublicPart};
use crate::db::is_unique_violation;
use crate::names::check_dns_label;
use crate::providers::endpoint::{self, EndpointPolicy};
use crate::providers::sim_settings::SimSettings;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{CredentialSaved, NewCredential};
use crate::workflows::credentials_verify::{VerifyCredential, VerifyInput};

use super::Operations;

impl Operations {
    /// Saves a credential as `verifying` and starts its verification. A name already taken (also
    /// by a request racing this one) is refused with `CREDENTIAL_EXISTS`.
    pub async fn save_credential(&self, request: NewCredential) -> Result<CredentialSaved, OperationError> {
        if request.provider == ProviderKind::Sim.as_str() && !self.deps.clouds.simulated() {
            return Err(Refusal::new(
                Code::InvalidCredential,
                format!(
                    "credential `{}`: this API runs on a VM of a real cloud, where the simulated cloud is off (it \
                     would run Pods as processes of the API's own machine); use an aws or gcp credential, or a local \
                     API for the simulated cloud",
                    request.name
                ),
            )
            .into());
        }
        let record = check(request, self.deps.clouds.endpoint_policy())
            .map_err(|why| Refusal::new(Code::InvalidCredential, why))?;
        let name = record.name.clone();
        let exists = || {
            Refusal::new(
                Code::CredentialExists,
                format!(
                    "credential `{name}` already exists; delete it first with `anycloud credentials delete {name}`, \
                     or pick another name"
                ),
            )
        };
        let mut tx = self.deps.db.begin().await?;
        let key = VerifyCredential::resource_key(&name);
        let input = VerifyInput { name: name.clone() };
        let run = self.engine.submit_in::<VerifyCredential>(&mut tx, &input, Some(&key)).await?;
        let now = crate::now_ms();
        match credentials::insert_in(&mut tx, &record, &self.deps.sealer, &run.to_string(), now).await {
            Err(err) if is_unique_violation(&err) => return Err(exists().into()),
            result => result?,
        }
        tx.commit().await?;
        self.engine.wake_up();
        let credential = credentials::get(&self.deps.db, &name).await?.ok_or_else(|| {
            Refusal::new(Code::CredentialNotFound, format!("credential `{name}` was deleted as it was saved"))
        })?;
        Ok(CredentialSaved { credential: credential.into(), workflow_id: run })
    }
}

/// Checks the request and splits it into what is shown and what is sealed; the error says what
/// is wrong and how to fix it.
fn check(request: NewCredential, endpoints: EndpointPolicy) -> Result<NewRecord, String> {
    let NewCredential {
        name,
        provider,
        access_key_id,
        secret_access_key,
        service_account_json,
        region,
        endpoint,
        sim,
        machine_identity,
        project,
    } = request;
    check_dns_label("credential", &name)?;
    let provider: ProviderKind = provider.parse()?;
    refuse_foreign_fields(
        &name,
        provider,
        &[
            ("access_key_id", access_key_id.is_some(), &[ProviderKind::Aws]),
            ("secret_access_key", secret_access_key.is_some(), &[ProviderKind::Aws]),
            ("region", region.is_some(), &[ProviderKind::Aws]),
            ("service_account_json", service_account_json.is_some(), &[ProviderKind::Gcp]),
            ("endpoint", endpoint.is_some(), &[ProviderKind::Aws, ProviderKind::Gcp]),
            ("sim", sim.is_some(), &[ProviderKind::Sim]),
            ("machine_identity", machine_identity, &[ProviderKind::Aws, ProviderKind::Gcp]),
            ("project", project.is_some(), &[ProviderKind::Gcp]),
        ],
    )?;
    if let Some(endpoint) = &endpoint {
        endpoint::check(&format!("credential `{name}`"), endpoint, endpoints)?;
    }
    if machine_identity {
        let keys = [
            ("access_key_id", access_key_id.is_some()),
            ("secret_access_key", secret_access_key.is_some()),
            ("service_account_json", service_account_json.is_some()),
        ];
        if let Some((field, _)) = keys.iter().find(|(_, given)| *given) {
            return Err(format!(
                "credential `{name}`: `{field}` and `machine_identity` are alternatives: a machine-identity \
                 credential holds no key (it acts as the machine the API runs on); remove one"
            ));
        }
    } else if project.is_some() {
        return Err(format!(
            "credential `{name}`: `project` is for a machine-identity credential; a key file names its own project"
        ));
    }
    let (public, secret) = match provider {
        ProviderKind::Sim => sim_parts(&name, sim)?,
        ProviderKind::Aws if machine_identity => {
            (PublicPart { region: aws_region(region), ..machine_part(endpoint) }, String::new())
        }
        ProviderKind::Aws => aws_parts(&name, access_key_id, secret_access_key, region, endpoint)?,
        ProviderKind::Gcp if machine_identity => (gcp_machine_part(&name, project, endpoint)?, String::new()),
        ProviderKind::Gcp => gcp_parts(&name, service_account_json, endpoint)?,
    };
    Ok(NewRecord { name, provider, public, secret })
}

/// A credential's public part and its secret.
type Parts = (PublicPart, String);

/// A simulated account: its settings checked, and a token sealed as a real secret would be.
fn sim_parts(name: &str, sim: Option<SimSettings>) -> Result<Parts, String> {
    let settings = sim.unwrap_or_default();
    settings.validate().map_err(|why| format!("credential `{name}`: {why}"))?;
    let public = PublicPart { identity: format!("sim-account-{name}"), sim: Some(settings), ..PublicPart::default() };
    // The simulated cloud takes any token; one is sealed like a real secret would be.
    Ok((public, format!("sim-token-{}", uuid::Uuid::new_v4().simple())))
}

/// An AWS access key: both halves required.
fn aws_parts(
    name: &str,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    region: Option<String>,
    endpoint: Option<String>,
) -> Result<Parts, String> {
    let present = |value: &Option<String>| value.as_deref().is_some_and(|v| !v.trim().is_empty());
    if !present(&access_key_id) {
        return Err(format!(
            "credential `{name}`: the AWS access key id is missing; pass --access-key-id or set AWS_ACCESS_KEY_ID"
        ));
    }
    if !present(&secret_access_key) {
        return Err(format!(
            "credential `{name}`: the AWS secret access key is missing; pass --secret-access-key or set \
             AWS_SECRET_ACCESS_KEY"
        ));
    }
    let public = PublicPart {
        identity: access_key_id.unwrap_or_default().trim().to_owned(),
        region: aws_region(region),
        endpoint,
        ..PublicPart::default()
    };
    Ok((public, secret_access_key.unwrap_or_default()))
}

/// The region an AWS credential acts in, `us-east-1` unless given.
fn aws_region(region: Option<String>) -> Option<String> {
    Some(region.unwrap_or_else(|| "us-east-1".to_owned()))
}

/// A machine-identity credential: no key, the machine the API runs on acts.
fn machine_part(endpoint: Option<String>) -> PublicPart {
    PublicPart { identity: MACHINE_IDENTITY.to_owned(), endpoint, machine: true, ..PublicPart::default() }
}

/// A GCP machine identity, which names the project it acts in.
fn gcp_machine_part(name: &str, project: Option<String>, endpoint: Option<String>) -> Result<PublicPart, String> {
    let project = project
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| format!("credential `{name}`: a GCP machine-identity credential needs --project PROJECT_ID"))?;
    check_dns_label("GCP project", &project).map_err(|why| format!("credential `{name}`: {why}"))?;
    Ok(PublicPart { project: Some(project), ..machine_part(endpoint) })
}

/// A GCP service-account key, whose email and project are its public part.
fn gcp_parts(name: &str, service_account_json: Option<String>, endpoint: Option<String>) -> Result<Parts, String> {
    let json = service_account_json.unwrap_or_default();
    let key =
        crate::providers::gcp::ServiceAccountKey::parse(&json).map_err(|why| format!("credential `{name}`: {why}"))?;
    let public =
        PublicPart { identity: key.client_email, project: Some(key.project_id), endpoint, ..PublicPart::default() };
    Ok((public, json))
}

/// Refuses the fields of another provider: ignoring them would let the caller believe they took
/// effect (an AWS key sent with `provider: gcp` is not a GCP credential). `fields` are each
/// field's name, whether it was given and the providers it applies to.
fn refuse_foreign_fields(
    name: &str,
    provider: ProviderKind,
    fields: &[(&str, bool, &[ProviderKind])],
) -> Result<(), String> {
    let foreign: Vec<&str> = fields
        .iter()
        .filter(|(_, given, owners)| *given && !owners.contains(&provider))
        .map(|(field, _, _)| *field)
        .collect();
    match foreign.as_slice() {
        [] => Ok(()),
        [one] => {
            Err(format!("credential `{name}`: `{one}` does not apply to provider {}; remove it", provider.as_str()))
        }
        many => Err(format!(
            "credential `{name}`: `{}` do not apply to provider {}; remove them",
            many.join("`, `"),
            provider.as_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{EndpointPolicy, check};
    use crate::wire::NewCredential;

    fn request(provider: &str) -> NewCredential {
        NewCredential { name: "team".to_owned(), provider: provider.to_owned(), ..NewCredential::default() }
    }

    fn aws() -> NewCredential {
        NewCredential {
            access_key_id: Some("AKIAEXAMPLE".to_owned()),
            secret_access_key: Some("secret".to_owned()),
            ..request("aws")
        }
    }

    fn check_https(request: NewCredential) -> Result<crate::db::credentials::NewRecord, String> {
        check(request, EndpointPolicy::HttpsOnly)
    }

    #[test]
    fn fields_of_another_provider_are_refused_not_ignored() {
        let refused = |request: NewCredential| check_https(request).map(|_| ()).unwrap_err();
        assert_eq!(
            refused(NewCredential { service_account_json: Some("{}".to_owned()), ..aws() }),
            "credential `team`: `service_account_json` does not apply to provider aws; remove it"
        );
        assert_eq!(
            refused(NewCredential { sim: Some(Default::default()), ..aws() }),
            "credential `team`: `sim` does not apply to provider aws; remove it"
        );
        let gcp = NewCredential {
            access_key_id: Some("AKIAEXAMPLE".to_owned()),
            region: Some("us-east-1".to_owned()),
            service_account_json: Some("{}".to_owned()),
            ..request("gcp")
        };
        assert_eq!(
            refused(gcp),
            "credential `team`: `access_key_id`, `region` do not apply to provider gcp; remove them"
        );
        let sim = NewCredential { endpoint: Some("https://example.com".to_owned()), ..request("sim") };
        assert_eq!(refused(sim), "credential `team`: `endpoint` does not apply to provider sim; remove it");
        // What belongs is accepted.
        assert!(check_https(NewCredential { region: Some("eu-west-1".to_owned()), ..aws() }).is_ok());
        assert!(check_https(request("sim")).is_ok());
    }

    #[test]
    fn an_endpoint_needs_https_to_a_public_host_unless_the_operator_allows_more() {
        let with = |endpoint: &str| NewCredential { endpoint: Some(endpoint.to_owned()), ..aws() };
        let refused = check_https(with("http://127.0.0.1:5000")).map(|_| ()).unwrap_err();
        assert!(refused.starts_with("credential `team`: endpoint `http://127.0.0.1:5000` is plain HTTP"), "{refused}");
        let refused = check_https(with("https://169.254.169.254")).map(|_| ()).unwrap_err();
        assert!(refused.contains("inner network"), "{refused}");
        assert!(check_https(with("https://ec2.eu-west-1.amazonaws.com")).is_ok());
        assert!(check(with("http://127.0.0.1:5000"), EndpointPolicy::AllowInsecure).is_ok());
        assert!(check(with("not a url"), EndpointPolicy::AllowInsecure).is_err());
    }
}
