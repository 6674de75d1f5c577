//! The client's views of the API's answers.

use std::collections::BTreeMap;

use chainstore_model::{
    Authority, ChainEvent, ChainPage, Change, Coverage, EventId, ExecutionId, FromLog, Guarded,
    GuardedPage, Head, Reason, Refusal,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ClientError;

/// How fresh a read must be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Consistency {
    /// Reflects every write acknowledged before the read (the default).
    #[default]
    Linearizable,
    /// The answering node's own state; the answer says which applied index it reflects.
    Local,
}

/// Options of every read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// How fresh.
    pub consistency: Consistency,
    /// Wait until the answering node applied at least this index.
    pub min_index: Option<u64>,
}

impl ReadOptions {
    /// A local read.
    pub fn local() -> Self {
        Self {
            consistency: Consistency::Local,
            min_index: None,
        }
    }

    /// The query string (with its `?`), empty for the defaults.
    pub(crate) fn query(&self) -> String {
        self.query_with("")
    }

    /// The query string with `extra` parameters (`a=1&b=2`) appended.
    pub(crate) fn query_with(&self, extra: &str) -> String {
        let mut parts = Vec::new();
        if !extra.is_empty() {
            parts.push(extra.to_string());
        }
        if self.consistency == Consistency::Local {
            parts.push("consistency=local".to_string());
        }
        if let Some(min) = self.min_index {
            parts.push(format!("min_index={min}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    }
}

/// The guarded read's answer and the applied index it reflects.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardedRead {
    /// `Authoritative(events)` or `CannotAnswer(reason)`.
    pub answer: Guarded,
    /// The answering node's applied index at the read.
    pub applied_index: u64,
}

/// One page of the guarded read and the applied index it reflects.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardedPageRead {
    /// `Authoritative(page)` or `CannotAnswer(reason)`.
    pub answer: GuardedPage,
    /// The answering node's applied index at the read.
    pub applied_index: u64,
}

impl GuardedPageRead {
    pub(crate) fn from_json(body: &Value) -> Result<Self, ClientError> {
        let applied_index = body["applied_index"].as_u64().unwrap_or(0);
        let answer = match body["answer"].as_str() {
            Some("authoritative") => GuardedPage::Authoritative(ChainPage {
                events: serde_json::from_value(body["events"].clone())
                    .map_err(|e| ClientError::Protocol(format!("bad events: {e}")))?,
                through_seq: body["through_seq"]
                    .as_u64()
                    .ok_or_else(|| ClientError::Protocol("a page without through_seq".into()))?,
                next_from_seq: body["next_from_seq"].as_u64(),
            }),
            Some("cannot_answer") => {
                let name = body["reason"].as_str().unwrap_or_default();
                GuardedPage::CannotAnswer(
                    reason_from(name)
                        .ok_or_else(|| ClientError::Protocol(format!("unknown reason {name:?}")))?,
                )
            }
            other => return Err(ClientError::Protocol(format!("unknown answer {other:?}"))),
        };
        Ok(Self {
            answer,
            applied_index,
        })
    }
}

/// Where a page of a chain read starts and ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// First sequence wanted (from 1).
    pub from_seq: u64,
    /// Last sequence wanted, if pinned.
    pub to_seq: Option<u64>,
    /// Most events wanted; `None` lets the server choose.
    pub limit: Option<usize>,
}

impl PageRequest {
    /// The first page, its size chosen by the server.
    pub fn first() -> Self {
        Self {
            from_seq: 1,
            to_seq: None,
            limit: None,
        }
    }

    /// The paging part of a query string (without `?` or a leading `&`).
    pub(crate) fn query(&self) -> String {
        let mut parts = vec![format!("from_seq={}", self.from_seq)];
        if let Some(to) = self.to_seq {
            parts.push(format!("to_seq={to}"));
        }
        if let Some(limit) = self.limit {
            parts.push(format!("limit={limit}"));
        }
        parts.join("&")
    }
}

fn reason_from(name: &str) -> Option<Reason> {
    Reason::ALL.into_iter().find(|r| r.as_str() == name)
}

/// `GET .../state`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateView {
    /// The execution.
    pub execution_id: ExecutionId,
    /// Watermark-derived authority.
    pub authority: Authority,
    /// The coverage record.
    pub coverage: Option<Coverage>,
    /// The newest event.
    pub head: Option<Head>,
    /// Whether the walk from the head reaches the root over the whole span.
    pub complete: bool,
    /// The missing predecessor, when the walk stopped at one.
    pub gap_at: Option<EventId>,
    /// The applied index the answer reflects.
    pub applied_index: u64,
}

/// A page of the change feed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangesPage {
    /// Changes in commit order.
    pub changes: Vec<Change>,
    /// Pass as `after` for the next page.
    pub next: u64,
}

/// `GET /v1/snapshot`: a consistent backup of the cluster's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// The last log index the backup includes.
    pub last_log_index: u64,
    /// The backup file's bytes.
    pub data: bytes::Bytes,
}

/// `GET /v1/cluster`: one node's view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The answering node.
    pub node_id: u64,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub state: String,
    /// The leader it knows.
    pub leader_id: Option<u64>,
    /// Its term.
    pub term: u64,
    /// Voting members.
    pub voters: Vec<u64>,
    /// Non-voting members.
    pub learners: Vec<u64>,
    /// Member addresses by id.
    pub nodes: BTreeMap<String, String>,
    /// Its last log index.
    pub last_log_index: u64,
    /// Its last applied index.
    pub last_applied: u64,
    /// Its last snapshot's index.
    #[serde(default)]
    pub snapshot_index: u64,
    /// Its last purged log index.
    #[serde(default)]
    pub purged_index: u64,
}

/// Decodes a populate answer (`extended` is an in-sync populate that appended).
pub(crate) fn parse_from_log(body: &Value) -> Result<FromLog, ClientError> {
    let number = |field: &str| {
        body[field]
            .as_u64()
            .ok_or_else(|| ClientError::Protocol(format!("populate answer lacks {field}")))
    };
    let id = |field: &str| {
        body[field]
            .as_str()
            .and_then(|s| EventId::new(s).ok())
            .ok_or_else(|| ClientError::Protocol(format!("populate answer lacks {field}")))
    };
    match body["outcome"].as_str() {
        Some("in_sync") | Some("extended") => Ok(FromLog::InSync {
            total: number("total")?,
            appended: number("appended")?,
        }),
        Some("stale_log") => Ok(FromLog::StaleLog {
            stored_len: number("stored_len")?,
            log_len: number("log_len")?,
        }),
        Some("diverged") => Ok(FromLog::Diverged {
            at_position: number("at_position")?,
            stored: id("stored")?,
            log: id("log")?,
        }),
        Some("refused") => {
            let name = body["reason"].as_str().unwrap_or_default();
            let reason = Refusal::ALL
                .into_iter()
                .find(|r| r.as_str() == name)
                .ok_or_else(|| ClientError::Protocol(format!("unknown refusal {name:?}")))?;
            Ok(FromLog::Refused { reason })
        }
        other => Err(ClientError::Protocol(format!(
            "unknown populate outcome {other:?}"
        ))),
    }
}

/// The events of an authoritative answer, if any.
pub fn authoritative_events(read: &GuardedRead) -> Option<&[ChainEvent]> {
    match &read.answer {
        Guarded::Authoritative(events) => Some(events),
        Guarded::CannotAnswer(_) => None,
    }
}
