//! The web console's sign-in: `anycloud ui` asks (with the API's bearer token) for a code that
//! signs a browser in once, within a minute; the browser trades it for a session of 12 hours,
//! held in an HttpOnly cookie (cli/src/server/console/). Codes and session ids are 32 random
//! bytes; only their hashes are stored (`db::console_sessions`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::db::console_sessions::{self, hash};
use crate::refusal::OperationError;
use crate::wire::ConsoleCode;

use super::Operations;

/// How long a code may wait to be traded, in milliseconds.
pub const CODE_LIFETIME_MS: i64 = 60_000;
/// How long a session lasts, in milliseconds.
pub const SESSION_LIFETIME_MS: i64 = 12 * 3600 * 1000;

/// 32 random bytes, URL-safe.
fn random_secret() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

impl Operations {
    /// A new single-use sign-in code, and the path that trades it.
    pub async fn console_code(&self) -> Result<ConsoleCode, OperationError> {
        let code = random_secret();
        let now = crate::now_ms();
        let expires_at = now + CODE_LIFETIME_MS;
        console_sessions::add_code(&self.deps.db, &hash(&code), expires_at, now).await?;
        Ok(ConsoleCode { path: format!("/ui/sign-in?code={code}"), code, expires_at })
    }

    /// Trades a code for a new session id: `None` if the code is unknown, spent or expired.
    pub async fn console_sign_in(&self, code: &str) -> Result<Option<String>, OperationError> {
        let session = random_secret();
        let now = crate::now_ms();
        let traded =
            console_sessions::trade_code(&self.deps.db, &hash(code), &hash(&session), now, now + SESSION_LIFETIME_MS)
                .await?;
        Ok(traded.then_some(session))
    }

    /// Whether a session id is of an open session.
    pub async fn console_session_open(&self, session: &str) -> Result<bool, OperationError> {
        Ok(console_sessions::is_open(&self.deps.db, &hash(session), crate::now_ms()).await?)
    }

    /// Ends a session.
    pub async fn console_sign_out(&self, session: &str) -> Result<(), OperationError> {
        Ok(console_sessions::close(&self.deps.db, &hash(session)).await?)
    }
}
