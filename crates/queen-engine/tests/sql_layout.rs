//! Where SQL lives, read from the source. Function files are named after
//! the engine module that calls them and all of them are applied; Rust
//! holds SQL text in two forms only: a call of one `queen.` function
//! inline, or a statement file of `sql/statements/` (`include_str!`).
//! No SQL literal in Rust reads or writes a table: that is `migrate.rs`'s
//! bootstrap alone (it creates the schema the functions live in).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every `.rs` file under `dir`, with its text before any `#[cfg(test)]`.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default().to_owned();
            out.push((path, code));
        }
    }
    out
}

/// The string literals of `code` (plain `"..."` ones; escapes kept).
fn literals(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        match c {
            '/' if chars.peek().is_some_and(|&(_, n)| n == '/') => {
                for (_, n) in chars.by_ref() {
                    if n == '\n' {
                        break;
                    }
                }
            }
            '\'' => {
                // A char literal ('"', '\\') or a lifetime: skip the char literal.
                let rest: String = chars.clone().take(3).map(|(_, c)| c).collect();
                if rest.starts_with("\\") && rest.chars().nth(2) == Some('\'') {
                    chars.nth(2);
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.nth(1);
                }
            }
            '"' => {
                let mut lit = String::new();
                while let Some((_, n)) = chars.next() {
                    match n {
                        '\\' => {
                            if let Some((_, e)) = chars.next() {
                                lit.push('\\');
                                lit.push(e);
                            }
                        }
                        '"' => break,
                        _ => lit.push(n),
                    }
                }
                out.push(lit);
            }
            _ => {}
        }
    }
    out
}

#[test]
fn function_files_are_named_after_their_module_and_all_applied() {
    let functions = root().join("sql/functions");
    let migrate = std::fs::read_to_string(root().join("src/migrate.rs")).unwrap();
    // Shared by every operation: helpers (ids, timestamps, errors) and
    // queue options.
    let shared = ["common", "queues"];
    for name in names_in(&functions) {
        let stem = name.strip_suffix(".sql").unwrap_or_else(|| panic!("{name}: not a .sql file"));
        assert!(
            migrate.contains(&format!("include_str!(\"../sql/functions/{name}\")")),
            "{name} is not in migrate.rs's FUNCTIONS, so it is never applied"
        );
        let module = stem.split('_').next().unwrap_or(stem);
        let src = root().join("src");
        let named =
            [src.join(format!("{module}.rs")), src.join(module), src.join(format!("engine/{module}.rs"))]
                .iter()
                .any(|p| p.exists());
        assert!(named || shared.contains(&stem), "{name} names no engine module (src/{module}.rs)");
    }
    for listed in migrate.split("include_str!(\"../sql/functions/").skip(1) {
        let name = listed.split('"').next().unwrap_or_default();
        assert!(functions.join(name).exists(), "migrate.rs lists {name}, which does not exist");
    }
}

#[test]
fn rust_holds_no_sql_that_reaches_a_table() {
    let mut offenders = Vec::new();
    for (path, code) in sources(&root().join("src")) {
        if path.ends_with("migrate.rs") {
            continue;
        }
        for lit in literals(&code) {
            let sql = lit.split_whitespace().collect::<Vec<_>>().join(" ");
            let table_read = sql.match_indices("FROM queen.").any(|(i, m)| {
                let rest = &sql[i + m.len()..];
                let ident: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                !rest[ident.len()..].starts_with('(')
            });
            let write =
                ["INSERT INTO", "UPDATE queen.", "DELETE FROM", "TRUNCATE"].iter().any(|w| sql.contains(w));
            if table_read || write {
                offenders.push(format!("{}: {sql}", path.display()));
            }
        }
    }
    assert!(offenders.is_empty(), "move these into sql/statements/ or a function:\n{}", offenders.join("\n"));
}

#[test]
fn every_statement_file_is_used_and_says_what_it_is() {
    let code: String = sources(&root().join("src")).into_iter().map(|(_, c)| c).collect();
    for name in names_in(&root().join("sql/statements")) {
        assert!(code.contains(&format!("sql/statements/{name}\")")), "sql/statements/{name} is not used");
        let text = std::fs::read_to_string(root().join("sql/statements").join(&name)).unwrap();
        assert!(
            text.starts_with("-- "),
            "sql/statements/{name} does not start with a comment saying who runs it"
        );
    }
}

#[test]
fn the_literal_reader_finds_sql_and_skips_comments_and_chars() {
    let code = "let c = '\"'; // \"DELETE FROM x\"\nlet s = \"SELECT a FROM queen.t\";";
    assert_eq!(literals(code), vec!["SELECT a FROM queen.t".to_owned()]);
}

/// A wire name the SQL needs is spelled once, in `queen-wire`: SQL reaches
/// it through a function whose body `migrate.rs` writes from the constant.
#[test]
fn sql_spells_no_wire_name_of_its_own() {
    let mut offenders = Vec::new();
    for dir in ["sql/functions", "sql/statements", "sql/migrations"] {
        for name in names_in(&root().join(dir)) {
            let text = std::fs::read_to_string(root().join(dir).join(&name)).unwrap();
            if text.contains(queen_wire::QUEUE_MODE) {
                offenders.push(format!("{dir}/{name}"));
            }
        }
    }
    assert!(offenders.is_empty(), "spell the queue-mode group as queen.queue_mode() in: {offenders:?}");
    let common = std::fs::read_to_string(root().join("sql/functions/common.sql")).unwrap();
    assert!(common.contains("SELECT text '{{QUEUE_MODE}}'"), "queen.queue_mode() lost its placeholder");
}
