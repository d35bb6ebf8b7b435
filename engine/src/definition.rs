//! Typed workflow definitions: a kind, a version, an input, an output, and named steps; and
//! [`StepCtx`], the context those steps run in, declared here because a [`Workflow`] and its
//! steps take it and it is typed by the workflow (what it offers a step is in `context.rs`).
//!
//! A step is named by a plain string, or by a [`StepKey`] that carries the type of its output:
//! a workflow declares the key once and reads the output through it (`ctx.output(KEY)`), so that
//! a misspelled name or a wrong type does not compile.

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::error::StepError;
use crate::retry::{OnExhausted, RetryPolicy};
use crate::store::Store;

/// A durable workflow: a stable kind, a definition version, typed input and output, and an
/// ordered list of named steps.
///
/// The value registered with the engine carries the workflow's dependencies (clients, pools);
/// steps reach it through [`StepCtx::workflow`].
pub trait Workflow: Send + Sync + Sized + 'static {
    /// Stable name of the workflow, e.g. `cluster.create`. Never reuse it for another shape.
    const KIND: &'static str;
    /// Definition version. Bump it when steps change; a run keeps the version it started with.
    const VERSION: u32;
    /// What a run is started with.
    type Input: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What a run that succeeded returns.
    type Output: Serialize + DeserializeOwned + Send + 'static;

    /// The steps, in execution order. Step names are stable identifiers stored in each run.
    fn steps() -> Steps<Self>;

    /// Builds the output from the completed steps once the last one has succeeded.
    fn output(ctx: &StepCtx<Self>) -> Result<Self::Output, StepError>;
}

/// The context a step (or its undo) runs in. Cheap to clone. Its methods are in `context.rs`.
pub struct StepCtx<W: Workflow> {
    pub(crate) workflow: Arc<W>,
    pub(crate) input: Arc<W::Input>,
    pub(crate) run: Arc<RunInfo>,
    pub(crate) outputs: Arc<BTreeMap<&'static str, Value>>,
    pub(crate) step: &'static str,
    pub(crate) attempt: u32,
    pub(crate) undoing: bool,
    pub(crate) store: Store,
}

/// Facts about the run a step belongs to.
#[derive(Debug)]
pub(crate) struct RunInfo {
    pub(crate) id: Uuid,
    pub(crate) resource_key: Option<String>,
    /// Why the run turned back, once it has.
    pub(crate) unwind_reason: Option<String>,
    /// An operator asked to cancel the run.
    pub(crate) cancelled: bool,
}

impl<W: Workflow> Clone for StepCtx<W> {
    fn clone(&self) -> Self {
        Self {
            workflow: self.workflow.clone(),
            input: self.input.clone(),
            run: self.run.clone(),
            outputs: self.outputs.clone(),
            step: self.step,
            attempt: self.attempt,
            undoing: self.undoing,
            store: self.store.clone(),
        }
    }
}

/// What a poll step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check<T> {
    /// The condition holds; the step succeeds with this output.
    Ready(T),
    /// Not yet; the reason is shown in `inspect` while the run waits for its next check.
    NotYet(String),
}

pub(crate) type ActionFn<W> =
    Arc<dyn Fn(StepCtx<W>) -> BoxFuture<'static, Result<Check<Value>, StepError>> + Send + Sync>;
pub(crate) type SleepFn<W> = Arc<dyn Fn(&StepCtx<W>) -> Duration + Send + Sync>;
pub(crate) type UndoFn<W> =
    Arc<dyn Fn(StepCtx<W>, Option<Value>) -> BoxFuture<'static, Result<(), StepError>> + Send + Sync>;

/// How long one attempt of a step (or of its undo, or one check of a poll) may take unless the
/// step says otherwise: past it, the attempt is stopped and fails as retryable (interrupted).
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The name of a step whose output other steps read, typed by that output. Declare it once, as
/// a `const` beside the step list, name the step with it, and read the output with
/// [`StepCtx::output`]: a misspelled key or a wrong type fails to compile.
///
/// ```
/// use anycloud_engine::StepKey;
/// const LAUNCH: StepKey<String> = StepKey::new("launch");
/// assert_eq!(LAUNCH.name(), "launch");
/// ```
pub struct StepKey<T> {
    name: &'static str,
    output: PhantomData<fn() -> T>,
}

