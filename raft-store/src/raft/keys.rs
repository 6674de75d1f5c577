//! Keys of the Raft storage. The log store lives under `R/`; the state machine's own records under
//! `a/`. The state machine's whole range, which snapshots copy, is `[a, y)`: it holds `a/`, the
//! chain store's `c`, `i`, `k`, `p`, `q`, `x` namespaces and its `m/format` record, and nothing of the log.

pub(crate) const VOTE: &[u8] = b"R/vote";
pub(crate) const COMMITTED: &[u8] = b"R/committed";
pub(crate) const PURGED: &[u8] = b"R/purged";
const LOG_PREFIX: &[u8] = b"R/log/";

pub(crate) const APPLIED: &[u8] = b"a/applied";
pub(crate) const MEMBERSHIP: &[u8] = b"a/membership";

/// The state machine's key range: everything a snapshot holds.
pub(crate) const SM_START: &[u8] = b"a";
pub(crate) const SM_END: &[u8] = b"y";

pub(crate) fn log_entry(index: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(LOG_PREFIX.len() + 8);
    key.extend_from_slice(LOG_PREFIX);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// One past the largest possible log key.
pub(crate) fn log_end() -> Vec<u8> {
    let mut key = LOG_PREFIX.to_vec();
    key.extend_from_slice(&[0xff; 9]);
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::keys as chain;
    use chainstore_model::{EventId, ExecutionId};

    #[test]
    fn every_state_machine_namespace_lies_in_its_range_and_the_log_outside_it() {
        // The largest id byte is 'z'; the namespace byte comes first and decides.
        let exec = ExecutionId::new("z".repeat(128)).unwrap();
        let id = EventId::new("z".repeat(128)).unwrap();
        let inside = [
            chain::head(&exec),
            chain::event(&exec, u64::MAX),
            chain::coverage(&exec),
            chain::watermark(&exec),
            chain::id_index(&exec, &id),
            chain::feed(u64::MAX, &exec, u64::MAX),
            chain::session(&exec),
            chain::quarantine_record(&exec, u64::MAX),
            chain::quarantined_event(&exec, u64::MAX, u64::MAX),
            chain::FORMAT.to_vec(),
            APPLIED.to_vec(),
            MEMBERSHIP.to_vec(),
        ];
        for key in inside {
            assert!(
                key.as_slice() >= SM_START && key.as_slice() < SM_END,
                "{:?} is outside the state machine's range",
                String::from_utf8_lossy(&key)
            );
        }
        let outside = [
            VOTE.to_vec(),
            COMMITTED.to_vec(),
            PURGED.to_vec(),
            log_entry(0),
            log_entry(u64::MAX),
            log_end(),
        ];
        for key in outside {
            assert!(
                key.as_slice() < SM_START || key.as_slice() >= SM_END,
                "{:?} is inside the state machine's range",
                String::from_utf8_lossy(&key)
            );
        }
    }
}
