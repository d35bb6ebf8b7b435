//! No function of `cli/src`, `engine/src`, `providers/src` or `workflows/src` runs over 80 lines
//! (outside their `#[cfg(test)]` modules): a longer one hides its shape, and is split into
//! functions of one idea each. An exception would be listed in [`EXCEPTIONS`] with its reason; there is none.
//!
//! A function is counted from its `fn` line to its closing brace, braces matched with string
//! literals (raw ones too), char literals and comments left out.
#![allow(clippy::unwrap_used)]

use anycloud_tests::source_code::{code_of, root, rust_files};

/// The most lines a function may take.
const LIMIT: usize = 80;

/// `path:function` that may run longer, each with why.
const EXCEPTIONS: &[(&str, &str)] = &[];

/// The name of the function that `line` starts, if it starts one.
fn function_name(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace().peekable();
    while let Some(word) = words.next() {
        match word {
            "fn" => {
                let name = words.next()?;
                return Some(name.split(['(', '<']).next().unwrap_or(name));
            }
            "pub" | "pub(crate)" | "pub(super)" | "async" | "const" | "unsafe" => {}
            _ => return None,
        }
    }
    None
}

/// Every function of `text` (before its test module) longer than [`LIMIT`]: name and lines.
fn long_functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let code = code_of(text);
    let code: Vec<&str> = code.split('\n').collect();
    let end = lines
        .windows(2)
        .position(|pair| pair[0].trim() == "#[cfg(test)]" && pair[1].trim_start().starts_with("mod "))
        .unwrap_or(lines.len());
    let mut long = Vec::new();
    let mut i = 0;
    while i < end {
        let Some(name) = function_name(code.get(i).copied().unwrap_or_default()) else {
            i += 1;
            continue;
        };
        let (mut depth, mut opened, mut j) = (0_i64, false, i);
        while j < code.len() {
            for c in code[j].chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if (opened && depth == 0) || (!opened && code[j].trim_end().ends_with(';')) {
                break;
            }
            j += 1;
        }
        let length = j - i + 1;
        if opened && length > LIMIT {
            long.push((name.to_owned(), length));
        }
        i = if opened { j + 1 } else { i + 1 };
    }
    long
}

#[test]
fn no_function_runs_over_80_lines() {
    let root = root();
    let mut files = Vec::new();
    for dir in ["cli/src", "engine/src", "providers/src", "workflows/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut over = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&root).unwrap().display().to_string();
        for (name, length) in long_functions(&std::fs::read_to_string(&file).unwrap()) {
            let key = format!("{relative}:{name}");
            if !EXCEPTIONS.iter().any(|(exception, _)| *exception == key) {
                over.push(format!("{key} ({length} lines)"));
            }
        }
    }
    assert!(over.is_empty(), "functions over {LIMIT} lines: split each into functions of one idea: {over:#?}");
}

#[test]
fn the_count_sees_what_it_must() {
    let body = "    let x = 1;\n".repeat(LIMIT);
    let long = format!("pub async fn long() {{\n{body}}}\nfn short() {{ '{{'; \"}}\"; }}\n");
    assert_eq!(long_functions(&long), [("long".to_owned(), LIMIT + 2)]);
    let tested = format!("fn short() {{}}\n#[cfg(test)]\nmod tests {{\n    fn long() {{\n{body}    }}\n}}\n");
    assert!(long_functions(&tested).is_empty());
    assert_eq!(code_of("let a = \"{ \\\" {\"; // }\nb"), "let a = ; \nb");
    assert_eq!(code_of("f(r#\"{\n\"}\"#, '{', '\\'', 'a) /* { */ x"), "f(\n, , , 'a)  x");
    assert_eq!(function_name("    pub(crate) fn explain<'a>(x: u8) {"), Some("explain"));
    assert_eq!(function_name("    let fn_name = 1;"), None);
}
