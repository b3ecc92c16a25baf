//! `cargo xtask layers`: checks correlator's one-way layering. The layer
//! list is read from the doc comment of `correlator/src/lib.rs` (lines
//! `//! - NAME: mod, mod, ...`, lowest first), so the written order and the
//! checked one cannot drift apart. Every `crate::` path in `correlator/src`
//! is resolved to its top-level module; an import from a higher layer, any
//! import into `stats`, or an import of `harness` from outside `cli` (and
//! unit-test modules, `tests.rs`) fails.
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
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
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
                // with the harness, as integration tests do.
                let test_module = rel.file_name().is_some_and(|f| f == "tests.rs");
                if first != "cli" && !test_module {
                    problems.push(format!("{what}: only cli may import the harness"));
                }
                continue;
            }
            if first == "harness" {
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
    Ok(problems)
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
}
