//! Kubernetes quantities (`500m`, `2`, `1.5`, `512Mi`, `1G`, `1e3`), as `resource.Quantity`
//! parses them (<https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/>):
//! a signed decimal number, then a binary suffix (`Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`), a decimal
//! one (`n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal exponent (`e3`, `E-2`). The
//! scheduler compares them in thousandths (millicores of CPU, millibytes of memory), rounded up
//! as the apiserver rounds a quantity to its smallest unit.

/// The quantity in thousandths of its unit (`500m` is 500, `2` is 2000, `1Ki` is 1 024 000), or
/// `None` if it is not one.
pub(crate) fn milli(text: &str) -> Option<i128> {
    let text = text.trim();
    let number_end =
        text.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let (negative, digits) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if (whole.is_empty() && fraction.is_empty()) || !(whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    // The number as an integer over 10^fraction digits.
    let mantissa: i128 = format!("{whole}{fraction}").parse().ok()?;
    let scale = i32::try_from(fraction.len()).ok()?;
    let (binary, decimal): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        exponent => {
            let digits = exponent.strip_prefix(['e', 'E'])?;
            (0, digits.parse().ok().filter(|e: &i32| e.abs() <= 18)?)
        }
    };
    // value = mantissa * 2^binary * 10^(decimal - scale); in thousandths: * 10^3.
    let power = decimal - scale + 3;
    let shifted = mantissa.checked_mul(1i128.checked_shl(binary)?)?;
    let value = if power >= 0 {
        shifted.checked_mul(10i128.checked_pow(power.unsigned_abs())?)?
    } else {
        let divisor = 10i128.checked_pow(power.unsigned_abs())?;
        // Rounded up, as the apiserver rounds `0.1m` to `1m`.
        (shifted + divisor - 1) / divisor
    };
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kubernetes_reads_them() {
        assert_eq!(milli("500m"), Some(500));
        assert_eq!(milli("2"), Some(2000));
        assert_eq!(milli("1.5"), Some(1500));
        assert_eq!(milli("0.1m"), Some(1));
        assert_eq!(milli("512Mi"), Some(512 * 1024 * 1024 * 1000));
        assert_eq!(milli("1G"), Some(1_000_000_000_000));
        assert_eq!(milli("1e3"), Some(1_000_000));
        assert_eq!(milli("16318312Ki"), Some(16_318_312 * 1024 * 1000));
        assert_eq!(milli("-1"), Some(-1000));
        for bad in ["", "m", "1x", "1.2.3", "Mi", "1e99"] {
            assert_eq!(milli(bad), None, "{bad}");
        }
    }
}
