//! Value encodings of the chain store's records.
//!
//! Events use a small length-prefixed binary layout rather than JSON so that the hot path does
//! not parse the envelope, and so that every field is checked on the way back: any byte string
//! that does not decode becomes [`StorageError::Corrupted`], never a panic and never a guess.
//!
//! ```text
//! event:     version u8 (=1) ++ commit_index u64 BE ++ id(event_id) ++ opt_id(prev)
//!            ++ opt_id(parent) ++ payload (JSON, to the end)
//!            id = len u8 ++ bytes; opt_id = len u8 (0 = none) ++ bytes
//! ```
//! The execution id and the sequence are in the key and are not repeated in the value.
//!
//! ```text
//! session:   total u64 BE ++ next_position u64 BE ++ id(session) ++ id(root) ++ id(tail)
//! ```
//!
//! An effect, as the Raft log carries it (see `raft::entry_codec` for the entry around it):
//! ```text
//! effect:    id(execution) ++ head_check ++ n u32 BE ++ n × log_event ++ watermark
//!            ++ coverage ++ session
//! head_check = 0 (any) | 1 (expect no head) | 2 ++ seq u64 BE ++ id(event) (expect this head)
//! log_event  = id(execution) ++ exec_seq u64 BE ++ id(event) ++ opt_id(prev)
//!              ++ opt_id(parent) ++ commit_index u64 BE ++ bytes(payload JSON)
//! watermark  = 0 | 1 ++ first_seq u64 BE ++ through_seq u64 BE
//! coverage   = 0 (keep) | 1 (drop) | 2 ++ bytes(coverage record)
//! session    = 0 (keep) | 1 ++ bytes(session record) | 2 (clear)
//! bytes      = len u32 BE ++ bytes
//! ```

use serde_json::Value;

use crate::chain::effect::{CoverageChange, Effect, HeadCheck, SessionChange, SessionRecord};
use chainstore_model::StorageError;
use chainstore_model::{validate_id, EventId, ExecutionId, SessionId};
use chainstore_model::{ChainEvent, Coverage, Head, Origin, QuarantineRecord, Watermark};

const EVENT_RECORD_VERSION: u8 = 1;

fn corrupted(what: &str) -> StorageError {
    StorageError::Corrupted(what.to_string())
}

/// A cursor over a stored value that turns every short read into `Corrupted`.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StorageError> {
        if self.bytes.len() < n {
            return Err(StorageError::Corrupted(format!(
                "{} record is truncated",
                self.what
            )));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    /// A cursor over `bytes`, a `what` record.
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Self { bytes, what }
    }

    pub(crate) fn u8(&mut self) -> Result<u8, StorageError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, StorageError> {
        let bytes = self.take(4)?;
        let mut array = [0u8; 4];
        array.copy_from_slice(bytes);
        Ok(u32::from_be_bytes(array))
    }

    /// A length-prefixed (u32) byte string.
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], StorageError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, StorageError> {
        let bytes = self.take(8)?;
        let mut array = [0u8; 8];
        array.copy_from_slice(bytes);
        Ok(u64::from_be_bytes(array))
    }

    fn opt_id(&mut self) -> Result<Option<&'a [u8]>, StorageError> {
        let len = usize::from(self.u8()?);
        if len == 0 {
            return Ok(None);
        }
        let bytes = self.take(len)?;
        validate_id(bytes).map_err(|e| {
            StorageError::Corrupted(format!("{} record holds a bad id: {e}", self.what))
        })?;
        Ok(Some(bytes))
    }

    fn id(&mut self) -> Result<&'a [u8], StorageError> {
        self.opt_id()?
            .ok_or_else(|| StorageError::Corrupted(format!("{} record lacks an id", self.what)))
    }

    /// A u32 count of items that take at least `least_bytes` each: refused when the rest
    /// cannot hold that many, before anything is allocated for them.
    pub(crate) fn count(&mut self, least_bytes: usize, items: &str) -> Result<usize, StorageError> {
        let count = self.u32()? as usize;
        if count > self.bytes.len() / least_bytes.max(1) {
            return Err(StorageError::Corrupted(format!(
                "{} record declares more {items} than it holds",
                self.what
            )));
        }
        Ok(count)
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }

    /// A byte that must be one of `0..count`.
    fn tag(&mut self, count: u8, field: &str) -> Result<u8, StorageError> {
        let tag = self.u8()?;
        if tag >= count {
            return Err(StorageError::Corrupted(format!(
                "{} record has {field} tag {tag}",
                self.what
            )));
        }
        Ok(tag)
    }

    pub(crate) fn finish(&self) -> Result<(), StorageError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(StorageError::Corrupted(format!(
                "{} record has trailing bytes",
                self.what
            )))
        }
    }
}

