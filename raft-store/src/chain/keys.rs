//! The physical key layout of the chain store.
//!
//! ```text
//! m/format                             -> format version, u32 big-endian
//! c<exec>/h                            -> head: exec_seq u64 BE ++ event_id
//! c<exec>/s<exec_seq u64 BE>           -> the event (see `codec`)
//! c<exec>/v                            -> coverage: origin u8 ++ total u64 BE ++ root id ("" = none)
//! c<exec>/w                            -> watermark: first_seq u64 BE ++ through_seq u64 BE
//! i<exec>/<event_id>                   -> exec_seq u64 BE (the id index)
//! p<exec>                              -> the execution's populate session (see `codec`)
//! k<exec>/<number u64 BE>              -> a quarantine record (JSON `QuarantineRecord`)
//! q<exec>/<number u64 BE><exec_seq u64 BE> -> an event of that record, as it was stored
//! x<commit_index u64 BE><exec>/<exec_seq u64 BE> -> event_id (the change feed)
//! ```
//!
//! Every record of one execution except its id index shares the prefix `c<exec>/`, so one range
//! scan reads the whole partition from one point-in-time view, and its events sort by sequence
//! because the sequence is big-endian. `/` cannot occur inside an id (see `ids`), so the prefix
//! of one execution is never a prefix of another's. The id index lives outside the partition
//! prefix so that a chain read never scans it. Other namespaces (the Raft log and state-machine
//! metadata) use other first bytes and never collide with these.

use crate::engine::prefix_end;
use chainstore_model::{EventId, ExecutionId};

/// The store-wide format record.
pub(crate) const FORMAT: &[u8] = b"m/format";

const PARTITION: u8 = b'c';
const ID_INDEX: u8 = b'i';
const FEED: u8 = b'x';
const SESSION: u8 = b'p';
const QUARANTINE_RECORD: u8 = b'k';
const QUARANTINE_EVENT: u8 = b'q';

const HEAD: u8 = b'h';
const EVENT: u8 = b's';
const COVERAGE: u8 = b'v';
const WATERMARK: u8 = b'w';

/// `c<exec>/`: the prefix of every record of one execution but its id index.
pub(crate) fn partition(exec: &ExecutionId) -> Vec<u8> {
    let mut key = Vec::with_capacity(exec.as_bytes().len() + 12);
    key.push(PARTITION);
    key.extend_from_slice(exec.as_bytes());
    key.push(b'/');
    key
}

/// The half-open range of the whole partition.
pub(crate) fn partition_range(exec: &ExecutionId) -> (Vec<u8>, Vec<u8>) {
    let start = partition(exec);
    // The prefix ends in '/', which is below 0xff, so an end always exists.
    let end = prefix_end(&start).unwrap_or_default();
    (start, end)
}

fn record(exec: &ExecutionId, tag: u8) -> Vec<u8> {
    let mut key = partition(exec);
    key.push(tag);
    key
}

pub(crate) fn head(exec: &ExecutionId) -> Vec<u8> {
    record(exec, HEAD)
}

pub(crate) fn coverage(exec: &ExecutionId) -> Vec<u8> {
    record(exec, COVERAGE)
}

pub(crate) fn watermark(exec: &ExecutionId) -> Vec<u8> {
    record(exec, WATERMARK)
}

pub(crate) fn event(exec: &ExecutionId, exec_seq: u64) -> Vec<u8> {
    let mut key = record(exec, EVENT);
    key.extend_from_slice(&exec_seq.to_be_bytes());
    key
}

/// The half-open range of an execution's events, in sequence order.
pub(crate) fn event_range(exec: &ExecutionId) -> (Vec<u8>, Vec<u8>) {
    (record(exec, EVENT), record(exec, EVENT + 1))
}

pub(crate) fn id_index(exec: &ExecutionId, event_id: &EventId) -> Vec<u8> {
    let mut key = Vec::with_capacity(exec.as_bytes().len() + event_id.as_bytes().len() + 2);
    key.push(ID_INDEX);
    key.extend_from_slice(exec.as_bytes());
    key.push(b'/');
    key.extend_from_slice(event_id.as_bytes());
    key
}

/// `p<exec>`: the execution's populate session. It lives outside the partition prefix: it says
/// how far a session has checked the log, never what the chain is, and no read looks at it.
pub(crate) fn session(exec: &ExecutionId) -> Vec<u8> {
    let mut key = Vec::with_capacity(exec.as_bytes().len() + 1);
    key.push(SESSION);
    key.extend_from_slice(exec.as_bytes());
    key
}

