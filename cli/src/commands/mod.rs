//! One module per command group.

use std::time::Duration;

use crate::output::say;

pub mod api;
pub mod cluster;
pub mod credentials;
pub mod workflow;

/// Prints a value as pretty JSON (for `--json`).
pub fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => say!("{text}"),
        Err(err) => eprintln!("error[ENCODING]: could not encode the answer as JSON: {err}"),
    }
}

/// The longest a command waits for anything: a week.
pub const MAX_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parses `30s`, `5m`, `2h`, `1d` or plain seconds, from 1 s to a week.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let unit_seconds = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("`{text}` has an unknown unit; use s, m, h or d (e.g. 15m)")),
    };
    let value: u64 = number.parse().map_err(|_| format!("`{text}` is not a duration; write it like 90s, 15m or 1h"))?;
    match value.checked_mul(unit_seconds) {
        Some(seconds) if (1..=MAX_WAIT.as_secs()).contains(&seconds) => Ok(Duration::from_secs(seconds)),
        _ => Err(format!("`{text}` is out of range: use 1s to 7d")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_a_range_and_never_overflow() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("7d"), Ok(MAX_WAIT));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        for bad in ["0s", "8d", "169h", "18446744073709551615h", "99999999999999999999999s"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("out of range") || err.contains("not a duration"), "{bad}: {err}");
        }
        assert!(parse_duration("5w").unwrap_err().contains("unknown unit"));
    }
}
