//! [`Chain`]: the sequential model of one execution's chain, as SPEC §4.1 and §6 define it for
//! appends and guarded reads.

use crate::{Answer, Op};

/// One execution's chain: its events in seq order, each with the content it was stored with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Chain {
    events: Vec<(String, u64)>,
}

impl Chain {
    /// The event ids in seq order.
    pub fn event_ids(&self) -> Vec<&str> {
        self.events.iter().map(|(id, _)| id.as_str()).collect()
    }

    fn head(&self) -> Option<&str> {
        self.events.last().map(|(id, _)| id.as_str())
    }

    fn position(&self, event: &str) -> Option<usize> {
        self.events.iter().position(|(id, _)| id == event)
    }

    /// The state after `op` answered `answer`, or `None` when no state can give that answer.
    ///
    /// An [`Answer::Unknown`] append is taken as applied whenever it could be: placed where it
    /// could not apply, it changes nothing, and since it never returns the search may always
    /// place it after everything it would disturb.
    pub fn step(&self, op: &Op, answer: &Answer) -> Option<Chain> {
        match op {
            Op::Read => match answer {
                Answer::Chain { events } => (events.len() == self.events.len()
                    && events.iter().zip(&self.events).all(|(a, (b, _))| a == b))
                .then(|| self.clone()),
                Answer::CannotAnswer | Answer::Unknown => Some(self.clone()),
                _ => None,
            },
            Op::Append {
                event,
                prev,
                content,
            } => {
                if let Some(at) = self.position(event) {
                    // Idempotency comes first: a stored id answers from what is stored.
                    let same = self.events[at].1 == *content;
                    let seq = at as u64 + 1;
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
                    let mut next = self.clone();
                    next.events.push((event.clone(), *content));
                    let valid = match answer {
                        Answer::Appended {
                            seq,
                            duplicate: false,
                        } => *seq == next.events.len() as u64,
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
