//! The repository kept tidy: every Rust file says what it is, ARCHITECTURE.md's code map names
//! every source file and nothing else, `node/src`'s modules import only downwards through the
//! layers ARCHITECTURE.md writes down, the node's and the store's rules stay in short functions,
//! and the client library compiles none of the tools' dependencies. Each failure names the file
//! and what to change.

use std::path::{Path, PathBuf};

use chainstore_tidy::{
    code_map_problems, layering_problems, long_functions, missing_module_docs, module_imports,
    normal_dependencies, parse_layers, workspace_members,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tidy crate sits in the workspace")
        .to_path_buf()
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

fn assert_none(what: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

#[test]
fn every_rust_file_opens_with_a_module_doc() {
    let members = workspace_members(&root()).unwrap();
    assert_none(
        "files without a `//!`",
        missing_module_docs(&root(), &members).unwrap(),
    );
}

#[test]
fn the_code_map_names_every_source_file_and_no_file_that_does_not_exist() {
    let members = workspace_members(&root()).unwrap();
    assert_none(
        "ARCHITECTURE.md's code map",
        code_map_problems(&root(), &members, &architecture()).unwrap(),
    );
}

#[test]
fn node_modules_import_only_from_the_layers_below_their_own() {
    let layers = parse_layers(&architecture(), "Layers of `node/src`").unwrap();
    let imports = module_imports(&root().join("node/src")).unwrap();
    assert_none("node/src's layering", layering_problems(&layers, &imports));
}

#[test]
fn the_client_library_compiles_none_of_the_tools_dependencies() {
    let tools = [
        "chainstore-populator",
        "tokio-postgres",
        "postgres-protocol",
        "prometheus-client",
        "clap",
        "axum",
        "chainstore-node",
        "raft-store",
        "openraft",
        "rocksdb",
    ];
    for package in ["chainstore-client", "chainstore-client-example"] {
        let deps = normal_dependencies(&root(), package).unwrap();
        let leaked: Vec<&str> = tools.into_iter().filter(|t| deps.contains(*t)).collect();
        assert!(
            leaked.is_empty(),
            "{package} compiles {leaked:?} for its users"
        );
        assert!(
            deps.contains("chainstore-model") && deps.contains("reqwest"),
            "{deps:?}"
        );
    }
}

#[test]
fn no_function_of_the_node_or_the_store_is_long_without_saying_why() {
    for dir in ["node/src", "raft-store/src"] {
        assert_none(
            "functions over 80 lines",
            long_functions(&root(), dir, 80).unwrap(),
        );
    }
}