/// The half-open range of an execution's id index.
pub(crate) fn id_index_range(exec: &ExecutionId) -> (Vec<u8>, Vec<u8>) {
    prefixed_range(ID_INDEX, exec)
}

/// `<tag><exec>/` and the end of everything under it.
fn prefixed_range(tag: u8, exec: &ExecutionId) -> (Vec<u8>, Vec<u8>) {
    let mut start = Vec::with_capacity(exec.as_bytes().len() + 2);
    start.push(tag);
    start.extend_from_slice(exec.as_bytes());
    start.push(b'/');
    // The prefix ends in '/', which is below 0xff, so an end always exists.
    let end = prefix_end(&start).unwrap_or_default();
    (start, end)
}

/// The half-open range of an execution's quarantine records, in number order.
pub(crate) fn quarantine_records(exec: &ExecutionId) -> (Vec<u8>, Vec<u8>) {
    prefixed_range(QUARANTINE_RECORD, exec)
}

/// `k<exec>/<number>`: one quarantine record.
pub(crate) fn quarantine_record(exec: &ExecutionId, number: u64) -> Vec<u8> {
    let mut key = quarantine_records(exec).0;
    key.extend_from_slice(&number.to_be_bytes());
    key
}

/// The number a key of [`quarantine_records`] names.
pub(crate) fn parse_quarantine_record(exec: &ExecutionId, key: &[u8]) -> Option<u64> {
    let rest = key.get(exec.as_bytes().len() + 2..)?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

/// `q<exec>/<number><exec_seq>`: an event of one quarantine record.
pub(crate) fn quarantined_event(exec: &ExecutionId, number: u64, exec_seq: u64) -> Vec<u8> {
    let mut key = prefixed_range(QUARANTINE_EVENT, exec).0;
    key.extend_from_slice(&number.to_be_bytes());
    key.extend_from_slice(&exec_seq.to_be_bytes());
    key
}

/// The half-open range of the events of quarantine record `number`, from `from_seq`.
pub(crate) fn quarantined_events(
    exec: &ExecutionId,
    number: u64,
    from_seq: u64,
) -> (Vec<u8>, Vec<u8>) {
    let start = quarantined_event(exec, number, from_seq);
    let mut end = prefixed_range(QUARANTINE_EVENT, exec).0;
    end.extend_from_slice(&number.to_be_bytes());
    let end = prefix_end(&end).unwrap_or_else(|| prefixed_range(QUARANTINE_EVENT, exec).1);
    (start, end)
}

/// The sequence a key of [`quarantined_events`] names.
pub(crate) fn parse_quarantined_event(key: &[u8]) -> Option<u64> {
    let seq = key.get(key.len().checked_sub(8)?..)?;
    Some(u64::from_be_bytes(seq.try_into().ok()?))
}

pub(crate) fn feed(commit_index: u64, exec: &ExecutionId, exec_seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(exec.as_bytes().len() + 18);
    key.push(FEED);
    key.extend_from_slice(&commit_index.to_be_bytes());
    key.extend_from_slice(exec.as_bytes());
    key.push(b'/');
    key.extend_from_slice(&exec_seq.to_be_bytes());
    key
}

/// The feed range of entries with a commit index greater than `after`.
pub(crate) fn feed_after(after: u64) -> (Vec<u8>, Vec<u8>) {
    let start = match after.checked_add(1) {
        Some(first) => {
            let mut key = vec![FEED];
            key.extend_from_slice(&first.to_be_bytes());
            key
        }
        // Nothing can follow u64::MAX: an empty range.
        None => vec![FEED + 1],
    };
    (start, vec![FEED + 1])
}

/// What a key inside a partition names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PartitionKey {
    Head,
    Event(u64),
    Coverage,
    Watermark,
}

/// Classifies a key returned by a partition scan. `None` for a key this layout never writes.
pub(crate) fn parse_partition_key(prefix_len: usize, key: &[u8]) -> Option<PartitionKey> {
    let rest = key.get(prefix_len..)?;
    match rest {
        [HEAD] => Some(PartitionKey::Head),
        [COVERAGE] => Some(PartitionKey::Coverage),
        [WATERMARK] => Some(PartitionKey::Watermark),
        [EVENT, seq @ ..] => Some(PartitionKey::Event(u64::from_be_bytes(
            seq.try_into().ok()?,
        ))),
        _ => None,
    }
}

