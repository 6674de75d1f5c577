//! The HTTP API of SPEC §6 against a real three-node cluster (separate `chainstore-node`
//! processes on loopback, RocksDB in temp dirs): every endpoint's answers, every error code, and
//! bad input on every endpoint changing nothing.

mod common;

use common::{event, log, Cluster, Options, SECRET};
use serde_json::{json, Value};

#[tokio::test]
async fn appends_follow_the_head_check_idempotency_and_genesis_rules() {
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    let (status, first) = c
        .post(l, "/v1/executions/run-1/events", &event("e1", None))
        .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["execution_id"], "run-1");
    assert_eq!(first["event_id"], "e1");
    assert_eq!(first["exec_seq"], 1);
    assert_eq!(first["duplicate"], false);
    let commit_index = first["commit_index"].as_u64().expect("commit_index");
    assert!(commit_index > 0);

    let (status, second) = c
        .post(l, "/v1/executions/run-1/events", &event("e2", Some("e1")))
        .await;
    assert_eq!((status, second["exec_seq"].as_u64()), (200, Some(2)));
    assert!(
        second["commit_index"].as_u64() > Some(commit_index),
        "commit_index is the Raft log index"
    );

    let (status, retry) = c
        .post(l, "/v1/executions/run-1/events", &event("e1", None))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        (retry["exec_seq"].as_u64(), retry["duplicate"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(
        retry["commit_index"].as_u64(),
        Some(commit_index),
        "the original commit index"
    );

    let (status, not_head) = c
        .post(l, "/v1/executions/run-1/events", &event("e3", Some("e1")))
        .await;
    assert_eq!(status, 409);
    assert_eq!(not_head["error"], "not_head");
    assert_eq!(
        (not_head["expected"].clone(), not_head["got"].clone()),
        (json!("e2"), json!("e1"))
    );

    let conflict = json!({ "event_id": "e1", "prev_event_id": null, "payload": { "other": 1 } });
    let (status, body) = c.post(l, "/v1/executions/run-1/events", &conflict).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("event_conflict"))
    );

    let (_, guarded) = c.get(l, "/v1/executions/run-1/chain").await;
    assert_eq!(guarded["answer"], "cannot_answer");
    assert_eq!(
        guarded["reason"], "no_coverage",
        "appends alone are never served"
    );
    assert!(guarded["applied_index"].as_u64().is_some());

    let genesis =
        json!({ "event_id": "g1", "prev_event_id": null, "payload": {}, "genesis": true });
    assert_eq!(
        c.post(l, "/v1/executions/gen-1/events", &genesis).await.0,
        200
    );
    assert_eq!(
        c.post(l, "/v1/executions/gen-1/events", &event("g2", Some("g1")))
            .await
            .0,
        200
    );
    let (_, guarded) = c.get(l, "/v1/executions/gen-1/chain").await;
    assert_eq!(guarded["answer"], "authoritative", "{guarded}");
    let ids: Vec<&str> = guarded["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["g1", "g2"]);

    let bad_genesis =
        json!({ "event_id": "g0", "prev_event_id": "x", "payload": {}, "genesis": true });
    let (status, body) = c.post(l, "/v1/executions/gen-2/events", &bad_genesis).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_input"))
    );
    let genesis_late =
        json!({ "event_id": "g9", "prev_event_id": null, "payload": {}, "genesis": true });
    let (status, body) = c
        .post(l, "/v1/executions/gen-1/events", &genesis_late)
        .await;
    assert_eq!((status, body["error"].as_str()), (409, Some("not_head")));
}

