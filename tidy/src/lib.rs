//! `chainstore-tidy`: checks over the repository's own text that keep its map true. Each check
//! returns the problems it found, one line each, naming the file; `tests/tidy.rs` runs them all
//! on the repository and fails on any.
//!
//! - [`missing_module_docs`]: every Rust file of a workspace member opens with a `//!` comment
//!   that says what the file is.
//! - [`code_map_problems`]: ARCHITECTURE.md's "Code map" names every source file under a
//!   member's `src/` (a module's root, `lib.rs` or `mod.rs`, is named by its section), and every
//!   `.rs` file it names exists.
//! - [`layering_problems`]: the modules of one crate import each other (`crate::…`) only
//!   downwards through layers written in ARCHITECTURE.md ([`parse_layers`]), so that no import
//!   circle can form.
//!
//! - [`long_functions`]: no function of a folder's library code runs past a line budget
//!   without a plain `//` comment above it saying why it must.
//! - [`normal_dependencies`]: the crates a package compiles for its users (its `[dependencies]`
//!   and theirs, through the workspace's manifests and `Cargo.lock`), so that a test can hold
//!   the client library free of the tools' dependencies.
//!
//! It reads text only: nothing is compiled or run, and it needs no dependency.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The `members` of the workspace's `Cargo.toml`.
pub fn workspace_members(root: &Path) -> io::Result<Vec<String>> {
    let manifest = fs::read_to_string(root.join("Cargo.toml"))?;
    let start = manifest
        .find("members")
        .and_then(|at| manifest[at..].find('[').map(|open| at + open + 1))
        .ok_or_else(|| invalid("the workspace manifest has no members list"))?;
    let end = manifest[start..]
        .find(']')
        .map(|close| start + close)
        .ok_or_else(|| invalid("the workspace's members list is not closed"))?;
    Ok(manifest[start..end]
        .split(',')
        .map(|member| member.trim().trim_matches('"').to_string())
        .filter(|member| !member.is_empty())
        .collect())
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

/// Every `.rs` file under `dir`, sorted; build output (`target`) and hidden folders skipped.
pub fn rust_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in fs::read_dir(&next)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    pending.push(path);
                }
            } else if name.ends_with(".rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// `path` relative to `root`, with `/` separators, for messages and matching.
fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The Rust files of the members (sources, tests, benches, examples) whose first line is not a
/// `//!` comment.
pub fn missing_module_docs(root: &Path, members: &[String]) -> io::Result<Vec<String>> {
    let mut problems = Vec::new();
    for member in members {
        for file in rust_files(&root.join(member))? {
            let text = fs::read_to_string(&file)?;
            if !text.lines().next().is_some_and(|l| l.starts_with("//!")) {
                problems.push(format!(
                    "{}: does not open with a `//!` comment saying what it is",
                    relative(root, &file)
                ));
            }
        }
    }
    Ok(problems)
}

/// The text of the section headed `## {title}` (up to the next `## ` heading).
fn section<'a>(markdown: &'a str, title: &str) -> Option<&'a str> {
    let heading = format!("## {title}\n");
    let start = if markdown.starts_with(&heading) {
        0
    } else {
        markdown.find(&format!("\n{heading}"))? + 1
    };
    let body = &markdown[start + heading.len()..];
    let end = body.find("\n## ").map_or(body.len(), |at| at + 1);
    Some(&body[..end])
}

