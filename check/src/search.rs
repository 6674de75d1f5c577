//! The search for a linearization of one execution's history: Wing and Gong's walk over the
//! calls and returns in time order, placing an operation when the model accepts its answer and
//! backtracking when a return is reached whose operation could not be placed, with Lowe's memo
//! of the (placed set, model state) pairs already explored.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, DefaultHasher};

use crate::model::Chain;
use crate::{Answer, Entry, History, Op};

/// Search steps one execution may take before the checker gives up and says so.
pub const STEPS_MAX: u64 = 50_000_000;

/// Operations of a window printed in a report, at most.
const WINDOW_MAX: usize = 24;

/// The outcome of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every execution's history has a linearization.
    Linearizable {
        /// Executions checked.
        executions: usize,
        /// Operations checked (reads that could not answer, and lost reads, are left out: they
        /// fit anywhere).
        operations: usize,
    },
    /// This execution's history has none.
    Illegal(Illegal),
    /// The search ran out of steps on this execution.
    Undecided {
        /// The execution.
        execution: String,
        /// Its operations.
        operations: usize,
    },
}

impl Verdict {
    /// Whether the history was found linearizable.
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable { .. })
    }
}

/// Why an execution's history is not linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Illegal {
    /// The execution.
    pub execution: String,
    /// How many operations the longest partial linearization placed, of how many.
    pub placed: usize,
    /// Operations in the history checked.
    pub operations: usize,
    /// The chain after that partial linearization.
    pub chain: Vec<String>,
    /// The earliest-called operation no order could place, first, then every operation whose
    /// interval overlaps it, by call time: the smallest window the violation lies in.
    pub window: Vec<Entry>,
}

impl fmt::Display for Illegal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "execution {}: not linearizable; the longest order places {} of {} operations, \
             leaving the chain {:?}; the operation no order can place, and those concurrent \
             with it:",
            self.execution, self.placed, self.operations, self.chain
        )?;
        for (i, e) in self.window.iter().enumerate() {
            let mark = if i == 0 { "=>" } else { "  " };
            let ret = if e.answer == Answer::Unknown {
                "never".to_string()
            } else {
                e.ret.to_string()
            };
            writeln!(
                f,
                "{mark} process {} [{} .. {ret}] {:?} -> {:?}",
                e.process, e.call, e.op, e.answer
            )?;
        }
        Ok(())
    }
}

/// Checks every execution of `history`, in name order; the first that fails is the verdict.
pub fn check(history: &History) -> Verdict {
    let mut by_execution: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for entry in &history.entries {
        by_execution
            .entry(entry.execution.as_str())
            .or_default()
            .push(entry);
    }
    let executions = by_execution.len();
    let mut operations = 0;
    for (execution, entries) in by_execution {
        match check_execution(execution, &entries) {
            Verdict::Linearizable { operations: n, .. } => operations += n,
            failed => return failed,
        }
    }
    Verdict::Linearizable {
        executions,
        operations,
    }
}

/// An operation the search places: a read that answered, or any append.
fn informative(entry: &Entry) -> bool {
    !matches!(
        (&entry.op, &entry.answer),
        (Op::Read, Answer::CannotAnswer | Answer::Unknown)
    )
}

/// Every event id the history shows to exist or to have been expected to: in a chain read, named
/// by `not_head`, answered for (ok, duplicate or a conflict with it), or sent as a `prev`.
fn observed_events<'a>(entries: &[&'a Entry]) -> HashSet<&'a str> {
    let mut seen = HashSet::new();
    for entry in entries {
        if let Op::Append { event, prev, .. } = &entry.op {
            if let Some(prev) = prev {
                seen.insert(prev.as_str());
            }
            if matches!(
                entry.answer,
                Answer::Appended { .. } | Answer::EventConflict
            ) {
                seen.insert(event.as_str());
            }
        }
        match &entry.answer {
            Answer::Chain { events } => seen.extend(events.iter().map(String::as_str)),
            Answer::NotHead {
                expected: Some(head),
            } => {
                seen.insert(head.as_str());
            }
            _ => {}
        }
    }
    seen
}

/// A lost append whose event nothing ever shows. Dropping it is sound: it may always be placed
/// after every other operation as one that did not happen. And nothing is lost: had it happened
/// before an observed operation, that operation would show its event (a chain holds it, a
/// `not_head` names it as the head, the next event names it as its `prev`, an append of the same
/// id answers duplicate or conflict).
fn unobserved_lost_append(entry: &Entry, observed: &HashSet<&str>) -> bool {
    match (&entry.op, &entry.answer) {
        (Op::Append { event, .. }, Answer::Unknown) => !observed.contains(event.as_str()),
        _ => false,
    }
}

/// When an operation's answer counts as received: never for a lost one.
fn returned(entry: &Entry) -> u64 {
    if entry.answer == Answer::Unknown {
        u64::MAX
    } else {
        entry.ret.max(entry.call)
    }
}

const NONE: usize = usize::MAX;

/// The calls and returns in time order as a doubly linked list, from which placed operations
/// are unlinked and to which backtracking links them back.
struct Events {
    /// For each node: the operation, and whether it is its call.
    node: Vec<(usize, bool)>,
    /// The return node of each operation.
    return_of: Vec<usize>,
    prev: Vec<usize>,
    next: Vec<usize>,
    head: usize,
}

