//! Ordering a log by its links.
//!
//! A log's order is what its `prev_event_id` links say, never what sorting ids says: ids are
//! minted before they are committed, so an event committed later can carry a lower id. The
//! checks run in a fixed order so that a log with several defects always gets the same reason:
//! `multiple_roots`, `dangling_prev`, `no_root`, `fork`, `unreachable`.

use std::collections::BTreeMap;

use crate::ids::EventId;
use crate::types::{LogEvent, Refusal};

/// Orders `events` into one chain from its root, or says why they are not one chain. The caller
/// has already rejected duplicate ids and empty logs.
pub fn order_by_links(events: &[LogEvent]) -> Result<Vec<&LogEvent>, Refusal> {
    order_segment(events, None)
}

/// Orders one part of a log sent in parts: `events` continue the chain after `anchor`, the last
/// event of the parts before (`None` for the first part, which is [`order_by_links`]). The part's
/// root is the event whose `prev_event_id` is the anchor; in a later part an event with no prev
/// is a second root, and one whose prev lies in an earlier part rather than at the anchor is
/// dangling here (a session sends its log in link order). The caller has already rejected
/// duplicate ids, ids equal to the anchor, and empty parts.
pub fn order_segment<'a>(
    events: &'a [LogEvent],
    anchor: Option<&EventId>,
) -> Result<Vec<&'a LogEvent>, Refusal> {
    let by_id: BTreeMap<&EventId, &LogEvent> = events.iter().map(|e| (&e.event_id, e)).collect();
    debug_assert_eq!(
        by_id.len(),
        events.len(),
        "duplicate ids are rejected before ordering"
    );

    let second_root = match anchor {
        None => events.iter().filter(|e| e.prev_event_id.is_none()).nth(1),
        Some(_) => events.iter().find(|e| e.prev_event_id.is_none()),
    };
    if second_root.is_some() {
        return Err(Refusal::MultipleRoots);
    }
    let dangling = events
        .iter()
        .filter_map(|e| e.prev_event_id.as_ref())
        .any(|prev| !by_id.contains_key(prev) && Some(prev) != anchor);
    if dangling {
        return Err(Refusal::DanglingPrev);
    }
    let Some(root) = events.iter().find(|e| e.prev_event_id.as_ref() == anchor) else {
        return Err(Refusal::NoRoot);
    };
    let mut successor: BTreeMap<&EventId, &LogEvent> = BTreeMap::new();
    for event in events {
        if let Some(prev) = &event.prev_event_id {
            if successor.insert(prev, event).is_some() {
                return Err(Refusal::Fork);
            }
        }
    }
    let mut ordered = Vec::with_capacity(events.len());
    let mut cursor = Some(root);
    while let Some(event) = cursor {
        ordered.push(event);
        // With one successor per event and a single root, the walk cannot revisit an event: a
        // cycle through the root would need the root to have a predecessor. The bound is a belt
        // for the brace.
        if ordered.len() > events.len() {
            return Err(Refusal::Unreachable);
        }
        cursor = successor.get(&event.event_id).copied();
    }
    if ordered.len() < events.len() {
        return Err(Refusal::Unreachable);
    }
    Ok(ordered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn ev(id: &str, prev: Option<&str>) -> LogEvent {
        LogEvent {
            event_id: EventId::new(id).unwrap(),
            prev_event_id: prev.map(|p| EventId::new(p).unwrap()),
            parent_execution_id: None,
            payload: Value::Null,
        }
    }

    fn ids(events: &[&LogEvent]) -> Vec<String> {
        events.iter().map(|e| e.event_id.to_string()).collect()
    }

    #[test]
    fn order_follows_links_not_ids() {
        // "a0" sorts first by id but is committed last.
        let log = [ev("z9", None), ev("a0", Some("m5")), ev("m5", Some("z9"))];
        assert_eq!(ids(&order_by_links(&log).unwrap()), ["z9", "m5", "a0"]);
    }

    #[test]
    fn each_malformed_shape_gets_its_reason() {
        let cases = [
            (vec![ev("a", None), ev("b", None)], Refusal::MultipleRoots),
            (
                vec![ev("a", None), ev("b", Some("x"))],
                Refusal::DanglingPrev,
            ),
            (
                vec![ev("a", Some("b")), ev("b", Some("a"))],
                Refusal::NoRoot,
            ),
            (
                vec![ev("a", None), ev("b", Some("a")), ev("c", Some("a"))],
                Refusal::Fork,
            ),
            (
                vec![
                    ev("a", None),
                    ev("b", Some("a")),
                    ev("c", Some("d")),
                    ev("d", Some("c")),
                ],
                Refusal::Unreachable,
            ),
            (
                vec![ev("a", None), ev("s", Some("s"))],
                Refusal::Unreachable,
            ),
        ];
        for (log, reason) in cases {
            assert_eq!(order_by_links(&log).err(), Some(reason), "{log:?}");
        }
    }

    #[test]
    fn a_log_from_mid_flight_is_dangling_before_rootless() {
        // The first event the log holds points at one it does not hold.
        let log = [ev("c", Some("b")), ev("d", Some("c"))];
        assert_eq!(order_by_links(&log).err(), Some(Refusal::DanglingPrev));
    }

    #[test]
    fn a_later_part_continues_from_its_anchor() {
        let anchor = EventId::new("c").unwrap();
        let part = [ev("e", Some("d")), ev("d", Some("c"))];
        assert_eq!(
            ids(&order_segment(&part, Some(&anchor)).unwrap()),
            ["d", "e"]
        );
        let cases = [
            (
                vec![ev("d", Some("c")), ev("x", None)],
                Refusal::MultipleRoots,
            ),
            (
                vec![ev("d", Some("c")), ev("e", Some("b"))],
                Refusal::DanglingPrev,
            ),
            (
                vec![ev("d", Some("e")), ev("e", Some("d"))],
                Refusal::NoRoot,
            ),
            (vec![ev("d", Some("c")), ev("e", Some("c"))], Refusal::Fork),
            (
                vec![ev("d", Some("c")), ev("e", Some("f")), ev("f", Some("e"))],
                Refusal::Unreachable,
            ),
        ];
        for (part, reason) in cases {
            assert_eq!(
                order_segment(&part, Some(&anchor)).err(),
                Some(reason),
                "{part:?}"
            );
        }
    }
}
