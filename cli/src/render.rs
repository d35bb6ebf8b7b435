//! Output for people: aligned tables, times, durations.

use crate::output::say;

/// Prints rows under a header, columns padded to their widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        say!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// A UTC time from milliseconds since the epoch: `2026-12-02 10:04:05.123Z`.
pub fn time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        ms.rem_euclid(1000)
    )
}

/// A duration in the unit a person reads best.
pub fn duration(ms: i64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 120_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms if ms < 7_200_000 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
        ms => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// When, relative to now: `in 2.0 s` or `3.1 s ago`.
pub fn relative(ms: i64, now: i64) -> String {
    if ms >= now { format!("in {}", duration(ms - now)) } else { format!("{} ago", duration(now - ms)) }
}

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_times_and_durations() {
        assert_eq!(time(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(time(1_796_205_061_890), "2026-12-02 09:51:01.890Z");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00.000Z");
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(2_500), "2.5 s");
        assert_eq!(duration(185_000), "3 min 5 s");
        assert_eq!(relative(3_000, 1_000), "in 2.0 s");
    }
}
