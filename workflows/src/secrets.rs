//! Secret material at rest: sealed with XChaCha20-Poly1305 under a key that lives outside the
//! database (a 0600 file in the API's data directory, or `ANYCLOUD_SECRET_KEY`), so that a copy
//! of the database alone reveals nothing.
//!
//! Every sealed value is bound to its [`Place`] (table, column and row) as associated data: a
//! value copied into another row or column (one credential's secret into another credential,
//! a cluster's secrets into another cluster) does not open there. The stored form is
//! `v2:` followed by the base64 of the nonce, the ciphertext and the tag. Values sealed before
//! places were bound have no prefix; [`SecretBox::open`] refuses them, and the API re-seals
//! them in place when it starts (`db::sealing_key::check`, through [`SecretBox::rebind`]).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use rand::RngCore;

/// The environment variable that may carry the key (base64 of 32 bytes) instead of the file.
pub const KEY_ENV: &str = "ANYCLOUD_SECRET_KEY";

const NONCE_LEN: usize = 24;

/// The prefix of a value sealed with its place bound.
const BOUND: &str = "v2:";

/// Where a sealed value is stored: its table, column and row (the row's key). Bound into the
/// seal as associated data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place<'a> {
    /// The table.
    pub table: &'static str,
    /// The column.
    pub column: &'static str,
    /// The row's key (a credential's name, a cluster's id).
    pub row: &'a str,
}

impl Place<'_> {
    /// The associated data: a version tag, then table, column and row, NUL-separated (no table
    /// or column name holds a NUL, and the row comes last, so no two places give the same bytes).
    fn associated_data(&self) -> Vec<u8> {
        [b"anycloud sealed v2".as_slice(), self.table.as_bytes(), self.column.as_bytes(), self.row.as_bytes()]
            .join(&0u8)
    }
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{} of row `{}`", self.table, self.column, self.row)
    }
}

/// Seals and opens secret material.
#[derive(Clone)]
pub struct SecretBox {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(..)")
    }
}

/// Why secret material could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The key file could not be read or written.
    #[error("secret key file {path}")]
    KeyFile {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The key is not 32 bytes of base64.
    #[error("the secret key in {0} is not 32 bytes of base64")]
    BadKey(String),
    /// Sealed data did not open: sealed for another place, with another key, or altered.
    #[error(
        "the sealed value in {place} does not open: it was sealed for another row or column (copied here), \
         altered, or sealed with another key; save it again"
    )]
    Open {
        /// Where it was read.
        place: String,
    },
    /// A value sealed without its place, found after the API re-sealed every such value at
    /// start: it was written since, from an older copy.
    #[error(
        "the sealed value in {place} is in the format without its place bound, which the API re-seals when it \
         starts; this one was written since (copied from an older database?) and is refused: save it again"
    )]
    Unbound {
        /// Where it was read.
        place: String,
    },
}

/// The sealing key's file in an API's data directory.
pub const SEALING_KEY_FILE: &str = "secret.key";

impl SecretBox {
    /// Uses `ANYCLOUD_SECRET_KEY` when set, else the key file [`SEALING_KEY_FILE`] in `dir`, creating
    /// it (mode 0600) on first use.
    pub fn load_or_create(dir: &Path) -> Result<Self, SecretError> {
        if let Ok(encoded) = std::env::var(KEY_ENV) {
            return Self::from_base64(&encoded, KEY_ENV);
        }
        let path = dir.join(SEALING_KEY_FILE);
        let shown = path.display().to_string();
        let io = |source| SecretError::KeyFile { path: shown.clone(), source };
        match std::fs::read_to_string(&path) {
            Ok(encoded) => Self::from_base64(encoded.trim(), &shown),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                rand::rng().fill_bytes(&mut key);
                let mut file =
                    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).map_err(io)?;
                file.write_all(STANDARD.encode(key).as_bytes()).map_err(io)?;
                file.sync_all().map_err(io)?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
                Self::from_key(&key, &shown)
            }
            Err(err) => Err(io(err)),
        }
    }

    fn from_base64(encoded: &str, origin: &str) -> Result<Self, SecretError> {
        let key = STANDARD.decode(encoded.trim()).map_err(|_| SecretError::BadKey(origin.to_owned()))?;
        Self::from_key(&key, origin)
    }

    fn from_key(key: &[u8], origin: &str) -> Result<Self, SecretError> {
        let cipher = XChaCha20Poly1305::new_from_slice(key).map_err(|_| SecretError::BadKey(origin.to_owned()))?;
        Ok(Self { cipher })
    }

    /// Seals `plaintext` for `place`: `v2:` and the base64 of a fresh random nonce followed by
    /// the ciphertext and tag, with the place as associated data.
    pub fn seal(&self, place: Place<'_>, plaintext: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let payload = Payload { msg: plaintext, aad: &place.associated_data() };
        let sealed = self
            .cipher
            .encrypt(&nonce.into(), payload)
            .expect("XChaCha20-Poly1305 encryption of an in-memory buffer cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        format!("{BOUND}{}", STANDARD.encode(out))
    }

    /// Opens what [`SecretBox::seal`] sealed for this same `place`.
    pub fn open(&self, place: Place<'_>, sealed: &str) -> Result<Vec<u8>, SecretError> {
        let Some(encoded) = sealed.strip_prefix(BOUND) else {
            return Err(SecretError::Unbound { place: place.to_string() });
        };
        let failed = || SecretError::Open { place: place.to_string() };
        let (nonce, ciphertext) = split(encoded).ok_or_else(failed)?;
        let payload = Payload { msg: ciphertext.as_slice(), aad: &place.associated_data() };
        self.cipher.decrypt(&nonce.into(), payload).map_err(|_| failed())
    }

    /// A value sealed without its place (the format before places were bound), sealed again
    /// for `place`; `None` if `sealed` is already bound (it is then left as it is, unopened).
    pub fn rebind(&self, place: Place<'_>, sealed: &str) -> Result<Option<String>, SecretError> {
        if sealed.starts_with(BOUND) {
            return Ok(None);
        }
        let failed = || SecretError::Open { place: place.to_string() };
        let (nonce, ciphertext) = split(sealed).ok_or_else(failed)?;
        let plaintext = self.cipher.decrypt(&nonce.into(), ciphertext.as_slice()).map_err(|_| failed())?;
        Ok(Some(self.seal(place, &plaintext)))
    }
}

