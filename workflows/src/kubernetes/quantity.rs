//! Kubernetes quantities (`500m`, `2`, `1.5`, `512Mi`, `1G`, `8023456Ki`, `1e3`) read as numbers
//! of their base unit (CPU cores, bytes): what comparing a Pod's requests with a node's
//! allocatable needs. The grammar is the API's: a signed decimal, then a binary suffix (`Ki` to
//! `Ei`), a decimal one (`n`, `u`, `m`, `k`, `M` to `E`) or a decimal exponent (`e3`, `E-2`).

/// The quantity's value in its base unit; `None` when it is not a quantity.
pub fn parse(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-'))).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number == "." {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let multiplier = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent => {
            let digits = exponent.strip_prefix(['e', 'E'])?;
            10f64.powi(digits.parse::<i32>().ok()?)
        }
    };
    Some(value * multiplier)
}

/// CPU cores as a person reads them: `2`, `0.5`.
pub fn cores(value: f64) -> String {
    let rounded = (value * 1000.0).round() / 1000.0;
    format!("{rounded}")
}

/// Bytes as a person reads them, in the largest binary unit that keeps one decimal: `1.5 GiB`.
pub fn bytes(value: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = value;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let rounded = (value * 10.0).round() / 10.0;
    format!("{rounded} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_the_api_writes_them() {
        assert_eq!(parse("2"), Some(2.0));
        assert_eq!(parse("500m"), Some(0.5));
        assert_eq!(parse("1.5"), Some(1.5));
        assert_eq!(parse("512Mi"), Some(512.0 * 1024.0 * 1024.0));
        assert_eq!(parse("8023456Ki"), Some(8_023_456.0 * 1024.0));
        assert_eq!(parse("1G"), Some(1e9));
        assert_eq!(parse("1e3"), Some(1000.0));
        assert_eq!(parse("1E"), Some(1e18));
        for bad in ["", "abc", "1Xi", "Mi", "."] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn amounts_read_as_people_read_them() {
        assert_eq!(cores(64.0), "64");
        assert_eq!(cores(0.25), "0.25");
        assert_eq!(bytes(1.5 * 1024.0 * 1024.0 * 1024.0), "1.5 GiB");
        assert_eq!(bytes(512.0), "512 B");
    }
}
