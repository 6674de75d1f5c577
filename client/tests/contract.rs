//! The HTTP contract, end to end: every answer a real node sends, read raw and read as the
//! contract's type, must be the same JSON, so a field the node sends that the type does not know
//! (or a field renamed on one side) fails here by name; and every answer the typed client
//! parses comes back with the values the node stored.

mod common;

use chainstore_client::{Client, ClientError, ReadOptions};
use chainstore_model::api::{
    AppendAnswer, AppendBatchAnswer, ChainAnswer, ChangesAnswer, ClusterStatus, ErrorBody,
    HealthAnswer, MembershipAnswer, PopulateAnswer, RawChainAnswer, ReadyAnswer, StateAnswer,
};
use chainstore_model::{
    ChainEvent, EventId, ExecutionId, FromLog, LogEvent, PartOutcome, PopulateSession, Reason,
    SessionId,
};
use chainstore_transport::Transport;
use common::InProcCluster;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// Sends one request to `url` and returns the status and the JSON body.
async fn call(url: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(format!("{url}{path}"))
        .header("content-type", "application/json")
        .body(body.map_or_else(bytes::Bytes::new, |b| b.to_string().into()))
        .unwrap();
    let answer = common::transport()
        .send(request, std::time::Duration::from_secs(10))
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let body = serde_json::from_slice(answer.body()).unwrap_or(Value::Null);
    (status, body)
}

/// Decodes `raw` as `T` and checks that `T` writes back exactly `raw`: no field lost, renamed
/// or added on either side.
fn typed<T: DeserializeOwned + Serialize>(what: &str, raw: &Value) -> T {
    let value: T = serde_json::from_value(raw.clone())
        .unwrap_or_else(|e| panic!("{what}: {raw} is not the contract's type: {e}"));
    assert_eq!(
        &serde_json::to_value(&value).unwrap(),
        raw,
        "{what}: the contract's type does not write back what the node sent"
    );
    value
}

fn id(s: &str) -> EventId {
    EventId::new(s).unwrap()
}

