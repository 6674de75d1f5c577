//! [`Client`]: one handle over a list of node URLs. It finds the leader and follows it, retries
//! what is retryable with bounded exponential back-off and jitter, and turns every answer into a
//! typed result. In a cluster of several shards it computes each execution's shard as the nodes
//! do and keeps each shard's leader apart, so a call about an execution goes straight to its
//! shard's leader and follows that leader when it moves.
//!
//! Appends are safe to retry because the store is idempotent by event id: a retried append that
//! had in fact committed answers with its original seq and `duplicate: true`, never `not_head`.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use chainstore_model::api::headers::{LAST_LOG_INDEX, LEADER};
use chainstore_model::api::{
    AppendAnswer, AppendBatchAnswer, AppendBatchBody, ChainAnswer, ChangesAnswer, ClusterStatus,
    ErrorBody, PopulateAnswer, PopulateBody, QuarantineList, QuarantinePage, RawChainAnswer,
    RebuildAnswer, RebuildBody, ReplicatedBody, StateAnswer,
};
use chainstore_model::{
    order_by_links, AppendRequest, Appended, ChainEvent, EventId, ExecutionId, FromLog, Guarded,
    GuardedPage, LogEvent, PartOutcome, PopulateSession, Replicated, SessionId, ShardCount,
};
use chainstore_transport::{ReqwestTransport, TlsClientOptions, Transport, TransportOptions};
use http::{HeaderMap, Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::ClientError;
use crate::types::{Backup, GuardedPageRead, GuardedRead, PageRequest, ReadOptions};

/// How calls are retried.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts per call, the first included.
    pub attempts_max: u32,
    /// Back-off before the second attempt; doubles each time.
    pub backoff_base: Duration,
    /// Longest back-off.
    pub backoff_max: Duration,
    /// Deadline of one attempt.
    pub request_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts_max: 10,
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// The longest answer a client reads by default (a backup is one answer).
pub const RESPONSE_BYTES_MAX: usize = 1 << 30;

/// Most events [`Client::populate`] sends in one request; a longer log goes as a session.
pub const PART_EVENTS_MAX: usize = 10_000;
/// About the most bytes of events [`Client::populate`] sends in one request (a node takes
/// bodies of 16 MiB by default).
pub const PART_BYTES_MAX: usize = 4 << 20;

/// How one attempt of a call ended.
enum Attempt<T> {
    /// With an answer to return.
    Done(T),
    /// Without an answer: retried on the next node.
    Unreachable(String),
    /// With a 503 (its error body, when it has one): retried, after finding the leader again on
    /// `no_leader`.
    Unavailable(Option<ErrorBody>),
}

/// The last log index a backup answer says it includes.
fn last_log_index(headers: &HeaderMap) -> Result<u64, ClientError> {
    headers
        .get(LAST_LOG_INDEX)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ClientError::Protocol(format!("the backup has no {LAST_LOG_INDEX} header")))
}

