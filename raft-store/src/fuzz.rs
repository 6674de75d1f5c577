//! A seeded mutation fuzzer for the decoders that read bytes from disk or the network.
//!
//! Each [`Target`] names a decoder and a few valid inputs (seeds). [`run`] feeds it inputs made
//! by mutating the seeds (flipped bits, boundary values over length fields, cuts, insertions,
//! repeats, splices of two seeds) and some made from nothing, and counts the inputs that make it
//! panic. A decoder may refuse any input; it may never panic. Seeded: one seed, one sequence of
//! inputs, so a failure replays. The store's own decoders are in [`store_targets`]; the node adds
//! the HTTP and Raft RPC ones (`node/tests/fuzz.rs`).

use std::panic::{self, AssertUnwindSafe};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::chain::{codec, SessionRecord};
use crate::engine::{seal, unseal};
use crate::raft::snapshot;
use chainstore_model::{
    ChainEvent, Coverage, EventId, ExecutionId, Head, Origin, SessionId, Watermark,
};

/// A decoder under test and valid inputs to start from.
pub struct Target {
    /// What the decoder reads.
    pub name: &'static str,
    /// Valid inputs.
    pub seeds: Vec<Vec<u8>>,
    /// Decodes one input, ignoring the outcome.
    pub decode: fn(&[u8]),
    /// Inputs every run gives this target at least, whatever the budget: the Raft log and RPC
    /// formats get [`PROPERTY_INPUTS_MIN`] in every test run.
    pub inputs_min: u64,
}

/// The least number of inputs the Raft log entry and Raft RPC decoders see in every run.
pub const PROPERTY_INPUTS_MIN: u64 = 100_000;

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Inputs decoded.
    pub inputs: u64,
    /// Inputs that made it panic.
    pub panics: u64,
    /// The first input that panicked, and the panic's message.
    pub first_panic: Option<(Vec<u8>, String)>,
}

/// Runs `target` on `inputs` inputs derived from `seed`.
pub fn run(target: &Target, inputs: u64, seed: u64) -> Report {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut report = Report::default();
    let quiet = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    for _ in 0..inputs {
        let input = generate(&mut rng, &target.seeds);
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| (target.decode)(&input)));
        report.inputs += 1;
        if let Err(payload) = outcome {
            report.panics += 1;
            if report.first_panic.is_none() {
                let message = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                report.first_panic = Some((input, message));
            }
        }
    }
    panic::set_hook(quiet);
    report
}

/// Runs every target with the environment's budget — `FUZZ_INPUTS` inputs per decoder (default
/// 20,000, never fewer than the target's `inputs_min`), `FUZZ_SEED` (default `seed`, which the
/// caller picks: this crate reads no clock) —
/// printing one line per decoder. Returns the failures, each with its first panicking input (as
/// text when `as_text`) and the seed that replays it.
pub fn run_all(targets: &[Target], as_text: bool, seed: u64) -> Vec<String> {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    let inputs = var("FUZZ_INPUTS").unwrap_or(20_000);
    let seed = var("FUZZ_SEED").unwrap_or(seed);
    let mut failures = Vec::new();
    for target in targets {
        let report = run(target, inputs.max(target.inputs_min), seed);
        println!(
            "fuzz: {:<60} {:>10} inputs, {} panics (FUZZ_SEED={seed})",
            target.name, report.inputs, report.panics
        );
        if let Some((input, message)) = report.first_panic {
            let input = if as_text {
                format!("{:?}", String::from_utf8_lossy(&input))
            } else {
                format!("{input:02x?}")
            };
            failures.push(format!(
                "{}: {} panics; first on {input}: {message} (FUZZ_SEED={seed})",
                target.name, report.panics
            ));
        }
    }
    failures
}

/// Values that break length and count fields most often.
const EDGES: [u32; 9] = [0, 1, 2, 0x7f, 0x80, 0xff, 0xffff, 0x7fff_ffff, u32::MAX];

