//! `cargo xtask layers`: checks correlator's one-way layering. The layer
//! list is read from the doc comment of `correlator/src/lib.rs` (lines
//! `//! - NAME: mod, mod, ...`, lowest first), so the written order and the
//! checked one cannot drift apart. Every `crate::` path in `correlator/src`
//! is resolved to its top-level module; an import from a higher layer, any
//! import into `stats`, an import of `harness` (the test helpers) from
//! anything but unit-test modules (`tests.rs`), or of `cli` from the
//! harness fails. Inside a module directory, sibling submodules must not
//! import each other in a circle (`super::a` in `b.rs` and `super::b` in
//! `a.rs`): shared types go one floor down.
//!
//! Hand-written rather than with a Rust parser crate: `crate::` paths and
//! brace groups are all it needs to read.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

use crate::workspace_root;

/// Module → layer index, from lib.rs.
fn layers(lib: &str) -> Result<BTreeMap<String, usize>> {
    let mut out = BTreeMap::new();
    let lines = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! - "))
        .filter_map(|l| l.split_once(':'));
    for (i, (_, mods)) in lines.enumerate() {
        for m in mods.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            out.insert(m.to_string(), i);
        }
    }
    if out.is_empty() {
        bail!("no `//! - layer: modules` lines in correlator/src/lib.rs");
    }
    Ok(out)
}

/// Top-level modules named after each `crate::` in `text`, including
/// every item of a `crate::{a, b::c, d::{..}}` group.
fn crate_paths(text: &str) -> BTreeSet<String> {
    prefixed_paths(text, "crate::")
}

/// The first path segment after each `prefix` in `text` (`crate::`,
/// `super::`), including every item of a `prefix{a, b::c, d::{..}}` group.
fn prefixed_paths(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item_start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        item_start = false;
                        let name = ident(&group[k..]);
                        if !name.is_empty() {
                            out.insert(name);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The problems found (empty: the layering holds).
pub fn check(src: &Path) -> Result<Vec<String>> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).context("reading lib.rs")?;
    let layer = layers(&lib)?;
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    files.sort();
    let mut problems = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        let first = rel
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .unwrap_or_default();
        if first == "lib" || first == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file)?;
        for target in crate_paths(&text) {
            if target == first {
                continue;
            }
            let what = format!("{} imports crate::{target}", rel.display());
            if target == "harness" {
                // Unit-test modules (`tests.rs`) may build their inputs
                // with the harness, as integration tests do; the product,
                // its command line included, never does.
                let test_module = rel.file_name().is_some_and(|f| f == "tests.rs");
                if !test_module {
                    problems.push(format!(
                        "{what}: only unit tests (tests.rs) import the harness, never the product"
                    ));
                }
                continue;
            }
            if first == "harness" {
                if target == "cli" {
                    problems.push(format!(
                        "{what}: the harness must not import the command line (it has its own, harness/cli.rs)"
                    ));
                }
                continue;
            }
            if first == "stats" {
                problems.push(format!("{what}: stats imports nothing from the crate"));
                continue;
            }
            match (layer.get(&first), layer.get(&target)) {
                (Some(from), Some(to)) if to > from => {
                    problems.push(format!("{what}: a higher layer"));
                }
                (None, _) => {
                    problems.push(format!("{}: module {first} is in no layer", rel.display()))
                }
                (_, None) => problems.push(format!("{what}: module {target} is in no layer")),
                _ => {}
            }
        }
    }
    problems.dedup();
    problems.extend(sibling_cycles(src)?);
    Ok(problems)
}

