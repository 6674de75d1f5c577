//! The client's read options and its views of the API's answers (the answers themselves are the
//! contract's types, in [`chainstore_model::api`]).

use chainstore_model::api::{ChainAnswer, ChainQuery, ChangesQuery, Consistency, ReadQuery};
use chainstore_model::{ChainEvent, ChainPage, Guarded, GuardedPage};

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

    /// The read's query (the default consistency is left out).
    pub(crate) fn query(&self) -> ReadQuery {
        ReadQuery {
            consistency: (self.consistency != Consistency::default()).then_some(self.consistency),
            min_index: self.min_index,
        }
    }

    /// The query of a chain read over `page` (`None`: the whole chain in one answer).
    pub(crate) fn chain_query(&self, page: Option<PageRequest>) -> ChainQuery {
        let read = self.query();
        ChainQuery {
            consistency: read.consistency,
            min_index: read.min_index,
            from_seq: page.map(|p| p.from_seq),
            to_seq: page.and_then(|p| p.to_seq),
            limit: page.and_then(|p| p.limit),
        }
    }

    /// The query of a page of the change feed (of one shard's, when named).
    pub(crate) fn changes_query(
        &self,
        shard: Option<u32>,
        after: u64,
        limit: usize,
    ) -> ChangesQuery {
        let read = self.query();
        ChangesQuery {
            shard,
            after: Some(after),
            limit: Some(limit),
            consistency: read.consistency,
            min_index: read.min_index,
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

impl From<ChainAnswer> for GuardedPageRead {
    fn from(answer: ChainAnswer) -> Self {
        match answer {
            ChainAnswer::Authoritative {
                events,
                applied_index,
                through_seq,
                next_from_seq,
                ..
            } => GuardedPageRead {
                answer: GuardedPage::Authoritative(ChainPage {
                    events,
                    through_seq,
                    next_from_seq,
                }),
                applied_index,
            },
            ChainAnswer::CannotAnswer {
                reason,
                applied_index,
                ..
            } => GuardedPageRead {
                answer: GuardedPage::CannotAnswer(reason),
                applied_index,
            },
        }
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
}

/// `GET /v1/snapshot`: a consistent backup of the cluster's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// The last log index the backup includes.
    pub last_log_index: u64,
    /// The backup file's bytes.
    pub data: bytes::Bytes,
}

/// The events of an authoritative answer, if any.
pub fn authoritative_events(read: &GuardedRead) -> Option<&[ChainEvent]> {
    match &read.answer {
        Guarded::Authoritative(events) => Some(events),
        Guarded::CannotAnswer(_) => None,
    }
}
