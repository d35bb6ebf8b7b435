//! docs/architecture.md cannot go stale: every path it names exists, every `Type::item` and
//! `module::item` it names is defined, every `file.rs::function` is in its file, and its list of
//! crate dependencies is exactly what the Cargo.toml files say.
//!
//! What the map names is read from its code spans (`...`) and bold spans (**...**), outside the
//! fenced diagram. A path is resolved from the workspace's root, else as the end of a path in the
//! workspace (the map often names `store/claim.rs` or `listener.rs` after naming their folder);
//! `{a,b}.rs` names each; a span with `<` is a pattern (`workflows/src/<kind>.rs`), not checked.
//! A name is "defined" when some source file of the workspace declares it (`fn`, `struct`, `enum`,
//! `trait`, `type`, `const`, `static`, `mod`, or a field or variant of that name).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The crates of the workspace, by folder.
const CRATES: [&str; 7] = ["engine", "checkpoint", "providers", "workflows", "sim", "cli", "tests"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn map() -> String {
    std::fs::read_to_string(root().join("docs/architecture.md")).unwrap()
}

/// Every file and folder of the workspace that the map may name, as paths from its root
/// (folders with a trailing `/`).
fn workspace_paths() -> Vec<String> {
    let root = root();
    let mut paths: Vec<String> = CRATES.iter().chain(["docs", "scripts"].iter()).map(|top| format!("{top}/")).collect();
    let mut pending: Vec<PathBuf> = CRATES.iter().chain(["docs", "scripts"].iter()).map(|top| root.join(top)).collect();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name == "target") {
                    continue;
                }
                paths.push(format!("{relative}/"));
                pending.push(path);
            } else {
                paths.push(relative);
            }
        }
    }
    paths
}

/// The text of every Rust source file of the workspace, one string.
fn all_sources(paths: &[String]) -> String {
    paths
        .iter()
        .filter(|path| path.ends_with(".rs"))
        .map(|path| std::fs::read_to_string(root().join(path)).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The code and bold spans of `text`, outside fenced blocks.
fn spans(text: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    let mut found = Vec::new();
    for (marker, step) in [("**", 2), ("`", 1)] {
        let mut rest = prose.as_str();
        while let Some(start) = rest.find(marker) {
            let after = &rest[start + step..];
            let Some(end) = after.find(marker) else { break };
            found.push(after[..end].trim().to_owned());
            rest = &after[end + step..];
        }
    }
    found
}

/// `a/{b,c}.rs` as `a/b.rs` and `a/c.rs`.
fn expand(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .map(|choice| format!("{}{}{}", &path[..open], choice.trim(), &path[close + 1..]))
            .collect(),
        _ => vec![path.to_owned()],
    }
}

/// Whether `word` looks like a path: a file of the kinds the map names, or a folder.
fn is_path(word: &str) -> bool {
    !word.contains(' ')
        && !word.contains('<')
        && !word.contains('*')
        && (word.ends_with(".rs")
            || word.ends_with(".md")
            || word.ends_with(".toml")
            || word.ends_with(".sql")
            || (word.ends_with('/') && word.len() > 1))
}

/// The path it names, if `path` resolves: from the root, or as the end of a workspace path.
fn resolve<'a>(path: &str, paths: &'a [String]) -> Option<&'a String> {
    let path = path.trim_start_matches("./");
    paths.iter().find(|candidate| *candidate == path || candidate.ends_with(&format!("/{path}")))
}

