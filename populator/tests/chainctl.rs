//! `chainctl` end to end: the real binary against a real in-process cluster, checking output and
//! exit codes, bad arguments and an unreachable cluster included.

// The in-process cluster the client's tests run against.
#[path = "../../client/tests/common/mod.rs"]
mod common;

use std::process::Output;

use common::InProcCluster;
use serde_json::Value;

/// Runs chainctl with `args` against `nodes` (off the async runtime's threads).
async fn chainctl(nodes: &str, args: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_chainctl"));
    command.arg("--nodes").arg(nodes).args(args);
    tokio::task::spawn_blocking(move || command.output().expect("run chainctl"))
        .await
        .expect("join")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chainctl_appends_reads_and_reports_with_meaningful_exit_codes() {
    let cluster = InProcCluster::start(3).await;
    let nodes = cluster.urls().join(",");

    let out = chainctl(&nodes, &["cluster", "status"]).await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("ID"), "{table}");
    assert!(table.contains("leader"), "{table}");
    assert_eq!(
        table.lines().count(),
        4,
        "a header and three nodes: {table}"
    );

    let out = chainctl(&nodes, &["--json", "cluster", "status"]).await;
    let status: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(status["nodes"].as_array().map(Vec::len), Some(3));

    let out = chainctl(
        &nodes,
        &[
            "append",
            "order-1",
            "e1",
            "--payload",
            r#"{"type":"created"}"#,
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("appended e1 to order-1 at seq 1"),
        "{}",
        text(&out.stdout)
    );

    let out = chainctl(&nodes, &["append", "order-1", "e2", "--prev", "nope"]).await;
    assert_eq!(code(&out), 1);
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one clear line: {err}");
    assert_eq!(
        err.trim_end(),
        "chainctl: not the head: the execution's head is e1, but the append named nope as its \
         previous event",
        "in words, no Debug text"
    );

    // With --json the refusal is the API's error body, on stdout, with the same exit code.
    let out = chainctl(
        &nodes,
        &["--json", "append", "order-1", "e2", "--prev", "nope"],
    )
    .await;
    assert_eq!(code(&out), 1);
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    let refusal: Value = serde_json::from_slice(&out.stdout).expect("a JSON error body");
    assert_eq!(
        (&refusal["error"], &refusal["expected"], &refusal["got"]),
        (
            &Value::from("not_head"),
            &Value::from("e1"),
            &Value::from("nope")
        ),
        "{refusal}"
    );
    assert!(refusal["message"]
        .as_str()
        .is_some_and(|m| m.contains("head is e1")));

    let out = chainctl(
        &nodes,
        &[
            "--json",
            "append",
            "order-1",
            "e1",
            "--payload",
            r#"{"type":"created"}"#,
        ],
    )
    .await;
    let appended: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (
            appended["exec_seq"].as_u64(),
            appended["duplicate"].as_bool()
        ),
        (Some(1), Some(true))
    );

    let out = chainctl(&nodes, &["chain", "order-1"]).await;
    assert_eq!(code(&out), 4, "a guarded read that cannot answer");
    assert!(text(&out.stdout).contains("cannot answer (no_coverage)"));

    let out = chainctl(&nodes, &["chain", "order-1", "--raw"]).await;
    assert_eq!(code(&out), 0);
    assert!(text(&out.stdout).contains("e1"));

    let out = chainctl(&nodes, &["--json", "state", "order-1"]).await;
    assert_eq!(code(&out), 0);
    let state: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(state["head"]["event_id"], "e1");

    let out = chainctl(&nodes, &["event", "order-1", "missing"]).await;
    assert_eq!(code(&out), 1);

    let out = chainctl(&nodes, &["changes", "--after", "0"]).await;
    assert_eq!(code(&out), 0);
    assert!(text(&out.stdout).contains("order-1"));

    // A backup saved to a file, whole and valid, with nothing left beside it.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backup.snap");
    let file_arg = file.to_str().unwrap();
    let out = chainctl(&nodes, &["--json", "snapshot", "save", file_arg]).await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let saved: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(saved["bytes"].as_u64(), Some(bytes.len() as u64));
    let applied = raft_store::raft::inspect_backup(&bytes).expect("a valid backup");
    assert_eq!(saved["last_log_index"].as_u64(), Some(applied.index));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    // Into a directory that does not exist: refused, exit code 1.
    let nowhere = dir.path().join("missing").join("backup.snap");
    let out = chainctl(&nodes, &["snapshot", "save", nowhere.to_str().unwrap()]).await;
    assert_eq!(code(&out), 1, "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chainctl_populates_from_a_jsonl_file_and_flags_unhealthy_logs() {
    let cluster = InProcCluster::start(3).await;
    let nodes = cluster.urls().join(",");
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.jsonl");
    let mut lines = String::new();
    for x in 0..5 {
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            let prev = if i == 0 {
                "null".to_string()
            } else {
                format!("\"{}\"", ["a", "b", "c"][i - 1])
            };
            lines.push_str(&format!("{{\"execution_id\": \"run-{x}\", \"event_id\": \"{id}\", \"prev_event_id\": {prev}, \"payload\": {{\"i\": {i}}}}}\n"));
        }
    }
    std::fs::write(&good, lines).unwrap();
    let out = chainctl(&nodes, &["populate", "--file", good.to_str().unwrap()]).await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("extended  5"),
        "{}",
        text(&out.stdout)
    );
    let out = chainctl(&nodes, &["chain", "run-3"]).await;
    assert_eq!(code(&out), 0);
    assert!(text(&out.stdout).contains("authoritative, 3 events"));

    let forked = dir.path().join("forked.jsonl");
    std::fs::write(
        &forked,
        "{\"execution_id\": \"f\", \"event_id\": \"a\", \"payload\": 1}\n{\"execution_id\": \"f\", \"event_id\": \"b\", \"payload\": 1}\n",
    )
    .unwrap();
    let out = chainctl(
        &nodes,
        &["--json", "populate", "--file", forked.to_str().unwrap()],
    )
    .await;
    assert_eq!(code(&out), 1, "a refused log is flagged");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["outcomes"]["refused"], 1);

    let broken = dir.path().join("broken.jsonl");
    std::fs::write(&broken, "{not json\n").unwrap();
    let out = chainctl(&nodes, &["populate", "--file", broken.to_str().unwrap()]).await;
    assert_eq!(code(&out), 2);
    assert!(text(&out.stderr).contains("broken.jsonl:1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chainctl_bench_prints_throughput_and_percentiles() {
    let cluster = InProcCluster::start(3).await;
    let nodes = cluster.urls().join(",");
    let out = chainctl(&nodes, &["bench", "--concurrency", "4", "--count", "80"]).await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let table = text(&out.stdout);
    for column in ["WRITERS", "APPENDS/S", "P50 MS", "P99 MS"] {
        assert!(table.contains(column), "{table}");
    }
    let out = chainctl(
        &nodes,
        &["--json", "bench", "--concurrency", "2", "--count", "20"],
    )
    .await;
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (report["appends"].as_u64(), report["errors"].as_u64()),
        (Some(20), Some(0))
    );
    assert!(report["appends_per_second"].as_f64() > Some(0.0));
}

