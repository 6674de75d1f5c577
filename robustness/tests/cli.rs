//! The fault run refuses what it cannot do before it starts a node or touches iptables.

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_chainstore-robustness"))
        .args(["--node-bin", "/nonexistent/chainstore-node"])
        .args(args)
        .output()
        .expect("run chainstore-robustness");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_run_directory_holding_an_earlier_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("report.txt"), "an earlier run").unwrap();
    let (code, stderr) = run(&["--dir", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("report.txt")).unwrap(),
        "an earlier run"
    );
}

#[test]
fn cuts_need_exactly_three_known_users() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let run_dir = run_dir.to_str().unwrap();
    let (code, stderr) = run(&["--dir", run_dir, "--users", "root,root"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("needs three users"), "{stderr}");
    let (code, stderr) = run(&["--dir", run_dir, "--users", "root,root,no-such-user-here"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no user no-such-user-here"), "{stderr}");
}
