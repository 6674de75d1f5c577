//! The client-side actors of a run, each a turmoil client host running the real client code:
//! the controller (bootstrap, membership change), writers, populators, replicators, readers and
//! the final checker. Every outcome is checked against the models in [`World`] as it happens.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chainstore_check::{Answer, Entry, Op};
use chainstore_client::{Client, ClientError, GuardedRead, ReadOptions, RetryPolicy};
use chainstore_model::{
    AppendRequest, Appended, ChainEvent, EventId, ExecutionId, FromLog, Guarded, LogEvent, Reason,
};
use chainstore_transport::Transport;
use serde_json::{json, Value};

use crate::net::{SimTransport, NODE_PORT};
use crate::rng::SimRng;
use crate::world::{
    check_genesis, check_log, now_ms, Floor, GenesisModel, LogModel, Phase, ReplicatedModel, Shared,
};

/// Where a node is reached.
pub fn node_url(id: u64) -> String {
    format!("http://n{id}:{NODE_PORT}")
}

/// A client over `ids` through the simulated network, its jitter seeded by `seed`.
pub fn client(ids: &[u64], seed: u64, attempts: u32) -> Client {
    let policy = RetryPolicy {
        attempts_max: attempts,
        backoff_base: Duration::from_millis(50),
        backoff_max: Duration::from_millis(800),
        request_timeout: Duration::from_secs(3),
    };
    // Building cannot fail with a non-empty URL list and a given transport.
    Client::builder(ids.iter().map(|id| node_url(*id)))
        .transport(Arc::new(SimTransport))
        .jitter_seed(seed)
        .retry_policy(policy)
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

fn exec(name: &str) -> ExecutionId {
    ExecutionId::new(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn id(name: &str) -> EventId {
    EventId::new(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn phase(world: &Shared) -> Phase {
    world.borrow().phase
}

async fn pause(rng: &mut SimRng, low_ms: u64, high_ms: u64) {
    tokio::time::sleep(Duration::from_millis(rng.range(low_ms, high_ms))).await;
}

/// Posts JSON to one node, once.
pub(crate) async fn post(node: u64, path: &str, body: &Value) -> Result<(u16, Value), String> {
    let request = http::Request::post(format!("{}{path}", node_url(node)))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Bytes::from(body.to_string()))
        .map_err(|e| e.to_string())?;
    let response = SimTransport
        .send(request, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    Ok((
        status,
        serde_json::from_slice(response.body()).unwrap_or(Value::Null),
    ))
}

/// Bootstraps the cluster, then (when a spare node exists) adds it as a learner and promotes it
/// while the load runs.
pub async fn controller(
    world: Shared,
    voters: Vec<u64>,
    spare: Option<(u64, u64)>,
    shards: u32,
) -> turmoil::Result {
    let nodes: BTreeMap<String, String> = voters
        .iter()
        .map(|v| (v.to_string(), format!("n{v}:{NODE_PORT}")))
        .collect();
    loop {
        let init = match shards {
            1 => json!({ "nodes": nodes }),
            shards => json!({ "nodes": nodes, "shards": shards }),
        };
        match post(voters[0], "/v1/cluster/init", &init).await {
            Ok((200, _)) => break,
            Ok((status, body)) => world
                .borrow_mut()
                .log("ctl", format!("init answered {status} {body}")),
            Err(e) => world.borrow_mut().log("ctl", format!("init failed: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    world.borrow_mut().log("ctl", "cluster initialized");
    let probe = client(&voters, 1, 50);
    while probe
        .cluster()
        .await
        .map(|s| s.leader_id.is_none())
        .unwrap_or(true)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    {
        let mut w = world.borrow_mut();
        w.phase = Phase::Load;
        w.log("ctl", "load phase");
    }
    let Some((spare_id, at_ms)) = spare else {
        return Ok(());
    };
    tokio::time::sleep(Duration::from_millis(at_ms)).await;
    let mut members: Vec<u64> = voters.clone();
    members.push(spare_id);
    let steps = [
        (
            "/v1/cluster/learners",
            json!({ "node_id": spare_id, "addr": format!("n{spare_id}:{NODE_PORT}") }),
        ),
        ("/v1/cluster/voters", json!({ "voters": members })),
    ];
    for (path, body) in steps {
        let mut attempt = 0u64;
        loop {
            if phase(&world) != Phase::Load {
                return Ok(());
            }
            attempt += 1;
            let target = voters[(attempt as usize) % voters.len()];
            match post(target, path, &body).await {
                Ok((200, _)) => {
                    world
                        .borrow_mut()
                        .log("ctl", format!("{path} {body}: done"));
                    break;
                }
                Ok((status, answer)) => world
                    .borrow_mut()
                    .log("ctl", format!("{path}: {status} {}", answer["error"])),
                Err(e) => world.borrow_mut().log("ctl", format!("{path}: {e}")),
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    Ok(())
}

/// What a genesis writer does next.
enum WriteKind {
    /// The next event (or the unacknowledged one, resent unchanged).
    Next,
    /// A new event whose prev is not the head: must be refused with `not_head`.
    WrongPrev,
    /// The last acknowledged event again: must answer `duplicate` with its seq.
    Retry,
}

/// Appends to its executions with the head check: the first event under `genesis`, then each
/// next one; sometimes a wrong prev, sometimes a retry of an acknowledged event.
pub async fn genesis_writer(
    world: Shared,
    nodes: Vec<u64>,
    execs: Vec<String>,
    mut rng: SimRng,
) -> turmoil::Result {
    let actor = "writer";
    let client = client(&nodes, rng.next_u64(), 8);
    for name in &execs {
        world
            .borrow_mut()
            .genesis
            .insert(name.clone(), GenesisModel::default());
    }
    while phase(&world) == Phase::Starting {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut wrong = 0u64;
    while phase(&world) == Phase::Load {
        let name = rng.pick(&execs).clone();
        let roll = rng.range(0, 100);
        let (kind, request, expected_seq) = {
            let mut w = world.borrow_mut();
            let model = w.genesis_model(&name);
            let acked = model.acked;
            if roll < 8 && acked >= 2 {
                wrong += 1;
                let prev = model.events[rng.range(0, acked as u64 - 1) as usize]
                    .0
                    .clone();
                let request = AppendRequest {
                    event_id: id(&format!("wrong-{wrong}")),
                    prev_event_id: Some(prev),
                    parent_execution_id: None,
                    payload: json!({ "wrong": wrong }),
                    genesis: false,
                };
                (WriteKind::WrongPrev, request, 0)
            } else if roll < 16 && acked >= 1 && model.events.len() == acked {
                let (event_id, payload) = model.events[acked - 1].clone();
                let prev = (acked > 1).then(|| model.events[acked - 2].0.clone());
                let request = AppendRequest {
                    event_id,
                    prev_event_id: prev,
                    parent_execution_id: None,
                    payload,
                    genesis: acked == 1,
                };
                (WriteKind::Retry, request, acked as u64)
            } else {
                if model.events.len() == acked {
                    let n = acked + 1;
                    model
                        .events
                        .push((id(&format!("e{n}")), json!({ "n": n, "exec": name })));
                }
                let (event_id, payload) = model.events[acked].clone();
                let prev = (acked > 0).then(|| model.events[acked - 1].0.clone());
                let request = AppendRequest {
                    event_id,
                    prev_event_id: prev,
                    parent_execution_id: None,
                    payload,
                    genesis: acked == 0,
                };
                (WriteKind::Next, request, acked as u64 + 1)
            }
        };
        let outcome = client.append(&exec(&name), &request).await;
        {
            let mut w = world.borrow_mut();
            w.log(
                actor,
                format!(
                    "{name}/{} -> {:?}",
                    request.event_id,
                    outcome.as_ref().map(|a| (a.exec_seq, a.duplicate))
                ),
            );
            match (kind, outcome) {
                (WriteKind::Next, Ok(done)) => {
                    if done.exec_seq != expected_seq {
                        w.violation(
                            actor,
                            format!(
                                "{name}/{} acknowledged at seq {}, expected {expected_seq}",
                                request.event_id, done.exec_seq
                            ),
                        );
                    }
                    w.genesis_model(&name).acked += 1;
                    w.count("appends acknowledged");
                }
                (WriteKind::Retry, Ok(done)) => {
                    if !done.duplicate || done.exec_seq != expected_seq {
                        w.violation(actor, format!("a retry of {name}/{} answered {done:?}, expected a duplicate at {expected_seq}", request.event_id));
                    }
                    w.count("retries answered duplicate");
                }
                (WriteKind::WrongPrev, Ok(done)) => {
                    w.violation(actor, format!("{name}/{} with a stale prev was acknowledged at seq {}: two appends share a prev", request.event_id, done.exec_seq));
                }
                (WriteKind::WrongPrev, Err(ClientError::NotHead { .. })) => {
                    w.count("wrong prevs refused")
                }
                (_, Err(err)) if err.is_retryable() => w.count("writes unavailable"),
                (_, Err(err)) => w.violation(
                    actor,
                    format!("{name}/{}: unexpected {err}", request.event_id),
                ),
            }
        }
        pause(&mut rng, 5, 60).await;
    }
    Ok(())
}

fn log_event(name: &str, i: usize) -> LogEvent {
    LogEvent {
        event_id: id(&format!("l{i}")),
        prev_event_id: (i > 0).then(|| id(&format!("l{}", i - 1))),
        parent_execution_id: None,
        payload: json!({ "exec": name, "i": i }),
    }
}

/// Grows each execution's authoritative log and populates from a read of it that lags by a
/// random number of events (so `stale_log` happens); damaged executions sometimes get a forked,
/// multi-rooted or cyclic log, which must be refused.
pub async fn populator(
    world: Shared,
    nodes: Vec<u64>,
    clean: Vec<String>,
    damaged: Vec<String>,
    mut rng: SimRng,
) -> turmoil::Result {
    let actor = "populator";
    let client = client(&nodes, rng.next_u64(), 8);
    for (names, is_damaged) in [(&clean, false), (&damaged, true)] {
        for name in names {
            world.borrow_mut().logs.insert(
                name.clone(),
                LogModel {
                    damaged: is_damaged,
                    ..LogModel::default()
                },
            );
        }
    }
    let all: Vec<String> = clean.iter().chain(&damaged).cloned().collect();
    while phase(&world) == Phase::Starting {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while phase(&world) == Phase::Load {
        let name = rng.pick(&all).clone();
        let (log, sent_damage) = {
            let mut w = world.borrow_mut();
            let model = w.log_model(&name);
            // The log grows by one event, or sometimes by a burst (a populate of more new events
            // than one entry carries spans several entries, which faults can interrupt).
            let growth = if rng.chance(0.15) {
                rng.range(2, 12)
            } else {
                u64::from(rng.chance(0.6))
            };
            for _ in 0..growth {
                let next = log_event(&name, model.truth.len());
                model.truth.push(next);
            }
            let lag = rng.range(0, 6) as usize;
            let len = model.truth.len().saturating_sub(lag);
            let mut log: Vec<LogEvent> = model.truth[..len].to_vec();
            let mut damage = None;
            if model.damaged && len >= 2 && rng.chance(0.3) {
                let odd = |event: &str, prev: Option<&str>| LogEvent {
                    event_id: id(event),
                    prev_event_id: prev.map(id),
                    parent_execution_id: None,
                    payload: json!("odd"),
                };
                match rng.range(0, 3) {
                    0 => {
                        let at = rng.range(0, len as u64 - 1);
                        log.push(odd("fork", Some(&format!("l{at}"))));
                        damage = Some("fork");
                    }
                    1 => {
                        log.push(odd("second-root", None));
                        damage = Some("multiple_roots");
                    }
                    _ => {
                        log.push(odd("cy-a", Some("cy-b")));
                        log.push(odd("cy-b", Some("cy-a")));
                        damage = Some("unreachable");
                    }
                }
            }
            let len = log.len();
            if damage.is_none() {
                model.submitted.insert(len);
            }
            let by = rng.range(0, len as u64 + 1) as usize;
            log.rotate_left(by.min(len));
            (log, damage)
        };
        let outcome = client.populate(&exec(&name), &log).await;
        {
            let mut w = world.borrow_mut();
            w.log(
                actor,
                format!(
                    "{name} len {} damage {sent_damage:?} -> {outcome:?}",
                    log.len()
                ),
            );
            let truth_len = w.logs[&name].truth.len();
            let sent_len = log.len();
            match (sent_damage, outcome) {
                (Some(expected), Ok(FromLog::Refused { reason })) => {
                    if reason.as_str() != expected {
                        w.violation(
                            actor,
                            format!(
                                "{name}: a {expected} log was refused as {}",
                                reason.as_str()
                            ),
                        );
                    }
                    w.count("damaged logs refused");
                }
                (Some(expected), Ok(other)) => w.violation(
                    actor,
                    format!("{name}: a {expected} log answered {other:?}"),
                ),
                (None, Ok(FromLog::InSync { total, .. })) => {
                    if (total as usize) < sent_len || total as usize > truth_len {
                        w.violation(actor, format!("{name}: in sync with total {total} for a log of {sent_len} (truth {truth_len})"));
                    }
                    let model = w.log_model(&name);
                    model.synced_len = model.synced_len.max(sent_len);
                    w.count("populates in sync");
                }
                (
                    None,
                    Ok(FromLog::StaleLog {
                        stored_len,
                        log_len,
                    }),
                ) => {
                    if stored_len as usize > truth_len || log_len as usize != sent_len {
                        w.violation(actor, format!("{name}: stale_log stored {stored_len} log {log_len}, truth {truth_len}, sent {sent_len}"));
                    }
                    w.count("populates stale");
                }
                (None, Ok(other)) => w.violation(
                    actor,
                    format!("{name}: a true prefix of the log answered {other:?}"),
                ),
                (_, Err(err)) if err.is_retryable() => w.count("populates unavailable"),
                (_, Err(err)) => w.violation(actor, format!("{name}: unexpected {err}")),
            }
        }
        // Coverage never shrinks under one root: looked at right after every populate, which is
        // when a write could have lowered it.
        if !world.borrow().logs[&name].damaged {
            let started = now_ms();
            if let Ok(state) = client.state(&exec(&name), ReadOptions::default()).await {
                world
                    .borrow_mut()
                    .observe_coverage(actor, &name, started, state.coverage);
            }
        }
        pause(&mut rng, 10, 80).await;
    }
    Ok(())
}

fn replicated_event(name: &str, seq: u64) -> ChainEvent {
    ChainEvent {
        execution_id: exec(name),
        exec_seq: seq,
        event_id: id(&format!("r{seq}")),
        prev_event_id: (seq > 1).then(|| id(&format!("r{}", seq - 1))),
        parent_execution_id: None,
        payload: json!({ "exec": name, "seq": seq }),
        commit_index: 0,
    }
}

/// Delivers true events out of order (with repeats); sometimes a conflicting event at a seq known
/// to be stored, which must be refused as `forked`.
pub async fn replicator(
    world: Shared,
    nodes: Vec<u64>,
    execs: Vec<String>,
    mut rng: SimRng,
) -> turmoil::Result {
    let actor = "replicator";
    let client = client(&nodes, rng.next_u64(), 8);
    for name in &execs {
        world
            .borrow_mut()
            .replicated
            .insert(name.clone(), ReplicatedModel::default());
    }
    while phase(&world) == Phase::Starting {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while phase(&world) == Phase::Load {
        let name = rng.pick(&execs).clone();
        let (events, conflict) = {
            let mut w = world.borrow_mut();
            let model = w.replicated_model(&name);
            for _ in 0..rng.range(0, 3) {
                let seq = model.truth.len() as u64 + 1;
                model.truth.push(replicated_event(&name, seq));
            }
            if model.truth.is_empty() {
                continue;
            }
            if !model.stored.is_empty() && rng.chance(0.1) {
                let stored: Vec<u64> = model.stored.iter().copied().collect();
                let seq = *rng.pick(&stored);
                // Either the stored event's id with other content, or another event altogether
                // at the stored seq (a second writer's fork).
                let mut altered = replicated_event(&name, seq);
                altered.payload = json!("conflicting");
                if rng.chance(0.5) {
                    altered.event_id = id(&format!("x{seq}"));
                }
                (vec![altered], true)
            } else {
                let count = rng.range(1, 4);
                let events: Vec<ChainEvent> = (0..count)
                    .map(|_| model.truth[rng.range(0, model.truth.len() as u64) as usize].clone())
                    .collect();
                (events, false)
            }
        };
        let outcome = client.replicated(&exec(&name), &events).await;
        {
            let mut w = world.borrow_mut();
            let seqs: Vec<u64> = events.iter().map(|e| e.exec_seq).collect();
            w.log(
                actor,
                format!("{name} {seqs:?} conflict {conflict} -> {outcome:?}"),
            );
            match (conflict, outcome) {
                (false, Ok(_)) => {
                    w.replicated_model(&name).stored.extend(seqs);
                    w.count("deliveries applied");
                }
                (true, Err(ClientError::Forked(_))) => w.count("conflicting deliveries refused"),
                (true, Ok(done)) => w.violation(
                    actor,
                    format!("{name}: a conflicting event at a stored seq was applied: {done:?}"),
                ),
                (_, Err(err)) if err.is_retryable() => w.count("deliveries unavailable"),
                (_, Err(err)) => w.violation(actor, format!("{name}: unexpected {err}")),
            }
        }
        pause(&mut rng, 20, 120).await;
    }
    Ok(())
}

/// What a read's answer must be checked against, taken just before it starts.
enum Expectation {
    Genesis(Floor),
    Log(Floor),
    Replicated,
}

/// Guarded reads of every kind of execution on every node, linearizable and local, each answer
/// checked against the models. Linearizable `state` reads also check that coverage never shrinks
/// under one root on the clean populated executions.
pub async fn reader(world: Shared, nodes: Vec<u64>, mut rng: SimRng) -> turmoil::Result {
    let actor = "reader";
    let per_node: BTreeMap<u64, Client> = nodes
        .iter()
        .map(|n| (*n, client(&[*n], rng.next_u64(), 2)))
        .collect();
    while phase(&world) == Phase::Starting {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while phase(&world) == Phase::Load {
        let node = *rng.pick(&nodes);
        let linearizable = rng.chance(0.5);
        let picked = {
            let w = world.borrow();
            let mut names: Vec<(String, u8)> = Vec::new();
            names.extend(w.genesis.keys().map(|k| (k.clone(), 0)));
            names.extend(w.logs.keys().map(|k| (k.clone(), 1)));
            names.extend(w.replicated.keys().map(|k| (k.clone(), 2)));
            if names.is_empty() {
                None
            } else {
                let (name, kind) = rng.pick(&names).clone();
                let expectation = match kind {
                    0 => Expectation::Genesis(if linearizable {
                        Floor::AtLeast(w.genesis[&name].acked)
                    } else {
                        Floor::Any
                    }),
                    1 => Expectation::Log(if linearizable {
                        Floor::AtLeast(w.logs[&name].synced_len)
                    } else {
                        Floor::Any
                    }),
                    _ => Expectation::Replicated,
                };
                Some((name, expectation))
            }
        };
        let Some((name, expectation)) = picked else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let options = if linearizable {
            ReadOptions::default()
        } else {
            ReadOptions::local()
        };
        let read = per_node[&node].chain(&exec(&name), options).await;
        let clean_log = {
            let mut w = world.borrow_mut();
            let summary = match &read {
                Ok(r) => match &r.answer {
                    Guarded::Authoritative(events) => {
                        format!("authoritative {} at {}", events.len(), r.applied_index)
                    }
                    Guarded::CannotAnswer(reason) => {
                        format!("cannot_answer {} at {}", reason.as_str(), r.applied_index)
                    }
                },
                Err(e) => format!("error {e}"),
            };
            w.log(
                actor,
                format!(
                    "n{node} {} {name} -> {summary}",
                    if linearizable { "lin" } else { "local" }
                ),
            );
            if let Ok(read) = read {
                if let Guarded::Authoritative(events) = &read.answer {
                    w.count("authoritative answers checked");
                    let verdict = match &expectation {
                        Expectation::Genesis(floor) => {
                            check_genesis(&w.genesis[&name], events, floor)
                        }
                        Expectation::Log(floor) => check_log(&w.logs[&name], events, floor),
                        Expectation::Replicated => {
                            Err("an execution fed only by replicated deliveries was served".into())
                        }
                    };
                    if let Err(what) = verdict {
                        w.violation(actor, format!("n{node} {name}: {what}"));
                    }
                } else {
                    w.count("refused answers");
                }
            }
            w.logs.get(&name).is_some_and(|m| !m.damaged)
        };
        if linearizable && clean_log {
            let started = now_ms();
            if let Ok(state) = per_node[&node]
                .state(&exec(&name), ReadOptions::default())
                .await
            {
                world
                    .borrow_mut()
                    .observe_coverage(actor, &name, started, state.coverage);
            }
        }
        pause(&mut rng, 10, 40).await;
    }
    Ok(())
}

/// FNV-1a over the state-machine range of each group an engine holds (group 0's keys as they
/// are, group g's under `z` ‖ g): equal digests of one group mean identical replicas of it.
pub fn state_digests(engine: &raft_store::MemEngine) -> BTreeMap<u32, u64> {
    let mut digests = BTreeMap::new();
    for (key, value) in engine.dump() {
        // Only the state machine's range: the Raft log differs legitimately between replicas.
        let (start, end) = raft_store::raft::STATE_MACHINE_RANGE;
        let (group, inner) = match key.first() {
            Some(b'z') if key.len() > 5 => {
                let mut group = [0u8; 4];
                group.copy_from_slice(&key[1..5]);
                (u32::from_be_bytes(group), &key[5..])
            }
            _ => (0, key.as_slice()),
        };
        if inner < start || inner >= end {
            continue;
        }
        let hash = digests.entry(group).or_insert(0xcbf2_9ce4_8422_2325u64);
        for byte in (key.len() as u64)
            .to_le_bytes()
            .iter()
            .chain(&key)
            .chain(&(value.len() as u64).to_le_bytes())
            .chain(&value)
        {
            *hash ^= u64::from(*byte);
            *hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    digests
}

/// What a linearizable read told the caller, as the history records it.
pub fn read_answer(read: &Result<GuardedRead, ClientError>) -> Answer {
    match read {
        Ok(r) => match &r.answer {
            Guarded::Authoritative(events) => Answer::Chain {
                events: events.iter().map(|e| e.event_id.to_string()).collect(),
            },
            Guarded::CannotAnswer(_) => Answer::CannotAnswer,
        },
        Err(_) => Answer::Unknown,
    }
}

/// What an append told the caller, as the history records it: every failure but a definite
/// refusal says nothing about whether the append happened.
pub fn append_answer(outcome: &Result<Appended, ClientError>) -> Answer {
    match outcome {
        Ok(done) => Answer::Appended {
            seq: done.exec_seq,
            duplicate: done.duplicate,
        },
        Err(ClientError::NotHead { expected, .. }) => Answer::NotHead {
            expected: expected.as_ref().map(|e| e.to_string()),
        },
        Err(ClientError::EventConflict { .. }) => Answer::EventConflict,
        Err(_) => Answer::Unknown,
    }
}

/// Simulated time, in nanoseconds, for the history.
fn now_ns() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_nanos() as u64)
}

/// A process racing with others on a few executions: it appends its next event after the head
/// it believes in (adopting the head a `not_head` names), sometimes retries an event whose answer
/// was lost, and reads linearizably, each call sent to a random node with no retry inside the
/// client. Every call and its answer enter the world's history, which is checked for
/// linearizability once the run ends. After a lost answer the process stops being itself (the
/// checker requires a process's calls not to overlap, and a lost call never ends): it goes on
/// under a new process id.
pub async fn race(
    world: Shared,
    nodes: Vec<u64>,
    execs: Vec<String>,
    racer: u64,
    mut rng: SimRng,
) -> turmoil::Result {
    let actor = "racer";
    let per_node: BTreeMap<u64, Client> = nodes
        .iter()
        .map(|n| (*n, client(&[*n], rng.next_u64(), 1)))
        .collect();
    while phase(&world) == Phase::Starting {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut heads: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut generation = 0u64;
    let mut sent = 0u64;
    let mut lost: Option<(String, Option<String>, String)> = None;
    while phase(&world) == Phase::Load {
        pause(&mut rng, 5, 80).await;
        let node = *rng.pick(&nodes);
        let client = &per_node[&node];
        let process = racer * 1_000_000 + generation;
        if rng.chance(0.25) {
            let name = rng.pick(&execs).clone();
            let call = now_ns();
            let answer = read_answer(&client.chain(&exec(&name), ReadOptions::default()).await);
            let mut w = world.borrow_mut();
            w.log(
                actor,
                format!("p{process} n{node} read {name} -> {answer:?}"),
            );
            w.history.push(Entry {
                process,
                execution: name,
                call,
                ret: now_ns(),
                op: Op::Read,
                answer,
            });
            continue;
        }
        // The next append: a retry of a lost one now and then, else a new event.
        let (name, prev, event) = match lost.take().filter(|_| rng.chance(0.5)) {
            Some(retry) => retry,
            None => {
                let name = rng.pick(&execs).clone();
                sent += 1;
                let prev = heads.get(&name).cloned().flatten();
                (name, prev, format!("r{racer}-{sent}"))
            }
        };
        let request = AppendRequest {
            event_id: id(&event),
            prev_event_id: prev.as_deref().map(id),
            parent_execution_id: None,
            payload: json!({ "by": racer }),
            genesis: prev.is_none(),
        };
        let call = now_ns();
        let outcome = client.append(&exec(&name), &request).await;
        let answer = append_answer(&outcome);
        let mut w = world.borrow_mut();
        w.log(
            actor,
            format!("p{process} n{node} {name}/{event} after {prev:?} -> {answer:?}"),
        );
        if let Err(err @ (ClientError::InvalidInput(_) | ClientError::TooLarge(_))) = &outcome {
            w.violation(actor, format!("{name}/{event} refused as bad input: {err}"));
        }
        match &answer {
            Answer::Appended { .. } => {
                heads.insert(name.clone(), Some(event.clone()));
            }
            Answer::NotHead { expected } => {
                heads.insert(name.clone(), expected.clone());
            }
            Answer::Unknown => {
                // This process never learns what happened: a new one continues.
                generation += 1;
                lost = Some((name.clone(), prev.clone(), event.clone()));
            }
            _ => {}
        }
        w.history.push(Entry {
            process,
            execution: name,
            call,
            ret: now_ns(),
            op: Op::Append {
                event,
                prev,
                content: racer,
            },
            answer,
        });
    }
    Ok(())
}

/// After the faults healed: the cluster serves again, every replica converges to the same state,
/// no acknowledged write is missing, and every clean log can be completed and served whole.
pub async fn checker(
    world: Shared,
    nodes: Vec<u64>,
    engines: Vec<(u64, raft_store::MemEngine)>,
    seed: u64,
) -> turmoil::Result {
    let actor = "checker";
    while phase(&world) != Phase::Check {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    world.borrow_mut().log(actor, "final checks");
    let cluster = client(&nodes, seed, 40);

    // Liveness: a new write and a linearizable read succeed.
    let probe = AppendRequest {
        event_id: id("alive"),
        prev_event_id: None,
        parent_execution_id: None,
        payload: json!(1),
        genesis: true,
    };
    if let Err(err) = cluster.append(&exec("liveness"), &probe).await {
        world.borrow_mut().violation(
            actor,
            format!("the healed cluster did not accept a write: {err}"),
        );
        world.borrow_mut().phase = Phase::Done;
        return Ok(());
    }

    // Convergence: every replica of each group applies the same index and holds the same state.
    // A node of a sharded cluster runs only its shards' groups (it lists them in `groups`), so
    // the replicas are compared group by group; a single-group cluster's members are its voters
    // and learners.
    let members: Vec<u64> = match cluster.cluster().await {
        Ok(status) if status.shards > 1 => nodes.clone(),
        Ok(status) => status
            .voters
            .iter()
            .chain(&status.learners)
            .copied()
            .collect(),
        Err(err) => {
            world
                .borrow_mut()
                .violation(actor, format!("no cluster status after healing: {err}"));
            nodes.clone()
        }
    };
    // A write sent just before the load ended may still be applying: the replicas have
    // converged when they report the same applied index AND hold the same state (the state
    // includes the applied id), read in one step. A real divergence never converges.
    let mut converged = false;
    let mut same_state = false;
    let mut views: BTreeMap<u32, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for _ in 0..150 {
        // Per group: (node, applied index, state digest) of every replica.
        views.clear();
        for member in &members {
            let view = client(&[*member], seed, 1).cluster().await;
            let digests = engines
                .iter()
                .find(|(id, _)| id == member)
                .map(|(_, engine)| state_digests(engine))
                .unwrap_or_default();
            let applied: Vec<(u32, u64)> = match view {
                Ok(v) if v.groups.is_empty() => vec![(0, v.last_applied)],
                Ok(v) => v.groups.iter().map(|g| (g.shard, g.last_applied)).collect(),
                // A member that does not answer has applied nothing as far as this check knows.
                Err(_) => vec![(0, 0)],
            };
            for (group, index) in applied {
                let digest = digests.get(&group).copied().unwrap_or(0);
                views
                    .entry(group)
                    .or_default()
                    .push((*member, index, digest));
            }
        }
        converged = views
            .values()
            .all(|r| r.iter().all(|(_, index, _)| *index == r[0].1 && *index > 0));
        same_state = views
            .values()
            .all(|r| r.iter().all(|(_, _, digest)| *digest == r[0].2));
        if converged && same_state {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    {
        let mut w = world.borrow_mut();
        w.log(
            actor,
            format!("members {members:?} converged {converged} replicas {views:x?}"),
        );
        if !converged {
            w.violation(
                actor,
                format!("the replicas of a group did not reach the same applied index: {views:?}"),
            );
        } else if !same_state {
            w.violation(
                actor,
                format!("the replicas of a group hold different states: {views:x?}"),
            );
        }
    }

    // How many entries carried the writes of several executions (the change feed lists every
    // stored event with the index of the entry that stored it): the run's coverage of shared
    // entries under its crashes.
    // A cluster of several shards has a feed per shard, each with indexes of its own.
    let mut shared = 0u64;
    let shards = cluster.shards().await.get();
    for shard in 0..shards {
        let mut after = 0;
        let mut last: Option<(u64, String)> = None;
        let mut counted_index = None;
        loop {
            let page = match shards {
                1 => cluster.changes(after, 1_000, ReadOptions::default()).await,
                _ => {
                    cluster
                        .shard_changes(shard, after, 1_000, ReadOptions::default())
                        .await
                }
            };
            let Ok(page) = page else { break };
            for change in &page.changes {
                let here = (change.commit_index, change.execution_id.to_string());
                if let Some((index, execution)) = &last {
                    if *index == here.0 && *execution != here.1 && counted_index != Some(here.0) {
                        shared += 1;
                        counted_index = Some(here.0);
                    }
                }
                last = Some(here);
            }
            if page.changes.is_empty() || page.next <= after {
                break;
            }
            after = page.next;
        }
    }
    *world
        .borrow_mut()
        .stats
        .entry("entries holding writes of several executions")
        .or_default() += shared;

    // No acknowledged append is missing.
    let genesis: Vec<String> = world.borrow().genesis.keys().cloned().collect();
    for name in genesis {
        let read = cluster.chain(&exec(&name), ReadOptions::default()).await;
        let mut w = world.borrow_mut();
        let model = &w.genesis[&name];
        let verdict = match read {
            Ok(r) => match r.answer {
                Guarded::Authoritative(events) => {
                    check_genesis(model, &events, &Floor::AtLeast(model.acked))
                }
                Guarded::CannotAnswer(reason)
                    if model.acked == 0 && reason == Reason::NotPopulated =>
                {
                    Ok(())
                }
                Guarded::CannotAnswer(reason) => Err(format!(
                    "cannot answer ({}) with {} acknowledged appends",
                    reason.as_str(),
                    model.acked
                )),
            },
            Err(err) => Err(format!("read failed after healing: {err}")),
        };
        if let Err(what) = verdict {
            w.violation(actor, format!("{name}: {what}"));
        }
    }

    // Every clean log completes and is served whole.
    let clean: Vec<(String, Vec<LogEvent>)> = world
        .borrow()
        .logs
        .iter()
        .filter(|(_, m)| !m.damaged)
        .map(|(k, m)| (k.clone(), m.truth.clone()))
        .collect();
    for (name, truth) in clean {
        if let Some(model) = world.borrow_mut().logs.get_mut(&name) {
            model.submitted.insert(truth.len());
        }
        let populated = cluster.populate(&exec(&name), &truth).await;
        let read = cluster.chain(&exec(&name), ReadOptions::default()).await;
        let mut w = world.borrow_mut();
        match (&populated, &read) {
            (Ok(FromLog::InSync { .. }), Ok(r)) => match &r.answer {
                Guarded::Authoritative(events) if events.len() == truth.len() => {
                    if let Err(what) =
                        check_log(&w.logs[&name], events, &Floor::AtLeast(truth.len()))
                    {
                        w.violation(actor, format!("{name}: {what}"));
                    }
                }
                other => w.violation(
                    actor,
                    format!(
                        "{name}: the whole log of {} populated, then {other:?}",
                        truth.len()
                    ),
                ),
            },
            _ => w.violation(
                actor,
                format!("{name}: completing the log answered {populated:?}, then {read:?}"),
            ),
        }
    }

    // Every stored replicated event is there.
    let replicated: Vec<(String, Vec<u64>)> = world
        .borrow()
        .replicated
        .iter()
        .map(|(k, m)| (k.clone(), m.stored.iter().copied().collect()))
        .collect();
    for (name, stored) in replicated {
        let raw = cluster
            .chain_raw(&exec(&name), ReadOptions::default())
            .await;
        let mut w = world.borrow_mut();
        match raw {
            Ok(events) => {
                let present: Vec<u64> = events.iter().map(|e| e.exec_seq).collect();
                if let Some(missing) = stored.iter().find(|s| !present.contains(s)) {
                    w.violation(
                        actor,
                        format!("{name}: the acknowledged delivery of seq {missing} is missing"),
                    );
                }
                let altered = |e: &&ChainEvent| {
                    **e != ChainEvent {
                        commit_index: e.commit_index,
                        ..replicated_event(&name, e.exec_seq)
                    }
                };
                if let Some(e) = events.iter().find(altered) {
                    w.violation(
                        actor,
                        format!("{name}: seq {} holds a different event", e.exec_seq),
                    );
                }
            }
            Err(err) => w.violation(
                actor,
                format!("{name}: raw read failed after healing: {err}"),
            ),
        }
    }
    let mut w = world.borrow_mut();
    w.log(actor, "done");
    w.phase = Phase::Done;
    Ok(())
}
