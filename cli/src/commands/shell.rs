//! What shells and `man` read, generated from the clap definitions so that they never drift from
//! the commands: `anycloud completions SHELL` and `anycloud man`. Neither reads the config nor
//! talks to an API, so both work on a machine that has never run one.

use clap::CommandFactory as _;

use crate::args::Cli;
use crate::exit::{CliError, CliResult, NOT_OBSERVED, OK};

/// `anycloud completions SHELL`: the completion script on stdout.
pub fn completions(shell: clap_complete::Shell) -> CliResult {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "anycloud", &mut script);
    print_bytes(&script)
}

/// `anycloud man [COMMAND...]`: the man page (section 1, roff) of `anycloud`, or of the command
/// the words name (`anycloud-cluster-create`), on stdout.
pub fn man(words: &[String]) -> CliResult {
    let mut command = Cli::command();
    // Gives each subcommand its full name (`anycloud-cluster`), which titles its page.
    command.build();
    for word in words {
        command = command.find_subcommand(word).filter(|sub| !sub.is_hide_set()).cloned().ok_or_else(|| {
            CliError::bad_input(format!(
                "`anycloud {}` is not a command, so it has no man page; `anycloud --help` lists the commands",
                words.join(" ")
            ))
        })?;
    }
    let mut page = Vec::new();
    // Every page's footer names the program and version, not the subcommand's own name.
    clap_mangen::Man::new(command)
        .source(concat!("anycloud ", env!("CARGO_PKG_VERSION")))
        .render(&mut page)
        .map_err(|err| CliError::new(NOT_OBSERVED, "MAN_PAGE", format!("rendering the man page: {err}")))?;
    print_bytes(&page)
}

/// Writes generated text to stdout as it is; a reader that went away ends quietly, as `say!` does.
fn print_bytes(bytes: &[u8]) -> CliResult {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(err) = stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        crate::output::stdout_failed(&err);
    }
    Ok(OK)
}