#[tokio::test]
async fn reads_answer_state_events_raw_chains_and_honest_refusals() {
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    c.post(l, "/v1/executions/r/events", &event("a", None))
        .await;
    c.post(l, "/v1/executions/r/events", &event("b", Some("a")))
        .await;

    let (status, unknown) = c.get(l, "/v1/executions/never-seen/chain").await;
    assert_eq!(status, 200);
    assert_eq!(
        (unknown["answer"].as_str(), unknown["reason"].as_str()),
        (Some("cannot_answer"), Some("not_populated"))
    );
    let (status, raw) = c.get(l, "/v1/executions/never-seen/chain/raw").await;
    assert_eq!((status, raw["events"].clone()), (200, json!([])));

    let (status, state) = c.get(l, "/v1/executions/r/state").await;
    assert_eq!(status, 200);
    assert_eq!(
        state["authority"],
        json!({ "state": "authoritative", "first_seq": 1, "through_seq": 2 })
    );
    assert_eq!(state["coverage"], Value::Null);
    assert_eq!(state["head"], json!({ "exec_seq": 2, "event_id": "b" }));
    assert_eq!(
        (state["complete"].clone(), state["gap_at"].clone()),
        (json!(true), Value::Null)
    );
    let (_, never) = c.get(l, "/v1/executions/never-seen/state").await;
    assert_eq!(never["authority"], json!({ "state": "not_populated" }));

    let (status, one) = c.get(l, "/v1/executions/r/events/b").await;
    assert_eq!(status, 200);
    assert_eq!(
        (one["exec_seq"].as_u64(), one["prev_event_id"].as_str()),
        (Some(2), Some("a"))
    );
    assert!(one["commit_index"].as_u64() > Some(0));
    let (status, missing) = c.get(l, "/v1/executions/r/events/zzz").await;
    assert_eq!(
        (status, missing["error"].as_str()),
        (404, Some("not_found"))
    );

    let (_, raw) = c.get(l, "/v1/executions/r/chain/raw").await;
    assert_eq!(raw["events"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn populate_reports_every_outcome() {
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    let p = "/v1/executions/p/populate";
    let (status, empty) = c
        .post(l, "/v1/executions/empty/populate", &json!({ "events": [] }))
        .await;
    assert_eq!(
        (status, empty.clone()),
        (
            200,
            json!({ "outcome": "in_sync", "total": 0, "appended": 0 })
        )
    );
    let (_, guarded) = c.get(l, "/v1/executions/empty/chain").await;
    assert_eq!(
        (guarded["answer"].clone(), guarded["events"].clone()),
        (json!("authoritative"), json!([]))
    );

    assert_eq!(
        c.post(l, p, &log(&["a", "b"])).await.1,
        json!({ "outcome": "extended", "total": 2, "appended": 2 })
    );
    assert_eq!(
        c.post(l, p, &log(&["a", "b"])).await.1,
        json!({ "outcome": "in_sync", "total": 2, "appended": 0 })
    );
    assert_eq!(
        c.post(l, p, &log(&["a", "b", "c"])).await.1["outcome"],
        "extended"
    );
    assert_eq!(
        c.post(l, p, &log(&["a"])).await.1,
        json!({ "outcome": "stale_log", "stored_len": 3, "log_len": 1 })
    );
    let (_, guarded) = c.get(l, "/v1/executions/p/chain").await;
    assert_eq!(guarded["events"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        c.post(l, p, &log(&["a", "x"])).await.1,
        json!({ "outcome": "diverged", "at_position": 1, "stored": "b", "log": "x" })
    );
    let (_, guarded) = c.get(l, "/v1/executions/p/chain").await;
    assert_eq!(
        guarded["reason"], "no_coverage",
        "divergence revokes serve-trust"
    );

    // A log in parts: a session.
    let s = "/v1/executions/s/populate";
    let part = |ids: &[&str], prev: Option<&str>, position: u64| {
        let mut body = log(ids);
        body["events"][0]["prev_event_id"] = json!(prev);
        body["session"] = json!({ "id": "s1", "position": position, "total": 5 });
        body
    };
    assert_eq!(
        c.post(l, s, &part(&["a", "b"], None, 0)).await.1,
        json!({ "outcome": "part_accepted", "next_position": 2, "total": 5, "appended": 2 })
    );
    let (_, guarded) = c.get(l, "/v1/executions/s/chain").await;
    assert_eq!(guarded["answer"], "cannot_answer", "{guarded}");
    assert_eq!(
        c.post(l, s, &part(&["d", "e"], Some("c"), 3)).await,
        (
            409,
            json!({
                "error": "session_conflict",
                "message": "the session continues at position 2",
                "next_position": 2
            })
        )
    );
    assert_eq!(
        c.post(l, s, &part(&["c", "d", "e"], Some("b"), 2)).await.1,
        json!({ "outcome": "extended", "total": 5, "appended": 3 })
    );
    let (_, guarded) = c.get(l, "/v1/executions/s/chain").await;
    assert_eq!(guarded["events"].as_array().map(Vec::len), Some(5));

    let forked = json!({ "events": [
        { "event_id": "r", "prev_event_id": null, "payload": 1 },
        { "event_id": "s", "prev_event_id": "r", "payload": 2 },
        { "event_id": "t", "prev_event_id": "r", "payload": 3 },
    ] });
    assert_eq!(
        c.post(l, "/v1/executions/q/populate", &forked).await.1,
        json!({ "outcome": "refused", "reason": "fork" })
    );
}

#[tokio::test]
async fn replicated_events_apply_in_any_order_and_forks_are_refused() {
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    let ev = |seq: u64, id: &str, prev: Option<&str>| json!({ "execution_id": "rep", "exec_seq": seq, "event_id": id, "prev_event_id": prev, "payload": { "n": seq }, "commit_index": 999 });
    let path = "/v1/executions/rep/replicated";
    let (status, body) = c
        .post(
            l,
            path,
            &json!({ "events": [ev(3, "c", Some("b")), ev(1, "a", None)] }),
        )
        .await;
    assert_eq!(
        (status, body),
        (200, json!({ "applied": 2, "duplicates": 0 }))
    );
    let (_, state) = c.get(l, "/v1/executions/rep/state").await;
    assert_eq!(
        (state["complete"].clone(), state["gap_at"].clone()),
        (json!(false), json!("b"))
    );
    let (status, body) = c
        .post(
            l,
            path,
            &json!({ "events": [ev(2, "b", Some("a")), ev(1, "a", None)] }),
        )
        .await;
    assert_eq!(
        (status, body),
        (200, json!({ "applied": 1, "duplicates": 1 }))
    );
    let (_, state) = c.get(l, "/v1/executions/rep/state").await;
    assert_eq!(state["complete"], json!(true));
    let (_, one) = c.get(l, "/v1/executions/rep/events/a").await;
    assert_ne!(
        one["commit_index"], 999,
        "the commit index is the applying entry's"
    );

    let (status, body) = c
        .post(l, path, &json!({ "events": [ev(2, "z", Some("a"))] }))
        .await;
    assert_eq!(
        (status, body),
        (
            409,
            json!({
                "error": "forked",
                "message": "the delivery would fork the chain: seq 2 holds event b, not z",
                "fork": { "kind": "seq_taken", "exec_seq": 2, "stored": "b", "offered": "z" }
            })
        )
    );
}

#[tokio::test]
async fn the_change_feed_is_commit_ordered_and_pages_with_next() {
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    c.post(l, "/v1/executions/f1/events", &event("a", None))
        .await;
    c.post(l, "/v1/executions/f2/populate", &log(&["x", "y", "z"]))
        .await;
    c.post(l, "/v1/executions/f1/events", &event("b", Some("a")))
        .await;
    let (status, all) = c.get(l, "/v1/changes?after=0&limit=100").await;
    assert_eq!(status, 200);
    let changes = all["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 5);
    let indexes: Vec<u64> = changes
        .iter()
        .map(|c| c["commit_index"].as_u64().unwrap())
        .collect();
    assert!(indexes.windows(2).all(|w| w[0] <= w[1]), "{indexes:?}");
    assert_eq!(
        changes[1]["commit_index"], changes[3]["commit_index"],
        "one populate entry"
    );
    assert_eq!(all["next"].as_u64(), indexes.last().copied());

    let (_, page) = c.get(l, "/v1/changes?after=0&limit=1").await;
    let next = page["next"].as_u64().unwrap();
    let (_, rest) = c
        .get(l, &format!("/v1/changes?after={next}&limit=100"))
        .await;
    let seen =
        page["changes"].as_array().unwrap().len() + rest["changes"].as_array().unwrap().len();
    assert_eq!(seen, 5, "paging loses nothing");
}

#[tokio::test]
async fn cluster_status_health_readiness_and_metrics() {
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    let (status, view) = c.get(l, "/v1/cluster").await;
    assert_eq!(status, 200);
    assert_eq!(view["node_id"].as_u64(), Some(l));
    assert_eq!(view["state"], "leader");
    assert_eq!(view["voters"], json!([1, 2, 3]));
    assert_eq!(view["learners"], json!([]));
    assert_eq!(view["nodes"].as_object().map(|m| m.len()), Some(3));
    assert!(view["term"].as_u64() > Some(0));
    assert!(view["last_log_index"].as_u64() >= view["last_applied"].as_u64());
    for id in 1..=3 {
        assert_eq!(c.get(id, "/healthz").await.0, 200);
        assert_eq!(c.get(id, "/readyz").await.0, 200);
    }
    c.post(l, "/v1/executions/m/events", &event("a", None))
        .await;
    c.get(l, "/v1/executions/m/chain").await;
    let text = c
        .http
        .get(c.url(l, "/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        "chainstore_raft_term ",
        "chainstore_raft_is_leader 1",
        "chainstore_appends_total{outcome=\"ok\"} 1",
        "chainstore_appends_total{outcome=\"not_head\"} 0",
        "chainstore_populates_total{outcome=\"diverged\"} 0",
        "chainstore_guarded_reads_total{answer=\"no_coverage\"} 1",
        "chainstore_guarded_reads_total{answer=\"watermark_ahead\"} 0",
        "chainstore_fsync_seconds_count ",
        "chainstore_apply_write_seconds_bucket{le=\"+Inf\"} ",
    ] {
        assert!(text.contains(series), "missing {series:?} in\n{text}");
    }
}

#[tokio::test]
async fn a_write_to_a_follower_is_forwarded_and_names_the_leader() {
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    let f = c.follower().await;
    let (status, headers, body) = c
        .post_raw(
            f,
            "/v1/executions/fw/events",
            event("a", None).to_string().into_bytes(),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        headers
            .get("x-chainstore-leader")
            .and_then(|v| v.to_str().ok()),
        Some(l.to_string().as_str())
    );
    let (status, headers, body) = c
        .post_raw(
            f,
            "/v1/executions/fw/events",
            event("b", Some("zzz")).to_string().into_bytes(),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(status, 409, "the leader's answer, relayed: {body}");
    assert!(headers.contains_key("x-chainstore-leader"));
    // A linearizable read on a follower is served through the leader and sees the write.
    let (_, raw) = c.get(f, "/v1/executions/fw/chain/raw").await;
    assert_eq!(raw["events"].as_array().map(Vec::len), Some(1));
    let (status, headers, _) = c
        .post_raw(
            l,
            "/v1/executions/fw/events",
            event("b", Some("a")).to_string().into_bytes(),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        headers
            .get("x-chainstore-leader")
            .and_then(|v| v.to_str().ok()),
        Some(l.to_string().as_str()),
        "every write response names the leader"
    );
}

/// Bad input on every endpoint gets its 4xx and changes nothing.
#[tokio::test]
async fn bad_input_on_every_endpoint_is_refused_and_changes_nothing() {
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    c.post(l, "/v1/executions/ok/events", &event("a", None))
        .await;
    let (_, before) = c.get(l, "/v1/cluster").await;
    let (_, feed_before) = c.get(l, "/v1/changes?limit=1000").await;

    let json_header = [("content-type", "application/json")];
    let long_id_path = format!("/v1/executions/{}/events", "x".repeat(129));
    let big_payload =
        json!({ "event_id": "big", "prev_event_id": "a", "payload": "x".repeat(2 << 20) });
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        ("POST", "/v1/executions/ok/events", b"{not json".to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/events", b"".to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/events", br#"{"event_id": 5, "prev_event_id": "a", "payload": 1}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/events", br#"{"event_id": "bad id", "prev_event_id": "a", "payload": 1}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/events", br#"{"event_id": "b", "prev_event_id": "a"}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/bad%20id/events", event("a", None).to_string().into_bytes(), 400, "invalid_input"),
        ("POST", &long_id_path, event("a", None).to_string().into_bytes(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/events", big_payload.to_string().into_bytes(), 413, "too_large"),
        ("POST", "/v1/executions/ok/populate", br#"{"events": "nope"}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/populate", br#"{"events": [{"event_id": "a", "payload": 1}, {"event_id": "a", "payload": 1}]}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/replicated", br#"{"events": [{"execution_id": "other", "exec_seq": 1, "event_id": "a", "payload": 1}]}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/replicated", br#"{"events": [{"execution_id": "ok", "exec_seq": 0, "event_id": "q", "payload": 1}]}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/cluster/voters", br#"{"voters": []}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/cluster/learners", br#"{"node_id": "four"}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/cluster/init", br#"{"nodes": {"1": "127.0.0.1:1"}}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/raft/append", b"{}".to_vec(), 401, "unauthorized"),
        ("POST", "/raft/vote", b"{}".to_vec(), 401, "unauthorized"),
        ("POST", "/raft/snapshot", b"{}".to_vec(), 401, "unauthorized"),
        ("POST", "/v1/nowhere", b"{}".to_vec(), 404, "not_found"),
        // A misspelled field is refused, not dropped (here: the append would lose `genesis`).
        ("POST", "/v1/executions/new/events", br#"{"event_id": "a", "payload": 1, "genisis": true}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/populate", br#"{"events": [{"event_id": "a", "payload": 1, "prev": null}]}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/populate", br#"{"events": [{"event_id": "a", "payload": 1}], "session": {"id": "s", "position": 3, "total": 9}}"#.to_vec(), 409, "session_conflict"),
        ("POST", "/v1/executions/ok/populate", br#"{"events": [{"event_id": "a", "payload": 1}], "session": {"id": "s", "position": 0, "total": 0}}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/populate", br#"{"events": [], "session": {"id": "s", "position": 0, "total": 4}}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/populate", br#"{"events": [{"event_id": "a", "payload": 1}], "session": {"id": "bad id", "position": 0, "total": 4}}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/populate", br#"{"events": [{"event_id": "a", "payload": 1}], "session": {"id": "s", "position": 0, "total": 4, "extra": 1}}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/rebuild", br#"{"events": []}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/rebuild", br#"{"reason": " ", "events": [{"event_id": "z", "payload": 1}]}"#.to_vec(), 400, "invalid_input"),
        ("POST", "/v1/executions/ok/rebuild", br#"{"reason": "r", "events": [], "force": true}"#.to_vec(), 400, "invalid_input"),
        // The stored chain is the log's beginning: nothing to rebuild.
        ("POST", "/v1/executions/ok/rebuild", br#"{"reason": "r", "events": [{"event_id": "a", "payload": {"step": "a"}}, {"event_id": "b", "prev_event_id": "a", "payload": 1}]}"#.to_vec(), 409, "refused"),
        // A log that is not one chain.
        ("POST", "/v1/executions/ok/rebuild", br#"{"reason": "r", "events": [{"event_id": "x", "payload": 1}, {"event_id": "y", "payload": 1}]}"#.to_vec(), 409, "refused"),
        ("GET", "/v1/executions/ok/quarantine/one", Vec::new(), 400, "invalid_input"),
        ("GET", "/v1/executions/ok/quarantine/1", Vec::new(), 404, "not_found"),
        ("GET", "/v1/executions/ok/quarantine/1?from_seq=0", Vec::new(), 400, "invalid_input"),
        ("POST", "/v1/executions/%ZZ/events", event("a", None).to_string().into_bytes(), 400, "invalid_input"),
        ("GET", "/v1/executions/%ZZ/chain", Vec::new(), 400, "invalid_input"),
        ("GET", "/v1/executions/ok/events", Vec::new(), 405, "method_not_allowed"),
        ("POST", "/v1/executions/ok/chain", b"{}".to_vec(), 405, "method_not_allowed"),
    ];
    for (method, path, body, status, code) in cases {
        let request = match method {
            "POST" => c.http.post(c.url(l, path)),
            _ => c.http.get(c.url(l, path)),
        };
        let mut request = request.body(body);
        for (name, value) in json_header {
            request = request.header(name, value);
        }
        let response = request.send().await.expect("request");
        let got = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (got, answer["error"].as_str()),
            (status, Some(code)),
            "{method} {path}: {answer}"
        );
        assert!(
            answer["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{path}: a message"
        );
    }
    // A limit passed says which, by how much.
    let (status, answer) = c.post(l, "/v1/executions/ok/events", &big_payload).await;
    assert_eq!(status, 413);
    assert_eq!(
        (&answer["what"], &answer["limit"]),
        (&json!("payload_bytes"), &json!(1 << 20))
    );
    assert!(
        answer["size"].as_u64().is_some_and(|size| size > 2 << 20),
        "{answer}"
    );
    let wrong_method = c
        .http
        .get(c.url(l, "/v1/executions/ok/events"))
        .send()
        .await
        .expect("request");
    assert_eq!(
        wrong_method
            .headers()
            .get("allow")
            .and_then(|v| v.to_str().ok()),
        Some("POST"),
        "a 405 names the methods the route takes"
    );
    let get_cases = [
        ("/v1/executions/bad%20id/chain", 400),
        ("/v1/executions/ok/chain?consistency=eventual", 400),
        ("/v1/executions/ok/chain?min_index=minus", 400),
        ("/v1/executions/ok/events/bad%20id", 400),
        ("/v1/changes?after=-1", 400),
        ("/v1/changes?limit=0", 400),
        ("/v1/executions/ok/events/none", 404),
    ];
    for (path, status) in get_cases {
        let (got, answer) = c.get(l, path).await;
        assert_eq!(got, status, "GET {path}: {answer}");
    }
    // A body over the limit is refused from its declared length, before it is read. (Sent by
    // hand: an HTTP client may see a broken pipe when the server answers before the upload ends.)
    let oversized = oversized_request_answer(&c.procs[&l].addr, 17 << 20).await;
    assert!(oversized.starts_with("HTTP/1.1 413"), "{oversized}");
    assert!(oversized.contains("\"too_large\""), "{oversized}");

    let (status, _, _) = c
        .post_raw(
            l,
            "/raft/vote",
            b"{}".to_vec(),
            &[("x-chainstore-secret", "wrong-secret")],
        )
        .await;
    assert_eq!(status, 401);
    let (status, _, _) = c
        .post_raw(
            l,
            "/raft/vote",
            b"{".to_vec(),
            &[("x-chainstore-secret", SECRET)],
        )
        .await;
    assert_eq!(
        status, 400,
        "with the secret, a malformed RPC is still refused"
    );

    let (_, after) = c.get(l, "/v1/cluster").await;
    let (_, feed_after) = c.get(l, "/v1/changes?limit=1000").await;
    assert_eq!(feed_before, feed_after, "no event was written");
    assert_eq!(
        before["last_log_index"], after["last_log_index"],
        "no entry entered the log"
    );
}

/// Sends only the head of a POST declaring `len` body bytes and returns the raw answer.
async fn oversized_request_answer(addr: &str, len: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/executions/ok/events HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("an answer before the body")
        .expect("read");
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

#[tokio::test]
async fn client_tokens_guard_the_client_api_and_survive_forwarding() {
    let options = Options {
        tokens: vec![("write", "s3cret-write-token-0001".into())],
        ..Options::default()
    };
    let c = Cluster::start_with(3, options).await;
    let f = c.follower().await;
    let anonymous = common::http_client(None, None, None);
    let response = anonymous
        .get(c.url(f, "/v1/executions/t/chain"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "unauthorized");
    let response = anonymous
        .post(c.url(f, "/v1/executions/t/events"))
        .bearer_auth("s3cret-write-token-0001")
        .json(&event("a", None))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "forwarded with the token");
    let response = anonymous
        .get(c.url(f, "/v1/executions/t/chain"))
        .bearer_auth("wrong-token-of-sixteen")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let response = anonymous.get(c.url(f, "/healthz")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "probes need no token");
}

#[tokio::test]
async fn a_node_without_a_leader_answers_no_leader_with_retry_after() {
    let c = Cluster::spawn(1, Options::default()).await;
    let (status, headers, body) = c
        .post_raw(
            1,
            "/v1/executions/x/events",
            event("a", None).to_string().into_bytes(),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(status, 503, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["error"], "no_leader");
    assert_eq!(
        headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert_eq!(
        c.get(1, "/readyz").await.0,
        503,
        "not ready without a leader"
    );
    assert_eq!(c.get(1, "/healthz").await.0, 200, "but alive");
}

/// The per-execution latch, seen from outside: appends racing on one head, sent at once to every
/// node (followers forward), resolve to exactly one winner and a clean `not_head` for each of
/// the others, naming the winner as the head; nobody gets a retryable 503, and the chain holds
/// the winner alone after the head it raced on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_racing_on_one_head_get_one_winner_and_not_head_for_the_rest() {
    const RACERS: usize = 16;
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    let genesis =
        json!({ "event_id": "root", "prev_event_id": null, "payload": {}, "genesis": true });
    assert_eq!(
        c.post(l, "/v1/executions/race/events", &genesis).await.0,
        200
    );
    for round in 0..5 {
        let head = if round == 0 {
            "root".to_string()
        } else {
            format!("won-{}", round - 1)
        };
        let ids: Vec<u64> = c.running();
        let mut racers = Vec::new();
        for r in 0..RACERS {
            let url = c.url(ids[r % ids.len()], "/v1/executions/race/events");
            let body = event(&format!("r{round}-{r}"), Some(&head));
            let http = c.http.clone();
            racers.push(tokio::spawn(async move {
                let response = http.post(url).json(&body).send().await.expect("an answer");
                let status = response.status().as_u16();
                let answer: Value = response.json().await.unwrap_or(Value::Null);
                (r, status, answer)
            }));
        }
        let mut winners = Vec::new();
        let mut losers = Vec::new();
        for racer in racers {
            let (r, status, answer) = racer.await.unwrap();
            match status {
                200 => winners.push(r),
                409 => {
                    assert_eq!(answer["error"], "not_head", "round {round}: {answer}");
                    losers.push(answer["expected"].as_str().unwrap_or_default().to_string());
                }
                other => panic!("round {round}: racer {r} got {other}: {answer}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let winner = format!("r{round}-{}", winners[0]);
        assert!(
            losers.iter().all(|expected| *expected == winner),
            "round {round}: every loser is told the winner is the head: {losers:?} vs {winner}"
        );
        // The next round races on the winner, renamed for the next round's prev.
        let next = event(&format!("won-{round}"), Some(&winner));
        assert_eq!(c.post(l, "/v1/executions/race/events", &next).await.0, 200);
    }
    let (_, chain) = c.get(l, "/v1/executions/race/chain").await;
    assert_eq!(chain["answer"], "authoritative", "{chain}");
    assert_eq!(chain["events"].as_array().map(Vec::len), Some(11));
}

/// A rebuild goes through Raft: every node moves the diverged partition into the same quarantine
/// record and serves the log's chain; sent to a follower, it is forwarded to the leader.
#[tokio::test]
async fn a_rebuild_replaces_a_diverged_execution_on_every_node_and_keeps_what_it_held() {
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    let f = c.follower().await;
    let (status, answer) = c
        .post(l, "/v1/executions/r/populate", &log(&["a", "b"]))
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = c
        .post(l, "/v1/executions/r/events", &event("intruder", Some("b")))
        .await;
    assert_eq!(status, 200, "{answer}");

    let mut body = log(&["a", "b", "c"]);
    body["reason"] = json!("a second writer");
    let (status, answer) = c.post(f, "/v1/executions/r/rebuild", &body).await;
    assert_eq!(status, 200, "{answer}");
    let record = answer["quarantine"].clone();
    assert_eq!(
        (&record["number"], &record["events"], &answer["total"]),
        (&json!(1), &json!(3), &json!(3)),
        "{answer}"
    );
    assert_eq!(record["reason"], "a second writer");
    assert!(
        record["diagnosis"].as_str().unwrap().contains("intruder"),
        "{record}"
    );
    let index = record["commit_index"].as_u64().expect("commit index");
    let ids = |events: &Value| -> Vec<String> {
        events
            .as_array()
            .expect("events")
            .iter()
            .map(|e| e["event_id"].as_str().unwrap().to_string())
            .collect()
    };
    for node in 1..=3 {
        c.wait_applied(node, index, std::time::Duration::from_secs(10))
            .await;
        let (_, chain) = c
            .get(node, "/v1/executions/r/chain?consistency=local")
            .await;
        assert_eq!(chain["answer"], "authoritative", "node {node}: {chain}");
        assert_eq!(ids(&chain["events"]), ["a", "b", "c"], "node {node}");
        let (_, list) = c
            .get(node, "/v1/executions/r/quarantine?consistency=local")
            .await;
        assert_eq!(list["records"], json!([record]), "node {node}");
        let (_, page) = c
            .get(
                node,
                "/v1/executions/r/quarantine/1?consistency=local&limit=2",
            )
            .await;
        assert_eq!(ids(&page["events"]), ["a", "b"], "node {node}: {page}");
        assert_eq!(page["next_from_seq"], 3, "node {node}: {page}");
        let (_, page) = c
            .get(
                node,
                "/v1/executions/r/quarantine/1?consistency=local&from_seq=3",
            )
            .await;
        assert_eq!(ids(&page["events"]), ["intruder"], "node {node}: {page}");
    }
    // Nothing is left to rebuild: refused, and no second record.
    let (status, answer) = c.post(l, "/v1/executions/r/rebuild", &body).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (409, Some("refused")),
        "{answer}"
    );
    let (_, list) = c.get(l, "/v1/executions/r/quarantine").await;
    assert_eq!(list["records"].as_array().map(Vec::len), Some(1));
}

/// `GET /v1/openapi.json` documents every route the router serves (the route table both are built
/// from), with its role, and every route it documents answers on a live node; every schema it
/// refers to is in it.
#[tokio::test]
async fn the_openapi_document_lists_every_route_with_its_role_and_every_route_in_it_exists() {
    let c = Cluster::start(1).await;
    let l = c.leader().await;
    let (status, doc) = c.get(l, "/v1/openapi.json").await;
    assert_eq!(status, 200, "{doc}");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.0"), "{doc}");
    let table = chainstore_node::route_table();
    let operations: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(
        operations,
        table.len(),
        "an operation documented twice or one too many"
    );
    for (method, path, access) in &table {
        let op = &doc["paths"][*path][method.to_ascii_lowercase()];
        let role = match access {
            chainstore_node::Access::Public => "public",
            chainstore_node::Access::Client(chainstore_transport::Role::Read) => "read",
            chainstore_node::Access::Client(chainstore_transport::Role::Write) => "write",
            chainstore_node::Access::Client(chainstore_transport::Role::Admin) => "admin",
            chainstore_node::Access::Peer => "peer",
        };
        assert_eq!(op["x-chainstore-role"], role, "{method} {path}: {op}");
        assert!(op["responses"]["200"].is_object(), "{method} {path}");
        // Every route in the document is served: a call never meets the router's own 404 or
        // 405 (bodies are empty objects: each write refuses them without changing anything).
        let concrete = path
            .replace("{id}", "openapi-probe")
            .replace("{event_id}", "e")
            .replace("{number}", "1");
        let request = match *method {
            "POST" => c.http.post(c.url(l, &concrete)).json(&json!({})),
            _ => c.http.get(c.url(l, &concrete)),
        };
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        assert!(
            status != 405 && !(status == 404 && body.contains("no such route")),
            "{method} {path} is documented but not served: {status} {body}"
        );
    }
    // The probe tells a missing route apart.
    let response = c
        .http
        .get(c.url(l, "/v1/not-a-route"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    assert!(response.text().await.unwrap().contains("no such route"));

    // The types: the chain read's query parameters, the rebuild's body, the answers' tags.
    let chain = &doc["paths"]["/v1/executions/{id}/chain"]["get"];
    let params: Vec<&str> = chain["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for name in [
        "id",
        "consistency",
        "min_index",
        "from_seq",
        "to_seq",
        "limit",
    ] {
        assert!(params.contains(&name), "{name} missing from {params:?}");
    }
    // OpenAPI 3.0 has no type lists: an optional parameter is one type, not "or null".
    for param in chain["parameters"].as_array().unwrap() {
        assert!(!param["schema"]["type"].is_array(), "{param}");
        assert!(param["schema"].get("anyOf").is_none(), "{param}");
    }
    let rebuild = &doc["paths"]["/v1/executions/{id}/rebuild"]["post"];
    assert_eq!(
        rebuild["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/RebuildBody"
    );
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let text = doc.to_string();
    for tag in [
        "cannot_answer",
        "authoritative",
        "stale_log",
        "not_head",
        "session_conflict",
    ] {
        assert!(
            text.contains(&format!("\"{tag}\"")),
            "{tag} is in no schema"
        );
    }
    // Every reference resolves.
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(refs.len() > 20, "{refs:?}");
    for reference in refs {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("a reference outside the components: {reference}"));
        assert!(schemas.contains_key(name), "{reference} does not resolve");
    }
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get("$ref") {
                out.push(r.clone());
            }
            map.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// How many AppendEntries RPCs node `id` answered over an append stream and as HTTP requests.
async fn append_rpcs_received(c: &Cluster, id: u64) -> (u64, u64) {
    let series = |via: &str| format!("chainstore_raft_append_rpcs_received_total{{via=\"{via}\"}}");
    (
        c.counter(&c.http, id, &series("stream")).await,
        c.counter(&c.http, id, &series("http")).await,
    )
}

/// Waits until node `id` has answered AppendEntries over a stream, then returns its counts.
async fn streaming(c: &Cluster, id: u64) -> (u64, u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let counts = append_rpcs_received(c, id).await;
        if counts.0 > 0 {
            return counts;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node {id} was never sent AppendEntries over a stream: {counts:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Once its stream is open (the first RPCs to a peer may go as HTTP requests while it opens),
/// the leader's AppendEntries reach every follower over it (an RPC that misses its deadline on a
/// loaded machine closes the stream, and the next goes as HTTP while another opens: far fewer
/// than half of them) — so a stream that stops working cannot hide behind the fallback — and a
/// follower that was killed and restarted is given a new stream and catches up.
#[tokio::test]
async fn the_leader_replicates_over_append_streams_and_opens_a_new_one_after_a_restart() {
    let mut c = Cluster::start(3).await;
    let l = c.leader().await;
    let mut prev: Option<String> = None;
    let mut append = |c: &Cluster, i: usize| {
        let id = format!("s{i}");
        let body = event(&id, prev.as_deref());
        prev = Some(id);
        let url = c.url(l, "/v1/executions/streamed/events");
        let http = c.http.clone();
        async move {
            let response = http.post(url).json(&body).send().await.expect("append");
            assert_eq!(response.status().as_u16(), 200);
            let answer: Value = response.json().await.expect("answer");
            answer["commit_index"].as_u64().expect("commit_index")
        }
    };
    let followers: Vec<u64> = (1..=3).filter(|id| *id != l).collect();
    let mut before = Vec::new();
    for &f in &followers {
        before.push(streaming(&c, f).await);
    }
    let mut index = 0;
    for i in 0..10 {
        index = append(&c, i).await;
    }
    for (&f, (stream_before, http_before)) in followers.iter().zip(before) {
        c.wait_applied(f, index, std::time::Duration::from_secs(10))
            .await;
        let (stream, http) = append_rpcs_received(&c, f).await;
        assert!(
            stream >= stream_before + 10,
            "node {f}: {stream_before} then {stream} RPCs over the stream"
        );
        assert!(
            2 * (http - http_before) < stream - stream_before,
            "node {f} was sent {} HTTP appends beside {} over its stream",
            http - http_before,
            stream - stream_before
        );
    }
    assert_eq!(
        append_rpcs_received(&c, l).await,
        (0, 0),
        "the leader received none"
    );

    // The leader's stream to the restarted follower breaks; a new one is opened.
    let f = followers[0];
    c.restart(f).await;
    index = append(&c, 10).await;
    c.wait_applied(f, index, std::time::Duration::from_secs(10))
        .await;
    streaming(&c, f).await;
    // Each of the leader's two clients to it (replication, heartbeats) finds its stream broken
    // by the restart at its next RPC, sends that one as HTTP and opens a new stream: a few
    // appends and heartbeats later both are open.
    for i in 11..14 {
        index = append(&c, i).await;
    }
    c.wait_applied(f, index, std::time::Duration::from_secs(10))
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (stream_before, http_before) = append_rpcs_received(&c, f).await;
    for i in 14..20 {
        index = append(&c, i).await;
    }
    c.wait_applied(f, index, std::time::Duration::from_secs(10))
        .await;
    let (stream, http) = append_rpcs_received(&c, f).await;
    assert!(
        stream >= stream_before + 6,
        "node {f} after its restart: {stream_before} then {stream} RPCs over a stream"
    );
    // On a loaded machine a stream RPC may miss its deadline: that stream is closed, and the
    // RPC after it goes as HTTP while the next stream opens. A stream that did not work would
    // send every one of them as HTTP, one that worked every other time half of them.
    assert!(
        2 * (http - http_before) < stream - stream_before,
        "node {f} was sent {} HTTP appends beside {} over a stream",
        http - http_before,
        stream - stream_before
    );
    let (_, chain) = c
        .get(f, "/v1/executions/streamed/chain/raw?consistency=local")
        .await;
    assert_eq!(
        chain["events"].as_array().map(Vec::len),
        Some(20),
        "{chain}"
    );
}
