//! Secret material at rest: sealed with XChaCha20-Poly1305 under a key that lives outside the
//! database (a 0600 file in the API's data directory, or `ANYCLOUD_SECRET_KEY`), so that a copy
//! of the database alone reveals nothing.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::{Aead, KeyInit};
use rand::RngCore;

/// The environment variable that may carry the key (base64 of 32 bytes) instead of the file.
pub const KEY_ENV: &str = "ANYCLOUD_SECRET_KEY";

const NONCE_LEN: usize = 24;

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
    /// Sealed data did not open: another key, or tampering.
    #[error("sealed secret could not be opened: it was sealed with another key, or altered")]
    Open,
}

impl SecretBox {
    /// Uses `ANYCLOUD_SECRET_KEY` when set, else the key file `secret.key` in `dir`, creating
    /// it (mode 0600) on first use.
    pub fn load_or_create(dir: &Path) -> Result<Self, SecretError> {
        if let Ok(encoded) = std::env::var(KEY_ENV) {
            return Self::from_base64(&encoded, KEY_ENV);
        }
        let path = dir.join("secret.key");
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

    /// Seals `plaintext`: base64 of a fresh random nonce followed by the ciphertext and tag.
    pub fn seal(&self, plaintext: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(&nonce.into(), plaintext)
            .expect("XChaCha20-Poly1305 encryption of an in-memory buffer cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        STANDARD.encode(out)
    }

    /// Opens what [`SecretBox::seal`] sealed.
    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, SecretError> {
        let bytes = STANDARD.decode(sealed).map_err(|_| SecretError::Open)?;
        if bytes.len() < NONCE_LEN {
            return Err(SecretError::Open);
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| SecretError::Open)?;
        self.cipher.decrypt(&nonce.into(), ciphertext).map_err(|_| SecretError::Open)
    }
}

/// Compares a presented token with the expected one in time that depends only on their
/// lengths, so that timing does not tell an attacker how much of a guess was right.
pub fn constant_time_eq(presented: &[u8], expected: &[u8]) -> bool {
    presented.len() == expected.len() && presented.iter().zip(expected).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_and_opens_and_refuses_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = SecretBox::load_or_create(dir.path()).unwrap();
        let sealed = sealer.seal(b"wJalrXUtnFEMI/K7MDENG");
        assert!(!sealed.contains("wJalr"));
        assert_eq!(sealer.open(&sealed).unwrap(), b"wJalrXUtnFEMI/K7MDENG");
        // The same directory gives the same key; its file is private.
        let again = SecretBox::load_or_create(dir.path()).unwrap();
        assert_eq!(again.open(&sealed).unwrap(), b"wJalrXUtnFEMI/K7MDENG");
        let mode = std::fs::metadata(dir.path().join("secret.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let other = SecretBox::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        assert!(other.open(&sealed).is_err());
    }
}