fn push_opt_id(out: &mut Vec<u8>, id: Option<&[u8]>) {
    match id {
        // Ids are at most 128 bytes (validated on construction), so the length fits a byte.
        Some(bytes) => {
            debug_assert!(!bytes.is_empty() && bytes.len() <= chainstore_model::ID_BYTES_MAX);
            out.push(bytes.len() as u8);
            out.extend_from_slice(bytes);
        }
        None => out.push(0),
    }
}

fn event_id(bytes: &[u8]) -> Result<EventId, StorageError> {
    EventId::from_bytes(bytes).map_err(|e| StorageError::Corrupted(format!("bad event id: {e}")))
}

fn execution_id(bytes: &[u8]) -> Result<ExecutionId, StorageError> {
    ExecutionId::from_bytes(bytes)
        .map_err(|e| StorageError::Corrupted(format!("bad execution id: {e}")))
}

/// Encodes a payload as JSON bytes.
pub(crate) fn payload_bytes(payload: &Value) -> Vec<u8> {
    // Serializing a `Value` into memory cannot fail: its map keys are strings.
    serde_json::to_vec(payload).unwrap_or_default()
}

/// Encodes an event's value. `payload_json` is the event's payload already encoded.
pub(crate) fn encode_event(event: &ChainEvent, payload_json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 8 + 3 * 129 + payload_json.len());
    out.push(EVENT_RECORD_VERSION);
    out.extend_from_slice(&event.commit_index.to_be_bytes());
    push_opt_id(&mut out, Some(event.event_id.as_bytes()));
    push_opt_id(
        &mut out,
        event.prev_event_id.as_ref().map(|id| id.as_bytes()),
    );
    push_opt_id(
        &mut out,
        event.parent_execution_id.as_ref().map(|id| id.as_bytes()),
    );
    out.extend_from_slice(payload_json);
    out
}

/// Decodes an event stored at `exec_seq` of `exec`.
pub(crate) fn decode_event(
    exec: &ExecutionId,
    exec_seq: u64,
    bytes: &[u8],
) -> Result<ChainEvent, StorageError> {
    let mut r = Reader {
        bytes,
        what: "event",
    };
    let (commit_index, id, prev) = event_envelope(&mut r)?;
    let parent = r.opt_id()?.map(execution_id).transpose()?;
    let payload: Value = serde_json::from_slice(r.rest())
        .map_err(|e| StorageError::Corrupted(format!("event payload is not JSON: {e}")))?;
    if exec_seq == 0 {
        return Err(corrupted("event stored at seq 0"));
    }
    Ok(ChainEvent {
        execution_id: exec.clone(),
        exec_seq,
        event_id: id,
        prev_event_id: prev,
        parent_execution_id: parent,
        payload,
        commit_index,
    })
}

/// The id and the predecessor of a stored event, without decoding its payload: what a check of
/// a whole chain's links needs from events it does not serve.
pub(crate) fn decode_event_links(bytes: &[u8]) -> Result<(EventId, Option<EventId>), StorageError> {
    let mut r = Reader {
        bytes,
        what: "event",
    };
    let (_, id, prev) = event_envelope(&mut r)?;
    Ok((id, prev))
}

/// The start of an event record: version, commit index, id and predecessor.
fn event_envelope(r: &mut Reader<'_>) -> Result<(u64, EventId, Option<EventId>), StorageError> {
    let version = r.u8()?;
    if version != EVENT_RECORD_VERSION {
        return Err(StorageError::Corrupted(format!(
            "event record version {version} is unknown"
        )));
    }
    let commit_index = r.u64()?;
    let id = event_id(r.id()?)?;
    let prev = r.opt_id()?.map(event_id).transpose()?;
    Ok((commit_index, id, prev))
}