#[cfg(test)]
impl SecretBox {
    /// A value in the format before places were bound, for the tests of [`SecretBox::rebind`].
    pub(crate) fn seal_unbound(&self, plaintext: &[u8]) -> String {
        let nonce = [7u8; NONCE_LEN];
        let mut out = nonce.to_vec();
        out.extend_from_slice(&self.cipher.encrypt(&nonce.into(), plaintext).expect("in-memory encryption"));
        STANDARD.encode(out)
    }
}

/// The nonce and the ciphertext of a sealed value's base64.
fn split(encoded: &str) -> Option<([u8; NONCE_LEN], Vec<u8>)> {
    let bytes = STANDARD.decode(encoded).ok()?;
    if bytes.len() < NONCE_LEN {
        return None;
    }
    let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
    Some((nonce.try_into().ok()?, ciphertext.to_vec()))
}

/// Compares a presented token with the expected one in time that depends only on their
/// lengths, so that timing does not tell an attacker how much of a guess was right.
pub fn constant_time_eq(presented: &[u8], expected: &[u8]) -> bool {
    presented.len() == expected.len() && presented.iter().zip(expected).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: Place<'static> = Place { table: "credentials", column: "secret", row: "team" };

    #[test]
    fn seals_and_opens_and_refuses_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = SecretBox::load_or_create(dir.path()).unwrap();
        let sealed = sealer.seal(HERE, b"wJalrXUtnFEMI/K7MDENG");
        assert!(!sealed.contains("wJalr"));
        assert!(sealed.starts_with("v2:"), "{sealed}");
        assert_eq!(sealer.open(HERE, &sealed).unwrap(), b"wJalrXUtnFEMI/K7MDENG");
        // The same directory gives the same key; its file is private.
        let again = SecretBox::load_or_create(dir.path()).unwrap();
        assert_eq!(again.open(HERE, &sealed).unwrap(), b"wJalrXUtnFEMI/K7MDENG");
        let mode = std::fs::metadata(dir.path().join("secret.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let other = SecretBox::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        assert!(other.open(HERE, &sealed).is_err());
    }

    #[test]
    fn a_value_moved_to_another_row_or_column_does_not_open() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = SecretBox::load_or_create(dir.path()).unwrap();
        let sealed = sealer.seal(HERE, b"secret");
        for elsewhere in [
            Place { row: "other", ..HERE },
            Place { column: "public", ..HERE },
            Place { table: "clusters", ..HERE },
            // The separators keep `ab`+`c` apart from `a`+`bc`.
            Place { table: "credentials", column: "secre", row: "tteam" },
        ] {
            let err = sealer.open(elsewhere, &sealed).unwrap_err();
            assert!(matches!(&err, SecretError::Open { .. }), "{err:?}");
            let message = err.to_string();
            assert!(message.contains(&elsewhere.to_string()) && message.contains("another row or column"), "{message}");
        }
    }

    #[test]
    fn an_unbound_value_is_refused_by_open_and_rebound_for_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = SecretBox::load_or_create(dir.path()).unwrap();
        let old = sealer.seal_unbound(b"from before");
        let err = sealer.open(HERE, &old).unwrap_err();
        assert!(matches!(err, SecretError::Unbound { .. }), "{err:?}");
        let rebound = sealer.rebind(HERE, &old).unwrap().unwrap();
        assert_eq!(sealer.open(HERE, &rebound).unwrap(), b"from before");
        assert!(sealer.open(Place { row: "other", ..HERE }, &rebound).is_err());
        // A bound value is left as it is; an unbound one of another key is refused.
        assert_eq!(sealer.rebind(HERE, &rebound).unwrap(), None);
        let other = SecretBox::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        assert!(matches!(other.rebind(HERE, &old), Err(SecretError::Open { .. })));
    }
}
