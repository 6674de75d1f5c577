//! Property tests: random sequences of appends, replicated deliveries and populates run against
//! the reference model of SPEC §4 (`common/model.rs`) and against the store on both engines.
//! After every operation, the outcome and every read of every execution (guarded read, the
//! guarded read assembled from pages of several sizes, raw chain, authority, coverage, head,
//! completeness) must agree with the model.
//!
//! Operations are drawn against a "true" chain per execution (t0 <- t1 <- ...), so most of them
//! are plausible (the next event, a prefix of the log) and the rest collide on purpose (wrong
//! prevs, reused ids, altered payloads, forked or cyclic logs, out-of-order deliveries).

mod common;

use chainstore_model::{
    AppendError, AppendRequest, ChainEvent, ExecutionId, FromLog, Guarded, GuardedPage, LogEvent,
    PopulateError, ReplicateError,
};
use common::model::Model;
use common::*;
use proptest::prelude::*;
use raft_store::{ChainStore, Engine, MemEngine, PageBounds, StoreConfig};
use serde_json::{json, Value};

const EXECS: [&str; 3] = ["x0", "x1", "x2"];
const TRUTH_LEN: usize = 8;

fn truth_id(i: usize) -> String {
    format!("t{i}")
}

fn truth_payload(i: usize) -> Value {
    json!({ "n": i })
}

fn truth_log(len: usize) -> Vec<LogEvent> {
    (0..len)
        .map(|i| LogEvent {
            event_id: eid(&truth_id(i)),
            prev_event_id: (i > 0).then(|| eid(&truth_id(i - 1))),
            parent_execution_id: None,
            payload: truth_payload(i),
        })
        .collect()
}