pub(crate) fn encode_head(head: &Head) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + head.event_id.as_bytes().len());
    out.extend_from_slice(&head.exec_seq.to_be_bytes());
    out.extend_from_slice(head.event_id.as_bytes());
    out
}

pub(crate) fn decode_head(bytes: &[u8]) -> Result<Head, StorageError> {
    let mut r = Reader {
        bytes,
        what: "head",
    };
    let exec_seq = r.u64()?;
    let event_id = event_id(r.rest())?;
    if exec_seq == 0 {
        return Err(corrupted("head at seq 0"));
    }
    Ok(Head { exec_seq, event_id })
}

pub(crate) fn encode_watermark(wm: &Watermark) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.extend_from_slice(&wm.first_seq.to_be_bytes());
    out.extend_from_slice(&wm.through_seq.to_be_bytes());
    out
}

pub(crate) fn decode_watermark(bytes: &[u8]) -> Result<Watermark, StorageError> {
    let mut r = Reader {
        bytes,
        what: "watermark",
    };
    let wm = Watermark {
        first_seq: r.u64()?,
        through_seq: r.u64()?,
    };
    r.finish()?;
    if wm.first_seq > wm.through_seq {
        return Err(corrupted("watermark first_seq is above through_seq"));
    }
    Ok(wm)
}

const ORIGIN_LOG: u8 = b'l';
const ORIGIN_GENESIS: u8 = b'g';

pub(crate) fn encode_coverage(cov: &Coverage) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + 128);
    out.push(match cov.origin {
        Origin::Log => ORIGIN_LOG,
        Origin::Genesis => ORIGIN_GENESIS,
    });
    out.extend_from_slice(&cov.total.to_be_bytes());
    if let Some(root) = &cov.root_event_id {
        out.extend_from_slice(root.as_bytes());
    }
    out
}

pub(crate) fn decode_coverage(bytes: &[u8]) -> Result<Coverage, StorageError> {
    let mut r = Reader {
        bytes,
        what: "coverage",
    };
    let origin = match r.u8()? {
        ORIGIN_LOG => Origin::Log,
        ORIGIN_GENESIS => Origin::Genesis,
        other => {
            return Err(StorageError::Corrupted(format!(
                "coverage origin 0x{other:02x}"
            )))
        }
    };
    let total = r.u64()?;
    let root = r.rest();
    let root_event_id = if root.is_empty() {
        None
    } else {
        Some(event_id(root)?)
    };
    Ok(Coverage {
        root_event_id,
        total,
        origin,
    })
}

pub(crate) fn encode_seq(seq: u64) -> Vec<u8> {
    seq.to_be_bytes().to_vec()
}

pub(crate) fn encode_session(record: &SessionRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 3 * 129);
    out.extend_from_slice(&record.total.to_be_bytes());
    out.extend_from_slice(&record.next_position.to_be_bytes());
    push_opt_id(&mut out, Some(record.id.as_bytes()));
    push_opt_id(&mut out, Some(record.root.as_bytes()));
    push_opt_id(&mut out, Some(record.tail.as_bytes()));
    out
}

pub(crate) fn decode_session(bytes: &[u8]) -> Result<SessionRecord, StorageError> {
    let mut r = Reader {
        bytes,
        what: "populate session",
    };
    let total = r.u64()?;
    let next_position = r.u64()?;
    let id = SessionId::from_bytes(r.id()?)
        .map_err(|e| StorageError::Corrupted(format!("bad session id: {e}")))?;
    let root = event_id(r.id()?)?;
    let tail = event_id(r.id()?)?;
    r.finish()?;
    if next_position == 0 || next_position > total {
        return Err(corrupted("populate session position outside 1..=total"));
    }
    Ok(SessionRecord {
        id,
        total,
        next_position,
        root,
        tail,
    })
}

pub(crate) fn decode_seq(bytes: &[u8]) -> Result<u64, StorageError> {
    let mut r = Reader {
        bytes,
        what: "id index",
    };
    let seq = r.u64()?;
    r.finish()?;
    if seq == 0 {
        return Err(corrupted("id index points at seq 0"));
    }
    Ok(seq)
}

pub(crate) fn encode_format(version: u32) -> Vec<u8> {
    version.to_be_bytes().to_vec()
}

