//! The checker's verdicts against stateright's `LinearizabilityTester` (a published model
//! checker's, without memo: fine at these sizes) on thousands of random histories of a few
//! clients, about half of them made illegal on purpose by a corrupted answer. Both must agree on
//! every one; the hand-written cases then pin down the semantics the random ones rely on.

use chainstore_check::{check, Answer, Chain, Entry, History, Op, Verdict};
use proptest::prelude::*;
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

/// Our model, as a stateright reference object.
#[derive(Clone, Debug, Default, PartialEq)]
struct Spec(Chain);

impl SequentialSpec for Spec {
    type Op = Op;
    type Ret = Answer;

    /// Only in-flight (never answered) operations are invoked: they apply when they can.
    fn invoke(&mut self, op: &Op) -> Answer {
        if let Some(next) = self.0.step(op, &Answer::Unknown) {
            self.0 = next;
        }
        Answer::Unknown
    }

    fn is_valid_step(&mut self, op: &Op, ret: &Answer) -> bool {
        match self.0.step(op, ret) {
            Some(next) => {
                self.0 = next;
                true
            }
            None => false,
        }
    }
}

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone)]
struct Pending {
    op: Op,
    call: u64,
    answer: Option<Answer>,
}

/// A random history of a system that is linearizable, except that with probability
/// `corrupt_percent` one answer is falsified. Events happen one a time unit: a call, the
/// operation taking effect (its linearization point), or the answer arriving (or being lost).
/// A call or a return as stateright is told it: (time, is it the call, process, op, answer).
type Event = (u64, bool, u64, Op, Answer);

fn random_history(seed: u64, corrupt_percent: u64) -> (History, Vec<Event>) {
    let mut rng = Rng(seed | 1);
    let processes = 1 + rng.below(4);
    let ops_per_process = 1 + rng.below(8);
    let mut truth = Chain::default();
    let mut pending: Vec<Option<Pending>> = vec![None; processes as usize];
    let mut issued = vec![0u64; processes as usize];
    let mut retired = vec![false; processes as usize];
    let mut history = History::default();
    // (time, is_call, process, op, answer) in time order, for stateright.
    let mut log = Vec::new();
    let mut corrupted = false;
    let mut time = 0u64;
    let events = ["a", "b", "c", "d"];
    loop {
        let live: Vec<usize> = (0..processes as usize)
            .filter(|p| !retired[*p] && (pending[*p].is_some() || issued[*p] < ops_per_process))
            .collect();
        if live.is_empty() {
            break;
        }
        let p = live[rng.below(live.len() as u64) as usize];
        time += 1;
        match pending[p].take() {
            None => {
                let op = if rng.below(3) == 0 {
                    Op::Read
                } else {
                    let event = events[rng.below(4) as usize].to_string();
                    let ids = truth.event_ids();
                    let prev = match rng.below(3) {
                        0 => None,
                        1 => ids.last().map(|s| s.to_string()),
                        _ => Some(events[rng.below(4) as usize].to_string()),
                    };
                    Op::Append {
                        event,
                        prev,
                        content: 1 + rng.below(5) / 4,
                    }
                };
                issued[p] += 1;
                log.push((time, true, p as u64, op.clone(), Answer::Unknown));
                pending[p] = Some(Pending {
                    op,
                    call: time,
                    answer: None,
                });
            }
            Some(now) if now.answer.is_none() && rng.below(12) == 0 => {
                // Lost before it took effect: it never happens, and the process stops.
                retired[p] = true;
                history.push(Entry {
                    process: p as u64,
                    execution: "x".into(),
                    call: now.call,
                    ret: time,
                    op: now.op,
                    answer: Answer::Unknown,
                });
            }
            Some(mut now) if now.answer.is_none() => {
                // The operation takes effect: its true answer is fixed now.
                let answer = true_answer(&truth, &now.op);
                truth = truth
                    .step(&now.op, &answer)
                    .expect("the true answer is valid");
                now.answer = Some(answer);
                pending[p] = Some(now);
            }
            Some(now) => {
                let mut answer = now.answer.unwrap_or(Answer::Unknown);
                if rng.below(8) == 0 {
                    // Lost: the process never hears back and stops.
                    retired[p] = true;
                    history.push(Entry {
                        process: p as u64,
                        execution: "x".into(),
                        call: now.call,
                        ret: time,
                        op: now.op.clone(),
                        answer: Answer::Unknown,
                    });
                    continue;
                }
                if !corrupted && rng.below(100) < corrupt_percent {
                    corrupted = true;
                    answer = corrupt(answer, &mut rng);
                }
                log.push((time, false, p as u64, now.op.clone(), answer.clone()));
                history.push(Entry {
                    process: p as u64,
                    execution: "x".into(),
                    call: now.call,
                    ret: time,
                    op: now.op,
                    answer,
                });
            }
        }
    }
    (history, log)
}