/// An id from a pool of true ids and a few others.
fn pool_id(i: u8) -> String {
    let i = usize::from(i) % 12;
    if i < TRUTH_LEN {
        truth_id(i)
    } else {
        format!("o{}", i - TRUTH_LEN)
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    None,
    ExtraRoot,
    Fork(u8),
    Dangling(u8),
    AlterPayload(u8),
    Cycle,
    Reverse,
}

#[derive(Debug, Clone)]
enum Op {
    /// The true event after the current head (or an odd one when the head is not true).
    AppendNext { exec: usize, genesis: bool },
    /// An arbitrary append from the id pool.
    Append {
        exec: usize,
        id: u8,
        prev: Option<u8>,
        alt_payload: bool,
        genesis: bool,
    },
    /// True events at the given positions; `shift` moves one to the next seq, `alter` changes a
    /// payload.
    Replicate {
        exec: usize,
        positions: Vec<u8>,
        alter: bool,
        shift: bool,
    },
    /// A prefix of the true log, possibly damaged, in a rotated order.
    Populate {
        exec: usize,
        len: u8,
        mutation: Mutation,
        rotate: u8,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let exec = 0..EXECS.len();
    let mutation = prop_oneof![
        6 => Just(Mutation::None),
        1 => Just(Mutation::ExtraRoot),
        1 => any::<u8>().prop_map(Mutation::Fork),
        1 => any::<u8>().prop_map(Mutation::Dangling),
        1 => any::<u8>().prop_map(Mutation::AlterPayload),
        1 => Just(Mutation::Cycle),
        1 => Just(Mutation::Reverse),
    ];
    prop_oneof![
        4 => (exec.clone(), prop::bool::weighted(0.15))
            .prop_map(|(exec, genesis)| Op::AppendNext { exec, genesis }),
        2 => (exec.clone(), any::<u8>(), prop::option::of(any::<u8>()), prop::bool::weighted(0.2), prop::bool::weighted(0.1))
            .prop_map(|(exec, id, prev, alt_payload, genesis)| Op::Append { exec, id, prev, alt_payload, genesis }),
        2 => (exec.clone(), prop::collection::vec(0u8..TRUTH_LEN as u8, 0..4), prop::bool::weighted(0.15), prop::bool::weighted(0.1))
            .prop_map(|(exec, positions, alter, shift)| Op::Replicate { exec, positions, alter, shift }),
        3 => (exec, 0u8..=TRUTH_LEN as u8, mutation, any::<u8>())
            .prop_map(|(exec, len, mutation, rotate)| Op::Populate { exec, len, mutation, rotate }),
    ]
}

fn damaged_log(len: usize, mutation: &Mutation, rotate: u8) -> Vec<LogEvent> {
    let mut log = truth_log(len);
    let odd = |id: &str, prev: Option<&str>| LogEvent {
        event_id: eid(id),
        prev_event_id: prev.map(eid),
        parent_execution_id: None,
        payload: json!({ "odd": id }),
    };
    match mutation {
        Mutation::None => {}
        Mutation::ExtraRoot => log.push(odd("o0", None)),
        Mutation::Fork(i) if len > 0 => {
            let at = truth_id(usize::from(*i) % len);
            log.push(odd("o1", Some(&at)));
        }
        Mutation::Dangling(i) if len > 0 => {
            log[usize::from(*i) % len].prev_event_id = Some(eid("ghost"));
        }
        Mutation::AlterPayload(i) if len > 0 => {
            log[usize::from(*i) % len].payload = json!({ "altered": true });
        }
        Mutation::Cycle => {
            log.push(odd("o2", Some("o3")));
            log.push(odd("o3", Some("o2")));
        }
        Mutation::Reverse => log.reverse(),
        _ => {}
    }
    if !log.is_empty() {
        let by = usize::from(rotate) % log.len();
        log.rotate_left(by);
    }
    log
}

/// Turns an op into a concrete request using the model's current state (deterministic, so a
/// shrunk case replays identically).
enum Request {
    Append(AppendRequest),
    Replicate(Vec<ChainEvent>),
    Populate(Vec<LogEvent>),
}

fn resolve(op: &Op, model: &Model) -> (usize, Request) {
    match op {
        Op::AppendNext { exec, genesis } => {
            let state = model.exec(&common::exec(EXECS[*exec]));
            let head = state.events.values().next_back();
            let next = match head {
                None => Some(0),
                Some(h) => h
                    .event_id
                    .as_str()
                    .strip_prefix('t')
                    .and_then(|n| n.parse::<usize>().ok())
                    .map(|n| n + 1),
            };
            let (id, payload) = match next {
                Some(n) if n < TRUTH_LEN => (truth_id(n), truth_payload(n)),
                _ => ("o3".to_string(), json!({ "odd": "o3" })),
            };
            let request = AppendRequest {
                event_id: eid(&id),
                prev_event_id: head.map(|h| h.event_id.clone()),
                parent_execution_id: None,
                payload,
                genesis: *genesis,
            };
            (*exec, Request::Append(request))
        }
        Op::Append {
            exec,
            id,
            prev,
            alt_payload,
            genesis,
        } => {
            let id_str = pool_id(*id);
            let payload = match (alt_payload, id_str.strip_prefix('t')) {
                (false, Some(n)) => truth_payload(n.parse().unwrap_or(0)),
                _ => json!({ "odd": id_str }),
            };
            let request = AppendRequest {
                event_id: eid(&id_str),
                prev_event_id: prev.map(|p| eid(&pool_id(p))),
                parent_execution_id: None,
                payload,
                genesis: *genesis,
            };
            (*exec, Request::Append(request))
        }
        Op::Replicate {
            exec,
            positions,
            alter,
            shift,
        } => {
            let events = positions
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let p = usize::from(*p);
                    let mut event = ChainEvent {
                        execution_id: common::exec(EXECS[*exec]),
                        exec_seq: p as u64 + 1,
                        event_id: eid(&truth_id(p)),
                        prev_event_id: (p > 0).then(|| eid(&truth_id(p - 1))),
                        parent_execution_id: None,
                        payload: truth_payload(p),
                        commit_index: 0,
                    };
                    if *alter && i == 0 {
                        event.payload = json!({ "altered": true });
                    }
                    if *shift && i == 0 {
                        event.exec_seq += 1;
                    }
                    event
                })
                .collect();
            (*exec, Request::Replicate(events))
        }
        Op::Populate {
            exec,
            len,
            mutation,
            rotate,
        } => (
            *exec,
            Request::Populate(damaged_log(usize::from(*len), mutation, *rotate)),
        ),
    }
}

fn norm_append(r: Result<chainstore_model::Appended, AppendError>) -> String {
    match r {
        Err(AppendError::InvalidInput(_) | AppendError::GenesisWithPrev) => "invalid_input".into(),
        other => format!("{other:?}"),
    }
}

fn norm_replicate(r: Result<chainstore_model::Replicated, ReplicateError>) -> String {
    match r {
        Err(ReplicateError::InvalidInput(_)) => "invalid_input".into(),
        other => format!("{other:?}"),
    }
}

fn norm_populate(r: Result<FromLog, PopulateError>) -> String {
    match r {
        Err(PopulateError::InvalidInput(_)) => "invalid_input".into(),
        other => format!("{other:?}"),
    }
}