/// One input: a mutated seed (most of the time) or random bytes.
pub fn generate(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if seeds.is_empty() || rng.random_ratio(1, 20) {
        let len = rng.random_range(0..64);
        return (0..len).map(|_| rng.random()).collect();
    }
    let mut input = seeds[rng.random_range(0..seeds.len())].clone();
    for _ in 0..rng.random_range(1..=4) {
        mutate(rng, &mut input, seeds);
    }
    input
}

fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let len = input.len();
    match rng.random_range(0..9) {
        0 if len > 0 => {
            let at = rng.random_range(0..len);
            input[at] ^= 1 << rng.random_range(0..8);
        }
        1 if len > 0 => {
            let at = rng.random_range(0..len);
            input[at] = [0u8, 0xff, 0x7f, 0x80, b'"', b'{', b'0'][rng.random_range(0..7)];
        }
        2 if len >= 4 => {
            // A length or count field set to a boundary value, either byte order.
            let at = rng.random_range(0..=len - 4);
            let value = EDGES[rng.random_range(0..EDGES.len())];
            let bytes = if rng.random() {
                value.to_be_bytes()
            } else {
                value.to_le_bytes()
            };
            input[at..at + 4].copy_from_slice(&bytes);
        }
        3 => input.truncate(rng.random_range(0..=len)),
        4 => {
            let at = rng.random_range(0..=len);
            let extra: Vec<u8> = (0..rng.random_range(1..16)).map(|_| rng.random()).collect();
            input.splice(at..at, extra);
        }
        5 if len > 0 => {
            let start = rng.random_range(0..len);
            let end = rng.random_range(start..=len.min(start + 32));
            input.drain(start..end);
        }
        6 if len > 0 => {
            // A stretch repeated in place.
            let start = rng.random_range(0..len);
            let end = rng.random_range(start..=len.min(start + 64));
            let piece = input[start..end].to_vec();
            input.splice(end..end, piece);
        }
        7 => {
            // The head of this input and the tail of another seed.
            let other = &seeds[rng.random_range(0..seeds.len())];
            let cut = rng.random_range(0..=len);
            let from = rng.random_range(0..=other.len());
            input.truncate(cut);
            input.extend_from_slice(&other[from..]);
        }
        _ => {
            if len > 0 {
                let at = rng.random_range(0..len);
                input[at] = rng.random();
            }
        }
    }
}

// The seeds below are built from constants: the ids are valid and the encodings cannot fail,
// so an `expect` there would only fire on a defect in this file, on the first test run.

fn id(s: &str) -> EventId {
    EventId::new(s).expect("a constant, valid id")
}

fn exec() -> ExecutionId {
    ExecutionId::new("fuzz").expect("a constant, valid id")
}

