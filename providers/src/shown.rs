//! Text from outside (a name, a URL) as a message may show it.

/// A refused name as an error message may show it: every character outside printable ASCII
/// escaped (`\u{430}` for a Cyrillic look-alike of `a`, `\u{1b}` for a terminal escape, which
/// must not reach the person's terminal), and a long one cut after 64 characters with its length.
pub fn shown(name: &str) -> String {
    let escaped =
        |c: char| if c.is_ascii_graphic() || c == ' ' { c.to_string() } else { c.escape_unicode().to_string() };
    let count = name.chars().count();
    let mut text: String = name.chars().take(64).map(escaped).collect();
    if count > 64 {
        text.push_str(&format!("... ({count} characters)"));
    }
    text
}