/// Splits a feed key into (commit_index, execution id bytes, exec_seq).
pub(crate) fn parse_feed_key(key: &[u8]) -> Option<(u64, &[u8], u64)> {
    let body = key.strip_prefix(&[FEED])?;
    if body.len() < 8 + 1 + 1 + 8 {
        return None;
    }
    let (ci, rest) = body.split_at(8);
    let (exec_slash, seq) = rest.split_at(rest.len() - 8);
    let exec = exec_slash.strip_suffix(b"/")?;
    Some((
        u64::from_be_bytes(ci.try_into().ok()?),
        exec,
        u64::from_be_bytes(seq.try_into().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(s: &str) -> ExecutionId {
        ExecutionId::new(s).unwrap()
    }

    #[test]
    fn one_partition_is_never_a_prefix_of_another() {
        let (start, end) = partition_range(&exec("a"));
        for other in ["ab", "a.b", "a-", "a:b", "A"] {
            let key = head(&exec(other));
            assert!(
                !(key >= start && key < end),
                "{other} falls inside a's partition"
            );
        }
        assert!(head(&exec("a")) >= start && head(&exec("a")) < end);
        assert!(!(session(&exec("a")) >= start && session(&exec("a")) < end));
    }

    #[test]
    fn quarantine_keys_stay_inside_their_execution_and_record() {
        let a = exec("a");
        let (start, end) = quarantine_records(&a);
        let keys: Vec<_> = [1u64, 2, 256, u64::MAX]
            .iter()
            .map(|n| quarantine_record(&a, *n))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert!(keys.iter().all(|k| *k >= start && *k < end));
        assert_eq!(parse_quarantine_record(&a, &keys[2]), Some(256));
        assert!(quarantine_record(&exec("ab"), 1) >= end);
        let (start, end) = quarantined_events(&a, 2, 1);
        for (n, seq, inside) in [
            (2, 1, true),
            (2, u64::MAX, true),
            (1, 9, false),
            (3, 1, false),
        ] {
            let key = quarantined_event(&a, n, seq);
            assert_eq!(key >= start && key < end, inside, "record {n} seq {seq}");
        }
        assert_eq!(
            parse_quarantined_event(&quarantined_event(&a, 2, 77)),
            Some(77)
        );
        let (start, end) = id_index_range(&a);
        assert!(id_index(&a, &EventId::new("e").unwrap()) >= start);
        assert!(id_index(&a, &EventId::new("e").unwrap()) < end);
        assert!(id_index(&exec("ab"), &EventId::new("e").unwrap()) >= end);
    }

    #[test]
    fn events_sort_by_sequence_and_stay_inside_their_range() {
        let e = exec("x");
        let (start, end) = event_range(&e);
        let keys: Vec<_> = [1u64, 2, 255, 256, u64::MAX]
            .iter()
            .map(|s| event(&e, *s))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert!(keys.iter().all(|k| *k >= start && *k < end));
        assert!(head(&e) < start && coverage(&e) >= end && watermark(&e) >= end);
    }

    #[test]
    fn partition_keys_round_trip() {
        let e = exec("x");
        let n = partition(&e).len();
        assert_eq!(parse_partition_key(n, &head(&e)), Some(PartitionKey::Head));
        assert_eq!(
            parse_partition_key(n, &event(&e, 7)),
            Some(PartitionKey::Event(7))
        );
        assert_eq!(
            parse_partition_key(n, &coverage(&e)),
            Some(PartitionKey::Coverage)
        );
        assert_eq!(
            parse_partition_key(n, &watermark(&e)),
            Some(PartitionKey::Watermark)
        );
        assert_eq!(parse_partition_key(n, b"cx/s\x01"), None);
        assert_eq!(parse_partition_key(n, b"cx/q"), None);
    }

    #[test]
    fn feed_keys_round_trip_and_order_by_commit_index() {
        let k1 = feed(9, &exec("zz"), 3);
        let k2 = feed(10, &exec("a"), 1);
        assert!(k1 < k2);
        assert_eq!(parse_feed_key(&k1), Some((9, &b"zz"[..], 3)));
        // A key too short to hold an index, a non-empty id, its separator and a seq is not a
        // feed key (here: an empty id).
        let mut no_id = vec![FEED];
        no_id.extend_from_slice(&9u64.to_be_bytes());
        no_id.push(b'/');
        no_id.extend_from_slice(&3u64.to_be_bytes());
        assert_eq!(parse_feed_key(&no_id), None);
        assert_eq!(parse_feed_key(&no_id[..no_id.len() - 1]), None);
        let (start, end) = feed_after(9);
        assert!(k1 < start && k2 >= start && k2 < end);
        let (start, end) = feed_after(u64::MAX);
        assert!(start >= end);
    }
}
