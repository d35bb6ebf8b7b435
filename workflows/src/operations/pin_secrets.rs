//! Which secrets a deployment takes, and at which version: what `--secret` and `--pull-secret`
//! name, and every registry secret for the image's registry host, each at its current version,
//! read inside the transaction that stores the deployment and held there, so that a `secret
//! delete` either commits first (and the deployment is refused) or sees the deployment.

use crate::db::credentials::Hold;
use crate::db::secrets::{self, SecretUse};
use crate::names::shown;
use crate::refusal::{Code, OperationError, Refusal};
use crate::workload::registry_host;

use super::save_secret::secret_not_found;

/// The secrets `deployment` takes: the env secrets `env` names, the registry secrets `pull`
/// names, and those for `image`'s registry host; each once, at its current version.
pub(super) async fn pin_in(
    tx: &mut anycloud_engine::WriteTx,
    deployment: &str,
    image: &str,
    env: &[String],
    pull: &[String],
) -> Result<Vec<SecretUse>, OperationError> {
    let mut pinned: Vec<SecretUse> = Vec::new();
    let refused = |code, why: String| -> OperationError {
        Refusal::new(code, format!("deployment `{deployment}`: {why}")).into()
    };
    for (names, registry_wanted) in [(env, false), (pull, true)] {
        for name in names {
            let secret = secrets::hold_in(tx, name, Hold::Shared).await?.ok_or_else(|| {
                let not_found = secret_not_found(name);
                refused(not_found.code, not_found.message)
            })?;
            match (&secret.registry, registry_wanted) {
                (Some(host), false) => {
                    return Err(refused(
                        Code::WrongSecretKind,
                        format!(
                            "secret `{name}` is a registry secret (a login to {host}), not values for the \
                             container's environment; give it with --pull-secret {name}"
                        ),
                    ));
                }
                (None, true) => {
                    return Err(refused(
                        Code::WrongSecretKind,
                        format!(
                            "secret `{name}` is an env secret (values for the container's environment), not a \
                             registry login; give it with --secret {name}"
                        ),
                    ));
                }
                _ => {}
            }
            if !pinned.iter().any(|one| one.name == secret.name) {
                pinned.push(SecretUse { name: secret.name, version: secret.version, registry: secret.registry });
            }
        }
    }
    for secret in secrets::for_registry_in(tx, &registry_host(image)).await? {
        if !pinned.iter().any(|one| one.name == secret.name) {
            pinned.push(SecretUse { name: secret.name, version: secret.version, registry: secret.registry });
        }
    }
    Ok(pinned)
}

/// What a message says of the secrets a deployment takes: `db (version 2), ghcr (version 1)`.
pub fn described(uses: &[SecretUse]) -> String {
    uses.iter().map(|one| format!("{} (version {})", shown(&one.name), one.version)).collect::<Vec<_>>().join(", ")
}