/// The decoders of the store: its records, the engine's sealed values, the Raft log's entries
/// and the snapshot/backup file.
// A table: one target per decoder, each with its valid seeds beside it, so a new decoder is
// added in one place.
pub fn store_targets() -> Vec<Target> {
    let event = ChainEvent {
        execution_id: exec(),
        exec_seq: 2,
        event_id: id("e2"),
        prev_event_id: Some(id("e1")),
        parent_execution_id: Some(ExecutionId::new("parent").expect("id")),
        payload: json!({ "k": [1, "two", null] }),
        commit_index: 9,
    };
    let payload = codec::payload_bytes(&event.payload);
    let root = ChainEvent {
        prev_event_id: None,
        parent_execution_id: None,
        event_id: id("e1"),
        exec_seq: 1,
        ..event.clone()
    };
    let pairs = vec![
        (
            b"a/applied".to_vec(),
            b"{\"leader_id\":{\"term\":1,\"node_id\":1},\"index\":3}".to_vec(),
        ),
        (
            b"cfuzz/h".to_vec(),
            codec::encode_head(&Head {
                exec_seq: 2,
                event_id: id("e2"),
            }),
        ),
        (b"cfuzz/s".to_vec(), codec::encode_event(&event, &payload)),
        (b"m/format".to_vec(), codec::encode_format(1)),
    ];
    let snapshot = snapshot::encode(1, &pairs).expect("encodes");
    // Entries in the previous format (JSON) and in the current one.
    let mut entries: Vec<Vec<u8>> = [
        json!({"log_id": {"leader_id": {"term": 1, "node_id": 1}, "index": 1}, "payload": "Blank"}),
        json!({"log_id": {"leader_id": {"term": 2, "node_id": 3}, "index": 7},
               "payload": {"Membership": {"configs": [[1, 2, 3]],
                 "nodes": {"1": {"addr": "a:1"}, "2": {"addr": "b:1"}, "3": {"addr": "c:1"}}}}}),
    ]
    .iter()
    .map(|v| serde_json::to_vec(v).expect("json"))
    .collect();
    let effect = crate::chain::Effect {
        execution_id: exec(),
        head_check: crate::chain::HeadCheck::Expect(Some(Head {
            exec_seq: 1,
            event_id: id("e1"),
        })),
        events: vec![event.clone()],
        watermark: Some(Watermark {
            first_seq: 1,
            through_seq: 2,
        }),
        coverage: crate::chain::CoverageChange::Keep,
        session: crate::chain::SessionChange::Clear,
    };
    for entry in [
        crate::raft::Entry {
            log_id: crate::raft::log_id(4, 2, 9),
            payload: crate::raft::EntryPayload::Normal(crate::raft::Command::Effect(
                effect.clone(),
            )),
        },
        crate::raft::Entry {
            log_id: crate::raft::log_id(4, 2, 11),
            payload: crate::raft::EntryPayload::Normal(crate::raft::Command::Effects(vec![
                effect.clone(),
                crate::chain::Effect {
                    execution_id: ExecutionId::new("other").expect("a constant, valid id"),
                    events: Vec::new(),
                    ..effect.clone()
                },
            ])),
        },
        crate::raft::Entry {
            log_id: crate::raft::log_id(4, 2, 10),
            payload: crate::raft::EntryPayload::Blank,
        },
        crate::raft::Entry {
            log_id: crate::raft::log_id(4, 2, 12),
            payload: crate::raft::EntryPayload::Normal(crate::raft::Command::Rebuild(
                crate::chain::Rebuild {
                    expect: Some(Head {
                        exec_seq: 3,
                        event_id: id("intruder"),
                    }),
                    note: crate::chain::QuarantineNote {
                        reason: "a second writer".into(),
                        diagnosis: "diverged at position 2".into(),
                        at_ms: 1_700_000_000_000,
                    },
                    effect,
                },
            )),
        },
    ] {
        entries.push(crate::raft::entry_codec::encode_entry(&entry).expect("encodes"));
    }
    vec![
        Target {
            name: "stored event",
            inputs_min: 0,
            seeds: vec![
                codec::encode_event(&event, &payload),
                codec::encode_event(&root, b"null"),
            ],
            decode: |bytes| {
                let _ = codec::decode_event(&exec(), 1, bytes);
                let _ = codec::decode_event_links(bytes);
            },
        },
        Target {
            name:
                "stored head, watermark, coverage, seq, format, feed, session, quarantine records",
            inputs_min: 0,
            seeds: vec![
                codec::encode_head(&Head {
                    exec_seq: 5,
                    event_id: id("e5"),
                }),
                codec::encode_watermark(&Watermark {
                    first_seq: 1,
                    through_seq: 5,
                }),
                codec::encode_coverage(&Coverage {
                    origin: Origin::Log,
                    total: 5,
                    root_event_id: Some(id("e1")),
                }),
                codec::encode_seq(77),
                codec::encode_format(1),
                codec::encode_session(&SessionRecord {
                    id: SessionId::new("s1").expect("a constant, valid id"),
                    total: 9,
                    next_position: 4,
                    root: id("e1"),
                    tail: id("e4"),
                }),
                codec::encode_quarantine(&chainstore_model::QuarantineRecord {
                    number: 2,
                    quarantined_at_ms: 1_700_000_000_000,
                    commit_index: 40,
                    reason: "a second writer".into(),
                    diagnosis: "diverged at position 2".into(),
                    head: Some(Head {
                        exec_seq: 3,
                        event_id: id("intruder"),
                    }),
                    watermark: None,
                    coverage: None,
                    events: 3,
                })
                .expect("a constant record encodes"),
            ],
            decode: |bytes| {
                let _ = codec::decode_session(bytes);
                let _ = codec::decode_quarantine(bytes);
                let _ = codec::decode_head(bytes);
                let _ = codec::decode_watermark(bytes);
                let _ = codec::decode_coverage(bytes);
                let _ = codec::decode_seq(bytes);
                let _ = codec::decode_format(bytes);
                let _ = codec::decode_feed_value(bytes);
                let _ = codec::decode_feed_execution(bytes);
            },
        },
        Target {
            name: "sealed value (checksum)",
            inputs_min: 0,
            seeds: vec![seal(b"k", b"value".to_vec()), seal(b"", Vec::new())],
            decode: |bytes| {
                let _ = unseal(b"k", bytes.to_vec());
            },
        },
        Target {
            name: "raft log entry",
            inputs_min: PROPERTY_INPUTS_MIN,
            seeds: entries,
            decode: |bytes| {
                let _ = crate::raft::entry_codec::decode_entry(bytes);
            },
        },
        Target {
            name: "snapshot and backup file",
            inputs_min: 0,
            seeds: vec![snapshot.clone(), snapshot::encode(1, &[]).expect("encodes")],
            decode: |bytes| {
                let _ = crate::raft::inspect_backup(bytes);
            },
        },
        Target {
            // The chunk parser behind the checksums: the input is a chunk's pair count and body,
            // framed into a file whose checksums and trailer all match, so that mutations reach
            // the parsing a random damage would stop at a checksum first.
            name: "snapshot chunk body (checksums made to match)",
            inputs_min: 0,
            seeds: vec![chunk_of(&pairs), chunk_of(&[])],
            decode: |bytes| {
                let _ = crate::raft::inspect_backup(&framed(bytes));
            },
        },
    ]
}

