//! The definitions an engine can run, keyed by kind and version, with their types erased so
//! that one worker loop drives them all.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::definition::{Body, Check, RunInfo, StepCtx, Steps, Workflow};
use crate::error::StepError;
use crate::retry::RetryPolicy;
use crate::status::{Phase, StepLimits, StepShape};
use crate::store::{RunRecord, Store};

/// The workflow definitions an engine runs. Register every version a binary still supports.
#[derive(Default, Clone)]
pub struct Registry {
    definitions: HashMap<(&'static str, u32), Arc<dyn Definition>>,
}

impl Registry {
    /// No definitions yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `workflow` (its value carries its dependencies) under its kind and version.
    #[must_use]
    pub fn with<W: Workflow>(mut self, workflow: Arc<W>) -> Self {
        self.register(workflow);
        self
    }

    /// Registers `workflow` under its kind and version, replacing an earlier registration.
    pub fn register<W: Workflow>(&mut self, workflow: Arc<W>) {
        let steps = Arc::new(W::steps());
        self.definitions.insert((W::KIND, W::VERSION), Arc::new(Registered { workflow, steps }));
    }

    pub(crate) fn get(&self, kind: &str, version: u32) -> Option<&Arc<dyn Definition>> {
        self.definitions.iter().find(|((k, v), _)| *k == kind && *v == version).map(|(_, definition)| definition)
    }

    /// The versions registered for `kind`, ascending.
    pub(crate) fn versions(&self, kind: &str) -> Vec<u32> {
        let mut versions: Vec<u32> = self.definitions.keys().filter(|(k, _)| *k == kind).map(|(_, v)| *v).collect();
        versions.sort_unstable();
        versions
    }

    /// Every registered kind and version, sorted: what a test walks to hold each workflow to
    /// the same checks.
    pub fn definitions(&self) -> Vec<(&'static str, u32)> {
        let mut all: Vec<(&'static str, u32)> = self.definitions.keys().copied().collect();
        all.sort_unstable();
        all
    }

    /// The step names of a definition, in order.
    pub fn step_names(&self, kind: &str, version: u32) -> Option<Vec<&'static str>> {
        self.get(kind, version).map(|definition| definition.step_names())
    }

    /// What the definition says about the run's step in hand: its deadlines and what happens
    /// when it gives up (`None` when the binary does not know the run's version, or no step is
    /// in hand).
    pub(crate) fn limits(&self, run: &RunRecord) -> Option<StepLimits> {
        let definition = self.get(&run.kind, run.version)?;
        let names = definition.step_names();
        let index = match run.phase {
            Phase::Forward => run.step_index as usize,
            Phase::Undo => match run.current_step.as_deref() {
                Some(step) => names.iter().position(|name| *name == step)?,
                None => (run.step_index as usize).checked_sub(1)?,
            },
        };
        (index < names.len()).then(|| definition.limits(index, run.phase))
    }

    /// Whether a run of this definition that never started has something to undo when it is
    /// cancelled: its first step has an undo (which may mark the domain's record, say).
    pub(crate) fn first_step_has_undo(&self, kind: &str, version: u32) -> bool {
        self.get(kind, version).is_some_and(|definition| definition.first_step_has_undo())
    }