fn log(ids: &[&str]) -> Vec<LogEvent> {
    ids.iter()
        .enumerate()
        .map(|(i, e)| LogEvent {
            event_id: id(e),
            prev_event_id: (i > 0).then(|| id(ids[i - 1])),
            parent_execution_id: None,
            payload: json!({ "n": i }),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_of_a_node_is_the_contracts_type_exactly() {
    let cluster = InProcCluster::start(1).await;
    let url = cluster.urls()[0].clone();

    let (status, raw) = call(&url, "GET", "/healthz", None).await;
    assert_eq!(status, 200);
    typed::<HealthAnswer>("healthz", &raw);
    let (_, raw) = call(&url, "GET", "/readyz", None).await;
    typed::<ReadyAnswer>("readyz", &raw);
    let (_, raw) = call(&url, "GET", "/v1/cluster", None).await;
    let cluster_view: ClusterStatus = typed("cluster", &raw);
    assert_eq!(cluster_view.voters.len(), 1);

    let append =
        json!({ "event_id": "a1", "prev_event_id": null, "payload": {"k": 1}, "genesis": true });
    let (status, raw) = call(&url, "POST", "/v1/executions/x/events", Some(append)).await;
    assert_eq!(status, 200, "{raw}");
    let appended: AppendAnswer = typed("append", &raw);
    assert_eq!((appended.exec_seq, appended.duplicate), (1, false));

    let several = json!({ "events": [
        { "event_id": "a2", "prev_event_id": "a1", "payload": {} },
        { "event_id": "a3", "prev_event_id": "a2", "payload": {} },
    ] });
    let (status, raw) = call(&url, "POST", "/v1/executions/x/events", Some(several)).await;
    assert_eq!(status, 200, "{raw}");
    let batch: AppendBatchAnswer = typed("append of several", &raw);
    assert_eq!(
        batch.events.iter().map(|e| e.exec_seq).collect::<Vec<_>>(),
        [2, 3]
    );
    let (_, raw) = call(&url, "GET", "/v1/executions/x/chain", None).await;
    assert!(matches!(
        typed::<ChainAnswer>("chain", &raw),
        ChainAnswer::Authoritative { ref events, next_from_seq: None, .. } if events.len() == 3
    ));
    let (_, raw) = call(
        &url,
        "GET",
        "/v1/executions/x/chain?from_seq=1&limit=1",
        None,
    )
    .await;
    typed::<ChainAnswer>("chain page", &raw);
    let (_, raw) = call(&url, "GET", "/v1/executions/never/chain", None).await;
    assert!(matches!(
        typed::<ChainAnswer>("cannot answer", &raw),
        ChainAnswer::CannotAnswer {
            reason: Reason::NotPopulated,
            ..
        }
    ));
    let (_, raw) = call(&url, "GET", "/v1/executions/x/chain/raw?limit=1", None).await;
    typed::<RawChainAnswer>("chain/raw", &raw);
    let (_, raw) = call(&url, "GET", "/v1/executions/x/state", None).await;
    typed::<StateAnswer>("state", &raw);
    let (_, raw) = call(&url, "GET", "/v1/executions/x/events/a1", None).await;
    typed::<ChainEvent>("event", &raw);
    let (_, raw) = call(&url, "GET", "/v1/changes?after=0&limit=10", None).await;
    assert_eq!(typed::<ChangesAnswer>("changes", &raw).changes.len(), 3);

    let populate = |ids: &[&str]| Some(json!({ "events": log(ids) }));
    for (ids, outcome) in [
        (&["p1", "p2"][..], "extended"),
        (&["p1", "p2"][..], "in_sync"),
        (&["p1"][..], "stale_log"),
        (&["p1", "q2"][..], "diverged"),
    ] {
        let (status, raw) = call(&url, "POST", "/v1/executions/p/populate", populate(ids)).await;
        assert_eq!(
            (status, raw["outcome"].as_str()),
            (200, Some(outcome)),
            "{raw}"
        );
        typed::<PopulateAnswer>(outcome, &raw);
    }
    let mut two_roots = log(&["r1"]);
    two_roots.extend(log(&["r2"]));
    let (_, raw) = call(
        &url,
        "POST",
        "/v1/executions/r/populate",
        Some(json!({ "events": two_roots })),
    )
    .await;
    assert_eq!(raw["outcome"], "refused", "{raw}");
    typed::<PopulateAnswer>("refused", &raw);
    let part = json!({
        "events": log(&["s1", "s2"]),
        "session": { "id": "sess", "position": 0, "total": 3 },
    });
    let (_, raw) = call(&url, "POST", "/v1/executions/s/populate", Some(part)).await;
    assert_eq!(raw["outcome"], "part_accepted", "{raw}");
    typed::<PopulateAnswer>("part_accepted", &raw);

    let delivery = json!({ "events": [{
        "execution_id": "d", "exec_seq": 1, "event_id": "d1", "prev_event_id": null,
        "payload": {}, "commit_index": 0
    }] });
    let (status, raw) = call(&url, "POST", "/v1/executions/d/replicated", Some(delivery)).await;
    assert_eq!(status, 200, "{raw}");
    typed::<chainstore_model::Replicated>("replicated", &raw);

    let (_, raw) = call(
        &url,
        "POST",
        "/v1/cluster/voters",
        Some(json!({ "voters": [1] })),
    )
    .await;
    typed::<MembershipAnswer>("voters", &raw);

    // Error answers: each one the node sends is the contract's error body, with its status.
    let wrong_prev = json!({ "event_id": "a9", "prev_event_id": "zz", "payload": {} });
    let conflicting =
        json!({ "event_id": "a1", "prev_event_id": null, "payload": {"k": 2}, "genesis": true });
    for (method, path, body, code) in [
        (
            "POST",
            "/v1/executions/x/events",
            Some(json!({ "nope": 1 })),
            "invalid_input",
        ),
        (
            "POST",
            "/v1/executions/x/events",
            Some(wrong_prev),
            "not_head",
        ),
        (
            "POST",
            "/v1/executions/x/events",
            Some(conflicting),
            "event_conflict",
        ),
        ("GET", "/v1/executions/x/events/zz", None, "not_found"),
        (
            "GET",
            "/v1/executions/x/chain?limit=0",
            None,
            "invalid_input",
        ),
        (
            "DELETE",
            "/v1/executions/x/events",
            None,
            "method_not_allowed",
        ),
        (
            "POST",
            "/v1/executions/s/populate",
            Some(
                json!({ "events": log(&["s3"]), "session": { "id": "other", "position": 2, "total": 3 } }),
            ),
            "session_conflict",
        ),
    ] {
        let (status, raw) = call(&url, method, path, body).await;
        let error: ErrorBody = typed(code, &raw);
        assert_eq!((error.code(), error.status()), (code, status), "{raw}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typed_client_reads_back_every_field_the_node_sends() {
    let cluster = InProcCluster::start(1).await;
    let client = Client::builder(cluster.urls()).build().unwrap();
    let x = ExecutionId::new("typed").unwrap();
    let batch_exec = ExecutionId::new("typed-batch").unwrap();
    let requests: Vec<chainstore_model::AppendRequest> = ["b1", "b2", "b3"]
        .iter()
        .enumerate()
        .map(|(i, e)| chainstore_model::AppendRequest {
            event_id: id(e),
            prev_event_id: (i > 0).then(|| id(["b1", "b2"][i - 1])),
            parent_execution_id: None,
            payload: json!({ "i": i }),
            genesis: i == 0,
        })
        .collect();
    let answers = client.append_batch(&batch_exec, &requests).await.unwrap();
    assert_eq!(
        answers
            .iter()
            .map(|a| (a.exec_seq, a.duplicate))
            .collect::<Vec<_>>(),
        [(1, false), (2, false), (3, false)]
    );
    assert_eq!(answers[0].commit_index, answers[2].commit_index);
    let outcome = client
        .populate(&x, &log(&["t1", "t2", "t3"]))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        FromLog::InSync {
            total: 3,
            appended: 3
        }
    );
    let state = client.state(&x, ReadOptions::default()).await.unwrap();
    assert!(state.complete, "{state:?}");
    assert_eq!(state.head.map(|h| h.exec_seq), Some(3));
    let changes = client.changes(0, 10, ReadOptions::local()).await.unwrap();
    assert_eq!(changes.changes.len(), 6);
    let part = PopulateSession {
        id: SessionId::new("typed-session").unwrap(),
        position: 0,
        total: 4,
    };
    let y = ExecutionId::new("typed-parts").unwrap();
    assert_eq!(
        client
            .populate_part(&y, &part, &log(&["u1", "u2"]))
            .await
            .unwrap(),
        PartOutcome::Accepted {
            next_position: 2,
            total: 4,
            appended: 2
        }
    );
    let skip = PopulateSession {
        position: 3,
        ..part
    };
    assert_eq!(
        client.populate_part(&y, &skip, &log(&["u4"])).await,
        Err(ClientError::SessionConflict {
            next_position: Some(2)
        })
    );
}
