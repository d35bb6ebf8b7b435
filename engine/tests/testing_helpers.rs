//! The helpers for workflow authors catch what they promise to catch.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anycloud_engine::testing::{action_failure_can_unwind, actions_succeed_idempotently, cancel_in_flight_can_unwind};
use anycloud_engine::{Effect, Step, StepCtx, StepError, StepKey, Steps, Workflow};
use support::TestDb;

/// A bank account in a toy world: open, deposit, notify. `careless` makes `deposit` add on
/// every call instead of once per idempotency key, and its undo forget to close the account.
struct Account {
    world: Arc<Mutex<BTreeMap<String, i64>>>,
    careless: bool,
}

const DEPOSIT: StepKey<i64> = StepKey::new("deposit");

impl Workflow for Account {
    const KIND: &'static str = "account.open";
    const VERSION: u32 = 1;
    type Input = String;
    type Output = i64;

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(
                Step::action("open", |ctx: StepCtx<Self>| async move {
                    ctx.workflow().world.lock().unwrap().entry(ctx.input().clone()).or_insert(0);
                    Ok(())
                })
                .undo(|ctx: StepCtx<Self>, _opened: Effect<()>| async move {
                    if !ctx.workflow().careless {
                        ctx.workflow().world.lock().unwrap().remove(ctx.input());
                    }
                    Ok(())
                }),
            )
            .then(
                Step::action(DEPOSIT, |ctx: StepCtx<Self>| async move {
                    let mut world = ctx.workflow().world.lock().unwrap();
                    let key = format!("deposit/{}", ctx.idempotency_key());
                    if ctx.workflow().careless || !world.contains_key(&key) {
                        world.insert(key, 1);
                        *world.get_mut(ctx.input()).ok_or_else(|| StepError::terminal_msg("no account"))? += 100;
                    }
                    Ok(world[ctx.input()])
                })
                .undo(|ctx: StepCtx<Self>, _balance: Effect<i64>| async move {
                    let mut world = ctx.workflow().world.lock().unwrap();
                    world.retain(|key, _| !key.starts_with("deposit/"));
                    if let Some(balance) = world.get_mut(ctx.input()) {
                        *balance = 0;
                    }
                    Ok(())
                }),
            )
            .then(Step::action("notify", |_ctx: StepCtx<Self>| async move { Ok(()) }))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<i64, StepError> {
        ctx.output(DEPOSIT)
    }
}

fn world_is_empty(world: &Arc<Mutex<BTreeMap<String, i64>>>) -> Result<(), String> {
    let world = world.lock().unwrap();
    if world.is_empty() { Ok(()) } else { Err(format!("left behind: {world:?}")) }
}

#[tokio::test]
async fn a_careful_workflow_passes_both_helpers() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let world = Arc::new(Mutex::new(BTreeMap::new()));
    let workflow = Arc::new(Account { world: world.clone(), careless: false });
    let balance = actions_succeed_idempotently(&store, workflow.clone(), &"alice".to_owned()).await.unwrap();
    assert_eq!(balance, 100, "the deposit happened once although the step ran twice");
    world.lock().unwrap().clear();
    action_failure_can_unwind(&store, workflow.clone(), &"bob".to_owned(), |_step| {
        let world = world.clone();
        async move { world_is_empty(&world) }
    })
    .await
    .unwrap();
    cancel_in_flight_can_unwind(&store, workflow, &"erin".to_owned(), |_step| {
        let world = world.clone();
        async move { world_is_empty(&world) }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_helpers_catch_a_careless_workflow() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let world = Arc::new(Mutex::new(BTreeMap::new()));
    let workflow = Arc::new(Account { world: world.clone(), careless: true });
    // Run twice, the careless deposit lands twice: the output shows it.
    let balance = actions_succeed_idempotently(&store, workflow.clone(), &"carol".to_owned()).await.unwrap();
    assert_eq!(balance, 200);
    world.lock().unwrap().clear();
    let err = action_failure_can_unwind(&store, workflow.clone(), &"dave".to_owned(), |_step| {
        let world = world.clone();
        async move { world_is_empty(&world) }
    })
    .await
    .unwrap_err();
    assert!(err.contains("failing at step `deposit` left the world unclean"), "{err}");
    // Cancelled while `open` ran: only `open`'s own undo could close the account, and it forgets.
    world.lock().unwrap().clear();
    let err = cancel_in_flight_can_unwind(&store, workflow, &"frank".to_owned(), |_step| {
        let world = world.clone();
        async move { world_is_empty(&world) }
    })
    .await
    .unwrap_err();
    assert!(err.contains("cancelled while running step `open` left the world unclean"), "{err}");
}