/// The backticked spans of `text`.
fn backticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// ARCHITECTURE.md's "Code map" against the tree: each `### ` heading's first backticked path
/// is a folder, and each backticked `….rs` in its section names the files under that folder
/// whose path ends with it (`api/error.rs`, `bin/chainctl/main.rs`), or the file at that path
/// from the repository's root. Problems: a source file
/// under a member's `src/` that no section names (except `lib.rs` and `mod.rs`), and a name
/// that matches no file.
pub fn code_map_problems(
    root: &Path,
    members: &[String],
    architecture: &str,
) -> io::Result<Vec<String>> {
    let mut problems = Vec::new();
    let Some(map) = section(architecture, "Code map") else {
        return Ok(vec!["ARCHITECTURE.md has no `## Code map` section".into()]);
    };
    let mut sources = BTreeSet::new();
    for member in members {
        let src = root.join(member).join("src");
        if src.is_dir() {
            sources.extend(rust_files(&src)?.iter().map(|f| relative(root, f)));
        }
    }
    let mut named = BTreeSet::new();
    for part in format!("\n{map}").split("\n### ").skip(1) {
        let heading = part.lines().next().unwrap_or("");
        let Some(folder) = backticked(heading).next() else {
            problems.push(format!("code map: the section `{heading}` names no folder"));
            continue;
        };
        let folder = folder.trim_end_matches('/');
        let files: Vec<String> = rust_files(&root.join(folder))
            .unwrap_or_default()
            .iter()
            .map(|f| relative(root, f))
            .collect();
        for name in backticked(part)
            .filter(|n| n.ends_with(".rs") && !n.starts_with('.') && !n.contains(' '))
        {
            let from_root = name.to_string();
            let mut matching: Vec<&String> = files
                .iter()
                .filter(|f| f.ends_with(&format!("/{name}")))
                .collect();
            // A path from the repository's root (`client/tests/contract.rs`) names that file.
            if matching.is_empty() && name.contains('/') && root.join(name).is_file() {
                matching.push(&from_root);
            }
            if matching.is_empty() {
                problems.push(format!(
                    "code map: `{name}` (under `{folder}/`) names no file that exists"
                ));
            }
            named.extend(matching.into_iter().cloned());
        }
    }
    for file in sources.difference(&named) {
        if !(file.ends_with("/lib.rs") || file.ends_with("/mod.rs")) {
            problems.push(format!("code map: {file} is not named in ARCHITECTURE.md"));
        }
    }
    Ok(problems)
}

/// The layers written in the `### {title}` section of `markdown`, lowest first: each numbered
/// line (`1. `) lists, backticked before its first `: `, the modules of one layer.
pub fn parse_layers(markdown: &str, title: &str) -> Result<Vec<Vec<String>>, String> {
    let heading = format!("### {title}\n");
    let start = markdown
        .find(&heading)
        .ok_or_else(|| format!("ARCHITECTURE.md has no `### {title}` section"))?;
    let body = &markdown[start + heading.len()..];
    let body = &body[..body.find("\n#").map_or(body.len(), |at| at + 1)];
    let layers: Vec<Vec<String>> = body
        .lines()
        .filter_map(|line| {
            let (number, rest) = line.split_once(". ")?;
            number.trim().parse::<u32>().ok()?;
            let names = rest.split(": ").next().unwrap_or(rest);
            Some(backticked(names).map(str::to_string).collect())
        })
        .collect();
    if layers.is_empty() {
        return Err(format!("the `### {title}` section lists no layers"));
    }
    Ok(layers)
}

/// The top-level module a file under a crate's `src/` belongs to (`api` for `api/error.rs`);
/// `None` for the crate roots (`lib.rs`, `main.rs`, `bin/`).
fn module_of(relative_to_src: &str) -> Option<String> {
    let first = relative_to_src.split('/').next()?;
    let module = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(module, "lib" | "main" | "bin")).then(|| module.to_string())
}

/// The code of `text` without its `//` comments (doc comments included: an intra-doc link is
/// not an import).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names following `crate::` in `code`: single paths (`crate::errors::X`) and each name of
/// a group (`crate::{errors, metrics::Metrics}`).
fn crate_imports(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let after = &code[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            for ch in group.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.extend(first_name(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(ch);
            }
            found.extend(first_name(&item));
        } else {
            found.extend(first_name(after));
        }
    }
    found
}

fn first_name(path: &str) -> Option<String> {
    let name: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty() && name != "self").then_some(name)
}

/// For each top-level module of the crate whose sources are `src`, the modules it imports and
/// the file of each import: `module -> imported -> file`.
pub fn module_imports(src: &Path) -> io::Result<BTreeMap<String, BTreeMap<String, String>>> {
    let mut imports: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let modules: BTreeSet<String> = rust_files(src)?
        .iter()
        .filter_map(|f| module_of(&relative(src, f)))
        .collect();
    for file in rust_files(src)? {
        let Some(module) = module_of(&relative(src, &file)) else {
            continue;
        };
        let code = without_comments(&fs::read_to_string(&file)?);
        let entry = imports.entry(module.clone()).or_default();
        for imported in crate_imports(&code) {
            if imported != module && modules.contains(&imported) {
                entry
                    .entry(imported)
                    .or_insert_with(|| relative(src, &file));
            }
        }
    }
    Ok(imports)
}

