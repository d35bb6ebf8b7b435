//! Names users give to resources.

/// Checks that `name` is a DNS label (RFC 1123): 1 to 63 characters of lowercase letters,
/// digits and hyphens, starting and ending with a letter or digit. Cloud resources and
/// Kubernetes objects are named after it, so nothing else is accepted.
pub fn check_dns_label(what: &str, name: &str) -> Result<(), String> {
    let valid_chars = name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let valid_ends = name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && name.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    if name.is_empty() || name.len() > 63 || !valid_chars || !valid_ends {
        return Err(format!(
            "{what} name `{}` is not a DNS label: use 1 to 63 lowercase letters, digits and hyphens, \
             starting and ending with a letter or digit (for example `team-aws`)",
            shown(name)
        ));
    }
    Ok(())
}

pub use anycloud_providers::shown::shown;

#[cfg(test)]
mod tests {
    use super::check_dns_label;

    #[test]
    fn accepts_labels_and_refuses_the_rest() {
        for good in ["a", "team-aws", "x1", &"a".repeat(63)] {
            assert!(check_dns_label("credential", good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "a-", "Team", "a_b", "a.b", "ünï", &"a".repeat(64)] {
            let err = check_dns_label("credential", bad).unwrap_err();
            assert!(err.contains("is not a DNS label"), "{err}");
        }
    }

    #[test]
    fn a_refused_name_is_shown_harmless_and_short() {
        // A Cyrillic `е` looks like `e`: refused, and shown for what it is.
        let err = check_dns_label("cluster", "tеam").unwrap_err();
        assert!(err.contains("name `t\\u{435}am`"), "{err}");
        let err = check_dns_label("cluster", "red\x1b[31m").unwrap_err();
        assert!(!err.contains('\x1b') && err.contains("red\\u{1b}[31m"), "{err}");
        let err = check_dns_label("cluster", &"x".repeat(10_000)).unwrap_err();
        assert!(err.contains(&format!("`{}... (10000 characters)`", "x".repeat(64))), "{err}");
        assert!(err.len() < 400, "{err}");
    }
}
