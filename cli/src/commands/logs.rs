//! `anycloud logs ID [--follow]`: a job's output, written to stdout line by line as it arrives.
//!
//! The CLI asks the API for stamped lines (`timestamps=true`) and prints them without their
//! stamps. When the stream breaks after it opened (the API restarted, a connection on the way
//! died), the CLI opens it again from the second of the last line it printed (`since_time`) and
//! skips the lines it already printed ([`LogCursor`]): a followed log neither loses nor repeats a
//! line across a break. It rides out an unreachable API for as long as a follower does.

use std::io::Write as _;
use std::time::Instant;

use anycloud_workflows::kubernetes::log_cursor::{LineBuffer, LogCursor, split_stamp};
use anycloud_workflows::wire::LogsQuery;

use super::deployment::{POLL, path};
use super::outage::UNREACHABLE_FOR;
use crate::client::Client;
use crate::exit::{CliResult, OK};
use crate::output::stdout_failed;

/// `anycloud logs ID`: the output so far, or with `follow` until the container ends.
pub async fn logs(key: &str, follow: bool) -> CliResult {
    let client = Client::active()?;
    let mut reader = Reader::default();
    let mut opened = false;
    let mut broken_since: Option<Instant> = None;
    loop {
        let query = LogsQuery { follow, timestamps: true, since_time: reader.cursor.since_time() };
        let mut received = false;
        let read = client
            .get_streamed(&format!("{}/logs", path(key)), &query, |chunk| {
                received = true;
                reader.push(chunk);
            })
            .await;
        let err = match read {
            Ok(()) => {
                reader.finish();
                return Ok(OK);
            }
            Err(err) => err,
        };
        // A stream that broke had opened; an unreachable API is waited for only once a stream
        // has opened (the API may be restarting), not on the first try.
        opened = opened || received || err.error_code == "STREAM_BROKEN";
        let resumable = err.error_code == "STREAM_BROKEN" || err.error_code == "API_UNREACHABLE";
        if !opened || !resumable {
            return Err(err);
        }
        if received {
            broken_since = None;
        }
        let since = *broken_since.get_or_insert_with(Instant::now);
        if since.elapsed() > UNREACHABLE_FOR {
            return Err(err);
        }
        if received {
            eprintln!("note: the log stream broke ({}); reading on from where it was", err.message);
        }
        reader.reopened();
        tokio::time::sleep(POLL).await;
    }
}

/// What has been read and printed so far.
#[derive(Default)]
struct Reader {
    cursor: LogCursor,
    lines: LineBuffer,
}

impl Reader {
    /// Prints the new lines `chunk` completes.
    fn push(&mut self, chunk: &[u8]) {
        for line in self.lines.push(chunk) {
            self.print(&line);
        }
    }

    /// The stream ended: prints a last line that had no newline.
    fn finish(&mut self) {
        if let Some(rest) = self.lines.rest() {
            self.print(&rest);
        }
    }

    /// The stream is opened again: a line it cut is read whole from the new one.
    fn reopened(&mut self) {
        self.lines.clear();
        self.cursor.reopened();
    }

    fn print(&mut self, line: &[u8]) {
        let text = match split_stamp(line) {
            Some((stamp, rest)) if self.cursor.pass(stamp) => rest,
            Some(_) => return,
            None => line,
        };
        let mut stdout = std::io::stdout();
        if let Err(err) = stdout.write_all(text).and_then(|()| stdout.flush()) {
            stdout_failed(&err);
        }
    }
}
