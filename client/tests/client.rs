//! The client against a real in-process three-node cluster: following the leader through a
//! failover, retrying a lost response into `duplicate: true`, typed errors, the reconciler's two
//! verdicts, and the comparator's coverage.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chainstore_client::{
    BoxFuture, Client, ClientError, Comparator, LogError, LogSource, ReadOptions, Reconciler,
    Verdict,
};
use chainstore_model::{
    AppendRequest, ChainEvent, EventId, ExecutionId, Fork, FromLog, Guarded, Limit, LogEvent,
};
use chainstore_transport::{ReqwestTransport, Transport, TransportError};
use common::InProcCluster;
use serde_json::json;

fn exec(s: &str) -> ExecutionId {
    ExecutionId::new(s).unwrap()
}

fn append(id: &str, prev: Option<&str>) -> AppendRequest {
    AppendRequest {
        event_id: EventId::new(id).unwrap(),
        prev_event_id: prev.map(|p| EventId::new(p).unwrap()),
        parent_execution_id: None,
        payload: json!({ "id": id }),
        genesis: false,
    }
}

fn log_events(ids: &[&str]) -> Vec<LogEvent> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| LogEvent {
            event_id: EventId::new(*id).unwrap(),
            prev_event_id: (i > 0).then(|| EventId::new(ids[i - 1]).unwrap()),
            parent_execution_id: None,
            payload: json!({ "id": id }),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_a_leader_change_without_losing_or_duplicating_appends() {
    let mut cluster = InProcCluster::start(3).await;
    let client = Arc::new(
        Client::builder(cluster.urls())
            .jitter_seed(7)
            .build()
            .unwrap(),
    );
    let acks: Arc<Mutex<Vec<(String, String, u64)>>> = Arc::default();
    let stop_at = Instant::now() + Duration::from_secs(6);
    let mut writers = Vec::new();
    for w in 0..4 {
        let (client, acks) = (Arc::clone(&client), Arc::clone(&acks));
        writers.push(tokio::spawn(async move {
            let x = exec(&format!("stream-{w}"));
            let mut n = 1u64;
            while Instant::now() < stop_at {
                let id = format!("e{n}");
                let prev = (n > 1).then(|| format!("e{}", n - 1));
                match client.append(&x, &append(&id, prev.as_deref())).await {
                    Ok(done) => {
                        assert_eq!(done.exec_seq, n, "{x}/{id}");
                        acks.lock()
                            .unwrap()
                            .push((x.to_string(), id, done.exec_seq));
                        n += 1;
                    }
                    Err(err) => assert!(err.is_retryable(), "{x}/{id}: {err}"),
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = cluster.leader().await;
    cluster.stop(leader).await;
    for w in writers {
        w.await.unwrap();
    }
    let acks = acks.lock().unwrap().clone();
    assert!(acks.len() > 20, "{} acks", acks.len());
    let mut per_exec: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    for (x, id, seq) in acks {
        per_exec.entry(x).or_default().push((id, seq));
    }
    for (x, acked) in per_exec {
        let events = client
            .chain_raw(&exec(&x), ReadOptions::default())
            .await
            .unwrap();
        let ids: Vec<String> = events.iter().map(|e| e.event_id.to_string()).collect();
        let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "{x}: no event stored twice");
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e.exec_seq, i as u64 + 1);
        }
        for (id, seq) in acked {
            assert_eq!(ids[(seq - 1) as usize], id, "{x}: acked {id} at {seq}");
        }
    }
}

/// Delivers requests but loses the answer of the first append: the caller sees a timeout.
struct LoseFirstAppendAnswer {
    inner: ReqwestTransport,
    lost: Mutex<bool>,
}

impl Transport for LoseFirstAppendAnswer {
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> chainstore_transport::BoxFuture<'_, Result<http::Response<Bytes>, TransportError>> {
        Box::pin(async move {
            let is_append =
                request.method() == http::Method::POST && request.uri().path().ends_with("/events");
            let response = self.inner.send(request, timeout).await?;
            let mut lost = self.lost.lock().unwrap();
            if is_append && !*lost {
                *lost = true;
                return Err(TransportError::Timeout(timeout));
            }
            Ok(response)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_whose_answer_was_lost_is_retried_and_answers_duplicate_with_its_seq() {
    let cluster = InProcCluster::start(3).await;
    let transport = Arc::new(LoseFirstAppendAnswer {
        inner: common::transport(),
        lost: Mutex::new(false),
    });
    let client = Client::builder(cluster.urls())
        .transport(transport)
        .jitter_seed(1)
        .build()
        .unwrap();
    let x = exec("lossy");
    let done = client.append(&x, &append("a", None)).await.unwrap();
    assert_eq!(
        (done.exec_seq, done.duplicate),
        (1, true),
        "the retry found the committed append"
    );
    let events = client.chain_raw(&x, ReadOptions::default()).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(
        done.commit_index, events[0].commit_index,
        "the original commit index"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_answers_and_errors() {
    let cluster = InProcCluster::start(3).await;
    let client = Client::builder(cluster.urls()).build().unwrap();
    let x = exec("typed");
    client.append(&x, &append("e1", None)).await.unwrap();
    client.append(&x, &append("e2", Some("e1"))).await.unwrap();
    let err = client
        .append(&x, &append("e3", Some("e1")))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ClientError::NotHead {
            expected: Some(EventId::new("e2").unwrap()),
            got: Some(EventId::new("e1").unwrap())
        }
    );
    let mut conflicting = append("e1", None);
    conflicting.payload = json!("other");
    assert_eq!(
        client.append(&x, &conflicting).await,
        Err(ClientError::EventConflict {
            event_id: EventId::new("e1").unwrap(),
            exec_seq: 1
        })
    );
    // A delivery that puts another event at a taken seq, and one that moves a stored id.
    let delivered = |seq: u64, id: &str| ChainEvent {
        execution_id: x.clone(),
        exec_seq: seq,
        event_id: EventId::new(id).unwrap(),
        prev_event_id: None,
        parent_execution_id: None,
        payload: json!({ "id": id }),
        commit_index: 0,
    };
    assert_eq!(
        client.replicated(&x, &[delivered(2, "other")]).await,
        Err(ClientError::Forked(Fork::SeqTaken {
            exec_seq: 2,
            stored: EventId::new("e2").unwrap(),
            offered: EventId::new("other").unwrap()
        }))
    );
    assert_eq!(
        client.replicated(&x, &[delivered(7, "e1")]).await,
        Err(ClientError::Forked(Fork::IdElsewhere {
            event_id: EventId::new("e1").unwrap(),
            stored_seq: 1,
            offered_seq: 7
        }))
    );

    let read = client.chain(&x, ReadOptions::default()).await.unwrap();
    assert_eq!(
        read.answer,
        Guarded::CannotAnswer(chainstore_model::Reason::NoCoverage)
    );
    let populated = exec("typed-log");
    assert_eq!(
        client
            .populate(&populated, &log_events(&["a", "b"]))
            .await
            .unwrap(),
        FromLog::InSync {
            total: 2,
            appended: 2
        }
    );
    let read = client
        .chain(&populated, ReadOptions::local())
        .await
        .unwrap();
    assert!(matches!(read.answer, Guarded::Authoritative(ref events) if events.len() == 2));
    let state = client.state(&x, ReadOptions::default()).await.unwrap();
    assert_eq!(state.head.map(|h| h.exec_seq), Some(2));
    assert!(state.complete);
    assert!(client
        .event(&x, &EventId::new("e2").unwrap(), ReadOptions::default())
        .await
        .unwrap()
        .is_some());
    assert!(client
        .event(&x, &EventId::new("nope").unwrap(), ReadOptions::default())
        .await
        .unwrap()
        .is_none());
    let page = client
        .changes(0, 100, ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(page.changes.len(), 4);
    let status = client.cluster().await.unwrap();
    assert_eq!(status.voters, vec![1, 2, 3]);
    let bad = client.replicated(&x, &[]).await.unwrap();
    assert_eq!((bad.applied, bad.duplicates), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_sends_its_bearer_token() {
    let cluster = InProcCluster::start_with_tokens(3, vec!["t0ken-for-writers".into()]).await;
    let anonymous = Client::builder(cluster.urls()).build().unwrap();
    let err = anonymous
        .append(&exec("auth"), &append("a", None))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Unauthorized(_)), "{err:?}");
    let client = Client::builder(cluster.urls())
        .token("t0ken-for-writers")
        .build()
        .unwrap();
    assert_eq!(
        client
            .append(&exec("auth"), &append("a", None))
            .await
            .unwrap()
            .exec_seq,
        1
    );
}

/// An authoritative log in memory, whose reads can be made to lag.
#[derive(Default)]
struct MemLog {
    logs: Mutex<BTreeMap<String, Vec<LogEvent>>>,
    /// Reads left that return only this many events (a stale snapshot).
    stale: Mutex<Option<(u32, usize)>>,
}

impl LogSource for MemLog {
    fn read_log<'a>(
        &'a self,
        exec: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<Vec<LogEvent>, LogError>> {
        Box::pin(async move {
            let mut log = self
                .logs
                .lock()
                .unwrap()
                .get(exec.as_str())
                .cloned()
                .unwrap_or_default();
            let mut stale = self.stale.lock().unwrap();
            if let Some((reads, len)) = *stale {
                log.truncate(len);
                *stale = if reads > 1 {
                    Some((reads - 1, len))
                } else {
                    None
                };
            }
            Ok(log)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_tells_a_stale_log_from_a_second_writer() {
    let cluster = InProcCluster::start(3).await;
    let client = Client::builder(cluster.urls()).build().unwrap();
    let source = MemLog::default();
    let mut reconciler = Reconciler::new(&client, &source);
    reconciler.reread_pause = Duration::from_millis(20);

    // Staleness: the store already holds a, b, c; the first read of the log is a stale snapshot.
    let x = exec("stale");
    source
        .logs
        .lock()
        .unwrap()
        .insert("stale".into(), log_events(&["a", "b", "c"]));
    client
        .populate(&x, &log_events(&["a", "b", "c"]))
        .await
        .unwrap();
    *source.stale.lock().unwrap() = Some((1, 1));
    let verdict = reconciler.reconcile(&x).await.unwrap();
    assert!(
        matches!(verdict, Verdict::Staleness { rereads: 1, .. }),
        "{verdict:?}"
    );
    assert!(!verdict.is_divergence());

    // A second writer: the store holds an event the log never gets.
    let y = exec("second");
    source
        .logs
        .lock()
        .unwrap()
        .insert("second".into(), log_events(&["a", "b"]));
    client.populate(&y, &log_events(&["a", "b"])).await.unwrap();
    client
        .append(&y, &append("intruder", Some("b")))
        .await
        .unwrap();
    let verdict = reconciler.reconcile(&y).await.unwrap();
    assert_eq!(
        verdict,
        Verdict::SecondWriter {
            stored_len: 3,
            log_len: 2
        }
    );
    assert!(verdict.is_divergence());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_comparator_reports_coverage_dropping_when_reads_are_refused() {
    let cluster = InProcCluster::start(3).await;
    let client = Client::builder(cluster.urls()).build().unwrap();
    let source = MemLog::default();
    let execs: Vec<ExecutionId> = (0..3).map(|i| exec(&format!("cmp-{i}"))).collect();
    for x in &execs {
        let log = log_events(&["a", "b"]);
        source
            .logs
            .lock()
            .unwrap()
            .insert(x.to_string(), log.clone());
        client.populate(x, &log).await.unwrap();
    }
    let mut comparator = Comparator::new();
    let first = comparator.run(&client, &source, &execs).await.unwrap();
    assert_eq!((first.compared, first.answered, first.agreed), (3, 3, 3));
    assert_eq!((first.coverage(), first.agreement()), (1.0, 1.0));

    // A native append revokes one execution's serve-trust: agreement stays perfect, coverage drops.
    client
        .append(&execs[0], &append("c", Some("b")))
        .await
        .unwrap();
    let second = comparator.run(&client, &source, &execs).await.unwrap();
    assert_eq!(
        (second.answered, second.agreed, second.disagreed),
        (2, 2, 0)
    );
    assert!((second.coverage() - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!(second.agreement(), 1.0);
    let total = comparator.cumulative();
    assert_eq!((total.compared, total.answered), (6, 5));

    // A log that grew after the store was read agrees (the store is behind, not wrong); a log
    // whose event differs from the stored one does not.
    let mut grown = log_events(&["a", "b", "c"]);
    source
        .logs
        .lock()
        .unwrap()
        .insert(execs[1].to_string(), grown.clone());
    grown[1].payload = json!({ "changed": true });
    grown.truncate(2);
    source
        .logs
        .lock()
        .unwrap()
        .insert(execs[2].to_string(), grown);
    let third = comparator.run(&client, &source, &execs).await.unwrap();
    assert_eq!(
        (third.answered, third.agreed, third.behind, third.disagreed),
        (2, 1, 1, 1)
    );
    assert_eq!(third.agreement(), 0.5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_larger_than_a_request_body_becomes_authoritative_through_a_populate_session() {
    // Nodes that take bodies of 1 MiB and 2,000 events per populate.
    let cluster = InProcCluster::start_tuned(3, |config| {
        config.limits.body_bytes_max = 1 << 20;
        config.limits.populate_events_max = 2_000;
    })
    .await;
    let x = exec("long-log");
    let mut log: Vec<LogEvent> = (0..12_000)
        .map(|i| LogEvent {
            event_id: EventId::new(format!("e{i}")).unwrap(),
            prev_event_id: (i > 0).then(|| EventId::new(format!("e{}", i - 1)).unwrap()),
            parent_execution_id: None,
            payload: json!({ "i": i, "pad": "p".repeat(200) }),
        })
        .collect();

    // In one body the log is refused and nothing changes.
    let whole = Client::builder(cluster.urls())
        .populate_parts(usize::MAX, usize::MAX)
        .build()
        .unwrap();
    match whole.populate(&x, &log).await {
        Err(ClientError::TooLarge(oversize)) => {
            assert_eq!((oversize.what, oversize.limit), (Limit::BodyBytes, 1 << 20));
            assert!(
                oversize.size.is_some_and(|size| size > 1 << 20),
                "{oversize:?}"
            );
        }
        other => panic!("one body of {} events was taken: {other:?}", log.len()),
    }

    // In parts it becomes authoritative, and so does every later extension of it.
    let client = Client::builder(cluster.urls())
        .populate_parts(1_500, 512 << 10)
        .build()
        .unwrap();
    assert_eq!(
        client.populate(&x, &log).await.unwrap(),
        FromLog::InSync {
            total: 12_000,
            appended: 12_000
        }
    );
    let read = client.chain(&x, ReadOptions::default()).await.unwrap();
    match read.answer {
        Guarded::Authoritative(events) => {
            assert_eq!(events.len(), 12_000);
            assert!(events
                .iter()
                .zip(&log)
                .all(|(stored, logged)| stored.event_id == logged.event_id
                    && stored.payload == logged.payload));
        }
        other => panic!("expected an authoritative answer, got {other:?}"),
    }
    for i in 12_000..12_007 {
        log.push(LogEvent {
            event_id: EventId::new(format!("e{i}")).unwrap(),
            prev_event_id: Some(EventId::new(format!("e{}", i - 1)).unwrap()),
            parent_execution_id: None,
            payload: json!({ "i": i }),
        });
    }
    // Sent in any order: the client orders the log by its links before splitting it.
    log.reverse();
    assert_eq!(
        client.populate(&x, &log).await.unwrap(),
        FromLog::InSync {
            total: 12_007,
            appended: 7
        }
    );

    // A log with a second root, in parts, is refused and the execution is no longer served.
    log.push(LogEvent {
        event_id: EventId::new("second-root").unwrap(),
        prev_event_id: None,
        parent_execution_id: None,
        payload: json!({}),
    });
    assert!(matches!(
        client.populate(&x, &log).await.unwrap(),
        FromLog::Refused { .. }
    ));
    let read = client.chain(&x, ReadOptions::default()).await.unwrap();
    assert!(matches!(read.answer, Guarded::CannotAnswer(_)), "{read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_larger_than_a_node_relays_whole_streams_through_a_follower() {
    // Nodes that read at most 256 KiB of a peer's answer; the backup is over 1 MiB.
    let cluster = InProcCluster::start_tuned(3, |config| {
        config.limits.peer_response_bytes_max = 256 << 10
    })
    .await;
    let client = Client::builder(cluster.urls()).build().unwrap();
    for e in 0..4 {
        let log: Vec<LogEvent> = (0..8)
            .map(|i| LogEvent {
                event_id: EventId::new(format!("e{i}")).unwrap(),
                prev_event_id: (i > 0).then(|| EventId::new(format!("e{}", i - 1)).unwrap()),
                parent_execution_id: None,
                payload: json!({ "pad": format!("{e}-{i}-").repeat(20_000) }),
            })
            .collect();
        client
            .populate(&exec(&format!("b{e}")), &log)
            .await
            .unwrap();
    }
    let leader = cluster.leader().await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let via_follower = Client::builder([format!("http://{}", cluster.addrs[&follower])])
        .build()
        .unwrap();

    let mut file = Vec::new();
    let last_log_index = via_follower.snapshot_to(&mut file).await.unwrap();
    assert!(file.len() > 4 * (256 << 10), "{} bytes", file.len());
    assert!(last_log_index > 0);
    let applied = raft_store::raft::inspect_backup(&file).expect("a whole, valid backup");
    assert_eq!(applied.index, last_log_index);
    // The same read answered whole by the client also comes through the follower.
    let whole = via_follower.snapshot().await.unwrap();
    assert!(whole.last_log_index >= last_log_index);
    assert!(raft_store::raft::inspect_backup(&whole.data).is_ok());
}
