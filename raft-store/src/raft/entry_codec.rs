//! The Raft log's on-disk encoding: its own versioned binary format, apart from the HTTP API's
//! JSON types, so a change to the wire never changes what is on disk (and the reverse).
//!
//! ```text
//! entry v2:  format u8 (= 2) ++ term u64 BE ++ leader node id u64 BE ++ index u64 BE ++ payload
//! payload  = 0 (blank) | 1 ++ effect (chain::codec's layout) | 2 ++ bytes(membership JSON)
//!          | 3 ++ count u32 BE ++ effect * count   (the effects of several requests)
//!          | 4 ++ rebuild
//! rebuild  = expect ++ bytes(reason) ++ bytes(diagnosis) ++ at_ms u64 BE ++ effect
//! expect   = 0 (no head) | 1 ++ seq u64 BE ++ id(event)
//! ```
//! A membership is openraft's own type, rare and small: it stays JSON inside the frame.
//!
//! Format 1, the previous one, was the JSON of openraft's `Entry`: its first byte is `{`, which
//! no format number uses, so a log written by an older build is still read. Any other first byte
//! names a format this build does not know and is refused with that reason, never guessed at.

use super::types::{log_id, Entry, EntryPayload};

use super::types::Command;
use crate::chain::codec::{decode_effect, encode_effect, push_bytes, Reader};
use crate::chain::{QuarantineNote, Rebuild};
use chainstore_model::StorageError;
use chainstore_model::{EventId, Head};

/// The format this build writes.
pub const LOG_FORMAT: u8 = 2;
/// The first byte of an entry written in format 1 (JSON).
const JSON_FORMAT_FIRST_BYTE: u8 = b'{';

const PAYLOAD_BLANK: u8 = 0;
const PAYLOAD_NORMAL: u8 = 1;
const PAYLOAD_MEMBERSHIP: u8 = 2;
const PAYLOAD_EFFECTS: u8 = 3;
const PAYLOAD_REBUILD: u8 = 4;
/// The fewest bytes one encoded effect takes (a one-byte execution id, no events, no changes).
const EFFECT_BYTES_MIN: usize = 9;

/// Encodes one entry in the current format.
pub fn encode_entry(entry: &Entry) -> Result<Vec<u8>, StorageError> {
    let mut out = Vec::with_capacity(64);
    out.push(LOG_FORMAT);
    out.extend_from_slice(&entry.log_id.leader_id.term.to_be_bytes());
    out.extend_from_slice(&entry.log_id.leader_id.node_id.to_be_bytes());
    out.extend_from_slice(&entry.log_id.index.to_be_bytes());
    match &entry.payload {
        EntryPayload::Blank => out.push(PAYLOAD_BLANK),
        EntryPayload::Normal(Command::Effect(effect)) => {
            out.push(PAYLOAD_NORMAL);
            encode_effect(effect, &mut out);
        }
        EntryPayload::Normal(Command::Effects(effects)) => {
            out.push(PAYLOAD_EFFECTS);
            let count = u32::try_from(effects.len()).map_err(|_| {
                StorageError::io(
                    std::io::ErrorKind::InvalidInput,
                    "an entry of over 2^32 effects",
                )
            })?;
            out.extend_from_slice(&count.to_be_bytes());
            for effect in effects {
                encode_effect(effect, &mut out);
            }
        }
        EntryPayload::Normal(Command::Rebuild(rebuild)) => {
            out.push(PAYLOAD_REBUILD);
            encode_rebuild(rebuild, &mut out);
        }
        EntryPayload::Membership(membership) => {
            out.push(PAYLOAD_MEMBERSHIP);
            let json = serde_json::to_vec(membership).map_err(|e| {
                StorageError::io(
                    std::io::ErrorKind::InvalidData,
                    format!("cannot encode a membership: {e}"),
                )
            })?;
            push_bytes(&mut out, &json);
        }
    }
    Ok(out)
}

/// Decodes one entry written in format 2, or in format 1 by an older build. Damaged,
/// truncated or unknown bytes are an error naming what is wrong, never a panic.
pub fn decode_entry(bytes: &[u8]) -> Result<Entry, StorageError> {
    match bytes.first() {
        None => Err(StorageError::Corrupted("an empty log entry".into())),
        Some(&JSON_FORMAT_FIRST_BYTE) => serde_json::from_slice(bytes).map_err(|e| {
            StorageError::Corrupted(format!("a format 1 (JSON) log entry does not decode: {e}"))
        }),
        Some(&LOG_FORMAT) => decode_v2(&bytes[1..]),
        Some(other) => Err(StorageError::Corrupted(format!(
            "log entry format {other} is unknown: this build reads formats 1 and {LOG_FORMAT}"
        ))),
    }
}