impl Events {
    fn new(ops: &[&Entry]) -> Self {
        let mut order: Vec<(u64, u8, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            order.push((op.call, 0, i));
            // Calls sort before returns at the same instant: operations that touch are taken
            // as concurrent, which never turns a legal history into an illegal one.
            order.push((returned(op), 1, i));
        }
        order.sort_unstable();
        let n = order.len();
        let mut node = Vec::with_capacity(n);
        let mut return_of = vec![NONE; ops.len()];
        for (k, (_, kind, op)) in order.iter().enumerate() {
            node.push((*op, *kind == 0));
            if *kind == 1 {
                return_of[*op] = k;
            }
        }
        let prev = (0..n).map(|k| if k == 0 { NONE } else { k - 1 }).collect();
        let next = (0..n)
            .map(|k| if k + 1 == n { NONE } else { k + 1 })
            .collect();
        Self {
            node,
            return_of,
            prev,
            next,
            head: if n == 0 { NONE } else { 0 },
        }
    }

    fn unlink(&mut self, k: usize) {
        let (p, n) = (self.prev[k], self.next[k]);
        if p == NONE {
            self.head = n;
        } else {
            self.next[p] = n;
        }
        if n != NONE {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, k: usize) {
        let (p, n) = (self.prev[k], self.next[k]);
        if p == NONE {
            self.head = k;
        } else {
            self.next[p] = k;
        }
        if n != NONE {
            self.prev[n] = k;
        }
    }

    /// Takes operation `op` (whose call is node `call`) out of the list.
    fn lift(&mut self, call: usize, op: usize) {
        self.unlink(call);
        self.unlink(self.return_of[op]);
    }

    /// Puts it back, in the reverse order of `lift`.
    fn unlift(&mut self, call: usize, op: usize) {
        self.relink(self.return_of[op]);
        self.relink(call);
    }
}

/// The memo key of a search state: the placed set, and the chain's length and fingerprint (a
/// collision could only prune a state, and is vanishingly unlikely at the sizes checked).
fn key(placed: &[u64], chain: &Chain) -> (Vec<u64>, usize, u64) {
    (placed.to_vec(), chain.len(), chain.fingerprint())
}

/// Checks one execution's operations.
pub fn check_execution(execution: &str, entries: &[&Entry]) -> Verdict {
    let observed = observed_events(entries);
    let ops: Vec<&Entry> = entries
        .iter()
        .copied()
        .filter(|e| informative(e) && !unobserved_lost_append(e, &observed))
        .collect();
    let n = ops.len();
    let mut events = Events::new(&ops);
    let mut placed = vec![0u64; n.div_ceil(64)];
    let mut seen: HashSet<(Vec<u64>, usize, u64), BuildHasherDefault<DefaultHasher>> =
        HashSet::default();
    let mut state = Chain::default();
    // (call node, operation, state before it)
    let mut stack: Vec<(usize, usize, Chain)> = Vec::new();
    let mut best: (usize, Vec<u64>, Chain) = (0, placed.clone(), state.clone());
    let mut steps = 0u64;
    let mut at = events.head;
    while at != NONE {
        steps += 1;
        if steps > STEPS_MAX {
            return Verdict::Undecided {
                execution: execution.to_string(),
                operations: n,
            };
        }
        let (op, is_call) = events.node[at];
        if is_call {
            if let Some(next) = state.step(&ops[op].op, &ops[op].answer) {
                placed[op / 64] |= 1 << (op % 64);
                if seen.insert(key(&placed, &next)) {
                    stack.push((at, op, std::mem::replace(&mut state, next)));
                    events.lift(at, op);
                    if stack.len() > best.0 {
                        best = (stack.len(), placed.clone(), state.clone());
                    }
                    at = events.head;
                    continue;
                }
                placed[op / 64] &= !(1 << (op % 64));
            }
            at = events.next[at];
        } else {
            // The return of an operation that could not be placed before it: undo the last
            // placement and try the next candidate after it.
            let Some((call, op, before)) = stack.pop() else {
                return Verdict::Illegal(illegal(execution, &ops, best));
            };
            placed[op / 64] &= !(1 << (op % 64));
            state = before;
            events.unlift(call, op);
            at = events.next[call];
        }
    }
    Verdict::Linearizable {
        executions: 1,
        operations: n,
    }
}

fn illegal(execution: &str, ops: &[&Entry], best: (usize, Vec<u64>, Chain)) -> Illegal {
    let (count, placed, chain) = best;
    let is_placed = |i: usize| placed[i / 64] & (1 << (i % 64)) != 0;
    // The earliest-called operation the best order left out.
    let first = (0..ops.len())
        .filter(|i| !is_placed(*i))
        .min_by_key(|i| (ops[*i].call, *i));
    let mut window = Vec::new();
    if let Some(f) = first {
        let (call, ret) = (ops[f].call, returned(ops[f]));
        window.push(ops[f].clone());
        let mut overlapping: Vec<usize> = (0..ops.len())
            .filter(|i| *i != f && ops[*i].call <= ret && call <= returned(ops[*i]))
            .collect();
        overlapping.sort_by_key(|i| (ops[*i].call, *i));
        window.extend(
            overlapping
                .into_iter()
                .take(WINDOW_MAX - 1)
                .map(|i| ops[i].clone()),
        );
    }
    Illegal {
        execution: execution.to_string(),
        placed: count,
        operations: ops.len(),
        chain: chain.event_ids().into_iter().map(str::to_string).collect(),
        window,
    }
}
