//! Exit codes, as `docs/cli.md` documents them, and the error every command returns.

/// The target state was reached, or the command did what it was asked.
pub const OK: u8 = 0;
/// The resource ended another way (failed, cancelled, invalid).
pub const ENDED_OTHERWISE: u8 = 1;
/// The state could not be observed: no active API, API unreachable, token rejected, unknown id.
pub const NOT_OBSERVED: u8 = 2;
/// The request was refused as bad input: malformed arguments, invalid names, a conflict.
pub const BAD_INPUT: u8 = 3;
/// Waiting timed out.
pub const TIMEOUT: u8 = 4;
/// The run being followed stopped for a person (`needs-attention`): nothing moves until someone
/// retries, resumes or cancels it; the message says which command.
pub const NEEDS_ATTENTION: u8 = 5;

/// A person stopped the command at a prompt (Ctrl-C, or the end of input): nothing it asked for
/// was sent unless the message says so. 128 + SIGINT, as a shell reports a command Ctrl-C ended.
pub const INTERRUPTED: u8 = 130;

/// A command's failure: what to print and which code to exit with.
#[derive(Debug)]
pub struct CliError {
    /// The exit code.
    pub code: u8,
    /// The stable error code, as the API gives it or as the CLI names its own failures.
    pub error_code: String,
    /// What went wrong and what to do.
    pub message: String,
}

impl CliError {
    /// A failure with an exit code, a stable error code and a message.
    pub fn new(code: u8, error_code: &str, message: impl Into<String>) -> Self {
        Self { code, error_code: error_code.to_owned(), message: message.into() }
    }

    /// Bad input found before any request was made.
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::new(BAD_INPUT, "INVALID_ARGUMENT", message)
    }
}

/// What a command returns.
pub type CliResult = Result<u8, CliError>;
