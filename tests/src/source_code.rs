//! Reading the workspace's own Rust sources, for the tests that hold the code to its shape
//! (`function_length.rs`, `module_circles.rs`): the files of a folder, and their code with
//! string literals, char literals and comments left out.

use std::path::{Path, PathBuf};

/// The workspace's root folder.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the tests crate is inside the workspace").to_path_buf()
}

/// Every `.rs` file under `dir`, into `found`.
pub fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|err| panic!("reading {}: {err}", dir.display())).path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// `text` with the contents of its string literals (raw ones too), char literals and comments
/// left out, its lines kept: what is left is code, whose braces can be counted.
pub fn code_of(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut code = String::with_capacity(text.len());
    let mut i = 0;
    // Keeps the line breaks of what is skipped, so that line numbers stay.
    let skip_to = |code: &mut String, from: usize, to: usize| {
        code.extend(chars[from..to.min(chars.len())].iter().filter(|c| **c == '\n'));
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = chars[i..].iter().position(|c| *c == '\n').map_or(chars.len(), |at| i + at);
            i = end;
        } else if c == '/' && next == Some('*') {
            let end = find(&chars, i + 2, &['*', '/']).map_or(chars.len(), |at| at + 2);
            skip_to(&mut code, i, end);
            i = end;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !is_ident(chars.get(i.wrapping_sub(1))) {
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                code.push(c);
                i += 1;
                continue;
            }
            let closing: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let end = find(&chars, i + 2 + hashes, &closing).map_or(chars.len(), |at| at + closing.len());
            skip_to(&mut code, i, end);
            i = end;
        } else if c == '"' {
            let mut end = i + 1;
            while end < chars.len() && chars[end] != '"' {
                end += if chars[end] == '\\' { 2 } else { 1 };
            }
            skip_to(&mut code, i, end + 1);
            i = end + 1;
        } else if c == '\'' && next == Some('\\') {
            // `'\''`, `'\n'`, `'\u{7f}'`: the escaped char, then up to the closing quote.
            let end = chars[(i + 3).min(chars.len())..]
                .iter()
                .position(|c| *c == '\'')
                .map_or(chars.len(), |at| i + 3 + at + 1);
            i = end;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            code.push(c);
            i += 1;
        }
    }
    code
}

/// Where `pattern` first occurs in `chars` at or after `from`.
fn find(chars: &[char], from: usize, pattern: &[char]) -> Option<usize> {
    (from..chars.len().saturating_sub(pattern.len() - 1)).find(|at| chars[*at..].starts_with(pattern))
}

fn is_ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}