/// Imports that go sideways or up through `layers` (lowest first), modules the layers leave
/// out, and layers naming modules that do not exist.
pub fn layering_problems(
    layers: &[Vec<String>],
    imports: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let layer_of: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(n, layer)| layer.iter().map(move |m| (m.as_str(), n)))
        .collect();
    for name in layer_of.keys() {
        if !imports.contains_key(*name) {
            problems.push(format!(
                "layers: `{name}` is listed but no such module exists"
            ));
        }
    }
    for (module, imported) in imports {
        let Some(&from) = layer_of.get(module.as_str()) else {
            problems.push(format!("layers: module `{module}` is in no layer"));
            continue;
        };
        for (target, file) in imported {
            match layer_of.get(target.as_str()) {
                Some(&to) if to < from => {}
                Some(&to) => problems.push(format!(
                    "layers: {file}: `{module}` (layer {}) imports `{target}` (layer {}); a \
                     module imports only from layers below its own",
                    from + 1,
                    to + 1
                )),
                None => {} // reported above as a module in no layer
            }
        }
    }
    problems
}

/// Functions longer than `max` lines in the `.rs` files under `dir` (test modules left out)
/// with no plain `//` comment among the lines just above them (with their doc comment and
/// attributes) to say why they must be that long: `path:line: name is N lines`.
pub fn long_functions(root: &Path, dir: &str, max: usize) -> io::Result<Vec<String>> {
    let mut problems = Vec::new();
    for file in rust_files(&root.join(dir))? {
        let text = fs::read_to_string(&file)?;
        let lines: Vec<&str> = text.lines().collect();
        // A `#[cfg(test)]` module closes a file's library code.
        let end = lines
            .windows(2)
            .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod "))
            .unwrap_or(lines.len());
        for (at, line) in lines[..end].iter().enumerate() {
            let Some(name) = fn_name(line) else { continue };
            let Some(length) = body_length(&lines[at..end]) else {
                continue;
            };
            if length > max && !explained(&lines[..at]) {
                problems.push(format!(
                    "{}:{}: `{name}` is {length} lines (over {max}) with no comment saying why",
                    relative(root, &file),
                    at + 1
                ));
            }
        }
    }
    Ok(problems)
}

/// The name of the function a line declares (`pub async fn name(` and the like), if any.
fn fn_name(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    loop {
        match words.next()? {
            "fn" => break,
            w if w == "pub"
                || w.starts_with("pub(")
                || w == "async"
                || w == "const"
                || w == "unsafe" => {}
            _ => return None,
        }
    }
    let rest = words.next()?;
    let name = rest.split(['(', '<']).next()?;
    (!name.is_empty()).then_some(name)
}

