//! Saving a secret: `secret new` stores version 1, `secret set` the next version. Its values are
//! checked as Kubernetes checks a Secret's data (the cluster would refuse them later, after the
//! deployment was accepted) and sealed before they are stored.

use std::collections::BTreeMap;

use crate::db::credentials::Hold;
use crate::db::is_unique_violation;
use crate::db::secrets::{self, PASSWORD, USERNAME};
use crate::names::{check_dns_label, shown};
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{NewSecret, SecretSaved};

use super::Operations;

/// Most bytes a secret's keys and values may hold in all: a Kubernetes Secret's limit (1 MiB).
pub const MAX_SECRET_BYTES: usize = 1024 * 1024;
/// Longest key: a Kubernetes Secret's data key is at most a DNS subdomain's 253 characters.
const MAX_KEY: usize = 253;

/// What a checked request stores.
struct Checked {
    registry: Option<String>,
    values: BTreeMap<String, String>,
}

impl Operations {
    /// Stores version 1 of a new secret. A name already taken (also by a request racing this
    /// one) is refused with `SECRET_EXISTS`.
    pub async fn save_secret(&self, request: NewSecret) -> Result<SecretSaved, OperationError> {
        let name = request.name.clone();
        let checked = check(request)?;
        let exists = || -> OperationError {
            Refusal::new(
                Code::SecretExists,
                format!(
                    "secret `{name}` already exists; give it a new version with `anycloud secret set {name} ...`, \
                     or pick another name"
                ),
            )
            .into()
        };
        let mut tx = self.deps.db.begin().await?;
        if secrets::hold_in(&mut tx, &name, Hold::Exclusive).await?.is_some() {
            return Err(exists());
        }
        let (registry, values) = (checked.registry.as_deref(), &checked.values);
        match secrets::put_version_in(&mut tx, &self.deps.sealer, &name, registry, 1, values, crate::now_ms()).await {
            Err(err) if is_unique_violation(&err) => return Err(exists()),
            result => result?,
        }
        match tx.commit().await {
            Err(err) if is_unique_violation(&err) => return Err(exists()),
            result => result?,
        }
        self.saved(&name).await
    }

    /// Stores the next version of the secret `name`, whole: keys it does not give are gone from
    /// the new version. Deployments keep the version they were given until they are resubmitted
    /// or upgraded. A registry secret stays one (and an env secret an env secret).
    pub async fn set_secret(&self, name: &str, request: NewSecret) -> Result<SecretSaved, OperationError> {
        if request.name != name {
            return Err(Refusal::new(
                Code::InvalidSecret,
                format!("the request names secret `{}` but was sent for `{}`", shown(&request.name), shown(name)),
            )
            .into());
        }
        let checked = check(request)?;
        let mut tx = self.deps.db.begin().await?;
        let secret = secrets::hold_in(&mut tx, name, Hold::Exclusive).await?.ok_or_else(|| secret_not_found(name))?;
        if secret.registry.is_some() != checked.registry.is_some() {
            let (was, now) = match &secret.registry {
                Some(host) => (format!("a registry secret (for {host})"), "values (--from-literal, --from-env-file)"),
                None => ("an env secret".to_owned(), "a registry login (--registry)"),
            };
            return Err(Refusal::new(
                Code::WrongSecretKind,
                format!(
                    "secret `{name}` is {was}, and its new version gives {now}; a secret keeps its kind: delete it \
                     and create it anew, or use another name"
                ),
            )
            .into());
        }
        let version = secret.version + 1;
        let registry = checked.registry.as_deref();
        let now = crate::now_ms();
        secrets::put_version_in(&mut tx, &self.deps.sealer, name, registry, version, &checked.values, now).await?;
        tx.commit().await?;
        self.saved(name).await
    }

    async fn saved(&self, name: &str) -> Result<SecretSaved, OperationError> {
        let secret = secrets::get(&self.deps.db, name).await?.ok_or_else(|| secret_not_found(name))?;
        Ok(SecretSaved { secret: secret.into() })
    }
}

/// No secret has this name.
pub(super) fn secret_not_found(name: &str) -> Refusal {
    Refusal::new(
        Code::SecretNotFound,
        format!(
            "secret `{}` does not exist; `anycloud secret list` shows the secrets, and `anycloud secret new NAME \
             --from-literal KEY=VALUE` creates one",
            shown(name)
        ),
    )
}