/// The guarded read assembled page by page, each page after the first pinned to the first
/// page's end; every page must agree on the extent.
fn paged<E: Engine>(
    store: &ChainStore<E>,
    x: &ExecutionId,
    events_max: usize,
    bytes_max: usize,
) -> Guarded {
    let mut bounds = PageBounds {
        from_seq: 1,
        to_seq: None,
        events_max,
        bytes_max,
    };
    let mut events = Vec::new();
    loop {
        match store.chain_page_if_authoritative(x, bounds).unwrap() {
            GuardedPage::CannotAnswer(reason) => return Guarded::CannotAnswer(reason),
            GuardedPage::Authoritative(page) => {
                assert!(!page.events.is_empty() || page.next_from_seq.is_none());
                let pinned = *bounds.to_seq.get_or_insert(page.through_seq);
                assert_eq!(page.through_seq, pinned, "the extent moved between pages");
                events.extend(page.events);
                match page.next_from_seq {
                    Some(next) => bounds.from_seq = next,
                    None => return Guarded::Authoritative(events),
                }
            }
        }
    }
}

fn check_reads<E: Engine>(
    store: &ChainStore<E>,
    model: &Model,
    step: usize,
) -> Result<(), TestCaseError> {
    for name in EXECS {
        let x = exec(name);
        let at = format!("after step {step}, execution {name}");
        prop_assert_eq!(
            store.chain_if_authoritative(&x).unwrap(),
            model.guarded(&x),
            "guarded read {}",
            at
        );
        for (events_max, bytes_max) in [(1 + step % 3, usize::MAX), (usize::MAX, 1 + step * 7)] {
            prop_assert_eq!(
                paged(store, &x, events_max, bytes_max),
                model.guarded(&x),
                "paged guarded read ({} events, {} bytes a page) {}",
                events_max,
                bytes_max,
                at
            );
        }
        prop_assert_eq!(
            store.chain(&x).unwrap(),
            model.chain(&x),
            "raw chain {}",
            at
        );
        prop_assert_eq!(
            store.authority(&x).unwrap(),
            model.authority(&x),
            "authority {}",
            at
        );
        prop_assert_eq!(
            store.coverage(&x).unwrap(),
            model.coverage(&x),
            "coverage {}",
            at
        );
        prop_assert_eq!(
            store.chain_is_complete(&x).unwrap(),
            model.completeness(&x),
            "completeness {}",
            at
        );
        let model_head = model
            .chain(&x)
            .last()
            .map(|e| (e.exec_seq, e.event_id.clone()));
        let head = store.head(&x).unwrap().map(|h| (h.exec_seq, h.event_id));
        prop_assert_eq!(head, model_head, "head {}", at);
    }
    Ok(())
}

fn run<E: Engine>(store: &ChainStore<E>, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let commit_index = step as u64 + 1;
        let (exec_index, request) = resolve(op, &model);
        let x = exec(EXECS[exec_index]);
        match request {
            Request::Append(req) => {
                let got = norm_append(store.append(&x, &req, commit_index));
                let want = norm_append(model.append(&x, &req, commit_index));
                prop_assert_eq!(got, want, "append at step {}: {:?}", step, req);
            }
            Request::Replicate(events) => {
                let got = norm_replicate(store.apply_replicated(&x, &events, commit_index));
                let want = norm_replicate(model.replicated(&x, &events, commit_index));
                prop_assert_eq!(got, want, "replicated at step {}: {:?}", step, events);
            }
            Request::Populate(log) => {
                let got = norm_populate(store.populate_from_log(&x, &log, commit_index));
                let want = norm_populate(model.populate(&x, &log, commit_index));
                prop_assert_eq!(got, want, "populate at step {}: {:?}", step, log);
            }
        }
        check_reads(store, &model, step)?;
    }
    Ok(())
}

/// Small populate batches, so that multi-batch populates happen in the random runs too.
fn config() -> StoreConfig {
    StoreConfig {
        populate_batch_events_max: 3,
        ..StoreConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_store_on_the_memory_engine_agrees_with_the_model(ops in prop::collection::vec(op_strategy(), 1..60)) {
        let store = ChainStore::open(MemEngine::new(), config()).unwrap();
        run(&store, &ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_store_on_rocksdb_agrees_with_the_model(ops in prop::collection::vec(op_strategy(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let engine = raft_store::RocksEngine::open(&raft_store::RocksOptions::new(dir.path())).unwrap();
        let store = ChainStore::open(engine, config()).unwrap();
        run(&store, &ops)?;
    }
}