fn decode_v2(bytes: &[u8]) -> Result<Entry, StorageError> {
    let mut r = Reader::new(bytes, "log entry");
    let term = r.u64()?;
    let node_id = r.u64()?;
    let index = r.u64()?;
    let payload = match r.u8()? {
        PAYLOAD_BLANK => EntryPayload::Blank,
        PAYLOAD_NORMAL => EntryPayload::Normal(Command::Effect(decode_effect(&mut r)?)),
        PAYLOAD_EFFECTS => {
            let count = r.count(EFFECT_BYTES_MIN, "effects")?;
            let mut effects = Vec::with_capacity(count);
            for _ in 0..count {
                effects.push(decode_effect(&mut r)?);
            }
            EntryPayload::Normal(Command::Effects(effects))
        }
        PAYLOAD_REBUILD => EntryPayload::Normal(Command::Rebuild(decode_rebuild(&mut r)?)),
        PAYLOAD_MEMBERSHIP => {
            EntryPayload::Membership(serde_json::from_slice(r.bytes()?).map_err(|e| {
                StorageError::Corrupted(format!("a membership entry does not decode: {e}"))
            })?)
        }
        other => {
            return Err(StorageError::Corrupted(format!(
                "log entry payload kind {other} is unknown"
            )))
        }
    };
    r.finish()?;
    Ok(Entry {
        log_id: log_id(term, node_id, index),
        payload,
    })
}

fn encode_rebuild(rebuild: &Rebuild, out: &mut Vec<u8>) {
    match &rebuild.expect {
        None => out.push(0),
        Some(head) => {
            out.push(1);
            out.extend_from_slice(&head.exec_seq.to_be_bytes());
            push_bytes(out, head.event_id.as_bytes());
        }
    }
    push_bytes(out, rebuild.note.reason.as_bytes());
    push_bytes(out, rebuild.note.diagnosis.as_bytes());
    out.extend_from_slice(&rebuild.note.at_ms.to_be_bytes());
    encode_effect(&rebuild.effect, out);
}

