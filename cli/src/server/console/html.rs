//! HTML for the console's pages: escaping, the page around every page's content, tables, and
//! the words for states (a state is always written, never only coloured).

use std::fmt::Write as _;

/// `text` safe inside an element or a quoted attribute.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            _ => escaped.push(c),
        }
    }
    escaped
}

/// A state in words, in a badge whose class colours it: `good`, `busy`, `bad` or `idle`.
pub fn state(words: &str) -> String {
    let tone = match words {
        "succeeded" | "ready" | "running" | "completed" | "valid" | "ok" => "good",
        "failed" | "needs-attention" | "rejected" | "error" | "cancelled" => "bad",
        "pending" | "waiting" | "retrying" | "unwinding" | "creating" | "deleting" | "deploying" | "upgrading"
        | "verifying" | "queued" | "starting" => "busy",
        _ => "idle",
    };
    format!(r#"<span class="state {tone}">{}</span>"#, escape(words))
}

/// A table: a caption, the header's cells, and rows of cells that are HTML already.
pub fn table(caption: &str, header: &[&str], rows: &[Vec<String>], empty: &str) -> String {
    if rows.is_empty() {
        return format!(r#"<section><h2>{}</h2><p class="empty">{}</p></section>"#, escape(caption), escape(empty));
    }
    let mut html = format!(r#"<section><h2>{}</h2><table><thead><tr>"#, escape(caption));
    for cell in header {
        let _ = write!(html, r#"<th scope="col">{}</th>"#, escape(cell));
    }
    html.push_str("</tr></thead><tbody>");
    for row in rows {
        html.push_str("<tr>");
        for cell in row {
            let _ = write!(html, "<td>{cell}</td>");
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table></section>");
    html
}

/// A link.
pub fn link(href: &str, text: &str) -> String {
    format!(r#"<a href="{}">{}</a>"#, escape(href), escape(text))
}

/// A whole page: the navigation, `content`, and the sign-out form (with the session's `csrf`
/// token, when signed in). `live`: the page reloads its `<main>` every 2 s (console.js).
pub fn page(title: &str, csrf: Option<&str>, live: bool, content: &str) -> String {
    let nav = match csrf {
        Some(csrf) => format!(
            r#"<nav aria-label="Console"><a href="/ui">Overview</a> <a href="/ui/workflows">Workflows</a> <a href="/ui/api">API</a>
<form method="post" action="/ui/sign-out" class="inline"><input type="hidden" name="csrf" value="{}"><button type="submit">Sign out</button></form></nav>"#,
            escape(csrf)
        ),
        None => String::new(),
    };
    let live = if live { r#" data-live="2000""# } else { "" };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Anycloud</title><link rel="icon" href="/ui/assets/icon.svg"><link rel="stylesheet" href="/ui/assets/console.css"><script src="/ui/assets/console.js" defer></script></head>
<body><header><a class="brand" href="/ui">Anycloud</a>{nav}</header>
<main id="main"{live}><h1>{title}</h1>
{content}
</main></body></html>"#,
        title = escape(title),
    )
}

/// "3 s ago", "in 2 min": `at` against `now` (milliseconds).
pub fn relative(at: i64, now: i64) -> String {
    let seconds = (now - at) / 1000;
    let (amount, ago) = if seconds >= 0 { (seconds, true) } else { (-seconds, false) };
    let span = match amount {
        0..60 => format!("{amount} s"),
        60..3600 => format!("{} min", amount / 60),
        3600..86400 => format!("{} h", amount / 3600),
        _ => format!("{} d", amount / 86400),
    };
    if ago { format!("{span} ago") } else { format!("in {span}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_text() {
        assert_eq!(escape(r#"<script>"a"&'b'</script>"#), "&lt;script&gt;&quot;a&quot;&amp;&#39;b&#39;&lt;/script&gt;");
        assert!(table("t", &["h"], &[vec![escape("<b>")]], "").contains("<td>&lt;b&gt;</td>"));
    }

    #[test]
    fn a_state_is_in_words_with_its_tone() {
        assert_eq!(state("needs-attention"), r#"<span class="state bad">needs-attention</span>"#);
        assert_eq!(relative(0, 5_000), "5 s ago");
        assert_eq!(relative(130_000, 10_000), "in 2 min");
    }
}
