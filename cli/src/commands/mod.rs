//! One module per command group.

use std::time::Duration;

use crate::output::say;

pub mod api;
pub mod api_serve;
pub mod cluster;
pub mod credentials;
pub mod credentials_wizard;
pub mod deployment;
pub mod exec;
pub mod hosted_api;
pub mod job;
pub mod logs;
pub mod outage;
pub mod secret;
pub mod service;
pub mod shell;
pub mod ui;
pub mod workflow;

/// Prints a value as pretty JSON (for `--json`).
pub fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => say!("{text}"),
        Err(err) => eprintln!("error[ENCODING]: could not encode the answer as JSON: {err}"),
    }
}

/// Every entry of a list the API answers a page at a time, by name (`?limit&after`, at most
/// [`anycloud_workflows::operations::PAGE_LIMIT`] a page): asks for the page after the last name
/// until one comes short.
pub(crate) async fn every_page<L, T>(
    client: &crate::client::Client,
    path: &str,
    entries: impl Fn(L) -> Vec<T>,
    name: impl Fn(&T) -> &str,
) -> Result<Vec<T>, crate::exit::CliError>
where
    L: serde::de::DeserializeOwned,
{
    use anycloud_workflows::operations::PAGE_LIMIT;
    let mut all: Vec<T> = Vec::new();
    loop {
        let after = all.last().map(|last| name(last).to_owned());
        let query = anycloud_workflows::wire::NamesQuery { limit: Some(PAGE_LIMIT), after };
        let page = entries(client.get_query(path, &query).await?);
        let full = page.len() >= PAGE_LIMIT as usize;
        all.extend(page);
        if !full {
            return Ok(all);
        }
    }
}

/// The longest a command waits for anything: a week.
pub const MAX_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parses `30s`, `5m`, `2h`, `1d` or plain seconds, from 1 s to a week.
///
/// Also the parser of every other number a user types with a bound (`--sim-latency-ms`, ...):
/// see [`at_most`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    if number.is_empty() {
        return Err(format!("`{text}` is not a duration; write it like 90s, 15m or 1h"));
    }
    let unit_seconds = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("`{text}` has an unknown unit; use s, m, h or d (e.g. 15m)")),
    };
    // All digits: a number too large for a u64 is out of range too.
    match number.parse::<u64>().ok().and_then(|value| value.checked_mul(unit_seconds)) {
        Some(seconds) if (1..=MAX_WAIT.as_secs()).contains(&seconds) => Ok(Duration::from_secs(seconds)),
        _ => Err(format!("`{text}` is out of range: use 1s to 7d")),
    }
}

/// A clap parser for a whole number from 0 to `max`, whose error says the range whatever was
/// typed (a negative number, one too large for any integer).
pub fn at_most(max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text: &str| match text.trim().parse::<i128>() {
        Ok(value) if (0..=i128::from(max)).contains(&value) => Ok(value as u64),
        Ok(_) => Err(format!("`{text}` is out of range: use 0 to {max}")),
        Err(_)
            if text.trim().trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) && !text.trim().is_empty() =>
        {
            Err(format!("`{text}` is out of range: use 0 to {max}"))
        }
        Err(_) => Err(format!("`{text}` is not a whole number; use 0 to {max}")),
    }
}

/// Reads a file a person named, refusing one over `limit` bytes before reading it whole (a
/// wrong path can name a disk image or `/dev/zero`). The error names the file and `what` it
/// should have been.
pub fn read_small_file(path: &std::path::Path, limit: u64, what: &str) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let too_big = |size: u64| {
        format!(
            "{what} {} is {size} bytes or more; it should be at most {limit}: is it the right file?",
            path.display()
        )
    };
    let file = std::fs::File::open(path).map_err(|err| format!("reading the {what} {}: {err}", path.display()))?;
    let size = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    if size > limit {
        return Err(too_big(size));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| format!("reading the {what} {}: {err}", path.display()))?;
    if bytes.len() as u64 > limit {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_files_are_size_checked_before_they_are_read() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let small = dir.path().join("small");
        std::fs::write(&small, b"KEY=value\n").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(read_small_file(&small, 64, "env file"), Ok(b"KEY=value\n".to_vec()));
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 65]).unwrap_or_else(|err| panic!("{err}"));
        let refused = read_small_file(&big, 64, "env file").unwrap_err();
        assert!(refused.contains("is 65 bytes or more; it should be at most 64"), "{refused}");
        // A device reports no size: the read stops one byte past the limit.
        let zero = read_small_file(std::path::Path::new("/dev/zero"), 64, "env file").unwrap_err();
        assert!(zero.contains("at most 64"), "{zero}");
        assert!(read_small_file(&dir.path().join("missing"), 64, "env file").unwrap_err().contains("missing"));
    }

    #[test]
    fn durations_have_a_range_and_never_overflow() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("7d"), Ok(MAX_WAIT));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        for bad in ["0s", "8d", "169h", "18446744073709551615h", "99999999999999999999999s"] {
            assert_eq!(parse_duration(bad).unwrap_err(), format!("`{bad}` is out of range: use 1s to 7d"));
        }
        assert!(parse_duration("-5s").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn bounded_numbers_say_their_range_whatever_was_typed() {
        let parse = at_most(60_000);
        assert_eq!(parse("60000"), Ok(60_000));
        for bad in ["60001", "-1", "99999999999999999999999999999"] {
            assert_eq!(parse(bad).unwrap_err(), format!("`{bad}` is out of range: use 0 to 60000"));
        }
        assert_eq!(parse("ten").unwrap_err(), "`ten` is not a whole number; use 0 to 60000");
        assert!(parse_duration("5w").unwrap_err().contains("unknown unit"));
    }
}