pub(crate) fn decode_format(bytes: &[u8]) -> Result<u32, StorageError> {
    let array: [u8; 4] = bytes
        .try_into()
        .map_err(|_| corrupted("format record is not 4 bytes"))?;
    Ok(u32::from_be_bytes(array))
}

/// Appends a length-prefixed (u32) byte string.
pub(crate) fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Every value the log carries is far below 4 GiB (a Raft entry is bounded by the body
    // limits); a longer one would not decode and is never produced.
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Appends an effect's encoding to `out`.
pub(crate) fn encode_effect(effect: &Effect, out: &mut Vec<u8>) {
    push_opt_id(out, Some(effect.execution_id.as_bytes()));
    match &effect.head_check {
        HeadCheck::Any => out.push(0),
        HeadCheck::Expect(None) => out.push(1),
        HeadCheck::Expect(Some(head)) => {
            out.push(2);
            out.extend_from_slice(&head.exec_seq.to_be_bytes());
            push_opt_id(out, Some(head.event_id.as_bytes()));
        }
    }
    out.extend_from_slice(&(effect.events.len() as u32).to_be_bytes());
    for event in &effect.events {
        push_opt_id(out, Some(event.execution_id.as_bytes()));
        out.extend_from_slice(&event.exec_seq.to_be_bytes());
        push_opt_id(out, Some(event.event_id.as_bytes()));
        push_opt_id(out, event.prev_event_id.as_ref().map(|id| id.as_bytes()));
        push_opt_id(
            out,
            event.parent_execution_id.as_ref().map(|id| id.as_bytes()),
        );
        out.extend_from_slice(&event.commit_index.to_be_bytes());
        push_bytes(out, &payload_bytes(&event.payload));
    }
    match &effect.watermark {
        None => out.push(0),
        Some(wm) => {
            out.push(1);
            out.extend_from_slice(&encode_watermark(wm));
        }
    }
    match &effect.coverage {
        CoverageChange::Keep => out.push(0),
        CoverageChange::Drop => out.push(1),
        CoverageChange::Raise(coverage) => {
            out.push(2);
            push_bytes(out, &encode_coverage(coverage));
        }
    }
    match &effect.session {
        SessionChange::Keep => out.push(0),
        SessionChange::Set(record) => {
            out.push(1);
            push_bytes(out, &encode_session(record));
        }
        SessionChange::Clear => out.push(2),
    }
}

/// Reads an effect written by [`encode_effect`]. Every field is checked (ids valid, payloads
/// JSON, records as they are checked when stored); the applying side checks the rest (an event
/// of another execution, a sequence of 0) as it does for any effect.
pub(crate) fn decode_effect(r: &mut Reader<'_>) -> Result<Effect, StorageError> {
    let exec = execution_id(r.id()?)?;
    let head_check = match r.tag(3, "head check")? {
        0 => HeadCheck::Any,
        1 => HeadCheck::Expect(None),
        _ => HeadCheck::Expect(Some(Head {
            exec_seq: r.u64()?,
            event_id: event_id(r.id()?)?,
        })),
    };
    let count = r.u32()? as usize;
    // Each event takes at least 23 bytes, so a count the rest cannot hold is refused before
    // anything is allocated for it.
    if count > r.bytes.len() / 23 {
        return Err(corrupted("effect declares more events than it holds"));
    }
    let mut events = Vec::with_capacity(count);
    for _ in 0..count {
        let execution = execution_id(r.id()?)?;
        let exec_seq = r.u64()?;
        let id = event_id(r.id()?)?;
        let prev = r.opt_id()?.map(event_id).transpose()?;
        let parent = r.opt_id()?.map(execution_id).transpose()?;
        let commit_index = r.u64()?;
        let payload: Value = serde_json::from_slice(r.bytes()?)
            .map_err(|e| StorageError::Corrupted(format!("effect payload is not JSON: {e}")))?;
        events.push(ChainEvent {
            execution_id: execution,
            exec_seq,
            event_id: id,
            prev_event_id: prev,
            parent_execution_id: parent,
            payload,
            commit_index,
        });
    }
    let watermark = match r.tag(2, "watermark")? {
        0 => None,
        _ => Some(decode_watermark(r.take(16)?)?),
    };
    let coverage = match r.tag(3, "coverage")? {
        0 => CoverageChange::Keep,
        1 => CoverageChange::Drop,
        _ => CoverageChange::Raise(decode_coverage(r.bytes()?)?),
    };
    let session = match r.tag(3, "session")? {
        0 => SessionChange::Keep,
        1 => SessionChange::Set(decode_session(r.bytes()?)?),
        _ => SessionChange::Clear,
    };
    Ok(Effect {
        execution_id: exec,
        head_check,
        events,
        watermark,
        coverage,
        session,
    })
}

/// A quarantine record: JSON (rare, small, read by operators).
pub(crate) fn encode_quarantine(record: &QuarantineRecord) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(record).map_err(|e| {
        StorageError::io(
            std::io::ErrorKind::InvalidData,
            format!("cannot encode a quarantine record: {e}"),
        )
    })
}