/// Splits a log into runs of at most `events_max` events and about `bytes_max` bytes of JSON
/// each (one event at least), in order.
fn parts_of(events: &[LogEvent], events_max: usize, bytes_max: usize) -> Vec<&[LogEvent]> {
    let mut parts = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (i, event) in events.iter().enumerate() {
        // An event that does not serialize is sent as it is and refused by the node.
        let size = serde_json::to_vec(event).map_or(0, |v| v.len()) + 1;
        if i > start && (i - start >= events_max || bytes + size > bytes_max) {
            parts.push(&events[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < events.len() || events.is_empty() {
        parts.push(&events[start..]);
    }
    parts
}

/// Builds a [`Client`].
pub struct ClientBuilder {
    urls: Vec<String>,
    token: Option<String>,
    policy: RetryPolicy,
    seed: Option<u64>,
    transport: Option<Arc<dyn Transport>>,
    tls: TlsClientOptions,
    response_bytes_max: usize,
    part_max: (usize, usize),
}

impl ClientBuilder {
    /// What `https://` node URLs trust (the CA; default: the system's trust store) and the
    /// client certificate presented, if any.
    pub fn tls(mut self, tls: TlsClientOptions) -> Self {
        self.tls = tls;
        self
    }

    /// The largest populate [`Client::populate`] sends in one request, in events and in bytes
    /// of JSON (default [`PART_EVENTS_MAX`], [`PART_BYTES_MAX`]); a longer log goes in parts.
    /// Keep them under the nodes' `populate_events_max` and body limit.
    pub fn populate_parts(mut self, events_max: usize, bytes_max: usize) -> Self {
        self.part_max = (events_max.max(1), bytes_max);
        self
    }

    /// The longest answer read (default [`RESPONSE_BYTES_MAX`]).
    pub fn response_bytes_max(mut self, bytes: usize) -> Self {
        self.response_bytes_max = bytes;
        self
    }

    /// Sends `Authorization: Bearer <token>` on every call.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Replaces the retry policy.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Seeds the back-off jitter (simulations need it reproducible).
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sends through `transport` instead of reqwest.
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// The client.
    pub fn build(self) -> Result<Client, ClientError> {
        if self.urls.is_empty() {
            return Err(ClientError::InvalidInput(
                "a client needs at least one node URL".into(),
            ));
        }
        let nodes: Vec<String> = self
            .urls
            .into_iter()
            .map(|u| {
                let u = u.trim().trim_end_matches('/').to_string();
                if u.contains("://") {
                    u
                } else {
                    format!("http://{u}")
                }
            })
            .collect();
        let transport = match self.transport {
            Some(t) => t,
            None => {
                let mut options =
                    TransportOptions::new(Duration::from_secs(2), self.response_bytes_max);
                options.tls = self.tls;
                Arc::new(
                    ReqwestTransport::new(&options)
                        .map_err(|e| ClientError::InvalidInput(format!("TLS: {e}")))?,
                )
            }
        };
        // Without a seed, the jitter only has to differ between processes.
        let seed = self.seed.unwrap_or_else(|| {
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        });
        Ok(Client {
            nodes,
            transport,
            token: self.token,
            policy: self.policy,
            part_max: self.part_max,
            state: Mutex::new(State {
                preferred: 0,
                node_ids: BTreeMap::new(),
                shards: ShardCount::ONE,
                shard_leaders: BTreeMap::new(),
                discovered: false,
                rng: seed | 1,
            }),
        })
    }
}

struct State {
    /// Index of the node tried first: the leader when known.
    preferred: usize,
    /// Node id → index in `nodes`, learned from `/v1/cluster`.
    node_ids: BTreeMap<u64, usize>,
    /// The cluster's shard count, learned from `/v1/cluster`.
    shards: ShardCount,
    /// Shard → index in `nodes` of its leader, when known (a cluster of several shards).
    shard_leaders: BTreeMap<u32, usize>,
    discovered: bool,
    /// xorshift64 state for the jitter.
    rng: u64,
}

/// A typed client of a chainstore cluster. Cheap to share behind an `Arc`; calls may run
/// concurrently.
pub struct Client {
    nodes: Vec<String>,
    transport: Arc<dyn Transport>,
    token: Option<String>,
    policy: RetryPolicy,
    part_max: (usize, usize),
    state: Mutex<State>,
}

/// The error an answer that is not a success stands for.
fn error_from(status: StatusCode, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) if body.status() == status.as_u16() => ClientError::from(body),
        Ok(body) => ClientError::Protocol(format!("HTTP {status} with the error body of {body}")),
        Err(_) => ClientError::Protocol(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(256)])
        )),
    }
}

/// The path with `query` appended (nothing for an empty query).
fn with_query<Q: Serialize>(path: &str, query: &Q) -> Result<String, ClientError> {
    let query = serde_urlencoded::to_string(query)
        .map_err(|e| ClientError::InvalidInput(format!("cannot encode the query: {e}")))?;
    Ok(if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    })
}

/// A request body as JSON.
fn json_body<T: Serialize>(value: &T) -> Result<Bytes, ClientError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| ClientError::InvalidInput(e.to_string()))
}

impl Client {
    /// A builder over `urls` (`http://host:port` or `host:port`).
    pub fn builder<I, S>(urls: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder {
            urls: urls.into_iter().map(Into::into).collect(),
            token: None,
            policy: RetryPolicy::default(),
            seed: None,
            transport: None,
            tls: TlsClientOptions::default(),
            response_bytes_max: RESPONSE_BYTES_MAX,
            part_max: (PART_EVENTS_MAX, PART_BYTES_MAX),
        }
    }

    /// The node URLs.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    fn shared(&self) -> MutexGuard<'_, State> {
        // Every update of State is a single assignment; a poisoned lock holds a valid state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next number of the client's xorshift64 sequence (seeded per client; see
    /// [`ClientBuilder::jitter_seed`]).
    fn next_random(&self) -> u64 {
        let mut state = self.shared();
        state.rng ^= state.rng << 13;
        state.rng ^= state.rng >> 7;
        state.rng ^= state.rng << 17;
        state.rng
    }

    /// A populate session id that no other caller picks (128 bits from the client's sequence).
    // "p" and 32 hex digits are always a valid id.
    #[allow(clippy::expect_used)]
    fn new_session_id(&self) -> SessionId {
        let id = format!("p{:016x}{:016x}", self.next_random(), self.next_random());
        SessionId::new(id).expect("hex digits are in the id alphabet")
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let unit = (self.next_random() % 1000) as f64 / 1000.0;
        let exp = self
            .policy
            .backoff_base
            .saturating_mul(1u32 << attempt.min(16));
        exp.min(self.policy.backoff_max).mul_f64(0.5 + unit / 2.0)
    }

