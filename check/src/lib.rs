//! `chainstore-check`: were the answers clients got consistent with ONE order of the
//! operations that respects real time? That is linearizability, the property a user of
//! chainstore relies on, checked here against the sequential model of an execution's chain
//! (SPEC §4.1 and §6).
//!
//! - [`History`]: what clients did, one [`Entry`] per operation: which process, which
//!   execution, when it was called and when it returned, what it asked ([`Op`]) and what it was
//!   told ([`Answer`]). Histories are written and read as JSON lines, so the real binary's runs
//!   are checked by the same code as the simulations'.
//! - [`Chain`]: the sequential model. An append succeeds only when its `prev` is the head and
//!   its event is new; a stored event answers `duplicate` with its seq; different content under
//!   a stored id is a conflict; anything else is `not_head` naming the head. An authoritative
//!   linearizable read returns exactly the chain; `cannot_answer` is always allowed.
//! - [`check`]: the search. Linearizability is local, so each execution is checked on its own,
//!   which keeps the search small. An operation whose answer was lost (a timeout, a reset, a 5xx)
//!   may or may not have happened, at any time after it was called: it never returns.
//!
//! The search is Wing and Gong's, with Lowe's memo of (linearized set, model state) so that a
//! history that is NOT linearizable is rejected in time polynomial in its length for a bounded
//! number of concurrent clients; `tests/against_stateright.rs` checks its verdicts against
//! stateright's `LinearizabilityTester` on random histories.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod model;
mod search;

pub use model::Chain;
pub use search::{check, check_execution, Illegal, Verdict, STEPS_MAX};

use serde::{Deserialize, Serialize};

/// What a client asked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Append `event` after `prev` (`None`: the first event). `content` fingerprints everything
    /// else the request carried (payload, parent): two appends of one event id with different
    /// contents conflict.
    Append {
        /// The event id.
        event: String,
        /// The `prev_event_id` sent.
        prev: Option<String>,
        /// A fingerprint of the rest of the event.
        content: u64,
    },
    /// A linearizable guarded read of the chain.
    Read,
}

/// What a client was told.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Answer {
    /// 200 to an append.
    Appended {
        /// The seq the event has.
        seq: u64,
        /// Whether it was already stored.
        duplicate: bool,
    },
    /// 409 `not_head`.
    NotHead {
        /// The head the cluster named.
        expected: Option<String>,
    },
    /// 409 `event_conflict`.
    EventConflict,
    /// An authoritative read: the chain's event ids, in order.
    Chain {
        /// The events.
        events: Vec<String>,
    },
    /// A read the store could not prove (always allowed; it says nothing).
    CannotAnswer,
    /// No answer, or one that does not say whether the operation happened.
    Unknown,
}

/// One operation as a client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The client process (operations of one process never overlap).
    pub process: u64,
    /// The execution operated on.
    pub execution: String,
    /// When the call was made, in any monotonic unit shared by the whole history.
    pub call: u64,
    /// When the answer arrived (ignored for [`Answer::Unknown`]).
    pub ret: u64,
    /// What was asked.
    pub op: Op,
    /// What was answered.
    pub answer: Answer,
}

/// A history: every operation of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The operations, in any order.
    pub entries: Vec<Entry>,
}

impl History {
    /// Records one operation.
    pub fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
    }

    /// The history as JSON lines, one entry a line.
    pub fn to_json_lines(&self) -> String {
        let mut out = String::new();
        for entry in &self.entries {
            // An Entry is strings, numbers and enums of them: it always serializes.
            if let Ok(line) = serde_json::to_string(entry) {
                out.push_str(&line);
                out.push('\n');
            }
        }
        out
    }

    /// Reads JSON lines written by [`History::to_json_lines`]; blank lines are skipped.
    pub fn from_json_lines(text: &str) -> Result<Self, String> {
        let mut history = History::default();
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let entry =
                serde_json::from_str(line).map_err(|e| format!("line {}: {e}", number + 1))?;
            history.push(entry);
        }
        Ok(history)
    }
}
