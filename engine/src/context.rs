//! What a step sees: the run's input, earlier steps' outputs, its idempotency key (the methods
//! of [`StepCtx`], which `definition.rs` declares beside the [`Workflow`] whose steps take it).

use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::definition::{StepCtx, StepKey, Workflow};
use crate::error::StepError;

impl<W: Workflow> StepCtx<W> {
    /// The registered workflow value, with its dependencies.
    pub fn workflow(&self) -> &W {
        &self.workflow
    }

    /// The run's input.
    pub fn input(&self) -> &W::Input {
        &self.input
    }

    /// The run's id.
    pub fn run_id(&self) -> Uuid {
        self.run.id
    }

    /// The run's resource key, if it has one.
    pub fn resource_key(&self) -> Option<&str> {
        self.run.resource_key.as_deref()
    }

    /// The name of the step running now.
    pub fn step_name(&self) -> &'static str {
        self.step
    }

    /// How many attempts of this step ended before this one (failed, or cut short by a crash).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// A key derived from the run id and the step name (and whether this is the undo): the same
    /// on every attempt and after any restart. Pass it to the outside world so that a repeated
    /// call is recognised (EC2 `ClientToken`, GCE `requestId`, a unique column).
    pub fn idempotency_key(&self) -> Uuid {
        let name = if self.undoing { format!("undo:{}", self.step) } else { self.step.to_owned() };
        Uuid::new_v5(&self.run.id, name.as_bytes())
    }

    /// Why the run is undoing its steps (`step `x` failed: ...`, or `cancelled by an operator`),
    /// when it is: an undo that marks a record failed can say why.
    pub fn unwind_reason(&self) -> Option<&str> {
        self.run.unwind_reason.as_deref()
    }

    /// Whether an operator has asked to cancel the run (it then ends `cancelled`, not `failed`).
    pub fn cancelled(&self) -> bool {
        self.run.cancelled
    }

    /// The output of an earlier, completed step, read through its typed key.
    pub fn output<T: DeserializeOwned>(&self, key: StepKey<T>) -> Result<T, StepError> {
        let step = key.name();
        let value = self.outputs.get(step).ok_or_else(|| {
            StepError::terminal_msg(format!(
                "step `{}` of {} asked for the output of `{step}`, which has not completed",
                self.step,
                W::KIND
            ))
        })?;
        serde_json::from_value(value.clone())
            .map_err(|err| StepError::terminal(err).context(format!("decoding the output of step `{step}`")))
    }

    /// The payload of the latest signal named `name` sent to this run, if any. Sending a signal
    /// wakes a waiting run, so a poll step can wait for a callback with this.
    pub async fn signal(&self, name: &str) -> Result<Option<Value>, StepError> {
        self.store
            .latest_signal(self.run.id, name)
            .await
            .map_err(|err| StepError::retryable(err).context(format!("reading signal `{name}`")))
    }
}
