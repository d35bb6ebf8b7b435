//! Output for people: aligned tables, times, durations.

use crate::output::say;

/// Prints rows under a header, columns padded to their widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    for line in table_lines(header, rows) {
        say!("{line}");
    }
}

/// The lines of [`table`]: each column as wide as its widest cell on a terminal, two spaces
/// apart. Widths are display columns, not bytes or chars: `é` takes one, `漢` two, a combining
/// accent none; padding by `format!`'s width (chars) would push every cell after a wide one out.
pub fn table_lines(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|cell| display_width(cell)).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(display_width(cell));
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (cell, width) in cells.zip(&widths) {
            out.push_str(cell);
            out.extend(std::iter::repeat_n(' ', width - display_width(cell) + 2));
        }
        out.trim_end().to_owned()
    };
    let mut lines = vec![line(&mut header.iter().copied())];
    lines.extend(rows.iter().map(|row| line(&mut row.iter().map(String::as_str))));
    lines
}

/// The columns `text` takes on a terminal.
pub fn display_width(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(text)
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

    /// Every column starts at the same terminal column on every line, whatever its cells hold:
    /// a non-ASCII letter, a wide (CJK) value, a combining accent, a cell longer than its header.
    #[test]
    fn table_columns_line_up_by_display_width() {
        let header = ["NAME", "STATE", "NOTE"];
        let rows = vec![
            vec!["é".to_owned(), "running".to_owned(), "x".to_owned()],
            vec!["漢字-job".to_owned(), "ok".to_owned(), "wide".to_owned()],
            vec!["e\u{301}t\u{e9}".to_owned(), "a-much-longer-state".to_owned(), "-".to_owned()],
            vec!["plain".to_owned(), "q".to_owned(), "last".to_owned()],
        ];
        let lines = table_lines(&header, &rows);
        assert_eq!(lines.len(), 5);
        // Where each column starts, in display columns: the same on every line.
        let starts = |line: &str, cells: &[&str]| -> Vec<usize> {
            let mut at = 0;
            let mut starts = Vec::new();
            for cell in cells {
                let byte = line[at..].find(cell).unwrap() + at;
                starts.push(display_width(&line[..byte]));
                at = byte + cell.len();
            }
            starts
        };
        let expected = starts(&lines[0], &header);
        assert_eq!(expected, [0, 10, 31], "{lines:#?}");
        for (line, row) in lines[1..].iter().zip(&rows) {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            assert_eq!(starts(line, &cells), expected, "{lines:#?}");
        }
        assert_eq!(lines[1], "é         running              x");
        assert!(lines.iter().all(|line| !line.ends_with(' ')), "{lines:#?}");
    }
}