fn true_answer(chain: &Chain, op: &Op) -> Answer {
    let candidates = [
        Answer::Chain {
            events: chain.event_ids().into_iter().map(str::to_string).collect(),
        },
        Answer::Appended {
            seq: chain.event_ids().len() as u64 + 1,
            duplicate: false,
        },
        Answer::NotHead {
            expected: chain.event_ids().last().map(|s| s.to_string()),
        },
        Answer::EventConflict,
    ];
    if let Some(found) = candidates.into_iter().find(|a| chain.step(op, a).is_some()) {
        return found;
    }
    // A duplicate: its seq is where the event is.
    let Op::Append { event, .. } = op else {
        unreachable!("a read always has a true answer")
    };
    let at = chain
        .event_ids()
        .iter()
        .position(|id| id == event)
        .expect("a stored event");
    Answer::Appended {
        seq: at as u64 + 1,
        duplicate: true,
    }
}

fn corrupt(answer: Answer, rng: &mut Rng) -> Answer {
    match answer {
        Answer::Appended { seq, duplicate } => Answer::Appended {
            seq: seq + 1 + rng.below(2),
            duplicate,
        },
        Answer::NotHead { expected } => Answer::NotHead {
            expected: match expected {
                Some(_) => None,
                None => Some("a".into()),
            },
        },
        Answer::Chain { mut events } => {
            if events.pop().is_none() {
                events.push("d".into());
            }
            Answer::Chain { events }
        }
        other => other,
    }
}

fn stateright_verdict(log: &[Event]) -> bool {
    let mut tester = LinearizabilityTester::new(Spec::default());
    for (_, is_call, process, op, answer) in log {
        let result = if *is_call {
            tester.on_invoke(*process, op.clone()).map(|_| ())
        } else {
            tester.on_return(*process, answer.clone()).map(|_| ())
        };
        result.expect("a well-formed history");
    }
    tester.is_consistent()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn the_checker_agrees_with_stateright(seed in any::<u64>(), corrupt in prop::sample::select(vec![0u64, 50])) {
        let (history, log) = random_history(seed, corrupt);
        let ours = check(&history).is_linearizable();
        let theirs = stateright_verdict(&log);
        prop_assert_eq!(ours, theirs, "{}", history.to_json_lines());
        if corrupt == 0 {
            prop_assert!(ours, "an uncorrupted history is linearizable: {}", history.to_json_lines());
        }
    }
}

fn append(
    process: u64,
    call: u64,
    ret: u64,
    event: &str,
    prev: Option<&str>,
    answer: Answer,
) -> Entry {
    Entry {
        process,
        execution: "x".into(),
        call,
        ret,
        op: Op::Append {
            event: event.into(),
            prev: prev.map(Into::into),
            content: 1,
        },
        answer,
    }
}

fn read(process: u64, call: u64, ret: u64, events: &[&str]) -> Entry {
    Entry {
        process,
        execution: "x".into(),
        call,
        ret,
        op: Op::Read,
        answer: Answer::Chain {
            events: events.iter().map(|s| s.to_string()).collect(),
        },
    }
}

fn ok(seq: u64) -> Answer {
    Answer::Appended {
        seq,
        duplicate: false,
    }
}

#[test]
fn a_read_after_an_acknowledged_append_must_see_it() {
    let stale = History {
        entries: vec![append(1, 0, 10, "a", None, ok(1)), read(2, 11, 12, &[])],
    };
    let Verdict::Illegal(illegal) = check(&stale) else {
        panic!("a stale read passed");
    };
    assert_eq!(illegal.window[0].op, Op::Read, "{illegal}");
    let concurrent = History {
        entries: vec![append(1, 0, 10, "a", None, ok(1)), read(2, 5, 12, &[])],
    };
    assert!(
        check(&concurrent).is_linearizable(),
        "a concurrent read may miss it"
    );
}

