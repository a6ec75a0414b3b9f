//! The library's modules form layers (docs/ARCHITECTURE.md, "Layers"): each uses only
//! the layers below it. This test reads the `crate::` paths of `crates/weft/src` (in
//! `use` items and in code, outside comments and test modules) and fails, naming the
//! file and the path, when a module reaches up the order, or when a top-level module
//! is missing from the order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The layers, bottom up. The same list, in the same words, heads
/// docs/ARCHITECTURE.md. Planned layers are not listed until they exist.
const ORDER: &[&str] = &[
    "base",
    "task",
    "waitlist",
    "driver",
    "stack",
    "scheduler",
    "runtime",
    "time",
    "forkjoin",
    "par",
    "fiber",
    "chan",
    "sync",
    "nursery",
    "io",
    "net",
    "signal",
    "hyper",
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without comments, string and char literals (their text is blanked, so
/// that braces and `crate::` inside them do not count).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(b.len(), |n| i + n);
            i = end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(b.len(), |n| i + n + 2);
            out.push(' ');
            i = end;
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let (open, close) = if rest.starts_with("r#") {
                (3, "\"#")
            } else {
                (2, "\"")
            };
            let end = rest[open..]
                .find(close)
                .map_or(b.len(), |n| i + open + n + close.len());
            out.push_str("\"\"");
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if b[i] == b'\''
            && (rest.get(2..3) == Some("'")
                || (rest.get(1..2) == Some("\\") && rest[2..].find('\'').is_some_and(|n| n < 10)))
        {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime.
            let end = i + 1 + rest[1..].find('\'').unwrap() + 1;
            let end = if rest.get(1..2) == Some("\\") {
                i + 2 + rest[2..].find('\'').unwrap() + 1
            } else {
                end
            };
            out.push_str("' '");
            i = end;
        } else {
            let ch = rest.chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// `code` without the items under a `#[cfg(..test..)]` attribute (test modules and
/// test-only functions: they may use anything).
fn without_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(") {
        let attr_end = at + rest[at..].find(']').unwrap() + 1;
        let attr = &rest[at..attr_end];
        let is_test = attr.contains("test") && !attr.contains("not(test)");
        out.push_str(&rest[..at]);
        if !is_test {
            out.push_str(attr);
            rest = &rest[attr_end..];
            continue;
        }
        // Skip the item: up to its first `;` at depth 0, or its balanced `{ .. }`.
        let item = &rest[attr_end..];
        let mut depth = 0usize;
        let mut end = item.len();
        for (k, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The first segment of every `crate::` path in `code` (`crate::a::b` gives `a`; `use
/// crate::{a::{x, y}, b}` gives `a` and `b`), with its line number. `$crate::` (macros,
/// expanded in the user's crate) does not count.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::") {
        let at = from + at;
        from = at + 7;
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        let tail = &code[at + 7..];
        if let Some(group) = tail.strip_prefix('{') {
            // The top-level entries of the group, each up to a comma at depth 0.
            let mut depth = 0usize;
            let mut entry = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        push_segment(&mut found, line_of(at), &entry);
                        entry.clear();
                        continue;
                    }
                    _ => {}
                }
                entry.push(c);
            }
            push_segment(&mut found, line_of(at), &entry);
        } else {
            push_segment(&mut found, line_of(at), tail);
        }
    }
    found
}

fn push_segment(found: &mut Vec<(usize, String)>, line: usize, path: &str) {
    let seg: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if !seg.is_empty() {
        found.push((line, seg));
    }
}

/// What the crate root re-exports (`pub use module::{Name, ..}`): a `crate::Name` path
/// belongs to `module`.
fn root_names(lib: &str) -> HashMap<String, String> {
    let mut names = HashMap::new();
    let code = code_only(lib);
    for stmt in code.split(';') {
        let stmt = stmt.trim();
        let Some(path) = stmt.strip_prefix("pub use ") else {
            continue;
        };
        let module = path.split("::").next().unwrap().trim().to_string();
        if let Some(group) = path.find('{').map(|at| &path[at + 1..]) {
            for part in group.trim_end_matches('}').split(',') {
                let name = part.split(" as ").last().unwrap().trim();
                let name = name.rsplit("::").next().unwrap();
                if !name.is_empty() {
                    names.insert(name.to_string(), module.clone());
                }
            }
        } else {
            let name = path.split(" as ").last().unwrap().trim();
            names.insert(
                name.rsplit("::").next().unwrap().to_string(),
                module.clone(),
            );
        }
    }
    names
}

#[test]
fn no_module_reaches_up_the_declared_layers() {
    let src = src_dir();
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let roots = root_names(&lib);
    let layer = |m: &str| ORDER.iter().position(|l| *l == m);

    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut errors = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&src).unwrap();
        let rel_str = rel.to_string_lossy().replace('\\', "/");
        if rel_str == "lib.rs" || rel_str == "loom_tests.rs" {
            continue;
        }
        let module = rel_str
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string();
        let Some(own) = layer(&module) else {
            errors.push(format!(
                "src/{rel_str}: module `{module}` is not in the layer order (tests/layering.rs \
                 ORDER and docs/ARCHITECTURE.md)"
            ));
            continue;
        };
        let code = without_test_items(&code_only(&std::fs::read_to_string(path).unwrap()));
        for (line, seg) in crate_paths(&code) {
            if seg == "self" || seg.is_empty() {
                continue;
            }
            let target = if layer(&seg).is_some() {
                seg.clone()
            } else if let Some(m) = roots.get(&seg) {
                m.clone()
            } else {
                // A crate-root item that is not a re-export (a macro, `self`).
                continue;
            };
            let Some(theirs) = layer(&target) else {
                continue;
            };
            if theirs > own {
                errors.push(format!(
                    "src/{rel_str}:{line}: `{module}` uses `crate::{seg}` (layer `{target}`), \
                     which is above it"
                ));
            }
        }
    }
    assert!(
        errors.is_empty(),
        "imports that reach up the layer order:\n{}",
        errors.join("\n")
    );
}