/// A chunk's pair count (u32 BE) and body for `pairs`: what [`framed`] takes.
fn chunk_of(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = (pairs.len() as u32).to_be_bytes().to_vec();
    for (key, value) in pairs {
        out.extend_from_slice(&(key.len() as u32).to_be_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// A whole snapshot file holding one chunk made of `input` (a pair count, then the body), with
/// the header, the chunk's checksum and the trailer all consistent with it.
fn framed(input: &[u8]) -> Vec<u8> {
    let mut count = [0u8; 4];
    let body = match input.get(..4) {
        Some(head) => {
            count.copy_from_slice(head);
            &input[4..]
        }
        None => &[][..],
    };
    let mut file = b"CSSNAP02".to_vec();
    file.extend_from_slice(&1u32.to_be_bytes());
    let crc = crc32c::crc32c(&file);
    file.extend_from_slice(&crc.to_be_bytes());
    let mut chunk = vec![b'C'];
    chunk.extend_from_slice(&(body.len() as u32).to_be_bytes());
    chunk.extend_from_slice(&count);
    chunk.extend_from_slice(body);
    let chunk_crc = crc32c::crc32c(&chunk).to_be_bytes();
    file.extend_from_slice(&chunk);
    file.extend_from_slice(&chunk_crc);
    let mut trailer = vec![b'T'];
    let pairs = u32::from_be_bytes(count);
    trailer.extend_from_slice(&u64::from(pairs).to_be_bytes());
    trailer.extend_from_slice(&1u64.to_be_bytes());
    trailer.extend_from_slice(&crc32c::crc32c(&chunk_crc).to_be_bytes());
    let crc = crc32c::crc32c(&trailer);
    trailer.extend_from_slice(&crc.to_be_bytes());
    file.extend_from_slice(&trailer);
    file
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The framed seed is a valid file, so mutations start from inputs that reach the parser.
    #[test]
    fn a_framed_chunk_of_valid_pairs_is_a_valid_backup() {
        let pairs = vec![
            (
                b"a/applied".to_vec(),
                b"{\"leader_id\":{\"term\":1,\"node_id\":1},\"index\":3}".to_vec(),
            ),
            (b"m/format".to_vec(), codec::encode_format(1)),
        ];
        let file = framed(&chunk_of(&pairs));
        assert_eq!(crate::raft::inspect_backup(&file).expect("valid").index, 3);
        assert_eq!(file, snapshot::encode(1, &pairs).expect("encodes"));
    }
}
