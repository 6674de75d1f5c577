//! [`Chain`]: the sequential model of one execution's chain, as SPEC §4.1 and §6 define it for
//! appends and guarded reads.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use crate::{Answer, Op};

/// One execution's chain: its events in seq order, each with the content it was stored with.
///
/// Persistent: the search clones a state at every step and keeps thousands of them, so a chain
/// shares its prefix with the chain it grew from (a clone is a reference count), and carries a
/// fingerprint of its whole content, updated as it grows (a memo key costs nothing to hash).
#[derive(Clone, Default)]
pub struct Chain {
    tip: Option<Arc<Link>>,
    len: usize,
    fingerprint: u64,
}

struct Link {
    event: String,
    content: u64,
    prev: Option<Arc<Link>>,
}

impl Chain {
    /// The event ids in seq order.
    pub fn event_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.links().map(|l| l.event.as_str()).collect();
        ids.reverse();
        ids
    }

    /// Events stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the chain holds no event.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A hash of every event and content in order (SipHash with fixed keys, chained).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The links from the head back to the first event.
    fn links(&self) -> impl Iterator<Item = &Link> {
        std::iter::successors(self.tip.as_deref(), |l| l.prev.as_deref())
    }

    fn head(&self) -> Option<&str> {
        self.tip.as_ref().map(|l| l.event.as_str())
    }

    /// The seq of `event` and the content stored with it.
    fn find(&self, event: &str) -> Option<(u64, u64)> {
        self.links()
            .zip((1..=self.len as u64).rev())
            .find(|(l, _)| l.event == event)
            .map(|(l, seq)| (seq, l.content))
    }

    fn push(&self, event: &str, content: u64) -> Chain {
        let mut hasher = DefaultHasher::new();
        (self.fingerprint, event, content).hash(&mut hasher);
        Chain {
            tip: Some(Arc::new(Link {
                event: event.to_string(),
                content,
                prev: self.tip.clone(),
            })),
            len: self.len + 1,
            fingerprint: hasher.finish(),
        }
    }

    /// Whether `events` are exactly this chain's ids, in order.
    fn reads_as(&self, events: &[String]) -> bool {
        events.len() == self.len
            && self
                .links()
                .zip(events.iter().rev())
                .all(|(l, id)| l.event == *id)
    }

    /// The state after `op` answered `answer`, or `None` when no state can give that answer.
    ///
    /// An [`Answer::Unknown`] append is taken as applied whenever it could be: placed where it
    /// could not apply, it changes nothing, and since it never returns the search may always
    /// place it after everything it would disturb.
    pub fn step(&self, op: &Op, answer: &Answer) -> Option<Chain> {
        match op {
            Op::Read => match answer {
                Answer::Chain { events } => self.reads_as(events).then(|| self.clone()),
                Answer::CannotAnswer | Answer::Unknown => Some(self.clone()),
                _ => None,
            },
            Op::Append {
                event,
                prev,
                content,
            } => {
                if let Some((seq, stored)) = self.find(event) {
                    // Idempotency comes first: a stored id answers from what is stored.
                    let same = stored == *content;
                    let valid = match answer {
                        Answer::Appended {
                            seq: s,
                            duplicate: true,
                        } => same && *s == seq,
                        Answer::EventConflict => !same,
                        Answer::Unknown => true,
                        _ => false,
                    };
                    return valid.then(|| self.clone());
                }
                if prev.as_deref() == self.head() {
                    let next = self.push(event, *content);
                    let valid = match answer {
                        Answer::Appended {
                            seq,
                            duplicate: false,
                        } => *seq == next.len as u64,
                        Answer::Unknown => true,
                        _ => false,
                    };
                    return valid.then_some(next);
                }
                match answer {
                    Answer::NotHead { expected } => {
                        (expected.as_deref() == self.head()).then(|| self.clone())
                    }
                    Answer::Unknown => Some(self.clone()),
                    _ => None,
                }
            }
        }
    }
}

impl PartialEq for Chain {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self.fingerprint == other.fingerprint
            && self
                .links()
                .zip(other.links())
                .all(|(a, b)| a.event == b.event && a.content == b.content)
    }
}

impl Eq for Chain {}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.event_ids()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(event: &str, prev: Option<&str>) -> Op {
        Op::Append {
            event: event.into(),
            prev: prev.map(Into::into),
            content: 1,
        }
    }

    #[test]
    fn the_model_follows_the_rules_of_append_and_read() {
        let empty = Chain::default();
        let ok = |seq| Answer::Appended {
            seq,
            duplicate: false,
        };
        let one = empty.step(&append("a", None), &ok(1)).unwrap();
        assert_eq!(one.event_ids(), ["a"]);
        assert!(
            empty.step(&append("a", None), &ok(2)).is_none(),
            "wrong seq"
        );
        assert!(
            one.step(&append("b", None), &ok(2)).is_none(),
            "not the head"
        );
        let not_head = Answer::NotHead {
            expected: Some("a".into()),
        };
        assert_eq!(one.step(&append("b", None), &not_head), Some(one.clone()));
        let wrong_head = Answer::NotHead { expected: None };
        assert!(one.step(&append("b", None), &wrong_head).is_none());
        let duplicate = Answer::Appended {
            seq: 1,
            duplicate: true,
        };
        assert_eq!(one.step(&append("a", None), &duplicate), Some(one.clone()));
        assert_eq!(
            one.step(&append("a", Some("zzz")), &duplicate),
            Some(one.clone()),
            "idempotency comes before the head check"
        );
        let other = Op::Append {
            event: "a".into(),
            prev: None,
            content: 2,
        };
        assert_eq!(one.step(&other, &Answer::EventConflict), Some(one.clone()));
        assert!(one.step(&other, &duplicate).is_none());
        let two = one.step(&append("b", Some("a")), &Answer::Unknown).unwrap();
        assert_eq!(
            two.event_ids(),
            ["a", "b"],
            "an unknown append applies when it can"
        );
        assert_eq!(
            two.step(&append("c", Some("a")), &Answer::Unknown),
            Some(two.clone()),
            "and changes nothing where it cannot"
        );
        let read = |ids: &[&str]| Answer::Chain {
            events: ids.iter().map(|s| s.to_string()).collect(),
        };
        assert!(two.step(&Op::Read, &read(&["a", "b"])).is_some());
        assert!(two.step(&Op::Read, &read(&["a"])).is_none(), "a short read");
        assert!(two.step(&Op::Read, &Answer::CannotAnswer).is_some());
    }
}