#[test]
fn the_architecture_doc_states_the_same_order() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ARCHITECTURE.md");
    let doc = std::fs::read_to_string(doc).unwrap();
    let line = ORDER
        .iter()
        .map(|m| format!("`{m}`"))
        .collect::<Vec<_>>()
        .join(" < ");
    assert!(
        doc.contains(&line),
        "docs/ARCHITECTURE.md must state the layer order as `{line}`"
    );
}

#[test]
fn every_top_level_module_of_lib_rs_is_in_the_order() {
    let lib = code_only(&std::fs::read_to_string(src_dir().join("lib.rs")).unwrap());
    let lib = without_test_items(&lib);
    for stmt in lib.split(';') {
        let stmt = stmt.trim();
        let Some(decl) = stmt
            .strip_prefix("mod ")
            .or_else(|| stmt.strip_prefix("pub mod "))
            .or_else(|| stmt.strip_prefix("pub(crate) mod "))
        else {
            continue;
        };
        let name = decl.trim();
        assert!(
            ORDER.contains(&name),
            "lib.rs declares `mod {name}`, which is not in the layer order"
        );
    }
}

/// The checker itself: an upward path is found, in a `use` group and in code, and
/// comments, strings and test modules are ignored.
#[test]
fn the_checker_sees_paths_and_skips_comments_strings_and_tests() {
    let code = code_only(
        "use crate::{base::{Arc, Mutex}, fiber::x};\n// crate::par::y\nlet s = \"crate::time\";\n\
         fn f() { crate::runtime::g(); }\n#[cfg(test)]\nmod tests { use crate::fiber; }\n\
         macro_rules! m { () => { $crate::fiber::z } }\n",
    );
    let code = without_test_items(&code);
    let segs: Vec<String> = crate_paths(&code).into_iter().map(|(_, s)| s).collect();
    assert_eq!(segs, ["base", "fiber", "runtime"]);
}
