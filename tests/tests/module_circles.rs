//! No circle of files inside `engine`, `providers`, `workflows` or `sim`: read from their `use` lines and
//! their `crate::`, `super::` and `self::` paths, every arrow between two files of a crate runs
//! one way, so that each file can be read knowing only those below it. A circle is a sign that
//! a type lives in the wrong file (a table row serving as the wire format, a shared error
//! declared beside one of its users); the failure names its files and the arrows that close it.
//!
//! A module's `pub use` of one of its own descendants is not an arrow: it is the folder's face
//! (`store/mod.rs` showing `store::Claimed` from `store/records.rs`), and the code of the module
//! does not depend on it.
//!
//! `cargo test --workspace --test module_circles` shows it; `cargo modules dependencies` would
//! draw the same arrows.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anycloud_tests::source_code::{code_of, root, rust_files};

/// A module path inside a crate, `[]` for the crate's root.
type ModPath = Vec<String>;

/// The crates whose files are checked.
const CRATES: &[&str] = &["engine/src", "providers/src", "workflows/src", "sim/src"];

/// The module each file of `src` is (binaries, which are crates of their own, left out).
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .filter(|file| !file.strip_prefix(src).unwrap().starts_with("bin"))
        .map(|file| {
            let relative = file.strip_prefix(src).unwrap().with_extension("");
            let mut path: ModPath = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
            if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
                path.pop();
            }
            (path, file)
        })
        .collect()
}

/// `code` before its test module.
fn without_tests(code: &str) -> &str {
    let cut = code.find("#[cfg(test)]\nmod ").or_else(|| code.find("#[cfg(test)]\npub mod "));
    cut.map_or(code, |at| &code[..at])
}

/// The paths of a `use` tree (`a::{b, c::{d, e as f}}` gives `a::b`, `a::c::d`, `a::c::e`).
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree.split("as").next().unwrap_or_default().to_owned()];
    };
    let (prefix, rest) = (&tree[..open], &tree[open + 1..tree.len().saturating_sub(1)]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, c) in rest.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&rest[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&rest[start..]);
    parts
        .into_iter()
        .filter(|part| !part.is_empty())
        .flat_map(|part| expand_use(part).into_iter().map(move |path| format!("{prefix}{path}")))
        .collect()
}

/// A path a file names, and whether it names it to re-export it (`pub use`).
struct Named {
    path: String,
    reexport: bool,
}