/// Checks a request as Kubernetes would check the Secret made of it; the refusal says what is
/// wrong. It never quotes a value.
fn check(request: NewSecret) -> Result<Checked, Refusal> {
    let invalid = |why: String| Refusal::new(Code::InvalidSecret, why);
    let NewSecret { name, values, registry } = request;
    check_dns_label("secret", &name).map_err(invalid)?;
    let checked = match registry {
        Some(_) if !values.is_empty() => {
            return Err(invalid(format!(
                "secret `{name}`: give either values (an env secret) or a registry login (a registry secret), not both"
            )));
        }
        Some(login) => {
            check_registry_host(&login.host).map_err(|why| invalid(format!("secret `{name}`: {why}")))?;
            if login.username.trim().is_empty() || login.password.is_empty() {
                return Err(invalid(format!(
                    "secret `{name}`: a registry login needs a user name (--username) and a password or token \
                     (--password-stdin)"
                )));
            }
            if login.username.contains(':') {
                return Err(invalid(format!(
                    "secret `{name}`: the user name holds a `:`, which a registry login (user:password) cannot carry"
                )));
            }
            let values = BTreeMap::from([(USERNAME.to_owned(), login.username), (PASSWORD.to_owned(), login.password)]);
            Checked { registry: Some(login.host.to_ascii_lowercase()), values }
        }
        None if values.is_empty() => {
            return Err(invalid(format!(
                "secret `{name}` has no values: give --from-literal KEY=VALUE, --from-env-file FILE, or KEY=VALUE \
                 lines on standard input"
            )));
        }
        None => {
            for key in values.keys() {
                check_key(key).map_err(|why| invalid(format!("secret `{name}`: {why}")))?;
            }
            Checked { registry: None, values }
        }
    };
    let size: usize = checked.values.iter().map(|(key, value)| key.len() + value.len()).sum();
    if size > MAX_SECRET_BYTES {
        return Err(invalid(format!(
            "secret `{name}` holds {size} bytes; a Kubernetes Secret holds at most {MAX_SECRET_BYTES} (1 MiB): keep \
             large files out of secrets (mount them from elsewhere) or split it"
        )));
    }
    Ok(checked)
}

/// A key as Kubernetes accepts it in a Secret's data (`[-._a-zA-Z0-9]+`, at most 253
/// characters), which the container also takes as an environment variable's name: so it must
/// not start with a digit either, and `.` and `-` are refused (a shell cannot read them).
fn check_key(key: &str) -> Result<(), String> {
    let valid = !key.is_empty()
        && key.len() <= MAX_KEY
        && key.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(format!(
            "key `{}` is not valid: the container takes each key as an environment variable, so use letters, \
             digits and `_`, not starting with a digit, at most {MAX_KEY} characters (as in `DB_PASSWORD`)",
            shown(key)
        ));
    }
    Ok(())
}

/// A registry host as an image reference names it: a host name or address, with a port.
fn check_registry_host(host: &str) -> Result<(), String> {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    let port_ok = port.is_none_or(|port| port.parse::<u16>().is_ok_and(|port| port > 0));
    if !name_ok || !port_ok {
        return Err(format!(
            "registry `{}` is not a registry host: give it as image references name it, such as `ghcr.io` or \
             `registry.example.com:5000` (no scheme, no path)",
            shown(host)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RegistryLogin;

    fn env(name: &str, pairs: &[(&str, &str)]) -> NewSecret {
        let values = pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect();
        NewSecret { name: name.into(), values, registry: None }
    }

    #[test]
    fn names_keys_and_sizes_kubernetes_refuses_are_refused_without_quoting_a_value() {
        assert!(check(env("db", &[("PASSWORD", "hunter2")])).is_ok());
        for (request, says) in [
            (env("Db", &[("A", "1")]), "not a DNS label"),
            (env("db", &[]), "has no values"),
            (env("db", &[("db.password", "hunter2")]), "key `db.password` is not valid"),
            (env("db", &[("1A", "hunter2")]), "key `1A` is not valid"),
            (env("db", &[("", "hunter2")]), "key `` is not valid"),
        ] {
            let refusal = check(request).err().unwrap();
            assert_eq!(refusal.code, Code::InvalidSecret);
            assert!(refusal.message.contains(says), "{}", refusal.message);
            assert!(!refusal.message.contains("hunter2"), "{}", refusal.message);
        }
        let big = "x".repeat(MAX_SECRET_BYTES);
        let refusal = check(env("db", &[("A", &big)])).err().unwrap();
        assert!(refusal.message.contains("at most 1048576"), "{}", refusal.message);
        assert!(check(env("db", &[("A", &big[1..])])).is_ok());
    }

    #[test]
    fn a_registry_login_needs_a_host_a_user_and_a_password_and_no_values() {
        let login = |host: &str, username: &str, password: &str| NewSecret {
            name: "ghcr".into(),
            values: BTreeMap::new(),
            registry: Some(RegistryLogin { host: host.into(), username: username.into(), password: password.into() }),
        };
        let checked = check(login("GHCR.io", "acme", "token")).unwrap();
        assert_eq!(checked.registry.as_deref(), Some("ghcr.io"));
        assert_eq!(checked.values.keys().collect::<Vec<_>>(), ["password", "username"]);
        assert!(check(login("registry.example.com:5000", "u", "p")).is_ok());
        for bad in ["https://ghcr.io", "ghcr.io/acme", "", "host:0", "host:x", "-a.io"] {
            let refusal = check(login(bad, "u", "p")).err().unwrap();
            assert!(refusal.message.contains("is not a registry host"), "{bad}: {}", refusal.message);
        }
        assert!(check(login("ghcr.io", "", "p")).err().unwrap().message.contains("needs a user name"));
        assert!(check(login("ghcr.io", "u", "")).err().unwrap().message.contains("needs a user name"));
        let mut both = login("ghcr.io", "u", "p");
        both.values.insert("A".into(), "1".into());
        assert!(check(both).err().unwrap().message.contains("not both"));
    }
}