    /// How many steps the workflow `kind` has at `version`, if it is registered.
    pub(crate) fn step_count(&self, kind: &str, version: u32) -> Option<usize> {
        self.get(kind, version).map(|definition| definition.step_names().len())
    }
}

/// How a step waits, if it does.
pub(crate) enum Shape {
    Action,
    Poll { interval: Duration, slowest: Duration, timeout: Duration },
    Sleep(Duration),
}

/// A definition with its types erased.
pub(crate) trait Definition: Send + Sync {
    fn step_names(&self) -> Vec<&'static str>;
    fn limits(&self, index: usize, phase: Phase) -> StepLimits;
    fn first_step_has_undo(&self) -> bool;
    /// Decodes the run's input and prepares its steps' context.
    fn instantiate(
        &self,
        run: &RunRecord,
        outputs: &[(u32, String, Value)],
        store: Store,
    ) -> Result<Box<dyn Instance>, StepError>;
}

/// One run of a definition, ready to execute steps.
pub(crate) trait Instance: Send + Sync {
    fn step_count(&self) -> usize;
    fn step_name(&self, index: usize) -> &'static str;
    fn shape(&self, index: usize) -> Shape;
    fn retry(&self, index: usize) -> &RetryPolicy;
    fn undo_retry(&self, index: usize) -> &RetryPolicy;
    fn attempt_timeout(&self, index: usize) -> Duration;
    fn has_undo(&self, index: usize) -> bool;
    fn run_step(&self, index: usize, attempt: u32) -> BoxFuture<'static, Result<Check<Value>, StepError>>;
    /// Runs the undo of step `index`, with the step's output if it completed.
    fn run_undo(&self, index: usize, attempt: u32) -> BoxFuture<'static, Result<(), StepError>>;
    fn completed(&mut self, index: usize, output: Value);
    /// The run turned back, for this reason, cancelled or not (undos can read both).
    fn turned_back(&mut self, reason: &str, cancelled: bool);
    fn output(&self) -> Result<Value, StepError>;
}

struct Registered<W: Workflow> {
    workflow: Arc<W>,
    steps: Arc<Steps<W>>,
}

impl<W: Workflow> Definition for Registered<W> {
    fn step_names(&self) -> Vec<&'static str> {
        self.steps.list.iter().map(|step| step.name).collect()
    }

    fn first_step_has_undo(&self) -> bool {
        self.steps.list.first().is_some_and(|step| step.undo.is_some())
    }

    fn limits(&self, index: usize, phase: Phase) -> StepLimits {
        let step = &self.steps.list[index];
        let millis = |duration: Duration| duration.as_millis() as u64;
        let (shape, every_ms, timeout_ms) = match (&step.body, phase) {
            (_, Phase::Undo) | (Body::Action(_), _) => (StepShape::Action, None, None),
            (Body::Poll { interval, timeout, .. }, Phase::Forward) => {
                (StepShape::Poll, Some(millis(*interval)), Some(millis(*timeout)))
            }
            (Body::Sleep(_), Phase::Forward) => (StepShape::Sleep, None, None),
        };
        let policy = if phase == Phase::Undo { &step.undo_retry } else { &step.retry };
        StepLimits {
            step: step.name.to_owned(),
            phase,
            shape,
            every_ms,
            timeout_ms,
            attempt_timeout_ms: millis(step.attempt_timeout),
            max_attempts: policy.max_attempts,
            max_elapsed_ms: policy.max_elapsed.map(millis),
            on_exhausted: policy.on_exhausted,
            has_undo: step.undo.is_some(),
        }
    }

    fn instantiate(
        &self,
        run: &RunRecord,
        outputs: &[(u32, String, Value)],
        store: Store,
    ) -> Result<Box<dyn Instance>, StepError> {
        let input: W::Input = serde_json::from_value(run.input.clone()).map_err(|err| {
            StepError::terminal(err).context(format!("the stored input does not fit {} v{}", W::KIND, W::VERSION))
        })?;
        let mut by_name = BTreeMap::new();
        for (index, name, output) in outputs {
            match self.steps.list.get(*index as usize) {
                Some(step) if step.name == name => {
                    by_name.insert(step.name, output.clone());
                }
                found => {
                    let now = found.map_or("no step".to_owned(), |step| format!("`{}`", step.name));
                    return Err(StepError::terminal_msg(format!(
                        "the run diverged from its definition: step {index} was `{name}` when it ran, \
                         but {} v{} now has {now} there; keep step names stable within a version, \
                         or register the old version beside the new one",
                        W::KIND,
                        W::VERSION
                    )));
                }
            }
        }
        Ok(Box::new(Running {
            steps: self.steps.clone(),
            ctx: StepCtx {
                workflow: self.workflow.clone(),
                input: Arc::new(input),
                run: Arc::new(RunInfo {
                    id: run.id,
                    resource_key: run.resource_key.clone(),
                    unwind_reason: run.unwind_reason.clone(),
                    cancelled: run.cancel_requested,
                }),
                outputs: Arc::new(by_name),
                step: "",
                attempt: 0,
                undoing: false,
                store,
            },
        }))
    }
}

