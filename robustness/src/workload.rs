//! The clients: racing processes whose every call enters the history, and a prober whose
//! acknowledged writes time the outages.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chainstore_check::{Answer, Entry, History, Op};
use chainstore_client::{Client, ClientError, ReadOptions, RetryPolicy};
use chainstore_model::{AppendRequest, EventId, ExecutionId};
use chaos::actors::{append_answer, read_answer};
use chaos::rng::SimRng as Rng;
use serde_json::json;

/// What the clients share: the start of time, the history, the acknowledged appends, the
/// prober's acknowledgement times.
pub struct Shared {
    pub start: Instant,
    pub history: Mutex<History>,
    /// Every append answered 200, per execution: the event ids.
    pub acknowledged: Mutex<BTreeMap<String, Vec<String>>>,
    /// The prober's acknowledged writes: when each attempt that succeeded was sent, and when
    /// its answer came, in nanoseconds since `start`.
    pub probe_acks: Mutex<Vec<(u64, u64)>>,
    pub stop: AtomicBool,
}

impl Shared {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            history: Mutex::new(History::default()),
            acknowledged: Mutex::new(BTreeMap::new()),
            probe_acks: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        })
    }

    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn record(&self, entry: Entry) {
        lock(&self.history).push(entry);
    }
}

pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn exec(name: &str) -> ExecutionId {
    ExecutionId::new(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn id(name: &str) -> EventId {
    EventId::new(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A client of one node that never retries: each call is one request, its answer recorded as
/// it came.
pub fn single_node_client(url: &str, timeout: Duration) -> Client {
    Client::builder([url.to_string()])
        .retry_policy(RetryPolicy {
            attempts_max: 1,
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_millis(10),
            request_timeout: timeout,
        })
        .build()
        .unwrap_or_else(|e| panic!("client of {url}: {e}"))
}

/// A process racing with the others on `execs`: appends after the head it believes in (adopting
/// the head a `not_head` names), retries a lost event now and then, reads linearizably; each
/// call goes to a random node, with no retry. After a lost answer it continues under a new
/// process id (a call that never ended must not overlap the process's next one).
pub async fn racer(
    shared: Arc<Shared>,
    urls: Vec<String>,
    execs: Vec<String>,
    racer: u64,
    mut rng: Rng,
) {
    let clients: Vec<Client> = urls
        .iter()
        .map(|u| single_node_client(u, Duration::from_millis(1500)))
        .collect();
    let mut heads: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut generation = 0u64;
    let mut sent = 0u64;
    let mut lost: Option<(String, Option<String>, String)> = None;
    while !shared.stopped() {
        tokio::time::sleep(Duration::from_millis(rng.range(2, 20))).await;
        let client = rng.pick(&clients);
        let process = racer * 1_000_000 + generation;
        if rng.chance(0.25) {
            let name = rng.pick(&execs).clone();
            let call = shared.now_ns();
            let answer = read_answer(&client.chain(&exec(&name), ReadOptions::default()).await);
            shared.record(Entry {
                process,
                execution: name,
                call,
                ret: shared.now_ns(),
                op: Op::Read,
                answer,
            });
            continue;
        }
        let (name, prev, event) = match lost.take().filter(|_| rng.chance(0.5)) {
            Some(retry) => retry,
            None => {
                sent += 1;
                let name = rng.pick(&execs).clone();
                let prev = heads.get(&name).cloned().flatten();
                (name, prev, format!("r{racer}-{sent}"))
            }
        };
        let request = AppendRequest {
            event_id: id(&event),
            prev_event_id: prev.as_deref().map(id),
            parent_execution_id: None,
            payload: json!({ "by": racer, "pad": "x".repeat(160) }),
            genesis: prev.is_none(),
        };
        let call = shared.now_ns();
        let outcome = client.append(&exec(&name), &request).await;
        let ret = shared.now_ns();
        let answer = append_answer(&outcome);
        match &answer {
            Answer::Appended { .. } => {
                heads.insert(name.clone(), Some(event.clone()));
                lock(&shared.acknowledged)
                    .entry(name.clone())
                    .or_default()
                    .push(event.clone());
            }
            Answer::NotHead { expected } => {
                heads.insert(name.clone(), expected.clone());
            }
            Answer::Unknown => {
                generation += 1;
                lost = Some((name.clone(), prev.clone(), event.clone()));
            }
            _ => {}
        }
        shared.record(Entry {
            process,
            execution: name,
            call,
            ret,
            op: Op::Append {
                event,
                prev,
                content: racer,
            },
            answer,
        });
    }
}

/// Appends to its own execution as fast as one writer can, through a client that follows the
/// leader and retries quickly; records when each write was acknowledged.
pub async fn prober(shared: Arc<Shared>, urls: Vec<String>, execution: String) {
    let client = Client::builder(urls)
        .retry_policy(RetryPolicy {
            attempts_max: 1_000,
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_millis(50),
            request_timeout: Duration::from_millis(500),
        })
        .build()
        .unwrap_or_else(|e| panic!("prober: {e}"));
    let mut prev: Option<String> = None;
    let mut n = 0u64;
    while !shared.stopped() {
        n += 1;
        let event = format!("p{n}");
        let request = AppendRequest {
            event_id: id(&event),
            prev_event_id: prev.as_deref().map(id),
            parent_execution_id: None,
            payload: json!({ "probe": n }),
            genesis: prev.is_none(),
        };
        let sent = shared.now_ns();
        match client.append(&exec(&execution), &request).await {
            Ok(_) => {
                lock(&shared.probe_acks).push((sent, shared.now_ns()));
                lock(&shared.acknowledged)
                    .entry(execution.clone())
                    .or_default()
                    .push(event.clone());
                prev = Some(event);
            }
            Err(ClientError::NotHead { expected, .. }) => {
                // Only after an answer lost twice over; follow the cluster.
                prev = expected.map(|e| e.to_string());
            }
            Err(_) => {
                // The retries ran out: try the same event again (answered as a duplicate if it
                // landed).
                n -= 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