fn decode_rebuild(r: &mut Reader<'_>) -> Result<Rebuild, StorageError> {
    let text = |bytes: &[u8], what: &str| {
        String::from_utf8(bytes.to_vec())
            .map_err(|_| StorageError::Corrupted(format!("a rebuild's {what} is not UTF-8")))
    };
    let expect = match r.u8()? {
        0 => None,
        1 => {
            let exec_seq = r.u64()?;
            let event_id = EventId::new(text(r.bytes()?, "head")?)
                .map_err(|e| StorageError::Corrupted(format!("a rebuild's head: {e}")))?;
            Some(Head { exec_seq, event_id })
        }
        other => {
            return Err(StorageError::Corrupted(format!(
                "a rebuild's head tag {other} is unknown"
            )))
        }
    };
    let reason = text(r.bytes()?, "reason")?;
    let diagnosis = text(r.bytes()?, "diagnosis")?;
    let at_ms = r.u64()?;
    let effect = decode_effect(r)?;
    Ok(Rebuild {
        expect,
        note: QuarantineNote {
            reason,
            diagnosis,
            at_ms,
        },
        effect,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use chainstore_model::{
        ChainEvent, Coverage, EventId, ExecutionId, Head, Origin, SessionId, Watermark,
    };
    use openraft::{BasicNode, Membership};
    use serde_json::json;

    use super::*;
    use crate::chain::{CoverageChange, Effect, HeadCheck, SessionChange, SessionRecord};

    fn id(s: &str) -> EventId {
        EventId::new(s).unwrap()
    }

    fn effect() -> Effect {
        let exec = ExecutionId::new("wf-1").unwrap();
        Effect {
            execution_id: exec.clone(),
            head_check: HeadCheck::Expect(Some(Head {
                exec_seq: 1,
                event_id: id("e1"),
            })),
            events: vec![ChainEvent {
                execution_id: exec,
                exec_seq: 2,
                event_id: id("e2"),
                prev_event_id: Some(id("e1")),
                parent_execution_id: Some(ExecutionId::new("parent").unwrap()),
                payload: json!({ "k": [1, "two", null] }),
                commit_index: 0,
            }],
            watermark: Some(Watermark {
                first_seq: 1,
                through_seq: 2,
            }),
            coverage: CoverageChange::Raise(Coverage {
                root_event_id: Some(id("e1")),
                total: 2,
                origin: Origin::Log,
            }),
            session: SessionChange::Set(SessionRecord {
                id: SessionId::new("s").unwrap(),
                total: 4,
                next_position: 2,
                root: id("e1"),
                tail: id("e2"),
            }),
        }
    }

    fn entries() -> Vec<Entry> {
        let log_id = |index| log_id(3, 2, index);
        let nodes: BTreeMap<u64, BasicNode> = (1..=3)
            .map(|n| (n, BasicNode::new(format!("127.0.0.1:700{n}"))))
            .collect();
        let voters: BTreeSet<u64> = nodes.keys().copied().collect();
        let mut bare = effect();
        bare.head_check = HeadCheck::Any;
        bare.watermark = None;
        bare.coverage = CoverageChange::Drop;
        bare.session = SessionChange::Clear;
        bare.events.clear();
        let mut other = effect();
        other.execution_id = ExecutionId::new("wf-2").unwrap();
        other.events[0].execution_id = other.execution_id.clone();
        vec![
            Entry {
                log_id: log_id(1),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: log_id(2),
                payload: EntryPayload::Membership(Membership::new(vec![voters], nodes).unwrap()),
            },
            Entry {
                log_id: log_id(3),
                payload: EntryPayload::Normal(Command::Effect(effect())),
            },
            Entry {
                log_id: log_id(4),
                payload: EntryPayload::Normal(Command::Effects(vec![
                    effect(),
                    other,
                    bare.clone(),
                ])),
            },
            Entry {
                log_id: log_id(5),
                payload: EntryPayload::Normal(Command::Effects(Vec::new())),
            },
            Entry {
                log_id: log_id(6),
                payload: EntryPayload::Normal(Command::Rebuild(Rebuild {
                    expect: Some(Head {
                        exec_seq: 9,
                        event_id: id("intruder"),
                    }),
                    note: QuarantineNote {
                        reason: "diverged: the log is the authority ✓".into(),
                        diagnosis: "diverged at position 1".into(),
                        at_ms: 1_700_000_000_000,
                    },
                    effect: effect(),
                })),
            },
            Entry {
                log_id: log_id(7),
                payload: EntryPayload::Normal(Command::Rebuild(Rebuild {
                    expect: None,
                    note: QuarantineNote {
                        reason: String::new(),
                        diagnosis: String::new(),
                        at_ms: 0,
                    },
                    effect: bare.clone(),
                })),
            },
            Entry {
                log_id: log_id(u64::MAX),
                payload: EntryPayload::Normal(Command::Effect(bare)),
            },
        ]
    }

    #[test]
    fn every_entry_kind_round_trips_in_the_current_format() {
        for entry in entries() {
            let bytes = encode_entry(&entry).unwrap();
            assert_eq!(bytes[0], LOG_FORMAT);
            assert_eq!(decode_entry(&bytes).unwrap(), entry);
        }
    }

    #[test]
    fn a_log_written_in_the_previous_json_format_is_still_read() {
        for entry in entries() {
            let previous = serde_json::to_vec(&entry).unwrap();
            assert_eq!(decode_entry(&previous).unwrap(), entry);
        }
    }

    #[test]
    fn an_unknown_format_is_refused_by_name() {
        let mut bytes = encode_entry(&entries()[2]).unwrap();
        bytes[0] = 7;
        let err = decode_entry(&bytes).unwrap_err().to_string();
        assert!(err.contains("log entry format 7 is unknown"), "{err}");
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_an_error_or_an_entry_never_a_panic() {
        for entry in entries() {
            let bytes = encode_entry(&entry).unwrap();
            for cut in 0..bytes.len() {
                assert!(decode_entry(&bytes[..cut]).is_err(), "cut at {cut} decoded");
            }
            let mut extended = bytes.clone();
            extended.push(0);
            assert!(decode_entry(&extended).is_err(), "a trailing byte decoded");
            for at in 0..bytes.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut damaged = bytes.clone();
                    damaged[at] ^= flip;
                    let _ = decode_entry(&damaged);
                }
            }
        }
    }
}