impl<T> StepKey<T> {
    /// The key of the step named `name`, whose output is a `T`.
    pub const fn new(name: &'static str) -> Self {
        Self { name, output: PhantomData }
    }

    /// The step's stable name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<T> Clone for StepKey<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for StepKey<T> {}

impl<T> std::fmt::Debug for StepKey<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StepKey({})", self.name)
    }
}

/// What names a step whose output is a `T`: a plain name, or a [`StepKey<T>`] (only the key of
/// a step with that very output type).
pub trait StepName<T> {
    /// The stable name.
    fn step_name(self) -> &'static str;
}

impl<T> StepName<T> for &'static str {
    fn step_name(self) -> &'static str {
        self
    }
}

impl<T> StepName<T> for StepKey<T> {
    fn step_name(self) -> &'static str {
        self.name
    }
}

/// What an undo knows of the effect of its step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect<T> {
    /// The step completed and checkpointed this output.
    Done(T),
    /// The step did not checkpoint: a cancel or its deadline stopped it in flight, the process
    /// running it died, or a cancel came before it ran. Its effect may be there in full, in part
    /// or not at all: find it as a retry of the step would (its tags, names or idempotency key)
    /// and remove what is there.
    Unknown,
}

impl<T> Effect<T> {
    /// The step's output, when it completed.
    pub fn done(self) -> Option<T> {
        match self {
            Self::Done(output) => Some(output),
            Self::Unknown => None,
        }
    }
}

/// How a step's body behaves.
pub(crate) enum Body<W: Workflow> {
    /// Runs once (retried on error) and checkpoints its output.
    Action(ActionFn<W>),
    /// Checks a condition every `interval` (slowing to `slowest`, see [`Step::slowing_to`]) until
    /// it holds or `timeout` passes since the first check.
    Poll { check: ActionFn<W>, interval: Duration, slowest: Duration, timeout: Duration },
    /// Waits until `duration` after the step first started.
    Sleep(SleepFn<W>),
}

/// One step of a definition, with its types erased; built by [`Step`].
pub(crate) struct StepDef<W: Workflow> {
    pub(crate) name: &'static str,
    pub(crate) body: Body<W>,
    pub(crate) undo: Option<UndoFn<W>>,
    pub(crate) retry: RetryPolicy,
    pub(crate) undo_retry: RetryPolicy,
    /// How long one attempt (of the action, a check, or the undo) may take.
    pub(crate) attempt_timeout: Duration,
}

/// A step under construction, typed by its output `T`, so that its undo takes that same `T`.
pub struct Step<W: Workflow, T> {
    def: StepDef<W>,
    output: PhantomData<fn() -> T>,
}

