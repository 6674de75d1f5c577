//! The decoders of what reaches a node over the network, under the seeded mutation fuzzer
//! (`raft_store::fuzz`): client request bodies, Raft RPCs and the snapshot chunk frame. No input
//! may panic one. `FUZZ_INPUTS` (default 20,000 per decoder) and `FUZZ_SEED` as in
//! `raft-store/tests/fuzz.rs`; `scripts/fuzz.sh` runs millions.

use chainstore_model::{AppendRequest, ChainEvent, LogEvent, PopulateSession};
use openraft::errors::RaftError;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, TransferLeaderRequest, VoteRequest,
};
use raft_store::fuzz::{run_all, Target, PROPERTY_INPUTS_MIN};
use raft_store::raft::{log_id, SnapshotMeta, TypeConfig, Vote};
use raft_store::wire::snapshot::{decode_chunk, encode_chunk, SnapshotChunk};
use raft_store::wire::Message;
use serde_json::{json, Value};

fn bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("json")
}

/// Body wrappers as the handlers declare them.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Events<T> {
    events: Vec<T>,
}

fn targets() -> Vec<Target> {
    let vote = Vote::new_committed(3, 1);
    let log_id = log_id(3, 1, 9);
    let append_rpc = json!({
        "vote": vote, "prev_log_id": log_id, "leader_commit": log_id,
        "entries": [
            {"log_id": log_id, "payload": "Blank"},
            {"log_id": log_id, "payload": {"Membership": {"configs": [[1, 2, 3]],
                "nodes": {"1": {"addr": "a:1"}, "2": {"addr": "b:1"}, "3": {"addr": "c:1"}}}}}
        ]
    });
    let chunk = SnapshotChunk {
        vote,
        meta: SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: Default::default(),
        },
        offset: 0,
        done: true,
    };
    vec![
        Target {
            name: "append body",
            inputs_min: 0,
            seeds: vec![
                bytes(
                    &json!({"event_id": "e2", "prev_event_id": "e1", "payload": {"a": [1, 2.5, "x"]}}),
                ),
                bytes(
                    &json!({"event_id": "e1", "genesis": true, "parent_execution_id": "p", "payload": null}),
                ),
            ],
            decode: |b| {
                let _ = serde_json::from_slice::<AppendRequest>(b);
            },
        },
        Target {
            name: "populate body",
            inputs_min: 0,
            seeds: vec![bytes(&json!({"events": [
                {"event_id": "l1", "payload": 1},
                {"event_id": "l2", "prev_event_id": "l1", "payload": {"k": "v"}}
            ]}))],
            decode: |b| {
                let _ = serde_json::from_slice::<Events<LogEvent>>(b);
            },
        },
        Target {
            name: "populate session (a part's position in a long log)",
            inputs_min: 0,
            seeds: vec![
                bytes(&json!({"id": "s1", "position": 0, "total": 250000})),
                bytes(&json!({"id": "p0123456789abcdef", "position": 10000, "total": 10001})),
            ],
            decode: |b| {
                let _ = serde_json::from_slice::<PopulateSession>(b);
            },
        },
        Target {
            name: "rebuild body",
            inputs_min: 0,
            seeds: vec![bytes(&json!({"reason": "a second writer", "events": [
                {"event_id": "l1", "payload": 1},
                {"event_id": "l2", "prev_event_id": "l1", "payload": {"k": "v"}}
            ]}))],
            decode: |b| {
                let _ = serde_json::from_slice::<chainstore_model::api::RebuildBody>(b);
            },
        },
        Target {
            name: "replicated body",
            inputs_min: 0,
            seeds: vec![bytes(&json!({"events": [
                {"execution_id": "x", "exec_seq": 1, "event_id": "r1", "payload": [], "commit_index": 4},
                {"execution_id": "x", "exec_seq": 2, "event_id": "r2", "prev_event_id": "r1", "payload": "s"}
            ]}))],
            decode: |b| {
                let _ = serde_json::from_slice::<Events<ChainEvent>>(b);
            },
        },
        Target {
            name: "raft append entries (binary encoding)",
            inputs_min: PROPERTY_INPUTS_MIN,
            seeds: vec![
                serde_json::from_value::<AppendEntriesRequest<TypeConfig>>(append_rpc.clone())
                    .expect("an append")
                    .encode()
                    .expect("encodes"),
                AppendEntriesRequest::<TypeConfig> {
                    vote,
                    prev_log_id: None,
                    leader_commit: None,
                    entries: Vec::new(),
                }
                .encode()
                .expect("encodes"),
            ],
            decode: |b| {
                let _ = AppendEntriesRequest::<TypeConfig>::decode(b);
            },
        },
        Target {
            name: "raft vote",
            inputs_min: PROPERTY_INPUTS_MIN,
            seeds: vec![bytes(
                &json!({"vote": Vote::new(4, 2), "last_log_id": log_id, "leadership_transfer": false}),
            )],
            decode: |b| {
                let _ = VoteRequest::<TypeConfig>::decode(b);
            },
        },
        Target {
            name: "raft snapshot chunk frame",
            inputs_min: PROPERTY_INPUTS_MIN,
            seeds: vec![encode_chunk(&chunk, b"CSSNAP02 and more").expect("frame")],
            decode: |b| {
                let _ = decode_chunk(b);
            },
        },
        Target {
            name: "raft leadership transfer",
            inputs_min: PROPERTY_INPUTS_MIN,
            seeds: vec![bytes(
                &serde_json::to_value(TransferLeaderRequest::<TypeConfig>::new(
                    vote,
                    2,
                    Some(log_id),
                ))
                .expect("json"),
            )],
            decode: |b| {
                let _ = TransferLeaderRequest::<TypeConfig>::decode(b);
            },
        },
        Target {
            name: "raft answer",
            inputs_min: PROPERTY_INPUTS_MIN,
            seeds: vec![
                Ok::<_, RaftError<TypeConfig>>(AppendEntriesResponse::<TypeConfig>::Success)
                    .encode()
                    .expect("encodes"),
                Ok::<_, RaftError<TypeConfig>>(
                    AppendEntriesResponse::<TypeConfig>::PartialSuccess(Some(log_id)),
                )
                .encode()
                .expect("encodes"),
            ],
            decode: |b| {
                let _ =
                    Result::<AppendEntriesResponse<TypeConfig>, RaftError<TypeConfig>>::decode(b);
            },
        },
    ]
}

#[test]
fn no_input_panics_a_network_decoder() {
    let failures = run_all(&targets(), true, fresh_seed());
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A new seed each run (the second it starts), so CI tries new inputs every time.
fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
