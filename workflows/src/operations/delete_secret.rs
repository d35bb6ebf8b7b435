//! Deleting a secret that no deployment still takes: one that has not ended may need its values
//! again (a job's next Pod, a service's rollback or restart, a queued upgrade).

use crate::db::credentials::Hold;
use crate::db::secrets;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::SecretDeleted;

use super::Operations;
use super::save_secret::secret_not_found;

impl Operations {
    /// Deletes the secret and every version of it, holding its row so that a deployment that
    /// would take it either commits first (and is seen here) or finds it gone.
    pub async fn delete_secret(&self, name: &str) -> Result<SecretDeleted, OperationError> {
        let mut tx = self.deps.db.begin().await?;
        secrets::hold_in(&mut tx, name, Hold::Exclusive).await?.ok_or_else(|| secret_not_found(name))?;
        let users = secrets::users_in(&mut tx, name).await?;
        if let Some(first) = users.first() {
            return Err(Refusal::new(
                Code::SecretInUse,
                format!(
                    "secret `{name}` is taken by {} deployment(s) that have not ended: {}; terminate them first \
                     (`anycloud terminate {first}`), then delete it",
                    users.len(),
                    users.join(", ")
                ),
            )
            .into());
        }
        secrets::delete_in(&mut tx, name).await?;
        tx.commit().await?;
        Ok(SecretDeleted { deleted: name.to_owned() })
    }
}
