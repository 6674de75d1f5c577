//! Overload at the edge, on real processes: a client flood is shed with 503 `overloaded` rather
//! than queued without bound; a thousand connections trickling headers per node are closed at
//! the header deadline; and through both, heartbeats stay on time: no node starts an election.
//! Connections beyond the cap are closed as soon as they are accepted.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{event, Cluster, Options};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Each node's term and the leader it follows.
async fn terms(c: &Cluster) -> Vec<(u64, Value, Value)> {
    let mut out = Vec::new();
    for id in c.running() {
        let (status, view) = c.get(id, "/v1/cluster").await;
        assert_eq!(status, 200, "node {id}: {view}");
        out.push((id, view["term"].clone(), view["leader_id"].clone()));
    }
    out
}

/// A slowloris connection: a request head sent a line at a time, never finished. Reconnects
/// whenever the node closes it; counts the closes.
async fn trickle(addr: String, stop: Arc<AtomicBool>, closed: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect(&addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if stream
            .write_all(b"GET /v1/cluster HTTP/1.1\r\nhost: node\r\n")
            .await
            .is_err()
        {
            continue;
        }
        let mut buf = [0u8; 256];
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            tokio::select! {
                read = stream.read(&mut buf) => {
                    // The node gave up on us (EOF, an error, or a 408 and then EOF).
                    if matches!(read, Ok(0) | Err(_)) {
                        closed.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(500)) => {
                    if stream.write_all(b"x-trickle: 1\r\n").await.is_err() {
                        closed.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_flood_and_a_thousand_trickling_connections_per_node_cause_no_election() {
    let options = Options {
        extra_args: [
            "--max-concurrent-requests",
            "8",
            "--max-queued-requests",
            "16",
            "--header-read-timeout-ms",
            "2000",
        ]
        .map(String::from)
        .to_vec(),
        ..Options::default()
    };
    let c = Cluster::start_with(3, options).await;
    let leader = c.leader().await;
    let (status, body) = c
        .post(leader, "/v1/executions/flood/events", &event("a", None))
        .await;
    assert_eq!(status, 200, "{body}");
    let before = terms(&c).await;

    let stop = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for id in c.running() {
        for _ in 0..1_000 {
            tasks.push(tokio::spawn(trickle(
                c.procs[&id].addr.clone(),
                Arc::clone(&stop),
                Arc::clone(&closed),
            )));
        }
    }
    // The flood: reads waiting for an index far ahead (each holds a slot for the whole
    // min_index wait) and appends, from 64 callers per node, that never pause.
    let shed = Arc::new(AtomicU64::new(0));
    let served = Arc::new(AtomicU64::new(0));
    for id in c.running() {
        for caller in 0..64u64 {
            let url_read = c.url(id, "/v1/executions/flood/chain?min_index=1000000000");
            let url_write = c.url(id, &format!("/v1/executions/f{id}-{caller}/events"));
            let http = c.http.clone();
            let (stop, shed, served) = (Arc::clone(&stop), Arc::clone(&shed), Arc::clone(&served));
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let request = if caller % 2 == 0 {
                        http.get(&url_read)
                    } else {
                        http.post(&url_write).json(&event(&format!("e{n}"), None))
                    };
                    let Ok(response) = request.send().await else {
                        continue;
                    };
                    let status = response.status().as_u16();
                    let body: Value = response.json().await.unwrap_or(Value::Null);
                    if status == 503 && body["error"] == "overloaded" {
                        shed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    } else {
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    // Long enough for several header deadlines and many election timeouts (600-1200 ms).
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
    }
    let after = terms(&c).await;
    let (shed, served, closed) = (
        shed.load(Ordering::Relaxed),
        served.load(Ordering::Relaxed),
        closed.load(Ordering::Relaxed),
    );
    println!("flood: {shed} shed, {served} answered; trickling connections closed by the nodes: {closed}");
    assert_eq!(
        before, after,
        "no node changed term or leader under the flood"
    );
    assert!(shed > 0, "the flood was shed, not queued without bound");
    assert!(served > 0, "requests within capacity were still served");
    // 3,000 connections, each closed at the 2 s header deadline at least three times in 8 s.
    assert!(
        closed >= 6_000,
        "the nodes close connections that never finish a request head ({closed} closed)"
    );
    // The cluster still writes once the flood is over.
    let (status, body) = c
        .post(
            leader,
            "/v1/executions/flood/events",
            &event("b", Some("a")),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

/// Connections past the cap are closed as soon as they are accepted; closing held ones gives
/// their slots back.
#[tokio::test]
async fn connections_beyond_the_cap_are_closed_at_once() {
    let options = Options {
        extra_args: [
            "--max-connections",
            "50",
            "--header-read-timeout-ms",
            "60000",
        ]
        .map(String::from)
        .to_vec(),
        ..Options::default()
    };
    let c = Cluster::spawn(1, options).await;
    let addr = c.procs[&1].addr.clone();
    let mut streams = Vec::new();
    for _ in 0..60 {
        streams.push(TcpStream::connect(&addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut held = Vec::new();
    let mut refused = 0;
    for mut stream in streams {
        let mut buf = [0u8; 16];
        match tokio::time::timeout(Duration::from_millis(20), stream.read(&mut buf)).await {
            // Still open, waiting for a request.
            Err(_) => held.push(stream),
            Ok(Ok(0) | Err(_)) => refused += 1,
            Ok(Ok(n)) => panic!("the node sent {n} bytes unasked"),
        }
    }
    // The harness's own client may hold one pooled connection.
    assert!(
        (49..=50).contains(&held.len()),
        "{} connections held, {refused} refused",
        held.len()
    );
    assert_eq!(held.len() + refused, 60);
    drop(held);
    let started = Instant::now();
    loop {
        let (status, _) = c.get(1, "/healthz").await;
        if status == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "slots come back when connections close"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