    fn request_to(
        &self,
        node: usize,
        method: &Method,
        path: &str,
        body: &Option<Bytes>,
    ) -> Result<http::Request<Bytes>, String> {
        let mut request = http::Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.nodes[node]));
        if let Some(token) = &self.token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if body.is_some() {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
        }
        request
            .body(body.clone().unwrap_or_default())
            .map_err(|e| e.to_string())
    }

    async fn send_once(
        &self,
        node: usize,
        method: &Method,
        path: &str,
        body: &Option<Bytes>,
    ) -> Result<(StatusCode, HeaderMap, Bytes), String> {
        let request = self.request_to(node, method, path, body)?;
        let response = self
            .transport
            .send(request, self.policy.request_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let (parts, bytes) = response.into_parts();
        Ok((parts.status, parts.headers, bytes))
    }

    /// Learns which URL is which node, how many shards the cluster has and who leads each,
    /// from every node's `/v1/cluster`.
    ///
    /// Every node is asked at once and the answers taken as they come, until a leader of every
    /// shard is named whose URL is known, every node has answered, or the others have had as
    /// long again as the first answer took (at least the back-off base): a node that does not
    /// answer (stopped, cut off) costs no more than that, whether a leader is named or not. With
    /// no leader named, the first node that answered is tried first.
    async fn discover(&self) {
        use futures_util::StreamExt;
        let started = tokio::time::Instant::now();
        let mut asking: futures_util::stream::FuturesUnordered<_> = (0..self.nodes.len())
            .map(|node| async move {
                let answer = self
                    .send_once(node, &Method::GET, "/v1/cluster", &None)
                    .await;
                (node, answer)
            })
            .collect();
        let mut ids = self.shared().node_ids.clone();
        let mut leader = None;
        let mut shards = None;
        let mut shard_leaders: BTreeMap<u32, u64> = BTreeMap::new();
        let mut first_answered = None;
        let mut deadline = None;
        loop {
            let next = match deadline {
                None => asking.next().await,
                Some(at) => match tokio::time::timeout_at(at, asking.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
            };
            let Some((node, answer)) = next else { break };
            if let Ok((StatusCode::OK, _, bytes)) = answer {
                if let Ok(view) = serde_json::from_slice::<ClusterStatus>(&bytes) {
                    ids.insert(view.node_id, node);
                    leader = leader.or(view.leader_id);
                    shards = shards.or(ShardCount::new(view.shards).ok());
                    for group in &view.groups {
                        if let Some(id) = group.leader_id {
                            shard_leaders.entry(group.shard).or_insert(id);
                        }
                    }
                    first_answered.get_or_insert(node);
                    deadline.get_or_insert_with(|| {
                        tokio::time::Instant::now()
                            + started.elapsed().max(self.policy.backoff_base)
                    });
                }
            }
            let every_shard = match shards {
                Some(count) if count.get() > 1 => (0..count.get())
                    .all(|s| shard_leaders.get(&s).is_some_and(|l| ids.contains_key(l))),
                _ => true,
            };
            if every_shard && leader.is_some_and(|l| ids.contains_key(&l)) {
                break;
            }
        }
        drop(asking);
        let mut state = self.shared();
        if let Some(index) = leader.and_then(|l| ids.get(&l)).or(first_answered.as_ref()) {
            state.preferred = *index;
        }
        if let Some(count) = shards {
            state.shards = count;
        }
        state.shard_leaders = shard_leaders
            .into_iter()
            .filter_map(|(shard, leader)| Some((shard, *ids.get(&leader)?)))
            .collect();
        state.node_ids = ids;
        state.discovered = true;
    }

    /// The shard `path` is about (an execution's, `/v1/executions/{id}/...`, or a change feed's,
    /// `/v1/changes?shard=` and `/v1/snapshot?shard=`, as this client writes them), when the
    /// cluster has several.
    fn shard_of_path(&self, path: &str) -> Option<u32> {
        let shards = self.shared().shards;
        if shards.get() == 1 {
            return None;
        }
        let query = path
            .strip_prefix("/v1/changes?")
            .or_else(|| path.strip_prefix("/v1/snapshot?"));
        if let Some(query) = query {
            return query
                .split('&')
                .find_map(|pair| pair.strip_prefix("shard="))
                .and_then(|shard| shard.parse().ok());
        }
        let id = path
            .strip_prefix("/v1/executions/")?
            .split(['/', '?'])
            .next()?;
        let exec = ExecutionId::new(id).ok()?;
        Some(shards.shard_of(&exec).0)
    }

    /// The node to try first for `shard` (the cluster's first group's leader for `None`).
    fn preferred(&self, shard: Option<u32>) -> usize {
        let state = self.shared();
        shard
            .and_then(|s| state.shard_leaders.get(&s).copied())
            .unwrap_or(state.preferred)
    }

    /// Follows `x-chainstore-leader` on an answer about `shard` (or the first group's).
    fn follow_leader(&self, headers: &HeaderMap, shard: Option<u32>) {
        let leader = headers
            .get(LEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(leader) = leader {
            let mut state = self.shared();
            if let Some(index) = state.node_ids.get(&leader).copied() {
                match shard {
                    Some(shard) => {
                        state.shard_leaders.insert(shard, index);
                    }
                    None => state.preferred = index,
                }
            }
        }
    }

    /// Moves on from the node just tried for `shard`.
    fn rotate(&self, shard: Option<u32>, tried: usize) {
        let mut state = self.shared();
        let next = (tried + 1) % self.nodes.len();
        match shard {
            Some(shard) => {
                state.shard_leaders.insert(shard, next);
            }
            None => state.preferred = next,
        }
    }

    /// Runs `attempt` against the preferred node until it is done or the attempts run out,
    /// backing off between attempts: the one retry loop of every call.
    async fn with_retries<T, F, Fut>(
        &self,
        shard: Option<u32>,
        mut attempt: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(usize) -> Fut,
        Fut: std::future::Future<Output = Result<Attempt<T>, ClientError>>,
    {
        if !self.shared().discovered {
            self.discover().await;
        }
        let mut last_failure = String::from("no attempt made");
        for n in 0..self.policy.attempts_max {
            if n > 0 {
                tokio::time::sleep(self.backoff(n - 1)).await;
            }
            let node = self.preferred(shard);
            match attempt(node).await? {
                Attempt::Done(value) => return Ok(value),
                Attempt::Unreachable(failure) => {
                    last_failure = format!("{}: {failure}", self.nodes[node]);
                    self.rotate(shard, node);
                }
                Attempt::Unavailable(body) => {
                    last_failure = format!(
                        "{}: {}",
                        self.nodes[node],
                        body.as_ref().map_or("unavailable", ErrorBody::message)
                    );
                    if matches!(body, Some(ErrorBody::NoLeader { .. })) {
                        self.discover().await;
                    }
                }
            }
        }
        Err(ClientError::Unavailable(format!(
            "gave up after {} attempts; last: {last_failure}",
            self.policy.attempts_max
        )))
    }

    /// One call with retries: transport failures and 503 answers are retried (on the next node,
    /// after a back-off); every other answer is returned, its body as raw bytes. A call about
    /// an execution goes to its shard's leader.
    async fn call_bytes(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<(StatusCode, HeaderMap, Bytes), ClientError> {
        if !self.shared().discovered {
            self.discover().await;
        }
        let shard = self.shard_of_path(path);
        self.with_retries(shard, |node| {
            let (method, body) = (&method, &body);
            async move {
                Ok(match self.send_once(node, method, path, body).await {
                    Err(failure) => Attempt::Unreachable(failure),
                    Ok((status, headers, bytes)) => {
                        self.follow_leader(&headers, shard);
                        if status == StatusCode::SERVICE_UNAVAILABLE {
                            Attempt::Unavailable(serde_json::from_slice(&bytes).ok())
                        } else {
                            Attempt::Done((status, headers, bytes))
                        }
                    }
                })
            }
        })
        .await
    }

    /// [`Client::call_bytes`] with a success's body decoded as `T` and any other answer turned
    /// into its error.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<T, ClientError> {
        let (status, _, bytes) = self.call_bytes(method, path, body).await?;
        if !status.is_success() {
            return Err(error_from(status, &bytes));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| ClientError::Protocol(format!("unexpected answer shape: {e}")))
    }

    /// Appends one event with the head check (SPEC §4.1).
    pub async fn append(
        &self,
        exec: &ExecutionId,
        request: &AppendRequest,
    ) -> Result<Appended, ClientError> {
        let answer: AppendAnswer = self
            .call(
                Method::POST,
                &format!("/v1/executions/{exec}/events"),
                Some(json_body(request)?),
            )
            .await?;
        Ok(Appended {
            exec_seq: answer.exec_seq,
            commit_index: answer.commit_index,
            duplicate: answer.duplicate,
        })
    }

    /// Appends several events at once: linked in order (each names the one before it), the first
    /// continuing the head (one head check for all), stored together as one Raft entry or not at
    /// all. Events already stored identically are answered as duplicates, as single appends of
    /// them would be, so a retried batch is harmless. One answer per event, in order.
    pub async fn append_batch(
        &self,
        exec: &ExecutionId,
        requests: &[AppendRequest],
    ) -> Result<Vec<Appended>, ClientError> {
        let body = AppendBatchBody {
            events: requests.to_vec(),
        };
        let answer: AppendBatchAnswer = self
            .call(
                Method::POST,
                &format!("/v1/executions/{exec}/events"),
                Some(json_body(&body)?),
            )
            .await?;
        if answer.events.len() != requests.len() {
            return Err(ClientError::Protocol(format!(
                "an append of {} events was answered for {}",
                requests.len(),
                answer.events.len()
            )));
        }
        Ok(answer
            .events
            .into_iter()
            .map(|event| Appended {
                exec_seq: event.exec_seq,
                commit_index: event.commit_index,
                duplicate: event.duplicate,
            })
            .collect())
    }

    /// Builds or extends an execution from the authoritative log (SPEC §4.3). A log larger than
    /// one request ([`PART_EVENTS_MAX`] events or about [`PART_BYTES_MAX`] bytes unless
    /// [`ClientBuilder::populate_parts`] says otherwise) is sent as a populate session, in link
    /// order, one part at a time; the outcome is the session's, with `appended` counted over
    /// every part.
    pub async fn populate(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
    ) -> Result<FromLog, ClientError> {
        let (events_max, bytes_max) = self.part_max;
        let parts = parts_of(events, events_max, bytes_max);
        if parts.len() <= 1 {
            return match PartOutcome::from(self.post_populate(exec, events, None).await?) {
                PartOutcome::Finished(outcome) => Ok(outcome),
                PartOutcome::Accepted { .. } => Err(ClientError::Protocol(
                    "a populate without a session was answered as a session part".into(),
                )),
            };
        }
        // A log that is not one chain is sent as it came: some part is then not a chain segment
        // after the parts before it, and the store refuses the log (and revokes its coverage).
        let ordered: Vec<LogEvent> = match order_by_links(events) {
            Ok(ordered) => ordered.into_iter().cloned().collect(),
            Err(_) => events.to_vec(),
        };
        let id = self.new_session_id();
        let total = ordered.len() as u64;
        let mut position = 0u64;
        let mut appended_before = 0u64;
        for part in parts_of(&ordered, events_max, bytes_max) {
            let session = PopulateSession {
                id: id.clone(),
                position,
                total,
            };
            match self.populate_part(exec, &session, part).await? {
                PartOutcome::Accepted {
                    next_position,
                    appended,
                    ..
                } => {
                    position = next_position;
                    appended_before += appended;
                }
                PartOutcome::Finished(FromLog::InSync { total, appended }) => {
                    return Ok(FromLog::InSync {
                        total,
                        appended: appended_before + appended,
                    })
                }
                PartOutcome::Finished(outcome) => return Ok(outcome),
            }
        }
        Err(ClientError::Protocol(format!(
            "populate session {id} sent every part but was answered with no outcome"
        )))
    }

    /// Sends one part of a populate session (see [`PopulateSession`]): the events at log
    /// positions `session.position..` in link order.
    pub async fn populate_part(
        &self,
        exec: &ExecutionId,
        session: &PopulateSession,
        events: &[LogEvent],
    ) -> Result<PartOutcome, ClientError> {
        Ok(self
            .post_populate(exec, events, Some(session))
            .await?
            .into())
    }

    /// `POST /v1/executions/{exec}/populate`: a whole log, or one part of a session.
    async fn post_populate(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
        session: Option<&PopulateSession>,
    ) -> Result<PopulateAnswer, ClientError> {
        let body = PopulateBody {
            events: events.to_vec(),
            session: session.cloned(),
        };
        self.call(
            Method::POST,
            &format!("/v1/executions/{exec}/populate"),
            Some(json_body(&body)?),
        )
        .await
    }

    /// Stores replicated events in any order (SPEC §4.2).
    pub async fn replicated(
        &self,
        exec: &ExecutionId,
        events: &[ChainEvent],
    ) -> Result<Replicated, ClientError> {
        let body = ReplicatedBody {
            events: events.to_vec(),
        };
        self.call(
            Method::POST,
            &format!("/v1/executions/{exec}/replicated"),
            Some(json_body(&body)?),
        )
        .await
    }

    /// Rebuilds `exec` from its whole log (admin): the stored partition moves into a new
    /// quarantine record, kept and readable, and the log's chain takes its place. Refused
    /// ([`ClientError::Refused`]) when the stored chain is the log's beginning (populate it
    /// instead) or the log is not one chain; nothing changes then.
    pub async fn rebuild(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
        reason: &str,
    ) -> Result<RebuildAnswer, ClientError> {
        let body = RebuildBody {
            reason: reason.to_owned(),
            events: events.to_vec(),
        };
        self.call(
            Method::POST,
            &format!("/v1/executions/{exec}/rebuild"),
            Some(json_body(&body)?),
        )
        .await
    }

    /// The execution's quarantine records, oldest first.
    pub async fn quarantine(
        &self,
        exec: &ExecutionId,
        options: ReadOptions,
    ) -> Result<QuarantineList, ClientError> {
        let path = with_query(
            &format!("/v1/executions/{exec}/quarantine"),
            &options.query(),
        )?;
        self.call(Method::GET, &path, None).await
    }

    /// One quarantine record and a page of the events it holds, from `request.from_seq`.
    pub async fn quarantined(
        &self,
        exec: &ExecutionId,
        number: u64,
        request: PageRequest,
        options: ReadOptions,
    ) -> Result<QuarantinePage, ClientError> {
        let path = with_query(
            &format!("/v1/executions/{exec}/quarantine/{number}"),
            &options.chain_query(Some(request)),
        )?;
        self.call(Method::GET, &path, None).await
    }

    /// The guarded read: the chain when the store can prove it whole, or why it cannot. Read
    /// in pages (each a bounded answer, whatever the chain's length): the first page fixes the
    /// chain's extent and the applied index; every later page is pinned to that extent and asks
    /// a node that has applied at least as far, so the events come back exactly once each, in
    /// order, as of the first page, while appends go on.
    pub async fn chain(
        &self,
        exec: &ExecutionId,
        options: ReadOptions,
    ) -> Result<GuardedRead, ClientError> {
        let mut request = PageRequest::first();
        let mut options = options;
        let mut events = Vec::new();
        let mut first_applied = None;
        loop {
            let read = self.chain_page(exec, request, options).await?;
            let page = match read.answer {
                GuardedPage::CannotAnswer(reason) => {
                    return Ok(GuardedRead {
                        answer: Guarded::CannotAnswer(reason),
                        applied_index: read.applied_index,
                    })
                }
                GuardedPage::Authoritative(page) => page,
            };
            let applied_index = *first_applied.get_or_insert(read.applied_index);
            let through = *request.to_seq.get_or_insert(page.through_seq);
            if page.through_seq < through
                || page
                    .events
                    .first()
                    .is_some_and(|e| e.exec_seq != request.from_seq)
            {
                return Err(ClientError::Protocol(format!(
                    "a page from {} did not continue the chain of {exec} through {through}",
                    request.from_seq
                )));
            }
            events.extend(page.events);
            match page.next_from_seq {
                Some(next) if next > request.from_seq && next <= through => {
                    request.from_seq = next;
                    options.min_index = Some(options.min_index.unwrap_or(0).max(applied_index));
                }
                Some(next) => {
                    return Err(ClientError::Protocol(format!(
                        "a page from {} named {next} as the next one",
                        request.from_seq
                    )))
                }
                None => {
                    return Ok(GuardedRead {
                        answer: Guarded::Authoritative(events),
                        applied_index,
                    })
                }
            }
        }
    }

    /// One page of the guarded read: the events of `request`'s range once the store has
    /// checked the whole chain, the chain's extent (`through_seq`) and where the next page
    /// starts.
    pub async fn chain_page(
        &self,
        exec: &ExecutionId,
        request: PageRequest,
        options: ReadOptions,
    ) -> Result<GuardedPageRead, ClientError> {
        let path = with_query(
            &format!("/v1/executions/{exec}/chain"),
            &options.chain_query(Some(request)),
        )?;
        let answer: ChainAnswer = self.call(Method::GET, &path, None).await?;
        Ok(answer.into())
    }

    /// The stored events, unguarded: for diagnosis, never as an answer.
    pub async fn chain_raw(
        &self,
        exec: &ExecutionId,
        options: ReadOptions,
    ) -> Result<Vec<ChainEvent>, ClientError> {
        let path = with_query(
            &format!("/v1/executions/{exec}/chain/raw"),
            &options.chain_query(None),
        )?;
        let answer: RawChainAnswer = self.call(Method::GET, &path, None).await?;
        Ok(answer.events)
    }

    /// The per-execution records.
    pub async fn state(
        &self,
        exec: &ExecutionId,
        options: ReadOptions,
    ) -> Result<StateAnswer, ClientError> {
        let path = with_query(&format!("/v1/executions/{exec}/state"), &options.query())?;
        self.call(Method::GET, &path, None).await
    }

    /// One event, or `None` when the execution does not hold it.
    pub async fn event(
        &self,
        exec: &ExecutionId,
        event_id: &EventId,
        options: ReadOptions,
    ) -> Result<Option<ChainEvent>, ClientError> {
        let path = with_query(
            &format!("/v1/executions/{exec}/events/{event_id}"),
            &options.query(),
        )?;
        match self.call(Method::GET, &path, None).await {
            Ok(event) => Ok(Some(event)),
            Err(ClientError::NotFound(_)) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// A page of the commit-ordered change feed after `after`.
    pub async fn changes(
        &self,
        after: u64,
        limit: usize,
        options: ReadOptions,
    ) -> Result<ChangesAnswer, ClientError> {
        let path = with_query("/v1/changes", &options.changes_query(None, after, limit))?;
        self.call(Method::GET, &path, None).await
    }

    /// One page of shard `shard`'s change feed, after commit index `after`. A cluster of several
    /// shards has a feed per shard, each with commit indexes of its own: a reader of all of
    /// them keeps one cursor per shard. Sent to the shard's leader.
    pub async fn shard_changes(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
        options: ReadOptions,
    ) -> Result<ChangesAnswer, ClientError> {
        let path = with_query(
            "/v1/changes",
            &options.changes_query(Some(shard), after, limit),
        )?;
        self.call(Method::GET, &path, None).await
    }

    /// The cluster's shard count (1 until the cluster has answered).
    pub async fn shards(&self) -> ShardCount {
        if !self.shared().discovered {
            self.discover().await;
        }
        self.shared().shards
    }

    /// The cluster as the preferred node (the leader, when known) sees it.
    pub async fn cluster(&self) -> Result<ClusterStatus, ClientError> {
        self.call(Method::GET, "/v1/cluster", None).await
    }

    /// A consistent backup of a cluster of one shard, taken on the leader: the file's bytes and
    /// the last log index they include. `chainstore-node --restore-from` seeds a new cluster
    /// from it. Holds the whole file (up to the client's answer limit); [`Client::snapshot_to`]
    /// writes it out as it arrives instead, and [`Client::save_backup`] saves any cluster's.
    pub async fn snapshot(&self) -> Result<Backup, ClientError> {
        let (status, headers, bytes) = self.call_bytes(Method::GET, "/v1/snapshot", None).await?;
        if !status.is_success() {
            return Err(error_from(status, &bytes));
        }
        Ok(Backup {
            last_log_index: last_log_index(&headers)?,
            data: bytes,
        })
    }

    /// A consistent backup of a cluster of one shard written to `out` piece by piece as it
    /// arrives, so the client holds a piece at a time whatever the store's size; returns the
    /// last log index it includes. Failures before the first byte are retried like any call;
    /// one after it is returned, and `out` then holds a cut file, which restore refuses (it has
    /// no trailer).
    pub async fn snapshot_to<W>(&self, out: &mut W) -> Result<u64, ClientError>
    where
        W: tokio::io::AsyncWrite + Unpin + Send,
    {
        self.shard_snapshot_to(None, out).await
    }

    /// [`Client::snapshot_to`] of one shard (`None`: a cluster of one shard), taken on the
    /// shard's leader: the file a backup set holds for it.
    pub async fn shard_snapshot_to<W>(
        &self,
        shard: Option<u32>,
        out: &mut W,
    ) -> Result<u64, ClientError>
    where
        W: tokio::io::AsyncWrite + Unpin + Send,
    {
        use futures_util::StreamExt;
        use tokio::io::AsyncWriteExt;

        let path = with_query(
            "/v1/snapshot",
            &chainstore_model::api::BackupQuery {
                shard,
                ..Default::default()
            },
        )?;
        let path = path.as_str();
        let answer = self
            .with_retries(shard, |node| async move {
                let request = self
                    .request_to(node, &Method::GET, path, &None)
                    .map_err(ClientError::InvalidInput)?;
                let answer = match self
                    .transport
                    .send_streamed(request, self.policy.request_timeout)
                    .await
                {
                    Ok(answer) => answer,
                    Err(failure) => return Ok(Attempt::Unreachable(failure.to_string())),
                };
                let (parts, mut pieces) = answer.into_parts();
                self.follow_leader(&parts.headers, shard);
                if parts.status.is_success() {
                    return Ok(Attempt::Done((node, parts.headers, pieces)));
                }
                // An error answer is a small JSON body; read a bounded amount of it.
                let mut bytes = Vec::new();
                while let Some(Ok(piece)) = pieces.next().await {
                    bytes.extend_from_slice(&piece);
                    if bytes.len() > 64 << 10 {
                        break;
                    }
                }
                if parts.status == StatusCode::SERVICE_UNAVAILABLE {
                    return Ok(Attempt::Unavailable(serde_json::from_slice(&bytes).ok()));
                }
                Err(error_from(parts.status, &bytes))
            })
            .await;
        let (node, headers, mut pieces) = answer?;
        let last_log_index = last_log_index(&headers)?;
        let mut written = 0u64;
        while let Some(piece) = pieces.next().await {
            let piece = piece.map_err(|e| {
                ClientError::Unavailable(format!(
                    "the backup from {} was cut after {written} bytes: {e}",
                    self.nodes[node]
                ))
            })?;
            out.write_all(&piece)
                .await
                .map_err(|e| ClientError::Write(e.to_string()))?;
            written += piece.len() as u64;
        }
        out.flush()
            .await
            .map_err(|e| ClientError::Write(e.to_string()))?;
        Ok(last_log_index)
    }

    /// Every node's own view and readiness, without retries: for status tables.
    pub async fn node_views(&self) -> Vec<(String, Result<ClusterStatus, String>, bool)> {
        let mut views = Vec::with_capacity(self.nodes.len());
        for node in 0..self.nodes.len() {
            let view = match self
                .send_once(node, &Method::GET, "/v1/cluster", &None)
                .await
            {
                Ok((status, _, bytes)) if status.is_success() => {
                    serde_json::from_slice::<ClusterStatus>(&bytes).map_err(|e| e.to_string())
                }
                Ok((status, _, bytes)) => Err(format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&bytes)
                )),
                Err(failure) => Err(failure),
            };
            let ready = matches!(
                self.send_once(node, &Method::GET, "/readyz", &None).await,
                Ok((StatusCode::OK, _, _))
            );
            views.push((self.nodes[node].clone(), view, ready));
        }
        views
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(n: usize, payload_bytes: usize) -> Vec<LogEvent> {
        (0..n)
            .map(|i| LogEvent {
                event_id: EventId::new(format!("e{i}")).unwrap(),
                prev_event_id: i
                    .checked_sub(1)
                    .map(|p| EventId::new(format!("e{p}")).unwrap()),
                parent_execution_id: None,
                payload: serde_json::json!("x".repeat(payload_bytes)),
            })
            .collect()
    }

    fn lengths(parts: &[&[LogEvent]]) -> Vec<usize> {
        parts.iter().map(|p| p.len()).collect()
    }

    #[test]
    fn a_log_is_split_by_count_and_by_bytes_in_order_and_never_into_empty_parts() {
        let events = log(10, 100);
        assert_eq!(lengths(&parts_of(&events, 4, usize::MAX)), [4, 4, 2]);
        // Each event is about 170 bytes of JSON (100 of payload): two fit in 400, three do not.
        assert_eq!(lengths(&parts_of(&events, 100, 400)), [2, 2, 2, 2, 2]);
        // An event larger than the byte bound goes alone.
        assert_eq!(lengths(&parts_of(&events, 100, 10)), [1; 10]);
        assert_eq!(lengths(&parts_of(&[], 4, 100)), [0]);
        let joined: Vec<LogEvent> = parts_of(&events, 3, 250).concat();
        assert_eq!(joined, events);
    }

    /// Node `silent` never answers (its requests end only at their deadline); node `answering`
    /// (id 2) knows no leader and refuses writes with 503 `no_leader`. Every request is noted.
    struct NoLeaderOneSilent {
        sent: Mutex<Vec<(String, String)>>,
    }

    impl Transport for NoLeaderOneSilent {
        fn send(
            &self,
            request: http::Request<Bytes>,
            timeout: Duration,
        ) -> chainstore_transport::BoxFuture<
            '_,
            Result<http::Response<Bytes>, chainstore_transport::TransportError>,
        > {
            let host = request.uri().host().unwrap().to_string();
            let path = request.uri().path().to_string();
            self.sent.lock().unwrap().push((host.clone(), path.clone()));
            Box::pin(async move {
                if host == "silent" {
                    tokio::time::sleep(timeout).await;
                    return Err(chainstore_transport::TransportError::Timeout(timeout));
                }
                let (status, body) = if path == "/v1/cluster" {
                    let view = serde_json::json!({
                        "node_id": 2, "state": "follower", "leader_id": null, "term": 7,
                        "voters": [1, 2, 3], "learners": [], "nodes": {},
                        "last_log_index": 9, "last_applied": 9, "snapshot_index": 0,
                        "purged_index": 0
                    });
                    (200, serde_json::to_vec(&view).unwrap())
                } else {
                    let body = ErrorBody::no_leader();
                    (body.status(), serde_json::to_vec(&body).unwrap())
                };
                Ok(http::Response::builder()
                    .status(status)
                    .body(Bytes::from(body))
                    .unwrap())
            })
        }
    }

    #[test]
    fn with_no_leader_named_a_silent_node_is_not_waited_for_and_an_answering_one_is_tried() {
        let transport = Arc::new(NoLeaderOneSilent {
            sent: Mutex::new(Vec::new()),
        });
        let client = Client::builder(["http://silent:1", "http://answering:1"])
            .transport(Arc::clone(&transport) as Arc<dyn Transport>)
            .retry_policy(RetryPolicy {
                attempts_max: 1,
                request_timeout: Duration::from_secs(600),
                ..RetryPolicy::default()
            })
            .build()
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let execution = ExecutionId::new("x").unwrap();
        let request = AppendRequest {
            event_id: EventId::new("e1").unwrap(),
            prev_event_id: None,
            genesis: true,
            parent_execution_id: None,
            payload: serde_json::json!(null),
        };
        let answer = runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), client.append(&execution, &request))
                .await
                .expect("discovery waited for the silent node")
        });
        assert!(
            matches!(answer, Err(ClientError::Unavailable(_))),
            "{answer:?}"
        );
        let sent = transport.sent.lock().unwrap().clone();
        let appends: Vec<&String> = sent
            .iter()
            .filter(|(_, path)| path != "/v1/cluster")
            .map(|(host, _)| host)
            .collect();
        assert_eq!(appends, ["answering"], "{sent:?}");
    }
}
