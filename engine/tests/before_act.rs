//! `EngineConfig::before_act`: no step acts until the hook says the commits before it are
//! durable (what a checkpointed API's bucket ship is); while it cannot, the step waits as a
//! retry whose reason says so.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anycloud_engine::{BeforeAct, Engine, Registry, RunStatus};
use support::{Journal, Probe, ProbeInput, TestDb, config, until_status};

#[tokio::test]
async fn no_step_acts_before_the_hook_says_the_state_is_durable() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let journal = Journal::default();
    let durable = Arc::new(AtomicBool::new(false));
    let hook = {
        let (durable, journal) = (durable.clone(), journal.clone());
        BeforeAct(Arc::new(move || {
            let (durable, journal) = (durable.clone(), journal.clone());
            Box::pin(async move {
                if !durable.load(Ordering::SeqCst) {
                    return Err("the bucket does not answer".to_owned());
                }
                journal.push("durable");
                Ok(())
            })
        }))
    };
    let mut config = config("before-act");
    config.before_act = Some(hook);
    let engine =
        Engine::start(store, Registry::new().with(Probe::<false>::new(journal.clone())), config).await.unwrap();
    let id = engine.submit::<Probe<false>>(&ProbeInput::default(), None).await.unwrap();

    until_status(&engine, id, RunStatus::Retrying).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(journal.entries().is_empty(), "a step acted: {:?}", journal.entries());
    let run = engine.run(id).await.unwrap();
    let reason = run.error.map(|error| error.to_string()).unwrap_or_default();
    assert!(reason.contains("not durable yet") && reason.contains("the bucket does not answer"), "{reason}");

    durable.store(true, Ordering::SeqCst);
    until_status(&engine, id, RunStatus::Succeeded).await;
    let entries = journal.entries();
    let acted: Vec<&String> = entries.iter().filter(|entry| *entry != "durable").collect();
    assert!(!acted.is_empty());
    for (at, entry) in entries.iter().enumerate().filter(|(_, entry)| *entry != "durable") {
        assert_eq!(
            entries.get(at.wrapping_sub(1)).map(String::as_str),
            Some("durable"),
            "{entry} came first: {entries:?}"
        );
    }
}
