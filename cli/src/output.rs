//! Writing to stdout like a Unix tool: when the reader has gone (`anycloud ... | head`), the
//! command ends quietly with exit 0 instead of panicking on the broken pipe.

/// `println!` for command output: a closed stdout ends the process quietly.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(err) = writeln!(std::io::stdout(), $($arg)*) {
            $crate::output::stdout_failed(&err);
        }
    }};
}
pub(crate) use say;

/// A write to stdout failed: a reader that went away ends the command (exit 0, as `head`
/// expects); anything else is reported on stderr (exit 2).
pub fn stdout_failed(err: &std::io::Error) -> ! {
    if err.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: writing to stdout: {err}");
    std::process::exit(i32::from(crate::exit::NOT_OBSERVED));
}