/// Circles among the submodules of each module directory: `b.rs` naming
/// `super::a` is an edge b → a; a path back from a to b is a circle.
fn sibling_cycles(src: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let Some(stem) = path.file_stem().map(|s| s.to_string_lossy().to_string()) else {
                continue;
            };
            if path.extension().is_none_or(|e| e != "rs") || stem == "mod" || stem == "tests" {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            // A file's own `mod tests` reads `super::*` of itself, not of a sibling.
            let body = text.split("#[cfg(test)]").next().unwrap_or(&text);
            edges.insert(stem, prefixed_paths(body, "super::"));
        }
        let names: BTreeSet<String> = edges.keys().cloned().collect();
        for (from, tos) in &edges {
            for to in tos.iter().filter(|t| names.contains(*t) && *t != from) {
                if reaches(&edges, to, from, &mut BTreeSet::new()) {
                    let rel = dir.strip_prefix(src).unwrap_or(&dir);
                    problems.push(format!(
                        "{}/{from}.rs imports super::{to}, which leads back to {from}: a circle among sibling modules (move the shared types one floor down)",
                        rel.display()
                    ));
                }
            }
        }
    }
    problems.sort();
    Ok(problems)
}

/// Whether `to` can be reached from `from` along `edges`.
fn reaches(
    edges: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
    seen: &mut BTreeSet<String>,
) -> bool {
    if from == to {
        return true;
    }
    if !seen.insert(from.to_string()) {
        return false;
    }
    edges
        .get(from)
        .is_some_and(|next| next.iter().any(|n| reaches(edges, n, to, seen)))
}

pub fn run() -> Result<()> {
    let src = workspace_root().join("correlator/src");
    let problems = check(&src)?;
    if problems.is_empty() {
        eprintln!(
            "xtask layers: every crate:: path in correlator/src follows the layers in lib.rs"
        );
        return Ok(());
    }
    for p in &problems {
        eprintln!("xtask layers: {p}");
    }
    bail!("{} layering problems", problems.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_paths_and_groups() {
        let text = "use crate::{a::X, b, c::{d, e}};\nfn f() { crate::g::h(); }";
        let got: Vec<String> = crate_paths(text).into_iter().collect();
        assert_eq!(got, ["a", "b", "c", "g"]);
    }

    #[test]
    fn finds_an_upward_import() {
        let dir = std::env::temp_dir().join(format!("xtask-layers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("lib.rs"), "//! - low: a\n//! - high: b\n").expect("lib");
        std::fs::write(dir.join("a.rs"), "use crate::b::X;\n").expect("a");
        std::fs::write(dir.join("b.rs"), "use crate::a::Y;\n").expect("b");
        let problems = check(&dir).expect("check");
        assert_eq!(problems, ["a.rs imports crate::b: a higher layer"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn finds_harness_imports_and_sibling_circles() {
        let dir = std::env::temp_dir().join(format!("xtask-layers-h-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("an")).expect("dir");
        std::fs::create_dir_all(dir.join("harness")).expect("dir");
        std::fs::write(dir.join("lib.rs"), "//! - low: an\n//! - cli: cli\n").expect("lib");
        std::fs::write(dir.join("cli.rs"), "use crate::harness::W;\n").expect("cli");
        std::fs::write(dir.join("harness/mod.rs"), "use crate::cli::X;\n").expect("h");
        std::fs::write(dir.join("an/mod.rs"), "mod a; mod b; mod c;\n").expect("m");
        std::fs::write(dir.join("an/a.rs"), "use super::{b::X, Y};\n").expect("a");
        std::fs::write(dir.join("an/b.rs"), "use super::c::Z;\n").expect("b");
        std::fs::write(
            dir.join("an/c.rs"),
            "fn f() { super::a::g() }\n#[cfg(test)]\nmod tests { use super::*; }\n",
        )
        .expect("c");
        std::fs::write(dir.join("an/tests.rs"), "use crate::harness::T;\n").expect("t");
        let problems = check(&dir).expect("check");
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems[0].starts_with("cli.rs imports crate::harness: only unit tests"));
        assert!(problems[1].starts_with("harness/mod.rs imports crate::cli: the harness must not"));
        assert!(problems[2].starts_with("an/a.rs imports super::b, which leads back to a"));
        assert!(problems[3].starts_with("an/b.rs imports super::c"));
        assert!(problems[4].starts_with("an/c.rs imports super::a"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
