//! Times as Kubernetes writes them (RFC 3339, whole seconds, UTC) and ages as kubectl prints
//! them (`HumanDuration`: `45s`, `3m20s`, `5h`, `2d3h`).

use jiff::Timestamp;
use serde_json::Value;

/// Now, to the second: `2026-01-01T00:00:00Z`.
pub(crate) fn now() -> String {
    Timestamp::from_second(Timestamp::now().as_second()).map(|t| t.to_string()).unwrap_or_default()
}

/// Seconds since the epoch of a timestamp field, if it holds one.
pub(crate) fn seconds(value: &Value) -> Option<i64> {
    value.as_str()?.parse::<Timestamp>().ok().map(|t| t.as_second())
}

/// Seconds since the epoch, now.
pub(crate) fn now_seconds() -> i64 {
    Timestamp::now().as_second()
}

/// How long ago a timestamp field was, as kubectl's AGE column says it (`<unknown>` if unset).
pub(crate) fn age(value: &Value) -> String {
    match seconds(value) {
        Some(then) => human(now_seconds() - then),
        None => "<unknown>".to_owned(),
    }
}

/// apimachinery's `duration.HumanDuration`.
pub(crate) fn human(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        assert_eq!(human(45), "45s");
        assert_eq!(human(200), "3m20s");
        assert_eq!(human(3600 * 5), "5h");
        assert_eq!(human(3600 * 51), "2d3h");
    }

    #[test]
    fn timestamps_are_whole_seconds_in_utc() {
        let now = now();
        assert!(now.ends_with('Z') && !now.contains('.'), "{now}");
        assert!(seconds(&Value::String(now)).is_some());
    }
}
