//! Reading credentials, never their secrets.

use crate::db::credentials;
use crate::names::shown;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{CredentialList, CredentialShown, NamesQuery};

use super::Operations;

impl Operations {
    /// A page of the credentials, by name ([`super::PAGE_LIMIT`], or as many as asked).
    pub async fn list_credentials(&self, query: &NamesQuery) -> Result<CredentialList, OperationError> {
        let limit = super::pages::page_limit(query.limit)?;
        let credentials = credentials::list(&self.deps.db, query.after.as_deref(), limit).await?;
        Ok(CredentialList { credentials: credentials.into_iter().map(Into::into).collect() })
    }

    /// One credential.
    pub async fn credential(&self, name: &str) -> Result<CredentialShown, OperationError> {
        let credential = credentials::get(&self.deps.db, name).await?.ok_or_else(|| credential_not_found(name))?;
        Ok(CredentialShown { credential: credential.into() })
    }
}

/// No credential has this name.
pub(super) fn credential_not_found(name: &str) -> Refusal {
    Refusal::new(
        Code::CredentialNotFound,
        format!("credential `{}` does not exist; `anycloud credentials list` shows the saved ones", shown(name)),
    )
}