struct Running<W: Workflow> {
    steps: Arc<Steps<W>>,
    ctx: StepCtx<W>,
}

impl<W: Workflow> Running<W> {
    fn ctx_for(&self, index: usize, attempt: u32, undoing: bool) -> StepCtx<W> {
        let mut ctx = self.ctx.clone();
        ctx.step = self.steps.list[index].name;
        ctx.attempt = attempt;
        ctx.undoing = undoing;
        ctx
    }
}

impl<W: Workflow> Instance for Running<W> {
    fn step_count(&self) -> usize {
        self.steps.list.len()
    }

    fn step_name(&self, index: usize) -> &'static str {
        self.steps.list[index].name
    }

    fn shape(&self, index: usize) -> Shape {
        match &self.steps.list[index].body {
            Body::Action(_) => Shape::Action,
            Body::Poll { interval, slowest, timeout, .. } => {
                Shape::Poll { interval: *interval, slowest: *slowest, timeout: *timeout }
            }
            Body::Sleep(duration) => Shape::Sleep(duration(&self.ctx_for(index, 0, false))),
        }
    }

    fn retry(&self, index: usize) -> &RetryPolicy {
        &self.steps.list[index].retry
    }

    fn undo_retry(&self, index: usize) -> &RetryPolicy {
        &self.steps.list[index].undo_retry
    }

    fn attempt_timeout(&self, index: usize) -> Duration {
        self.steps.list[index].attempt_timeout
    }

    fn has_undo(&self, index: usize) -> bool {
        self.steps.list[index].undo.is_some()
    }

    fn run_step(&self, index: usize, attempt: u32) -> BoxFuture<'static, Result<Check<Value>, StepError>> {
        let ctx = self.ctx_for(index, attempt, false);
        let step = &self.steps.list[index];
        match &step.body {
            Body::Action(action) | Body::Poll { check: action, .. } => contain_panics(step.name, action(ctx)),
            Body::Sleep(_) => Box::pin(async { Ok(Check::Ready(Value::Null)) }),
        }
    }

    fn run_undo(&self, index: usize, attempt: u32) -> BoxFuture<'static, Result<(), StepError>> {
        let step = &self.steps.list[index];
        let output = self.ctx.outputs.get(step.name).cloned();
        match &step.undo {
            Some(undo) => contain_panics(step.name, undo(self.ctx_for(index, attempt, true), output)),
            None => Box::pin(async { Ok(()) }),
        }
    }

    fn completed(&mut self, index: usize, output: Value) {
        let mut outputs = (*self.ctx.outputs).clone();
        outputs.insert(self.steps.list[index].name, output);
        self.ctx.outputs = Arc::new(outputs);
    }

    fn turned_back(&mut self, reason: &str, cancelled: bool) {
        let run = &self.ctx.run;
        self.ctx.run = Arc::new(RunInfo {
            id: run.id,
            resource_key: run.resource_key.clone(),
            unwind_reason: Some(reason.to_owned()),
            cancelled,
        });
    }

    fn output(&self) -> Result<Value, StepError> {
        let output = W::output(&self.ctx)?;
        serde_json::to_value(output).map_err(|err| StepError::terminal(err).context("encoding the workflow's output"))
    }
}

/// A step that panics fails its attempt (retryably, with the panic's message) instead of taking
/// its driver down with the run still leased.
fn contain_panics<T: Send + 'static>(
    step: &'static str,
    attempt: BoxFuture<'static, Result<T, StepError>>,
) -> BoxFuture<'static, Result<T, StepError>> {
    use futures::FutureExt as _;
    Box::pin(async move {
        match std::panic::AssertUnwindSafe(attempt).catch_unwind().await {
            Ok(result) => result,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_owned());
                Err(StepError::retryable_msg(format!("step `{step}` panicked: {message}")))
            }
        }
    })
}
