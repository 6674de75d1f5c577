//! Certificates of a running TLS cluster replaced without a restart, one node at a time, under a
//! write load that sends every request to a different node (so peer traffic, forwarding
//! included, crosses every rotation): first every node learns to trust the next CA beside the
//! current one, then each node gets a certificate from the next CA (node 1 through a
//! half-written rotation, which must be refused and keep the old certificate in service), then
//! every node stops trusting the old CA. No request may fail, the load must keep going after the
//! last step, certificates of the old CA must be refused everywhere at the end, and every
//! acknowledged append must be in its chain. Finally a follower restarts, so that its peers must
//! reach it on new connections: it can catch up only if they present their new certificates.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::certs::{Ca, Pem};
use common::{http_client, Cluster, Options, ADMIN_TOKEN};
use serde_json::{json, Value};

const WRITERS: usize = 4;

/// The count of TLS reloads of `outcome` node `id` reports.
async fn reloads(client: &reqwest::Client, c: &Cluster, id: u64, outcome: &str) -> u64 {
    let series = format!("chainstore_tls_reloads_total{{outcome=\"{outcome}\"}}");
    c.counter(client, id, &series).await
}

async fn wait_reloads(
    client: &reqwest::Client,
    c: &Cluster,
    id: u64,
    outcome: &str,
    at_least: u64,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while reloads(client, c, id, outcome).await < at_least {
        assert!(Instant::now() < deadline, "node {id}: no {outcome} reload");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The DER of the certificate node `id` presents on a new connection.
async fn served_certificate(c: &Cluster, id: u64, ca: &str) -> Vec<u8> {
    let options = chainstore_transport::TlsClientOptions {
        roots_pem: Some(ca.as_bytes().to_vec()),
        identity: None,
    };
    let tls = chainstore_transport::tls::client_config(
        &options,
        chainstore_transport::ServerCheck::Hostname,
    )
    .unwrap();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .tls_info(true)
        .build()
        .unwrap();
    let response = client
        .get(c.url(id, "/healthz"))
        .send()
        .await
        .expect("healthz");
    response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("the peer's certificate")
        .to_vec()
}

fn der_of(pem: &Pem) -> Vec<u8> {
    chainstore_transport::tls::certificates_from_pem("cert", pem.cert.as_bytes()).unwrap()[0]
        .to_vec()
}

async fn wait_serving(c: &Cluster, id: u64, ca: &str, pem: &Pem) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while served_certificate(c, id, ca).await != der_of(pem) {
        assert!(
            Instant::now() < deadline,
            "node {id} does not serve its new certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Load {
    stop: Arc<AtomicBool>,
    failures: Arc<Mutex<Vec<String>>>,
    acked: Arc<Mutex<Vec<Vec<String>>>>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(urls: Vec<String>, ca: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let acked = Arc::new(Mutex::new(vec![Vec::new(); WRITERS]));
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let client = http_client(Some(ca), None, Some(ADMIN_TOKEN));
            let (stop, failures, acked, urls) = (
                Arc::clone(&stop),
                Arc::clone(&failures),
                Arc::clone(&acked),
                urls.clone(),
            );
            writers.push(tokio::spawn(async move {
                let mut prev: Option<String> = None;
                let mut n = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let id = format!("e{n}");
                    let body = json!({
                        "event_id": id, "prev_event_id": prev, "payload": { "n": n },
                        "genesis": prev.is_none(),
                    });
                    let url = format!(
                        "{}/v1/executions/rot-{w}/events",
                        urls[(n + w) % urls.len()]
                    );
                    match client.post(url).json(&body).send().await {
                        Ok(r) if r.status().is_success() => {
                            acked.lock().unwrap()[w].push(id.clone());
                            prev = Some(id);
                            n += 1;
                        }
                        Ok(r) => {
                            let status = r.status();
                            let text = r.text().await.unwrap_or_default();
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("writer {w}: {status} {text}"));
                            return;
                        }
                        Err(e) => {
                            failures.lock().unwrap().push(format!("writer {w}: {e:?}"));
                            return;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }));
        }
        Self {
            stop,
            failures,
            acked,
            writers,
        }
    }

    fn total(&self) -> usize {
        self.acked.lock().unwrap().iter().map(Vec::len).sum()
    }

    fn assert_no_failure(&self, step: &str) {
        let failures = self.failures.lock().unwrap();
        assert!(failures.is_empty(), "{step}: {failures:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_one_node_at_a_time_under_load_with_no_failed_request() {
    let options = Options {
        tls: true,
        tls_reload_poll_ms: 100,
        election_ms: (1500, 3000),
        ..Options::default()
    };
    let c = Cluster::start_with(3, options).await;
    let ids: Vec<u64> = (1..=3).collect();
    let old: Vec<Pem> = ids
        .iter()
        .map(|id| {
            let text = |name| std::fs::read_to_string(c.tls_dir(*id).join(name)).unwrap();
            Pem {
                cert: text("cert.pem"),
                key: text("key.pem"),
            }
        })
        .collect();
    let next = Ca::new("the next CA");
    let both = format!("{}{}", c.ca.cert, next.cert);
    let admin = http_client(Some(&both), None, Some(ADMIN_TOKEN));
    let urls: Vec<String> = ids.iter().map(|id| c.url(*id, "")).collect();
    let mut load = Load::start(urls, &both);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 1. Every node trusts the next CA as well as the current one.
    for (i, id) in ids.iter().enumerate() {
        let before = reloads(&admin, &c, *id, "ok").await;
        c.write_tls(*id, &old[i], &both);
        wait_reloads(&admin, &c, *id, "ok", before + 1).await;
        load.assert_no_failure(&format!("node {id} trusts both CAs"));
    }

    // 2. Each node gets a certificate from the next CA. Node 1's arrives half-written (the new
    //    certificate beside the old key): refused, the old certificate stays in service.
    let new: Vec<Pem> = ids.iter().map(|id| next.node(*id)).collect();
    let dir = c.tls_dir(1);
    let errors = reloads(&admin, &c, 1, "error").await;
    std::fs::write(dir.join("cert.pem"), &new[0].cert).unwrap();
    wait_reloads(&admin, &c, 1, "error", errors + 1).await;
    assert_eq!(
        served_certificate(&c, 1, &both).await,
        der_of(&old[0]),
        "a mismatched certificate and key were put in service"
    );
    for (i, id) in ids.iter().enumerate() {
        c.write_tls(*id, &new[i], &both);
        wait_serving(&c, *id, &both, &new[i]).await;
        load.assert_no_failure(&format!("node {id} has its new certificate"));
    }

    // 3. Every node stops trusting the old CA.
    for (i, id) in ids.iter().enumerate() {
        let before = reloads(&admin, &c, *id, "ok").await;
        c.write_tls(*id, &new[i], &next.cert);
        wait_reloads(&admin, &c, *id, "ok", before + 1).await;
        load.assert_no_failure(&format!("node {id} trusts only the next CA"));
    }
    let after_rotation = load.total();
    tokio::time::sleep(Duration::from_secs(2)).await;
    load.stop.store(true, Ordering::SeqCst);
    for writer in std::mem::take(&mut load.writers) {
        writer.await.unwrap();
    }
    load.assert_no_failure("the end");
    assert!(
        load.total() > after_rotation + WRITERS,
        "the load kept going after the rotation: {} then {}",
        after_rotation,
        load.total()
    );

    // The old CA is trusted nowhere; the next one everywhere.
    let old_admin = http_client(Some(&both), Some(&c.ca.role("admin")), None);
    let new_admin = http_client(Some(&both), Some(&next.role("admin")), None);
    for id in &ids {
        let refused = old_admin.get(c.url(*id, "/v1/cluster")).send().await;
        assert!(
            refused.is_err(),
            "node {id} still accepts the old CA: {refused:?}"
        );
        let accepted = new_admin
            .get(c.url(*id, "/v1/cluster"))
            .send()
            .await
            .unwrap();
        assert_eq!(accepted.status().as_u16(), 200);
    }

    // A restarted follower trusts only the next CA: its peers reach it with new connections,
    // which work only if they present their new certificates.
    let mut c = c;
    c.http = http_client(Some(&next.cert), None, Some(ADMIN_TOKEN));
    let leader = c.leader().await;
    let follower = c.follower().await;
    c.restart(follower).await;
    let (_, status) = c.get(leader, "/v1/cluster").await;
    let last = status["last_log_index"].as_u64().unwrap();
    c.wait_applied(follower, last, Duration::from_secs(20))
        .await;

    // Every acknowledged append is in its chain, in order, on the restarted follower too.
    let acked = load.acked.lock().unwrap().clone();
    for (w, ids) in acked.iter().enumerate() {
        let path = format!("/v1/executions/rot-{w}/chain?consistency=local");
        let (status, answer): (u16, Value) = {
            let r = admin.get(c.url(follower, &path)).send().await.unwrap();
            (r.status().as_u16(), r.json().await.unwrap())
        };
        assert_eq!(status, 200);
        assert_eq!(answer["answer"], "authoritative", "{answer}");
        let stored: Vec<&str> = answer["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_id"].as_str().unwrap())
            .collect();
        assert_eq!(stored, *ids, "writer {w}");
    }
}