/// How many lines the function starting at `lines[0]` spans, to its closing brace; `None` for a
/// declaration without a body.
fn body_length(lines: &[&str]) -> Option<usize> {
    let mut depth = 0usize;
    let mut opened = false;
    for (n, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for ch in strip_literals(code).chars() {
            match ch {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        if opened && depth == 0 {
            return Some(n + 1);
        }
        if !opened && code.trim_end().ends_with(';') {
            return None;
        }
    }
    None
}

/// `code` with its string and character literals emptied, so their braces are not counted.
fn strip_literals(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut chars = code.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push_str("\"\"");
            }
            '\'' if matches!(chars.clone().nth(1), Some('\'')) => {
                chars.next();
                chars.next();
            }
            '\'' if chars.peek() == Some(&'\\') => {
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether a plain `//` comment sits among the doc comments and attributes just above a
/// declaration (`above` ends with the line before it).
fn explained(above: &[&str]) -> bool {
    for line in above.iter().rev() {
        let line = line.trim_start();
        if line.starts_with("//") && !line.starts_with("///") && !line.starts_with("//!") {
            return true;
        }
        if !(line.starts_with("///") || line.starts_with("#[")) {
            return false;
        }
    }
    false
}

/// The names of the keys of the `[dependencies]` table of a manifest (`name = ...` and
/// `name.workspace = true` lines).
fn manifest_dependencies(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside && !line.is_empty() && !line.starts_with('#') {
            let key = line.split(['=', '.']).next().unwrap_or("").trim();
            if !key.is_empty() {
                names.push(key.trim_matches('"').to_string());
            }
        }
    }
    names
}

/// The package name a member's manifest declares.
fn package_name(manifest: &str) -> Option<String> {
    let after = &manifest[manifest.find("[package]")?..];
    let line = after.lines().find(|l| l.trim_start().starts_with("name"))?;
    Some(line.split('"').nth(1)?.to_string())
}

/// Every package `package` (a workspace member) compiles as a dependency for its users: its
/// `[dependencies]` (not dev-dependencies), and theirs, transitively. Workspace members are
/// followed through their manifests; other packages through `Cargo.lock`, which lists every
/// dependency a package may build with (so the set may be larger than one build's, never
/// smaller).
pub fn normal_dependencies(root: &Path, package: &str) -> io::Result<BTreeSet<String>> {
    let mut members: BTreeMap<String, String> = BTreeMap::new();
    for member in workspace_members(root)? {
        let manifest = fs::read_to_string(root.join(&member).join("Cargo.toml"))?;
        if let Some(name) = package_name(&manifest) {
            members.insert(name, manifest);
        }
    }
    let lock = fs::read_to_string(root.join("Cargo.lock"))?;
    let mut locked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in lock.split("[[package]]").skip(1) {
        let Some(name) = entry.lines().find_map(|l| l.strip_prefix("name = ")) else {
            continue;
        };
        let deps = entry
            .split_once("dependencies = [")
            .map(|(_, rest)| rest.split(']').next().unwrap_or(""))
            .unwrap_or("");
        let names = deps
            .split(',')
            .filter_map(|d| d.trim().trim_matches('"').split(' ').next())
            .filter(|d| !d.is_empty())
            .map(str::to_string);
        locked
            .entry(name.trim_matches('"').to_string())
            .or_default()
            .extend(names);
    }
    let start = members
        .get(package)
        .ok_or_else(|| invalid("no such workspace member"))?;
    let mut seen = BTreeSet::new();
    let mut pending = manifest_dependencies(start);
    while let Some(next) = pending.pop() {
        if !seen.insert(next.clone()) {
            continue;
        }
        match members.get(&next) {
            Some(manifest) => pending.extend(manifest_dependencies(manifest)),
            None => pending.extend(locked.get(&next).cloned().unwrap_or_default()),
        }
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn normal_dependencies_follow_members_and_the_lock_file_but_not_dev_dependencies() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "Cargo.toml",
            "[workspace]\nmembers = [\"a\", \"b\"]\n",
        );
        write(
            dir.path(),
            "a/Cargo.toml",
            "[package]\nname = \"app\"\n[dependencies]\nlib-b = { path = \"../b\" }\nserde.workspace = true\n[dev-dependencies]\nheavy = \"1\"\n",
        );
        write(
            dir.path(),
            "b/Cargo.toml",
            "[package]\nname = \"lib-b\"\n[dependencies]\nlog = \"0.4\"\n",
        );
        write(
            dir.path(),
            "Cargo.lock",
            "[[package]]\nname = \"serde\"\ndependencies = [\n \"serde_derive\",\n]\n\n[[package]]\nname = \"serde_derive\"\n\n[[package]]\nname = \"log\"\n\n[[package]]\nname = \"heavy\"\n",
        );
        let deps = normal_dependencies(dir.path(), "app").unwrap();
        let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
        assert_eq!(deps, ["lib-b", "log", "serde", "serde_derive"]);
    }

    #[test]
    fn a_long_function_needs_a_comment_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        let body = |n: usize| "    let x = '{';\n".repeat(n);
        let text = format!(
            "//! x\n/// Short.\nfn short() {{\n{}}}\n\n/// Long.\npub(crate) async fn long<T>() {{\n{}}}\n\n/// Long, on purpose.\n// A table.\n#[allow(dead_code)]\nfn table() {{\n{}}}\n\n#[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{}    }}\n}}\n",
            body(3),
            body(10),
            body(10),
            body(10)
        );
        write(dir.path(), "src/lib.rs", &text);
        assert_eq!(
            long_functions(dir.path(), "src", 8).unwrap(),
            vec![
                "src/lib.rs:10: `long` is 12 lines (over 8) with no comment saying why".to_string()
            ]
        );
        assert!(long_functions(dir.path(), "src", 12).unwrap().is_empty());
    }

    #[test]
    fn a_file_without_a_module_doc_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a/src/lib.rs", "//! The crate.\nmod x;\n");
        write(dir.path(), "a/src/x.rs", "use std::fmt;\n");
        write(dir.path(), "a/tests/t.rs", "//! A test.\n");
        let problems = missing_module_docs(dir.path(), &["a".into()]).unwrap();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("a/src/x.rs:"), "{problems:?}");
    }

    #[test]
    fn the_code_map_must_name_every_source_file_and_only_files_that_exist() {
        let dir = tempfile::tempdir().unwrap();
        for file in [
            "a/src/lib.rs",
            "a/src/one.rs",
            "a/src/sub/mod.rs",
            "a/src/sub/two.rs",
        ] {
            write(dir.path(), file, "//! x\n");
        }
        let members = ["a".to_string()];
        let whole =
            "# A\n## Code map\n### `a/`\n- `one.rs`, `sub/two.rs`: things.\n## Next\n`gone.rs`\n";
        assert_eq!(
            code_map_problems(dir.path(), &members, whole).unwrap(),
            Vec::<String>::new()
        );
        let missing_one = "## Code map\n### `a/`\n- `sub/two.rs`\n";
        assert_eq!(
            code_map_problems(dir.path(), &members, missing_one).unwrap(),
            vec!["code map: a/src/one.rs is not named in ARCHITECTURE.md".to_string()]
        );
        let names_a_ghost = "## Code map\n### `a/`\n- `one.rs`, `two.rs`, `three.rs`\n";
        assert_eq!(
            code_map_problems(dir.path(), &members, names_a_ghost).unwrap(),
            vec!["code map: `three.rs` (under `a/`) names no file that exists".to_string()]
        );
    }

    #[test]
    fn layers_are_read_lowest_first_from_their_numbered_lines() {
        let md = "### Layers of `x`\nText.\n1. `errors`, `latch`: leaves, `not_this`.\n2. `node`: the rest.\n\n## After\n3. `no`\n";
        assert_eq!(
            parse_layers(md, "Layers of `x`").unwrap(),
            vec![
                vec!["errors".to_string(), "latch".into()],
                vec!["node".to_string()]
            ]
        );
        assert!(parse_layers(md, "Layers of `y`").is_err());
    }

    #[test]
    fn imports_are_found_in_paths_and_groups_but_not_in_comments() {
        let code = without_comments(
            "use crate::errors::WriteError;\nuse crate::{metrics::{Metrics, x}, latch};\n\
             /// See [`crate::node`].\nfn f() { crate::proposer::go(); } // crate::server\n",
        );
        let found: Vec<String> = crate_imports(&code).into_iter().collect();
        assert_eq!(found, ["errors", "latch", "metrics", "proposer"]);
    }

    #[test]
    fn an_import_sideways_or_upwards_is_reported_and_downwards_is_not() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "src/lib.rs",
            "//! x\nmod errors; mod node; mod api;\n",
        );
        write(dir.path(), "src/errors.rs", "//! x\n");
        write(
            dir.path(),
            "src/node/mod.rs",
            "//! x\nuse crate::errors::E;\n",
        );
        write(
            dir.path(),
            "src/api/mod.rs",
            "//! x\nuse crate::{node::Node, errors};\n",
        );
        let layers = vec![
            vec!["errors".to_string()],
            vec!["node".into()],
            vec!["api".into()],
        ];
        let imports = module_imports(&dir.path().join("src")).unwrap();
        assert_eq!(layering_problems(&layers, &imports), Vec::<String>::new());

        write(
            dir.path(),
            "src/errors.rs",
            "//! x\nuse crate::api::Thing;\n",
        );
        let imports = module_imports(&dir.path().join("src")).unwrap();
        let problems = layering_problems(&layers, &imports);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("errors.rs: `errors` (layer 1) imports `api` (layer 3)"));

        let unlisted = vec![vec!["errors".to_string()], vec!["node".into()]];
        let problems = layering_problems(&unlisted, &imports);
        assert!(problems.contains(&"layers: module `api` is in no layer".to_string()));
    }
}