/// Whether `source` declares `name` as an item, a field or a variant.
fn declares(source: &str, name: &str) -> bool {
    let declarations = ["fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "mod ", "macro_rules! "];
    declarations.iter().any(|keyword| {
        source.match_indices(&format!("{keyword}{name}")).any(|(at, found)| {
            let next = source[at + found.len()..].chars().next();
            next.is_none_or(|next| !next.is_alphanumeric() && next != '_')
        })
    }) || source.lines().any(|line| {
        let line = line.trim_start().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        line.starts_with(&format!("{name}:"))
            || line.starts_with(&format!("{name},"))
            || line.starts_with(&format!("{name} {{"))
            || line.starts_with(&format!("{name}("))
    })
}

#[test]
fn every_path_the_map_names_exists() {
    let paths = workspace_paths();
    let mut missing = BTreeSet::new();
    for span in spans(&map()) {
        // `path.rs::function`: the path part.
        let path = span.split("::").next().unwrap_or_default();
        if !is_path(path) {
            continue;
        }
        for path in expand(path) {
            if resolve(&path, &paths).is_none() {
                missing.insert(path);
            }
        }
    }
    assert!(missing.is_empty(), "docs/architecture.md names paths that do not exist: {missing:#?}");
}

#[test]
fn every_item_the_map_names_is_defined() {
    let paths = workspace_paths();
    let sources = all_sources(&paths);
    let mut missing = BTreeSet::new();
    for span in spans(&map()) {
        let span = span.trim_end_matches("()");
        if !span.contains("::") || span.contains(' ') || span.contains('<') || span.contains('(') {
            continue;
        }
        let mut parts: Vec<&str> = span.split("::").collect();
        // `path.rs::function`: the function is in that file.
        if is_path(parts[0]) {
            let Some(file) = resolve(parts[0], &paths) else { continue };
            let source = std::fs::read_to_string(root().join(file)).unwrap();
            for name in &parts[1..] {
                if !declares(&source, name) {
                    missing.insert(format!("{span} ({name} is not in {file})"));
                }
            }
            continue;
        }
        // A crate's name stands for its root: `workflows::registry`, `cli::Seams`.
        if CRATES.contains(&parts[0]) || parts[0].starts_with("anycloud_") {
            parts.remove(0);
        }
        for name in parts {
            let module = name.chars().next().is_some_and(char::is_lowercase)
                && (resolve(&format!("{name}.rs"), &paths).is_some() || resolve(&format!("{name}/"), &paths).is_some());
            if !module && !declares(&sources, name) {
                missing.insert(format!("{span} ({name})"));
            }
        }
    }
    assert!(missing.is_empty(), "docs/architecture.md names items no source defines: {missing:#?}");
}

/// The workspace crates that `krate`'s Cargo.toml lists under `[dependencies]`.
fn dependencies_of(krate: &str) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(root().join(krate).join("Cargo.toml")).unwrap();
    let mut section = "";
    let mut found = BTreeSet::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line;
        } else if section == "[dependencies]"
            && let Some(name) = line.strip_prefix("anycloud-")
        {
            let name: String = name.chars().take_while(|c| c.is_alphanumeric() || *c == '-').collect();
            found.insert(name);
        }
    }
    found
}

/// The map's list of crate dependencies: lines `` - `cli` -> `sim`, `workflows` `` (or `none`).
fn dependencies_in_map(map: &str) -> Vec<(String, BTreeSet<String>)> {
    map.lines()
        .filter_map(|line| {
            let line = line.trim().strip_prefix("- `")?;
            let (krate, rest) = line.split_once("` -> ")?;
            let targets = if rest.trim().starts_with("none") {
                BTreeSet::new()
            } else {
                rest.split(',').map(|target| target.trim().trim_matches('`').to_owned()).collect()
            };
            Some((krate.to_owned(), targets))
        })
        .collect()
}

#[test]
fn the_maps_crate_dependencies_are_the_manifests() {
    let listed = dependencies_in_map(&map());
    let named: BTreeSet<&str> = listed.iter().map(|(krate, _)| krate.as_str()).collect();
    assert_eq!(named, CRATES.iter().copied().collect(), "docs/architecture.md lists the dependencies of every crate");
    for (krate, targets) in listed {
        assert_eq!(
            targets,
            dependencies_of(&krate),
            "docs/architecture.md: the dependencies of `{krate}` differ from {krate}/Cargo.toml's [dependencies]"
        );
    }
}

#[test]
fn the_checks_themselves_catch_what_is_wrong() {
    let paths = workspace_paths();
    assert!(resolve("store/claim.rs", &paths).is_some());
    assert!(resolve("store/no_such_file.rs", &paths).is_none());
    assert_eq!(expand("operations/{a,b}.rs"), ["operations/a.rs", "operations/b.rs"]);
    assert!(declares("pub async fn submit_in(", "submit_in"));
    assert!(!declares("pub async fn submit_inner(", "submit_in"));
    assert!(declares("    pub before_act: Option<X>,", "before_act"));
    let spans = spans("a `x/y.rs` and **z.rs**\n```text\n`fenced.rs`\n```\n");
    assert_eq!(spans, ["z.rs", "x/y.rs"]);
    let listed = dependencies_in_map("- `cli` -> `sim`, `engine`\n- `engine` -> none\n");
    assert_eq!(listed[0].1, ["engine".to_owned(), "sim".to_owned()].into_iter().collect());
    assert!(listed[1].1.is_empty());
}
