//! A follower's patience with an API that is restarting: an unreachable API is waited for, said
//! once, for up to [`UNREACHABLE_FOR`]; its return is said too. The read that reports what a
//! followed workflow left ([`read_patiently`]) has the same patience: the API may restart between
//! the workflow's end and that read.

use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use crate::client::Client;
use crate::exit::CliError;
use crate::output::say;

/// How often an unreachable API is asked again.
const ASK_AGAIN: Duration = Duration::from_millis(250);

/// How long a follower rides out an unreachable API (it may be restarting).
pub(crate) const UNREACHABLE_FOR: Duration = Duration::from_secs(120);

/// Since when the API has not answered, if it has not.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    since: Option<Instant>,
}

impl Outage {
    /// The API answered: says so if it had not.
    pub(crate) fn answered(&mut self, json: bool) {
        if self.since.take().is_some() && !json {
            say!("  (API reachable again)");
        }
    }

    /// The API's answer was `err`: `Ok` to ask again (it is unreachable, for less than
    /// [`UNREACHABLE_FOR`] so far; said once), else the error.
    pub(crate) fn failed(&mut self, err: CliError, json: bool) -> Result<(), CliError> {
        if err.error_code != "API_UNREACHABLE" {
            return Err(err);
        }
        let since = *self.since.get_or_insert_with(|| {
            if !json {
                say!("  (API unreachable; waiting for it to come back)");
            }
            Instant::now()
        });
        if since.elapsed() > UNREACHABLE_FOR {
            return Err(err);
        }
        Ok(())
    }
}

/// `GET path`, asked again while the API is unreachable (for up to [`UNREACHABLE_FOR`]).
pub(crate) async fn read_patiently<T: DeserializeOwned>(
    client: &Client,
    path: &str,
    json: bool,
) -> Result<T, CliError> {
    let mut outage = Outage::default();
    loop {
        match client.get(path).await {
            Ok(answer) => {
                outage.answered(json);
                return Ok(answer);
            }
            Err(err) => outage.failed(err, json)?,
        }
        tokio::time::sleep(ASK_AGAIN).await;
    }
}