#[tokio::test]
async fn chainctl_refuses_bad_arguments_and_reports_an_unreachable_cluster() {
    let out = chainctl("http://127.0.0.1:1", &["no-such-command"]).await;
    assert_eq!(code(&out), 2);
    let out = chainctl("http://127.0.0.1:1", &["append", "bad id", "e1"]).await;
    assert_eq!(code(&out), 2);
    assert!(text(&out.stderr).contains("bad execution id"));
    let out = chainctl(
        "http://127.0.0.1:1",
        &["append", "x", "e1", "--payload", "{oops"],
    )
    .await;
    assert_eq!(code(&out), 2);
    let out = chainctl(
        "http://127.0.0.1:1",
        &["--attempts", "2", "--timeout-ms", "300", "chain", "x"],
    )
    .await;
    assert_eq!(code(&out), 3, "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("chainctl: unavailable"), "{err}");

    // Under --json a script reads every failure as one JSON body: unavailable (exit 3, try
    // again) apart from a usage error (exit 2, the request was wrong).
    let out = chainctl(
        "http://127.0.0.1:1",
        &[
            "--json",
            "--attempts",
            "2",
            "--timeout-ms",
            "300",
            "chain",
            "x",
        ],
    )
    .await;
    assert_eq!(code(&out), 3);
    let body: Value = serde_json::from_slice(&out.stdout).expect("a JSON error body");
    assert_eq!(body["error"], "unavailable", "{body}");
    let out = chainctl("http://127.0.0.1:1", &["--json", "append", "bad id", "e1"]).await;
    assert_eq!(code(&out), 2);
    let body: Value = serde_json::from_slice(&out.stdout).expect("a JSON error body");
    assert_eq!(body["error"], "usage", "{body}");
    assert!(body["message"]
        .as_str()
        .is_some_and(|m| m.contains("bad execution id")));
}