pub(crate) fn decode_quarantine(bytes: &[u8]) -> Result<QuarantineRecord, StorageError> {
    serde_json::from_slice(bytes)
        .map_err(|e| StorageError::Corrupted(format!("a quarantine record does not decode: {e}")))
}

pub(crate) fn decode_feed_value(bytes: &[u8]) -> Result<EventId, StorageError> {
    event_id(bytes)
}

pub(crate) fn decode_feed_execution(bytes: &[u8]) -> Result<ExecutionId, StorageError> {
    execution_id(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> ChainEvent {
        ChainEvent {
            execution_id: ExecutionId::new("ex").unwrap(),
            exec_seq: 3,
            event_id: EventId::new("e3").unwrap(),
            prev_event_id: Some(EventId::new("e2").unwrap()),
            parent_execution_id: None,
            payload: json!({"k": [1, 2, "x"]}),
            commit_index: 42,
        }
    }

    #[test]
    fn an_event_round_trips() {
        let event = sample();
        let bytes = encode_event(&event, &payload_bytes(&event.payload));
        assert_eq!(decode_event(&event.execution_id, 3, &bytes).unwrap(), event);
    }

    #[test]
    fn every_truncation_of_an_event_is_corrupted_not_a_panic() {
        let event = sample();
        let bytes = encode_event(&event, &payload_bytes(&event.payload));
        for cut in 0..bytes.len() {
            let result = decode_event(&event.execution_id, 3, &bytes[..cut]);
            assert!(
                matches!(result, Err(StorageError::Corrupted(_))),
                "cut at {cut}: {result:?}"
            );
        }
    }

    #[test]
    fn flipped_bytes_never_panic() {
        let event = sample();
        let bytes = encode_event(&event, &payload_bytes(&event.payload));
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[i] ^= flip;
                let _ = decode_event(&event.execution_id, 3, &damaged);
            }
        }
    }

    #[test]
    fn small_records_reject_garbage() {
        assert!(decode_head(b"").is_err());
        assert!(
            decode_head(&[0, 0, 0, 0, 0, 0, 0, 0, b'a']).is_err(),
            "seq 0"
        );
        assert!(
            decode_head(&[0, 0, 0, 0, 0, 0, 0, 1, b'/']).is_err(),
            "bad id"
        );
        assert!(decode_watermark(&[0; 15]).is_err());
        assert!(decode_watermark(&[0; 17]).is_err());
        let backwards = encode_watermark(&Watermark {
            first_seq: 5,
            through_seq: 2,
        });
        assert!(decode_watermark(&backwards).is_err());
        assert!(decode_coverage(b"q\0\0\0\0\0\0\0\0").is_err());
        assert!(decode_seq(&[0; 8]).is_err());
        assert!(decode_format(&[1, 2, 3]).is_err());
    }

    #[test]
    fn a_session_record_round_trips_and_every_cut_is_corrupted() {
        let record = SessionRecord {
            id: SessionId::new("s-1").unwrap(),
            total: 9,
            next_position: 4,
            root: EventId::new("e1").unwrap(),
            tail: EventId::new("e4").unwrap(),
        };
        let bytes = encode_session(&record);
        assert_eq!(decode_session(&bytes).unwrap(), record);
        for cut in 0..bytes.len() {
            assert!(decode_session(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_session(&longer).is_err());
        for next_position in [0, 10] {
            let bad = encode_session(&SessionRecord {
                next_position,
                ..record.clone()
            });
            assert!(decode_session(&bad).is_err(), "next {next_position}");
        }
    }
}