impl<W: Workflow, T: Serialize + DeserializeOwned + Send + 'static> Step<W, T> {
    /// A step that runs `action` and checkpoints its output.
    pub fn action<F, Fut>(name: impl StepName<T>, action: F) -> Self
    where
        F: Fn(StepCtx<W>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        let action: ActionFn<W> = Arc::new(move |ctx| {
            let fut = action(ctx);
            Box::pin(async move { Ok(Check::Ready(to_value(fut.await?)?)) })
        });
        Self::new(name.step_name(), Body::Action(action))
    }

    /// A durable poll: `check` runs every 5 s (see [`Step::every`]) until it reports
    /// [`Check::Ready`], for at most 15 min (see [`Step::timeout`]). Between checks the run
    /// is a row with a wake-up time, not a task.
    pub fn poll<F, Fut>(name: impl StepName<T>, check: F) -> Self
    where
        F: Fn(StepCtx<W>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Check<T>, StepError>> + Send + 'static,
    {
        let check: ActionFn<W> = Arc::new(move |ctx| {
            let fut = check(ctx);
            Box::pin(async move {
                Ok(match fut.await? {
                    Check::Ready(output) => Check::Ready(to_value(output)?),
                    Check::NotYet(reason) => Check::NotYet(reason),
                })
            })
        });
        let every = Duration::from_secs(5);
        let body = Body::Poll { check, interval: every, slowest: every, timeout: Duration::from_secs(15 * 60) };
        Self::new(name.step_name(), body)
    }

    /// Sets the undo. It runs when the run turns back: for the step's own output when the step
    /// completed ([`Effect::Done`]), and with [`Effect::Unknown`] when the step was cut short (a
    /// cancel reached it in flight, or the process running it died before its checkpoint). It
    /// must tolerate running twice and finding its work already undone, or never done. A step
    /// that *returns* an error is not undone: it must leave nothing behind when it fails.
    #[must_use]
    pub fn undo<F, Fut>(mut self, undo: F) -> Self
    where
        F: Fn(StepCtx<W>, Effect<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), StepError>> + Send + 'static,
    {
        self.def.undo = Some(Arc::new(move |ctx, output| match output.map(serde_json::from_value::<T>) {
            Some(Ok(output)) => Box::pin(undo(ctx, Effect::Done(output))),
            None => Box::pin(undo(ctx, Effect::Unknown)),
            Some(Err(err)) => Box::pin(async move {
                Err(StepError::terminal(err).context("the stored output does not fit the undo's type"))
            }),
        }));
        self
    }

    /// Sets the retry policy of the action.
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.def.retry = policy;
        self
    }

    /// Sets the retry policy of the undo. When it runs out, the run always parks.
    #[must_use]
    pub fn undo_retry(mut self, policy: RetryPolicy) -> Self {
        self.def.undo_retry = policy.on_exhausted(OnExhausted::Park);
        self
    }

    /// For a poll step: the time between checks.
    #[must_use]
    pub fn every(mut self, every: Duration) -> Self {
        if let Body::Poll { interval, slowest, .. } = &mut self.def.body {
            *interval = every;
            *slowest = (*slowest).max(every);
        }
        self
    }

    /// For a poll step: checks come further apart the longer it waits, a tenth of the time waited
    /// so far (never less than [`Step::every`]), up to `slowest`. A wait of a few seconds is seen
    /// within its first interval; a job that runs for days costs a check every `slowest`, not
    /// every `every`.
    #[must_use]
    pub fn slowing_to(mut self, slowest: Duration) -> Self {
        if let Body::Poll { interval, slowest: limit, .. } = &mut self.def.body {
            *limit = slowest.max(*interval);
        }
        self
    }

    /// For a poll step: how long after the first check it gives up (a terminal error).
    #[must_use]
    pub fn timeout(mut self, limit: Duration) -> Self {
        if let Body::Poll { timeout, .. } = &mut self.def.body {
            *timeout = limit;
        }
        self
    }

    /// How long one attempt of the action, one check of a poll, or one attempt of the undo may
    /// take ([`DEFAULT_ATTEMPT_TIMEOUT`] unless set). An attempt still running then is stopped
    /// and fails as retryable ([`ErrorKind::Interrupted`](crate::ErrorKind::Interrupted)).
    #[must_use]
    pub fn attempt_timeout(mut self, limit: Duration) -> Self {
        self.def.attempt_timeout = limit;
        self
    }

    fn new(name: &'static str, body: Body<W>) -> Self {
        Self {
            def: StepDef {
                name,
                body,
                undo: None,
                retry: RetryPolicy::default(),
                undo_retry: RetryPolicy::default().on_exhausted(OnExhausted::Park),
                attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            },
            output: PhantomData,
        }
    }
}

impl<W: Workflow> Step<W, ()> {
    /// A durable sleep: the step ends `duration` after it first started, however many times
    /// the engine restarts in between.
    pub fn sleep<F>(name: impl StepName<()>, duration: F) -> Self
    where
        F: Fn(&StepCtx<W>) -> Duration + Send + Sync + 'static,
    {
        Self::new(name.step_name(), Body::Sleep(Arc::new(duration)))
    }
}

/// The ordered steps of a definition.
pub struct Steps<W: Workflow> {
    pub(crate) list: Vec<StepDef<W>>,
}

impl<W: Workflow> Default for Steps<W> {
    fn default() -> Self {
        Self { list: Vec::new() }
    }
}

impl<W: Workflow> Steps<W> {
    /// No steps yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a step. Names must be unique within the definition.
    #[must_use]
    pub fn then<T>(mut self, step: Step<W, T>) -> Self {
        assert!(
            self.list.iter().all(|existing| existing.name != step.def.name),
            "workflow {} has two steps named `{}`",
            W::KIND,
            step.def.name
        );
        self.list.push(step.def);
        self
    }
}

fn to_value<T: Serialize>(value: T) -> Result<Value, StepError> {
    serde_json::to_value(value).map_err(|err| StepError::terminal(err).context("encoding the step's output"))
}