#[test]
fn a_deposed_leaders_not_head_after_an_acknowledged_append_is_illegal() {
    let history = History {
        entries: vec![
            append(1, 0, 1, "a", None, ok(1)),
            append(1, 2, 3, "b", Some("a"), ok(2)),
            // A stale leader still thinks `a` is the head.
            append(
                2,
                5,
                6,
                "c",
                Some("b"),
                Answer::NotHead {
                    expected: Some("a".into()),
                },
            ),
        ],
    };
    assert!(!check(&history).is_linearizable());
}

#[test]
fn two_winners_on_one_head_are_illegal_but_a_lost_answer_may_have_won() {
    let two = History {
        entries: vec![
            append(1, 0, 10, "a", None, ok(1)),
            append(2, 0, 10, "b", None, ok(1)),
        ],
    };
    assert!(!check(&two).is_linearizable());
    let lost_then_read = History {
        entries: vec![
            append(1, 0, 10, "a", None, Answer::Unknown),
            read(2, 20, 21, &["a"]),
            append(3, 30, 31, "b", Some("a"), ok(2)),
        ],
    };
    assert!(
        check(&lost_then_read).is_linearizable(),
        "the lost append happened"
    );
    let lost_never = History {
        entries: vec![
            append(1, 0, 10, "a", None, Answer::Unknown),
            append(2, 20, 21, "b", None, ok(1)),
            read(3, 30, 31, &["b"]),
        ],
    };
    assert!(
        check(&lost_never).is_linearizable(),
        "the lost append did not happen"
    );
}

#[test]
fn a_retry_of_a_lost_append_answers_duplicate_with_the_original_seq() {
    let history = History {
        entries: vec![
            append(1, 0, 10, "a", None, Answer::Unknown),
            append(
                2,
                11,
                12,
                "a",
                None,
                Answer::Appended {
                    seq: 1,
                    duplicate: true,
                },
            ),
        ],
    };
    assert!(check(&history).is_linearizable());
    let wrong_seq = History {
        entries: vec![
            append(1, 0, 10, "a", None, Answer::Unknown),
            append(
                2,
                11,
                12,
                "a",
                None,
                Answer::Appended {
                    seq: 2,
                    duplicate: true,
                },
            ),
        ],
    };
    assert!(!check(&wrong_seq).is_linearizable());
}

#[test]
fn histories_round_trip_through_json_lines() {
    let (history, _) = random_history(42, 50);
    let text = history.to_json_lines();
    assert_eq!(History::from_json_lines(&text).unwrap(), history);
    assert!(History::from_json_lines("{\"process\": 1}").is_err());
}

#[test]
fn a_long_history_of_racing_clients_is_checked_quickly() {
    // 8 clients racing on one head for 400 rounds, with reads: every round one winner, the
    // rest not_head; the memo keeps this linear.
    let mut entries = Vec::new();
    let mut head: Option<String> = None;
    let mut chain: Vec<String> = Vec::new();
    for round in 0..400u64 {
        let t = round * 10;
        for p in 0..8u64 {
            let event = format!("r{round}-{p}");
            let answer = if p == round % 8 {
                ok(chain.len() as u64 + 1)
            } else {
                Answer::NotHead {
                    expected: Some(format!("r{round}-{}", round % 8)),
                }
            };
            entries.push(append(p, t, t + 5, &event, head.as_deref(), answer));
        }
        let winner = format!("r{round}-{}", round % 8);
        chain.push(winner.clone());
        head = Some(winner);
        let ids: Vec<&str> = chain.iter().map(String::as_str).collect();
        entries.push(read(8, t + 6, t + 7, &ids));
    }
    let started = std::time::Instant::now();
    let verdict = check(&History { entries });
    assert!(verdict.is_linearizable(), "{verdict:?}");
    assert!(
        started.elapsed().as_secs() < 5,
        "took {:?}",
        started.elapsed()
    );
}
