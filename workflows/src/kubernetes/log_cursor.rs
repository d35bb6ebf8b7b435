//! Where a reader of a container's log stands, so that a stream that broke can be opened again
//! and resumed without losing or repeating a line.
//!
//! Kubernetes has no offset into a container's log; what it offers a client that reconnects is
//! `timestamps=true` (every line starts with the time the runtime read it, RFC 3339 with
//! nanoseconds, then a space) and `sinceTime` (only lines stamped at or after that time; the
//! kubelet skips a line only when its stamp is *before* `sinceTime`). kube-rs sends `sinceTime`
//! in whole seconds, so the cursor asks from the start of the second of the last line it
//! passed, and on the new stream skips every line stamped earlier than that line, and as many of
//! the lines stamped exactly as it as it had already passed. This is how log shippers such as
//! Fluent Bit and stern resume (kubectl itself does not reconnect).

use k8s_openapi::jiff::{RoundMode, Timestamp, TimestampRound, Unit};

/// The position of a reader in a container's log, by the stamps of the lines it passed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogCursor {
    /// The stamp of the last line passed.
    last: Option<Timestamp>,
    /// How many lines stamped `last` were passed.
    passed_at_last: usize,
    /// How many lines stamped `last` the current stream has shown (passed or skipped).
    shown_at_last: usize,
}

impl LogCursor {
    /// A cursor at the start of the log.
    pub fn new() -> Self {
        Self::default()
    }

    /// The `sinceTime` to ask for when the stream is opened again: the start of the second of the
    /// last line passed (none at the start of the log).
    pub fn since_time(&self) -> Option<Timestamp> {
        let floor = TimestampRound::new().smallest(Unit::Second).mode(RoundMode::Floor);
        self.last.and_then(|last| last.round(floor).ok())
    }

    /// The stream was opened again from [`LogCursor::since_time`]: the lines it repeats are
    /// about to be shown once more.
    pub fn reopened(&mut self) {
        self.shown_at_last = 0;
    }

    /// Whether the line stamped `stamp` is new (and then passes it), or one the reader already
    /// passed before the stream was opened again.
    pub fn pass(&mut self, stamp: Timestamp) -> bool {
        match self.last {
            Some(last) if stamp < last => false,
            Some(last) if stamp == last => {
                self.shown_at_last += 1;
                if self.shown_at_last <= self.passed_at_last {
                    return false;
                }
                self.passed_at_last += 1;
                true
            }
            _ => {
                self.last = Some(stamp);
                self.passed_at_last = 1;
                self.shown_at_last = 1;
                true
            }
        }
    }
}

/// A line of a log read with `timestamps=true`, split into its stamp and the rest (the line as
/// the container wrote it). `None` when it does not start with a stamp.
pub fn split_stamp(line: &[u8]) -> Option<(Timestamp, &[u8])> {
    let space = line.iter().position(|&byte| byte == b' ')?;
    let stamp = std::str::from_utf8(&line[..space]).ok()?.parse::<Timestamp>().ok()?;
    Some((stamp, &line[space + 1..]))
}

/// Reads lines out of the chunks of a stream, keeping a line cut between two chunks until its end
/// arrives.
#[derive(Debug, Default)]
pub struct LineBuffer {
    partial: Vec<u8>,
}

impl LineBuffer {
    /// The complete lines (each with its `\n`) that `chunk` finishes.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        self.partial.extend_from_slice(chunk);
        let mut lines = Vec::new();
        while let Some(end) = self.partial.iter().position(|&byte| byte == b'\n') {
            lines.push(self.partial.drain(..=end).collect());
        }
        lines
    }

    /// What is left after the last `\n`, once the stream has ended cleanly.
    pub fn rest(&mut self) -> Option<Vec<u8>> {
        (!self.partial.is_empty()).then(|| std::mem::take(&mut self.partial))
    }

    /// Drops a line cut by a broken stream (the reopened stream sends it whole).
    pub fn clear(&mut self) {
        self.partial.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_reopened_stream_repeats_nothing_and_loses_nothing() {
        let mut cursor = LogCursor::new();
        assert_eq!(cursor.since_time(), None);
        for time in ["2026-01-01T00:00:01.5Z", "2026-01-01T00:00:02.25Z", "2026-01-01T00:00:02.25Z"] {
            assert!(cursor.pass(stamp(time)));
        }
        assert_eq!(cursor.since_time(), Some(stamp("2026-01-01T00:00:02Z")));
        cursor.reopened();
        // The kubelet sends again every line stamped from 00:00:02 on.
        assert!(!cursor.pass(stamp("2026-01-01T00:00:02.25Z")));
        assert!(!cursor.pass(stamp("2026-01-01T00:00:02.25Z")));
        // A third line with the same stamp had not been passed.
        assert!(cursor.pass(stamp("2026-01-01T00:00:02.25Z")));
        assert!(cursor.pass(stamp("2026-01-01T00:00:03Z")));
        cursor.reopened();
        assert!(!cursor.pass(stamp("2026-01-01T00:00:02.25Z")));
        assert!(!cursor.pass(stamp("2026-01-01T00:00:03Z")));
        assert!(cursor.pass(stamp("2026-01-01T00:00:03.1Z")));
    }

    #[test]
    fn the_since_time_is_the_start_of_the_second_never_after_the_line() {
        let mut cursor = LogCursor::new();
        cursor.pass(stamp("2026-01-01T00:00:09.999999999Z"));
        assert_eq!(cursor.since_time(), Some(stamp("2026-01-01T00:00:09Z")));
    }

    #[test]
    fn stamps_split_from_the_line() {
        let (time, rest) = split_stamp(b"2026-01-01T00:00:01.123456789Z hello world\n").unwrap();
        assert_eq!(time, stamp("2026-01-01T00:00:01.123456789Z"));
        assert_eq!(rest, b"hello world\n");
        assert_eq!(split_stamp(b"2026-01-01T00:00:01Z \n").unwrap().1, b"\n");
        assert!(split_stamp(b"no stamp here\n").is_none());
        assert!(split_stamp(b"nospace").is_none());
    }

    #[test]
    fn lines_cut_between_chunks_come_out_whole() {
        let mut lines = LineBuffer::default();
        assert!(lines.push(b"a b").is_empty());
        assert_eq!(lines.push(b"c\nd\ne"), vec![b"a bc\n".to_vec(), b"d\n".to_vec()]);
        assert_eq!(lines.rest(), Some(b"e".to_vec()));
        assert_eq!(lines.rest(), None);
    }
}
