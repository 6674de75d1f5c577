//! Paged guarded reads of a long chain through the client, against a real in-process
//! three-node cluster on RocksDB: every event exactly once, in order, while the chain grows.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use chainstore_client::{Client, PageRequest, ReadOptions};
use chainstore_model::{EventId, ExecutionId, FromLog, Guarded, GuardedPage, LogEvent};
use common::InProcCluster;
use serde_json::json;

const LOGGED: u64 = 100_000;

fn id(seq: u64) -> EventId {
    EventId::new(format!("e{seq}")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paged_read_of_a_100k_event_chain_returns_every_event_once_while_it_grows() {
    // Room for the log to grow past 100,000 events in one populate.
    let cluster =
        InProcCluster::start_tuned(3, |config| config.limits.populate_events_max = 200_000).await;
    let client = Arc::new(Client::builder(cluster.urls()).build().unwrap());
    let x = ExecutionId::new("long").unwrap();

    // 100,000 events from the authoritative log, in one populate.
    let log: Vec<LogEvent> = (1..=LOGGED)
        .map(|seq| LogEvent {
            event_id: id(seq),
            prev_event_id: (seq > 1).then(|| id(seq - 1)),
            parent_execution_id: None,
            payload: json!({ "seq": seq }),
        })
        .collect();
    let started = Instant::now();
    let outcome = client.populate(&x, &log).await.expect("populate");
    assert!(
        matches!(outcome, FromLog::InSync { total, .. } if total == LOGGED),
        "{outcome:?}"
    );
    println!("populated {LOGGED} events in {:?}", started.elapsed());

    // The populator keeps the execution in step with a log that goes on growing: every few
    // milliseconds the log gains five events and is populated again (each extension is one
    // entry, so the execution stays authoritative throughout).
    let stop = Arc::new(AtomicBool::new(false));
    let appended = Arc::new(AtomicU64::new(0));
    let writer = {
        let (client, x, stop, appended) = (
            Arc::clone(&client),
            x.clone(),
            Arc::clone(&stop),
            Arc::clone(&appended),
        );
        tokio::spawn(async move {
            let mut log = log;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..5 {
                    let seq = log.len() as u64 + 1;
                    log.push(LogEvent {
                        event_id: id(seq),
                        prev_event_id: Some(id(seq - 1)),
                        parent_execution_id: None,
                        payload: json!({ "seq": seq }),
                    });
                }
                let outcome = client.populate(&x, &log).await.expect("populate");
                assert!(
                    matches!(outcome, FromLog::InSync { appended: 5, .. }),
                    "{outcome:?}"
                );
                appended.fetch_add(5, Ordering::Relaxed);
            }
        })
    };
    while appended.load(Ordering::Relaxed) < 10 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // The client reads in pages (the server's default size) and assembles them.
    let started = Instant::now();
    let before = appended.load(Ordering::Relaxed);
    let read = client
        .chain(&x, ReadOptions::default())
        .await
        .expect("read");
    let during = appended.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
    let Guarded::Authoritative(events) = read.answer else {
        panic!("not authoritative: {:?}", read.answer);
    };
    println!(
        "read {} events in {:?} while {during} more were populated",
        events.len(),
        started.elapsed()
    );
    assert!(during > 0, "the chain did not grow during the read");
    assert!(events.len() as u64 > LOGGED, "{} events", events.len());
    for (event, seq) in events.iter().zip(1u64..) {
        assert_eq!(event.exec_seq, seq, "every event once, in order");
        assert_eq!(event.event_id, id(seq));
        assert_eq!(event.prev_event_id, (seq > 1).then(|| id(seq - 1)));
        assert_eq!(event.payload, json!({ "seq": seq }));
    }

    // One page in the middle, asked for directly: the chain's extent and the next page named.
    let page = client
        .chain_page(
            &x,
            PageRequest {
                from_seq: 50_001,
                to_seq: Some(50_100),
                limit: Some(60),
            },
            ReadOptions::default(),
        )
        .await
        .expect("page");
    let GuardedPage::Authoritative(page) = page.answer else {
        panic!("not authoritative: {:?}", page.answer);
    };
    assert_eq!(page.events.len(), 60);
    assert_eq!(page.events[0].exec_seq, 50_001);
    assert_eq!(page.next_from_seq, Some(50_061));
    assert!(page.through_seq >= events.len() as u64);
}
