//! RFC 3339 timestamps as Google's APIs write them, for the fakes of Compute Engine and Cloud
//! Storage (no date crate for a few lines of civil-calendar arithmetic).

use std::time::SystemTime;

/// `time` at a fixed UTC offset of `offset_hours` (`Z` for 0), with milliseconds.
pub fn at_offset(time: SystemTime, offset_hours: i64) -> String {
    let ms = time.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis()) as i64 + offset_hours * 3_600_000;
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
    let zone = match offset_hours {
        0 => "Z".to_owned(),
        hours => format!("{}{:02}:00", if hours < 0 { '-' } else { '+' }, hours.abs()),
    };
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}{zone}")
}
