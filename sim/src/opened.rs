//! The simulated VMs' user-data, opened once per sealed value. The simulated Kubernetes API
//! checks a control plane's token, which its user-data holds, on every request, and its scheduler
//! reads every machine's at every Pod it places: a decryption each time, about 2 % of the API's
//! CPU in the jobs benchmark (docs/benchmarks.md, "Jobs", twelfth stop). A VM's opened user-data is kept
//! with the sealed value it came from, so a row that changes is opened again, and a value that
//! does not open is never kept. Plain text held in memory is what the process could open at any
//! time with the key it holds; nothing is written anywhere.

use std::collections::HashMap;
use std::sync::Mutex;

use anycloud_workflows::secrets::SecretBox;

use crate::vms::{UserDataError, open_user_data};

/// At most this many VMs' user-data is kept; past it, the kept values are forgotten at once (a
/// simulated cloud holds a few dozen live VMs).
const MOST: usize = 1024;

/// The API's sealer, and the user-data it opened, by VM id.
#[derive(Debug)]
pub(crate) struct OpenedUserData {
    sealer: SecretBox,
    opened: Mutex<HashMap<String, Opened>>,
}

#[derive(Debug)]
struct Opened {
    sealed: String,
    script: String,
}

impl OpenedUserData {
    pub(crate) fn new(sealer: SecretBox) -> Self {
        Self { sealer, opened: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn sealer(&self) -> &SecretBox {
        &self.sealer
    }

    /// VM `id`'s user-data, `sealed` as its row holds it.
    pub(crate) fn open(&self, id: &str, sealed: &str) -> Result<String, UserDataError> {
        let kept = self
            .opened
            .lock()
            .ok()
            .and_then(|opened| opened.get(id).filter(|kept| kept.sealed == sealed).map(|kept| kept.script.clone()));
        if let Some(script) = kept {
            return Ok(script);
        }
        let script = open_user_data(&self.sealer, id, sealed)?;
        if let Ok(mut opened) = self.opened.lock() {
            if opened.len() >= MOST {
                opened.clear();
            }
            opened.insert(id.to_owned(), Opened { sealed: sealed.to_owned(), script: script.clone() });
        }
        Ok(script)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::vms::seal_user_data;

    /// A kept value answers only for the sealed value it came from: a row sealed again (or
    /// altered) is opened again, and one that does not open is refused, not answered from before.
    #[test]
    fn a_kept_value_answers_only_for_its_sealed_value() {
        let sealer = SecretBox::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        let opened = OpenedUserData::new(sealer.clone());
        let first = seal_user_data(&sealer, "sim-1", "#!/bin/sh\nK3S_TOKEN='one'\n");
        assert_eq!(opened.open("sim-1", &first).unwrap(), "#!/bin/sh\nK3S_TOKEN='one'\n");
        assert_eq!(opened.open("sim-1", &first).unwrap(), "#!/bin/sh\nK3S_TOKEN='one'\n");
        let second = seal_user_data(&sealer, "sim-1", "#!/bin/sh\nK3S_TOKEN='two'\n");
        assert_eq!(opened.open("sim-1", &second).unwrap(), "#!/bin/sh\nK3S_TOKEN='two'\n");
        assert!(opened.open("sim-1", "not sealed").is_err());
        assert!(opened.open("sim-2", &second).is_err(), "sealed for another VM's row");
    }
}
