//! What `--wait`, `--follow` and `--watch` show while they follow something.
//!
//! On a terminal (stdout is one, `TERM` is not `dumb`, no `--json`) one status line is redrawn in
//! place (`\r` and erase-line): a spinner, what is followed, the step of total, the attempt, the
//! elapsed time and what it waits for. It moves on every poll and on a ticker of its own, so the
//! spinner and the clock turn while a request or a poll waits. The follower's permanent lines are
//! printed above it, and it is erased before the outcome is said and whenever the follower
//! returns, an error included (on drop). Colour is only extra (the words say the same), and
//! never with `NO_COLOR` set to anything non-empty (no-color.org).
//!
//! Anywhere else (a pipe, a file, `--json`) the lines are printed exactly as they are given, with
//! no escape sequence at all: scripts and the tests read them.

use std::io::{IsTerminal as _, Write as _};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::output::say;
use crate::render::display_width;

/// The spinner's frames.
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// How often the status line is redrawn when nothing else moves it.
const TICK: Duration = Duration::from_millis(120);
/// Back to the start of the line and erase it.
const ERASE: &str = "\r\x1b[2K";
/// Back to the terminal's own colour.
const RESET: &str = "\x1b[0m";

/// How a line reads at a glance; on a terminal that takes colour, its colour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Tone {
    /// Nothing to flag.
    #[default]
    Plain,
    /// Done, succeeded (green).
    Good,
    /// Failed (red).
    Bad,
    /// Waiting, retrying, unwinding (yellow).
    Waiting,
}

impl Tone {
    fn sgr(self) -> Option<&'static str> {
        match self {
            Self::Plain => None,
            Self::Good => Some("\x1b[32m"),
            Self::Bad => Some("\x1b[31m"),
            Self::Waiting => Some("\x1b[33m"),
        }
    }
}

/// Where the followed thing stands: what the status line shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Stand {
    /// What is followed: `cluster.create demo`, `job nightly`.
    pub subject: String,
    /// The step in hand: its number (from 1), how many there are, its name.
    pub step: Option<(u32, u32, String)>,
    /// The attempt in hand (shown from the second on).
    pub attempt: u32,
    /// Its state in words: `running`, `waiting: the control plane answers`, ...
    pub state: String,
    /// How the state reads.
    pub tone: Tone,
}

/// The display of one follower: a live status line on a terminal, plain lines elsewhere.
pub(crate) struct Progress {
    live: Option<Live>,
}

/// The status line's state, shared with the ticker that redraws it.
struct Live {
    screen: Arc<Mutex<Screen>>,
    colour: bool,
    ticker: tokio::task::AbortHandle,
}

struct Screen {
    stand: Stand,
    since: Instant,
    frame: usize,
    colour: bool,
    /// The status line is on the terminal now.
    shown: bool,
    /// The follower has returned: nothing is drawn any more.
    closed: bool,
}

impl Progress {
    /// The display for following `subject` (`cluster.create demo`); decides, once, whether it
    /// is live. Must be called inside the runtime (the ticker is a task).
    pub(crate) fn start(subject: impl Into<String>, json: bool) -> Self {
        let dumb = std::env::var_os("TERM").is_some_and(|term| term == "dumb");
        if json || dumb || !std::io::stdout().is_terminal() {
            return Self { live: None };
        }
        let colour = std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
        let screen = Arc::new(Mutex::new(Screen {
            stand: Stand { subject: subject.into(), state: "starting".into(), ..Stand::default() },
            since: Instant::now(),
            frame: 0,
            colour,
            shown: false,
            closed: false,
        }));
        let ticking = Arc::clone(&screen);
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            loop {
                tick.tick().await;
                let mut screen = lock(&ticking);
                screen.frame = screen.frame.wrapping_add(1);
                screen.draw();
            }
        })
        .abort_handle();
        Self { live: Some(Live { screen, colour, ticker }) }
    }

    /// Prints a permanent line: above the status line on a terminal (coloured by `tone` where
    /// colour is on), as it is elsewhere.
    pub(crate) fn line(&self, tone: Tone, text: &str) {
        match tone.sgr().filter(|_| self.colour()) {
            Some(sgr) => self.above(|| say!("{sgr}{text}{RESET}")),
            None => self.above(|| say!("{text}")),
        }
    }

    /// Runs `print` (which prints whole lines, or nothing) with the status line out of its way.
    pub(crate) fn above<R>(&self, print: impl FnOnce() -> R) -> R {
        let Some(live) = &self.live else { return print() };
        let mut screen = lock(&live.screen);
        screen.erase();
        let answer = print();
        screen.draw();
        answer
    }

    /// Erases the status line for good, then says how it ended (a permanent line).
    pub(crate) fn finish(self, tone: Tone, text: &str) {
        let sgr = tone.sgr().filter(|_| self.colour());
        drop(self);
        match sgr {
            Some(sgr) => say!("{sgr}{text}{RESET}"),
            None => say!("{text}"),
        }
    }

    fn colour(&self) -> bool {
        self.live.as_ref().is_some_and(|live| live.colour)
    }

    /// The followed thing moved: redraws the status line (nothing without a terminal).
    pub(crate) fn update(&self, stand: Stand) {
        if let Some(live) = &self.live {
            let mut screen = lock(&live.screen);
            screen.stand = stand;
            screen.draw();
        }
    }

    /// The elapsed time counts from `ms` milliseconds ago (the run's start, by the API's clock).
    pub(crate) fn started_ago(&self, ms: i64) {
        if let Some(live) = &self.live {
            let ago = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
            let mut screen = lock(&live.screen);
            screen.since = Instant::now().checked_sub(ago).unwrap_or(screen.since);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(live) = &self.live {
            live.ticker.abort();
            let mut screen = lock(&live.screen);
            screen.erase();
            screen.closed = true;
        }
    }
}

