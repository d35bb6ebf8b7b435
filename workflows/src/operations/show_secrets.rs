//! Reading secrets: names, kinds, key names, versions and the deployments that take them, never
//! a value.

use crate::db::secrets;
use crate::refusal::OperationError;
use crate::wire::{NamesQuery, SecretList, SecretSummary};

use super::Operations;
use super::save_secret::secret_not_found;

impl Operations {
    /// A page of the secrets, by name ([`super::PAGE_LIMIT`], or as many as asked), each with
    /// the deployments that have not ended and take it.
    pub async fn list_secrets(&self, query: &NamesQuery) -> Result<SecretList, OperationError> {
        let limit = super::pages::page_limit(query.limit)?;
        let page = secrets::list(&self.deps.db, query.after.as_deref(), limit).await?;
        let users = if page.is_empty() { Vec::new() } else { secrets::users(&self.deps.db).await? };
        let secrets = page
            .into_iter()
            .map(|secret| SecretSummary {
                used_by: secrets::users_of(users.clone(), &secret.name),
                secret: secret.into(),
            })
            .collect();
        Ok(SecretList { secrets })
    }

    /// One secret, with the deployments that take it.
    pub async fn secret(&self, name: &str) -> Result<SecretSummary, OperationError> {
        let secret = secrets::get(&self.deps.db, name).await?.ok_or_else(|| secret_not_found(name))?;
        let used_by = secrets::users_of(secrets::users(&self.deps.db).await?, name);
        Ok(SecretSummary { secret: secret.into(), used_by })
    }
}
