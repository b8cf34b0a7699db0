//! The engine's top-level modules form no import cycle: the `Engine` facade
//! (`engine.rs`, `engine/`) sits on top and calls down; operation modules
//! depend on the batching mechanism and shared types, never on the facade
//! or on each other in a circle. Read from the source: a module depends on
//! another when its non-test code names `crate::other`, or a name `lib.rs`
//! re-exports from it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The source files of a top-level module (a file, or a folder's files).
fn files(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(path).unwrap() {
            out.extend(files(&entry.unwrap().path()));
        }
        out
    } else if path.extension().is_some_and(|e| e == "rs") {
        vec![path.to_owned()]
    } else {
        Vec::new()
    }
}

fn ident_at(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(text.len());
    &text[..end]
}

/// Names `lib.rs` re-exports (`pub use module::{A, B as C}`), by module.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else { continue };
        let module = ident_at(rest).to_owned();
        let list = rest[module.len()..].trim_start_matches("::");
        for item in list.trim_matches(|c| c == '{' || c == '}').split(',') {
            let item = item.trim();
            let name = item.rsplit(" as ").next().unwrap_or(item).trim();
            let name = name.rsplit("::").next().unwrap_or(name);
            if !name.is_empty() {
                names.insert(name.to_owned(), module.clone());
            }
        }
    }
    names
}

fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let names = reexports(&lib);
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name != "lib" && (path.is_dir() || path.extension().is_some_and(|e| e == "rs")) {
            modules.entry(name).or_insert_with(Vec::new).push(path);
        }
    }
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, paths) in &modules {
        let mut found = BTreeSet::new();
        for file in paths.iter().flat_map(|p| files(p)) {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let mut named = vec![ident_at(rest).to_owned()];
                if rest.starts_with('{') {
                    let list = &rest[1..rest.find('}').unwrap_or(rest.len())];
                    named = list.split(',').map(|n| ident_at(n.trim()).to_owned()).collect();
                }
                for n in named {
                    let target = if modules.contains_key(&n) { Some(n) } else { names.get(&n).cloned() };
                    if let Some(t) = target.filter(|t| t != module && modules.contains_key(t)) {
                        found.insert(t);
                    }
                }
            }
        }
        deps.insert(module.clone(), found);
    }
    deps
}

/// An import cycle, if there is one, as the path that closes it.
fn cycle(deps: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut c = path[at..].to_vec();
            c.push(m.to_owned());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for d in deps.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, deps, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    deps.keys().find_map(|m| visit(m, deps, &mut Vec::new(), &mut done))
}

#[test]
fn the_engines_top_level_modules_form_no_import_cycle() {
    let deps = dependencies();
    assert!(deps.len() > 20, "the source was read: {deps:?}");
    assert!(deps["engine"].contains("push"), "the facade calls down: {:?}", deps["engine"]);
    if let Some(c) = cycle(&deps) {
        panic!("an import cycle among the engine's modules: {}", c.join(" -> "));
    }
}

#[test]
fn only_the_facade_names_the_engine() {
    let deps = dependencies();
    let above: Vec<&String> = deps.iter().filter(|(_, d)| d.contains("engine")).map(|(m, _)| m).collect();
    assert!(above.is_empty(), "modules that depend on the facade: {above:?}");
}

#[test]
fn the_batch_mechanism_knows_no_operation() {
    let deps = dependencies();
    let known: Vec<&String> = deps["batch"].iter().filter(|d| *d != "error").collect();
    assert!(known.is_empty(), "batch.rs imports {known:?}");
}