/// The screen, even if a thread panicked holding it (the line is redrawn whole anyway).
fn lock(screen: &Mutex<Screen>) -> MutexGuard<'_, Screen> {
    screen.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Screen {
    fn draw(&mut self) {
        if self.closed {
            return;
        }
        // A terminal that does not know its size (a pty made by a program) says 0 columns.
        let width = rustix::termios::tcgetwinsize(std::io::stdout())
            .map(|size| usize::from(size.ws_col))
            .ok()
            .filter(|columns| *columns > 0)
            .unwrap_or(80);
        let elapsed = self.since.elapsed().as_secs();
        let line = status_line(&self.stand, self.frame, elapsed, self.colour, width);
        // The ticker's writes are best-effort: a follower's own write reports a closed stdout.
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{ERASE}{line}");
        let _ = out.flush();
        self.shown = true;
    }

    fn erase(&mut self) {
        if self.shown {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{ERASE}");
            let _ = out.flush();
            self.shown = false;
        }
    }
}

/// The status line, at most `width - 1` columns (a line that wraps could not be erased):
/// `⠋ cluster.create demo  step 3/7 boot_control_plane  attempt 2  1m04s  waiting: ...`. The
/// state comes last, as it is the part that may be cut.
fn status_line(stand: &Stand, frame: usize, elapsed_s: u64, colour: bool, width: usize) -> String {
    let mut head = format!("{} {}", SPINNER[frame % SPINNER.len()], stand.subject);
    if let Some((number, total, name)) = &stand.step {
        head.push_str(&format!("  step {number}/{total} {name}"));
    }
    if stand.attempt > 1 {
        head.push_str(&format!("  attempt {}", stand.attempt));
    }
    head.push_str(&format!("  {}", clock(elapsed_s)));
    let room = width.saturating_sub(1);
    let head = cut(&head, room);
    let state = cut(&format!("  {}", stand.state), room.saturating_sub(display_width(&head)));
    match stand.tone.sgr().filter(|_| colour && !state.is_empty()) {
        Some(sgr) => format!("{head}{sgr}{state}{RESET}"),
        None => format!("{head}{state}"),
    }
}

/// `text` cut to `width` display columns, with `…` where it was cut.
fn cut(text: &str, width: usize) -> String {
    if display_width(text) <= width {
        return text.to_owned();
    }
    let mut out = String::new();
    for c in text.chars() {
        if display_width(&out) + unicode_width::UnicodeWidthChar::width(c).unwrap_or(0) + 1 > width {
            break;
        }
        out.push(c);
    }
    if width > 0 {
        out.push('…');
    }
    out
}

/// Elapsed time as a clock a person reads at a glance: `8s`, `1m04s`, `2h05m`.
fn clock(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting() -> Stand {
        Stand {
            subject: "cluster.create demo".into(),
            step: Some((3, 7, "boot_control_plane".into())),
            attempt: 2,
            state: "waiting: the control plane answers on 6443".into(),
            tone: Tone::Waiting,
        }
    }

    #[test]
    fn the_status_line_says_step_attempt_time_and_state() {
        let line = status_line(&waiting(), 0, 64, false, 200);
        assert_eq!(
            line,
            "⠋ cluster.create demo  step 3/7 boot_control_plane  attempt 2  1m04s  waiting: the control plane \
             answers on 6443"
        );
        let first = Stand { subject: "x".into(), attempt: 1, tone: Tone::Plain, state: "running".into(), ..waiting() };
        assert_eq!(status_line(&first, 1, 5, false, 200), "⠙ x  step 3/7 boot_control_plane  5s  running");
    }

    #[test]
    fn colour_is_only_around_the_state_and_only_when_asked() {
        let line = status_line(&waiting(), 0, 1, true, 200);
        assert!(line.ends_with("\x1b[33m  waiting: the control plane answers on 6443\x1b[0m"), "{line}");
        assert!(!status_line(&waiting(), 0, 1, false, 200).contains('\x1b'));
    }

    #[test]
    fn a_narrow_terminal_cuts_the_state_first_and_never_wraps() {
        for width in [0, 1, 10, 30, 60, 79] {
            let line = status_line(&waiting(), 0, 64, false, width);
            assert!(display_width(&line) < width.max(1), "{width}: {line:?}");
        }
        let line = status_line(&waiting(), 0, 64, false, 90);
        assert!(line.contains("1m04s  waiting: the contr"), "{line}");
        assert!(line.ends_with('…'), "{line}");
    }

    #[test]
    fn the_clock_reads_at_a_glance() {
        assert_eq!(clock(0), "0s");
        assert_eq!(clock(64), "1m04s");
        assert_eq!(clock(3600 + 5 * 60 + 9), "1h05m");
    }
}