/// Every path `code` names that may lead to another file of its crate: its `use` trees, and
/// the `crate::`, `super::` and `self::` paths written inline.
fn named_paths(code: &str) -> Vec<Named> {
    let mut paths = Vec::new();
    let mut rest = String::new();
    let mut remaining = code;
    while let Some(at) = find_use(remaining) {
        rest.push_str(&remaining[..at]);
        let reexport = remaining[..at].trim_end().ends_with("pub") || remaining[..at].trim_end().ends_with(')');
        let end = remaining[at..].find(';').map_or(remaining.len(), |end| at + end);
        paths.extend(expand_use(&remaining[at + 4..end]).into_iter().map(|path| Named { path, reexport }));
        remaining = &remaining[end..];
    }
    rest.push_str(remaining);
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in rest.match_indices(start) {
            if at > 0 && rest[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String =
                rest[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            paths.push(Named { path, reexport: false });
        }
    }
    paths
}

/// Where the next `use` item of `code` begins (its `use ` keyword).
fn find_use(code: &str) -> Option<usize> {
    code.match_indices("use ").map(|(at, _)| at).find(|at| {
        let before = code[..*at].trim_end_matches([' ', '\t']);
        before.is_empty() || before.ends_with('\n') || before.ends_with("pub") || before.ends_with(')')
    })
}

/// The file `path`, named from the module `from`, lands in: the longest prefix of its resolved
/// module path that is a file.
fn resolve(path: &str, from: &ModPath, modules: &BTreeMap<ModPath, PathBuf>) -> Option<ModPath> {
    let mut segments = path.split("::").filter(|segment| !segment.is_empty()).peekable();
    let mut at: ModPath = match segments.peek().copied() {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        Some("super" | "self") => from.clone(),
        // A child of this module named without `self::` (in a `mod.rs` or the crate's root).
        Some(first) if modules.contains_key(&[from.as_slice(), &[first.to_owned()]].concat()) => from.clone(),
        _ => return None,
    };
    for segment in segments {
        match segment {
            "super" => {
                at.pop();
            }
            "self" => {}
            name => {
                let child = [at.as_slice(), &[name.to_owned()]].concat();
                if !modules.contains_key(&child) {
                    break;
                }
                at = child;
            }
        }
    }
    Some(at)
}

/// Arrows from each file of `src` to the files it names, each with one path that names it.
fn arrows(src: &Path) -> (BTreeMap<ModPath, PathBuf>, BTreeMap<ModPath, BTreeMap<ModPath, String>>) {
    let modules = modules(src);
    let mut arrows: BTreeMap<ModPath, BTreeMap<ModPath, String>> = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let to = arrows.entry(module.clone()).or_default();
        for Named { path, reexport } in named_paths(without_tests(&code)) {
            if let Some(target) = resolve(&path, module, &modules)
                && &target != module
                && modules.contains_key(&target)
                && !(reexport && target.starts_with(module))
            {
                to.entry(target).or_insert(path);
            }
        }
    }
    (modules, arrows)
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn circles(arrows: &BTreeMap<ModPath, BTreeMap<ModPath, String>>) -> Vec<BTreeSet<ModPath>> {
    struct Walk<'a> {
        arrows: &'a BTreeMap<ModPath, BTreeMap<ModPath, String>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        found: Vec<BTreeSet<ModPath>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a ModPath) {
            let next = self.index.len();
            self.index.insert(node, next);
            self.low.insert(node, next);
            self.stack.push(node);
            for target in self.arrows.get(node).into_iter().flat_map(BTreeMap::keys) {
                if !self.index.contains_key(target) {
                    self.visit(target);
                    let low = self.low[node].min(self.low[target]);
                    self.low.insert(node, low);
                } else if self.stack.contains(&target) {
                    let low = self.low[node].min(self.index[target]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = BTreeSet::new();
                while let Some(member) = self.stack.pop() {
                    component.insert(member.clone());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk { arrows, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for node in arrows.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.found
}

#[test]
fn no_circle_of_files_inside_engine_providers_workflows_or_sim() {
    let root = root();
    let mut found = Vec::new();
    for src in CRATES {
        let (modules, arrows) = arrows(&root.join(src));
        for circle in circles(&arrows) {
            let name = |module: &ModPath| modules[module].strip_prefix(&root).unwrap().display().to_string();
            let inside: Vec<String> = circle
                .iter()
                .flat_map(|from| {
                    arrows[from]
                        .iter()
                        .filter(|(to, _)| circle.contains(*to))
                        .map(move |(to, path)| format!("{} -> {} ({path})", name(from), name(to)))
                })
                .collect();
            found.push(inside.join("\n    "));
        }
    }
    assert!(found.is_empty(), "circles of files (move the shared type below both):\n  {}", found.join("\n  "));
}

#[test]
fn the_reader_sees_what_it_must() {
    assert_eq!(expand_use("crate::a::{b, c::{d, e as f}}"), ["crate::a::b", "crate::a::c::d", "crate::a::c::e"]);
    let code = "use crate::x::Y;\npub(crate) use super::z;\nfn f() { crate::w::g(); let a = self::v; }\n";
    let named: Vec<(String, bool)> = named_paths(code).into_iter().map(|named| (named.path, named.reexport)).collect();
    let expected = [("crate::x::Y", false), ("super::z", true), ("crate::w::g", false), ("self::v", false)];
    assert_eq!(named, expected.map(|(path, reexport)| (path.to_owned(), reexport)));
    let modules: BTreeMap<ModPath, PathBuf> = [vec![], vec!["a".into()], vec!["a".into(), "b".into()]]
        .into_iter()
        .map(|path| (path, PathBuf::new()))
        .collect();
    let b = vec!["a".to_owned(), "b".to_owned()];
    assert_eq!(resolve("super::Thing", &b, &modules), Some(vec!["a".to_owned()]));
    assert_eq!(resolve("crate::a::b::Thing", &[].into(), &modules), Some(b.clone()));
    assert_eq!(resolve("a::Thing", &[].into(), &modules), Some(vec!["a".to_owned()]));
    assert_eq!(resolve("std::fmt", &[].into(), &modules), None);
    let arrows: BTreeMap<ModPath, BTreeMap<ModPath, String>> = [
        (vec!["a".to_owned()], [(b.clone(), String::new())].into()),
        (b.clone(), [(vec!["a".to_owned()], String::new())].into()),
        (vec![], [(b.clone(), String::new())].into()),
    ]
    .into();
    assert_eq!(circles(&arrows), [BTreeSet::from([vec!["a".to_owned()], b])]);
}
