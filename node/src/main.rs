//! `chainstore-node`: runs one cluster member.
//!
//! Configuration comes from flags, then environment variables (`CHAINSTORE_*`), then an optional
//! TOML file (`--config`), in that order of precedence. Every option is declared once, in
//! [`Options`]: clap reads it from flags and the environment, serde from the file, and the two
//! are layered field by field.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chainstore_model::ShardCount;
use chainstore_node::{app, ClientAuth, HandOff, Host, NodeConfig, PeerAuth, Secret, Tokens};
use chainstore_node::{bootstrap, parse_voters, Bootstrapped, Restored};
use chainstore_node::{serve, ServeOptions};
use chainstore_node::{NodeTls, Reloaded, TlsFiles};
use chainstore_transport::tls::TlsClientOptions;
use chainstore_transport::ServerCheck;
use chainstore_transport::{ReqwestTransport, Transport, TransportOptions};
use clap::{Parser, Subcommand};
use raft_store::raft::NodeId;
use raft_store::{Engine, RocksEngine, RocksOptions};
use serde::{Deserialize, Serialize};

#[derive(Debug, Parser)]
#[command(
    name = "chainstore-node",
    version,
    about = "Runs one chainstore cluster node."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// TOML file with defaults for any of the options below.
    #[arg(long, env = "CHAINSTORE_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    options: Options,
}

/// Every option of a node, declared once: a flag, an environment variable and a key of the TOML
/// file (the field's name) each. A flag that is set (`true`) or a value that is given overrides
/// the file's.
#[derive(Debug, Default, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Options {
    /// This node's id: a positive integer unique in the cluster, or a StatefulSet pod name
    /// ending in `-<ordinal>` (id = ordinal + 1).
    #[arg(long, env = "CHAINSTORE_ID")]
    #[serde(deserialize_with = "number_or_text")]
    id: Option<String>,
    /// Address to listen on.
    #[arg(long, env = "CHAINSTORE_LISTEN")]
    listen: Option<SocketAddr>,
    /// The `host:port` other nodes use to reach this one (default: the listen address).
    #[arg(long, env = "CHAINSTORE_ADVERTISE")]
    advertise: Option<String>,
    /// Directory of the RocksDB database.
    #[arg(long, env = "CHAINSTORE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The node's certificate chain (PEM). It must name this node: a URI SAN
    /// `chainstore://node/<id>` (or the common name `chainstore-node-<id>`).
    #[arg(long, env = "CHAINSTORE_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, env = "CHAINSTORE_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// The CA certificates (PEM) that peers' and clients' certificates must chain to.
    #[arg(long, env = "CHAINSTORE_TLS_CLIENT_CA")]
    tls_client_ca: Option<PathBuf>,
    /// How often the TLS files are checked for new contents, in milliseconds (SIGHUP reloads
    /// at once).
    #[arg(long, env = "CHAINSTORE_TLS_RELOAD_POLL_MS")]
    tls_reload_poll_ms: Option<u64>,
    /// Serve plaintext HTTP: peers then authenticate by the cluster secret, which crosses the
    /// network in clear. For tests and local demos only.
    #[arg(long, env = "CHAINSTORE_INSECURE_NO_TLS")]
    insecure_no_tls: bool,
    /// A file holding the cluster secret of a plaintext cluster (the environment variable
    /// CHAINSTORE_CLUSTER_SECRET works too; there is no flag, so it never shows in `ps`).
    #[arg(long, env = "CHAINSTORE_CLUSTER_SECRET_FILE")]
    cluster_secret_file: Option<PathBuf>,
    /// A file of client bearer tokens, one `role:token` a line (roles: read, write, admin).
    #[arg(long, env = "CHAINSTORE_CLIENT_TOKENS_FILE")]
    client_tokens_file: Option<PathBuf>,
    /// Admit clients without any credential, with every role. For tests and local demos only.
    #[arg(long, env = "CHAINSTORE_INSECURE_NO_CLIENT_AUTH")]
    insecure_no_client_auth: bool,
    /// Log format: text or json.
    #[arg(long, env = "CHAINSTORE_LOG_FORMAT")]
    log_format: Option<String>,
    /// Raft heartbeat interval in milliseconds.
    #[arg(long, env = "CHAINSTORE_HEARTBEAT_MS")]
    heartbeat_ms: Option<u64>,
    /// Shortest Raft election timeout in milliseconds.
    #[arg(long, env = "CHAINSTORE_ELECTION_MIN_MS")]
    election_min_ms: Option<u64>,
    /// Longest Raft election timeout in milliseconds.
    #[arg(long, env = "CHAINSTORE_ELECTION_MAX_MS")]
    election_max_ms: Option<u64>,
    /// Build a snapshot after this many log entries.
    #[arg(long, env = "CHAINSTORE_SNAPSHOT_AFTER_ENTRIES")]
    snapshot_after_entries: Option<u64>,
    /// Log entries kept behind a snapshot.
    #[arg(long, env = "CHAINSTORE_LOG_ENTRIES_KEPT")]
    log_entries_kept: Option<u64>,
    /// Purge the log only when at least this many entries can go.
    #[arg(long, env = "CHAINSTORE_PURGE_BATCH_ENTRIES")]
    purge_batch_entries: Option<u64>,
    /// RocksDB's block cache, in MiB (default 256).
    #[arg(long, env = "CHAINSTORE_BLOCK_CACHE_MIB")]
    block_cache_mib: Option<usize>,
    /// One RocksDB memtable, in MiB (default 64; at most four are held).
    #[arg(long, env = "CHAINSTORE_WRITE_BUFFER_MIB")]
    write_buffer_mib: Option<usize>,
    /// The initial voters, `1=host:port,2=host:port,...`, the same on every node: the node with
    /// the lowest id initializes the cluster once, when every listed voter is reachable and none
    /// belongs to a cluster yet.
    #[arg(long, env = "CHAINSTORE_BOOTSTRAP_VOTERS")]
    bootstrap_voters: Option<String>,
    /// The shards of the cluster `--bootstrap-voters` makes (default 1): its executions spread
    /// over that many Raft groups, three replicas each, fixed for the cluster's life.
    #[arg(long, env = "CHAINSTORE_BOOTSTRAP_SHARDS")]
    bootstrap_shards: Option<u32>,
    /// A backup (`chainctl snapshot save`) to seed this node's store from, when the store is
    /// empty: a backup file, or a sharded cluster's backup set (its directory, holding
    /// `manifest.json`); the new cluster's voters are `--bootstrap-voters`. Ignored on a store
    /// with data.
    #[arg(long, env = "CHAINSTORE_RESTORE_FROM")]
    restore_from: Option<PathBuf>,
    /// Client requests served at once (default 512); Raft RPCs have their own capacity.
    #[arg(long, env = "CHAINSTORE_MAX_CONCURRENT_REQUESTS")]
    max_concurrent_requests: Option<usize>,
    /// Client requests that may wait for a slot (default 1024); more are refused at once with
    /// 503 overloaded.
    #[arg(long, env = "CHAINSTORE_MAX_QUEUED_REQUESTS")]
    max_queued_requests: Option<usize>,
    /// Open connections (default 4096); more are closed as soon as they are accepted.
    #[arg(long, env = "CHAINSTORE_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// How long a connection may take to send a request's headers, and stay idle between
    /// requests, in milliseconds (default 10000).
    #[arg(long, env = "CHAINSTORE_HEADER_READ_TIMEOUT_MS")]
    header_read_timeout_ms: Option<u64>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Exits 0 when `url` answers 200 (for container health checks: the image has no shell).
    /// Without a URL, probes this node's own `/readyz` on the port of `--listen`, over TLS when
    /// `--tls-cert` is set (the server must present this node's certificate).
    Probe {
        /// For example http://127.0.0.1:7001/readyz
        url: Option<String>,
        /// The CA that the server's certificate chains to (default: `--tls-client-ca`).
        #[arg(long)]
        ca_file: Option<PathBuf>,
    },
}

/// The node id in the file: `id = 3` or `id = "chainstore-2"`.
fn number_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Number(u64),
        Text(String),
    }
    Ok(Option::<Id>::deserialize(d)?.map(|id| match id {
        Id::Number(n) => n.to_string(),
        Id::Text(text) => text,
    }))
}

impl Options {
    /// The file's options (none without a file) overridden by every option given here.
    fn layered_over_file(self, file: Option<&PathBuf>) -> Result<Options, String> {
        let Some(path) = file else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let from_file: Options = toml::from_str(&text)
            .map_err(|e| format!("bad config file {}: {e}", path.display()))?;
        let mut merged = serde_json::to_value(from_file).map_err(|e| e.to_string())?;
        let given = serde_json::to_value(self).map_err(|e| e.to_string())?;
        if let (Some(merged), Some(given)) = (merged.as_object_mut(), given.as_object()) {
            for (key, value) in given {
                if !value.is_null() && *value != serde_json::Value::Bool(false) {
                    merged.insert(key.clone(), value.clone());
                }
            }
        }
        serde_json::from_value(merged).map_err(|e| e.to_string())
    }
}

struct Settings {
    node: NodeConfig,
    tls: Option<TlsFiles>,
    tls_reload_poll: Duration,
    listen: SocketAddr,
    data_dir: PathBuf,
    rocks: RocksOptions,
    log_format: String,
    bootstrap_voters: Option<BTreeMap<NodeId, String>>,
    /// `--bootstrap-shards` when given (1 when not; a backup set's count must equal it).
    bootstrap_shards: Option<ShardCount>,
    restore_from: Option<PathBuf>,
}

/// A node id: a positive integer, or a StatefulSet pod name `name-<ordinal>` (ordinal + 1).
fn parse_node_id(text: &str) -> Result<NodeId, String> {
    let id = match text.parse::<u64>() {
        Ok(id) => Some(id),
        Err(_) => text
            .rsplit_once('-')
            .filter(|(name, _)| !name.is_empty())
            .and_then(|(_, ordinal)| ordinal.parse::<u64>().ok())
            .and_then(|ordinal| ordinal.checked_add(1)),
    };
    match id {
        Some(id) if id > 0 => Ok(id),
        _ => Err(format!(
            "--id must be a positive integer or a pod name ending in -<ordinal>, not {text:?}"
        )),
    }
}

fn settings(cli: Cli) -> Result<Settings, String> {
    // Options are taken out of `o` as they are used; the tuning ones are read at the end.
    let mut o = cli.options.layered_over_file(cli.config.as_ref())?;
    let id = parse_node_id(o.id.as_deref().ok_or("--id is required")?)?;
    let bootstrap_voters = o
        .bootstrap_voters
        .take()
        .map(|text| parse_voters(&text).map_err(|e| format!("--bootstrap-voters: {e}")))
        .transpose()?;
    if let Some(voters) = &bootstrap_voters {
        if !voters.contains_key(&id) {
            return Err(format!("--bootstrap-voters does not list this node ({id})"));
        }
    }
    let bootstrap_shards = o
        .bootstrap_shards
        .take()
        .map(|count| ShardCount::new(count).map_err(|e| format!("--bootstrap-shards: {e}")))
        .transpose()?;
    if bootstrap_shards.is_some_and(|s| s.get() > 1) && bootstrap_voters.is_none() {
        return Err("--bootstrap-shards needs --bootstrap-voters".into());
    }
    let restore_from = o.restore_from.take();
    if restore_from.is_some() && bootstrap_voters.is_none() {
        return Err("--restore-from needs --bootstrap-voters (the new cluster's voters)".into());
    }
    let listen = o.listen.ok_or("--listen is required")?;
    let advertise = o.advertise.take().unwrap_or_else(|| listen.to_string());
    let data_dir = o.data_dir.take().ok_or("--data-dir is required")?;
    let tls = tls_files(
        o.tls_cert.take(),
        o.tls_key.take(),
        o.tls_client_ca.take(),
        o.insecure_no_tls,
    )?;
    let secret = cluster_secret(o.cluster_secret_file.take())?;
    let peer_auth = peer_auth(tls.is_some(), secret)?;
    let client_auth = client_auth(
        o.client_tokens_file.take(),
        o.insecure_no_client_auth,
        tls.is_some(),
    )?;
    let mut node = NodeConfig::new(id, advertise, peer_auth);
    node.client_auth = client_auth;
    let tls_reload_poll = Duration::from_millis(o.tls_reload_poll_ms.unwrap_or(10_000).max(100));
    let mut rocks = RocksOptions::new(&data_dir);
    tune(&o, &mut node, &mut rocks);
    // Snapshots are files next to the database, cleared at every start.
    node.snapshot_dir = Some(data_dir.join("snapshots"));
    let log_format = o.log_format.take().unwrap_or_else(|| "text".into());
    Ok(Settings {
        node,
        tls,
        tls_reload_poll,
        listen,
        data_dir,
        rocks,
        log_format,
        bootstrap_voters,
        bootstrap_shards,
        restore_from,
    })
}

/// How peers authenticate: by certificate with TLS, by the cluster secret without; never both,
/// never neither.
fn peer_auth(tls: bool, secret: Option<String>) -> Result<PeerAuth, String> {
    match (tls, secret) {
        (true, None) => Ok(PeerAuth::Certificate),
        (true, Some(_)) => Err(
            "with TLS, peers authenticate by certificate; the cluster secret \
                                is for plaintext setups only: remove it"
                .into(),
        ),
        (false, Some(secret)) => {
            Ok(PeerAuth::Secret(Secret::new(secret).map_err(|e| {
                format!("the cluster secret is refused: {e}")
            })?))
        }
        (false, None) => Err(
            "without TLS, peers authenticate by the cluster secret: set \
                              CHAINSTORE_CLUSTER_SECRET or --cluster-secret-file"
                .into(),
        ),
    }
}

/// How clients authenticate: the tokens file, TLS client certificates, or nobody at all when
/// asked for by name; a setup in which no client could authenticate is refused.
fn client_auth(
    tokens_file: Option<PathBuf>,
    insecure_no_client_auth: bool,
    tls: bool,
) -> Result<ClientAuth, String> {
    let tokens = match tokens_file {
        None => Tokens::default(),
        Some(path) => Tokens::parse(&read_secret_file(&path)?)
            .map_err(|e| format!("{}: {e}", path.display()))?,
    };
    if insecure_no_client_auth && !tokens.is_empty() {
        return Err(
            "--insecure-no-client-auth admits every client; a tokens file would do \
                    nothing: give one or the other"
                .into(),
        );
    }
    if tokens.is_empty() && !tls && !insecure_no_client_auth {
        return Err(
            "no client could authenticate: give --client-tokens-file (one role:token a \
                    line) or TLS (clients then present certificates naming a role), or run \
                    without client authentication on purpose with --insecure-no-client-auth"
                .into(),
        );
    }
    Ok(ClientAuth {
        tokens,
        insecure_no_client_auth,
    })
}

/// The Raft timings, the limits at the edge and RocksDB's memory the options set (the
/// defaults stay for the ones they leave out).
fn tune(o: &Options, node: &mut NodeConfig, rocks: &mut RocksOptions) {
    let timings = &mut node.raft;
    if let Some(ms) = o.heartbeat_ms {
        timings.heartbeat = Duration::from_millis(ms);
    }
    if let Some(ms) = o.election_min_ms {
        timings.election_min = Duration::from_millis(ms);
    }
    if let Some(ms) = o.election_max_ms {
        timings.election_max = Duration::from_millis(ms);
    }
    if let Some(n) = o.snapshot_after_entries {
        timings.snapshot_after_entries = n;
    }
    if let Some(n) = o.log_entries_kept {
        timings.log_entries_kept = n;
    }
    if let Some(n) = o.purge_batch_entries {
        timings.purge_batch_entries = n;
    }
    let limits = &mut node.limits;
    if let Some(n) = o.max_concurrent_requests {
        limits.concurrency_max = n;
    }
    if let Some(n) = o.max_queued_requests {
        limits.queue_max = n;
    }
    if let Some(n) = o.max_connections {
        limits.connections_max = n;
    }
    if let Some(ms) = o.header_read_timeout_ms {
        limits.header_read_timeout = Duration::from_millis(ms.max(1));
    }
    if let Some(mib) = o.block_cache_mib {
        rocks.block_cache_bytes = mib.max(1) << 20;
    }
    if let Some(mib) = o.write_buffer_mib {
        rocks.write_buffer_bytes = mib.max(1) << 20;
    }
}

/// The TLS files, all three or none (and then only when asked for by name).
fn tls_files(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    insecure_no_tls: bool,
) -> Result<Option<TlsFiles>, String> {
    match (cert, key, client_ca, insecure_no_tls) {
        (Some(cert), Some(key), Some(client_ca), false) => Ok(Some(TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (None, None, None, true) => Ok(None),
        (None, None, None, false) => Err("TLS is required: give --tls-cert, --tls-key and \
                                          --tls-client-ca (deploy/tls/gen-certs.sh makes them), \
                                          or serve plaintext on purpose with --insecure-no-tls"
            .into()),
        (_, _, _, true) => Err("--insecure-no-tls cannot be combined with TLS files".into()),
        _ => Err("TLS needs all three of --tls-cert, --tls-key and --tls-client-ca".into()),
    }
}

/// Reads a file holding a secret, warning when others may read it.
fn read_secret_file(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(path) {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o004 != 0 {
            eprintln!(
                "chainstore-node: warning: {} is readable by every user; make it 0600 or 0640",
                path.display()
            );
        }
    }
    Ok(text)
}

/// The cluster secret: from `CHAINSTORE_CLUSTER_SECRET` or a file (not both), or none.
fn cluster_secret(file: Option<PathBuf>) -> Result<Option<String>, String> {
    let from_env = std::env::var("CHAINSTORE_CLUSTER_SECRET")
        .ok()
        .filter(|s| !s.is_empty());
    match (from_env, file) {
        (Some(_), Some(_)) => Err(
            "the cluster secret comes from CHAINSTORE_CLUSTER_SECRET or --cluster-secret-file, \
             not both"
                .into(),
        ),
        (Some(secret), None) => Ok(Some(secret)),
        (None, Some(path)) => Ok(Some(
            read_secret_file(&path)?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        )),
        (None, None) => Ok(None),
    }
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// How long a stopping leader tries to hand its leadership over.
const HAND_OFF_WITHIN: Duration = Duration::from_secs(2);

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => return interrupt.await.unwrap_or(()),
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    interrupt.await.unwrap_or(());
}

/// Opens the database and, when asked, restores a backup into it (an empty store only).
async fn open_store(settings: &Settings) -> Result<Arc<dyn Engine>, String> {
    let engine = RocksEngine::open(&settings.rocks).map_err(|e| {
        format!(
            "cannot open the database at {}: {e}",
            settings.data_dir.display()
        )
    })?;
    let engine: Arc<dyn Engine> = Arc::new(engine);
    if let (Some(path), Some(voters)) = (&settings.restore_from, &settings.bootstrap_voters) {
        let backup = path.display();
        let restored = chainstore_node::restore(
            Arc::clone(&engine),
            settings.node.id,
            voters,
            path,
            settings.bootstrap_shards,
        );
        match restored.await? {
            Restored::File { last_log_index } => {
                tracing::info!(%backup, last_log_index, "restored the store from a backup")
            }
            Restored::Set { shards, groups } => {
                for (shard, last_log_index) in groups {
                    tracing::info!(%backup, shards, shard, last_log_index, "restored a shard");
                }
            }
            Restored::AlreadyHolds => {
                tracing::info!(%backup, "the store already holds data; not restoring")
            }
        }
    }
    Ok(engine)
}

/// Initializes the cluster once, if this node is the one `--bootstrap-voters` names for it.
async fn bootstrap_once(node: Arc<Host>, voters: BTreeMap<NodeId, String>, shards: ShardCount) {
    match bootstrap(node, voters, shards, Duration::from_secs(1)).await {
        Bootstrapped::Initialized => tracing::info!("bootstrap: initialized the cluster"),
        Bootstrapped::AlreadyMember => tracing::info!("bootstrap: already a member"),
        Bootstrapped::PeerHasCluster(peer) => tracing::warn!(
            peer,
            "bootstrap: node {peer} already belongs to a cluster; not initializing"
        ),
        Bootstrapped::NotBootstrapper => {}
    }
}

/// Waits for SIGTERM or SIGINT, then hands over the leadership of every group this node leads,
/// all at once.
async fn hand_off_on_signal(host: Arc<Host>) {
    shutdown_signal().await;
    tracing::info!("stopping");
    let groups = host.groups();
    let hand_offs = groups.iter().map(|node| async move {
        (
            node.group(),
            node.hand_off_leadership(HAND_OFF_WITHIN).await,
        )
    });
    for (group, outcome) in futures_util::future::join_all(hand_offs).await {
        match outcome {
            HandOff::NotLeader => {}
            HandOff::HandedTo(successor) => {
                tracing::info!(group, successor, "handed leadership over")
            }
            HandOff::NoSuccessor(why) => {
                tracing::warn!(group, %why, "leadership not handed over")
            }
        }
    }
}

async fn run(settings: Settings) -> Result<(), String> {
    let engine = open_store(&settings).await?;
    let limits = settings.node.limits.clone();
    let tls = match settings.tls.clone() {
        None => None,
        Some(files) => Some(NodeTls::load(
            settings.node.id,
            files,
            limits.rpc_connect_timeout,
            limits.peer_response_bytes_max,
        )?),
    };
    let transport: Arc<dyn Transport> = match &tls {
        Some(tls) => tls.peer_transport(),
        None => Arc::new(
            ReqwestTransport::new(&TransportOptions::new(
                limits.rpc_connect_timeout,
                limits.peer_response_bytes_max,
            ))
            .map_err(|e| e.to_string())?,
        ),
    };
    let node = Host::start(settings.node, engine, transport)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(tls) = &tls {
        node.metrics().set_tls_not_after(tls.not_after_unix());
        let watched = Arc::clone(&node);
        tokio::spawn(
            Arc::clone(tls).watch(settings.tls_reload_poll, move |outcome| {
                let metrics = watched.metrics();
                metrics.record_tls_reload(outcome.is_ok());
                if let Ok(Reloaded::Changed { not_after_unix }) = outcome {
                    metrics.set_tls_not_after(*not_after_unix);
                }
            }),
        );
    }
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
    tracing::info!(
        node_id = node.id(),
        listen = %settings.listen,
        tls = tls.is_some(),
        "chainstore-node serving"
    );
    if let Some(voters) = settings.bootstrap_voters.clone() {
        tokio::spawn(bootstrap_once(
            Arc::clone(&node),
            voters,
            settings.bootstrap_shards.unwrap_or(ShardCount::ONE),
        ));
    }
    let options = ServeOptions {
        header_read_timeout: limits.header_read_timeout,
        tls_handshake_timeout: limits.tls_handshake_timeout,
        shutdown_grace: limits.request_timeout,
        connections_max: limits.connections_max,
    };
    // On SIGTERM a leader first hands its leadership over (a successor is elected within a
    // round trip instead of an election timeout), then the server drains within its grace.
    let stopping = hand_off_on_signal(Arc::clone(&node));
    serve(listener, app(Arc::clone(&node)), tls, options, stopping).await;
    tracing::info!("shutting down");
    // In-flight requests have finished; stop Raft so the log and state machine close cleanly.
    let _ = tokio::time::timeout(Duration::from_secs(5), node.shutdown()).await;
    Ok(())
}

/// `probe [URL]`: one GET, 0 when it answers 200. Without a URL, this node's own `/readyz`.
fn probe(cli: &Cli, url: Option<&str>, ca_file: Option<&PathBuf>) -> std::process::ExitCode {
    let outcome = (|| -> Result<bool, String> {
        let id = cli.options.id.as_deref().map(parse_node_id).transpose()?;
        let (url, check) = match url {
            Some(url) => (url.to_string(), ServerCheck::Hostname),
            None => {
                let port = cli
                    .options
                    .listen
                    .ok_or("probe needs a URL or --listen (CHAINSTORE_LISTEN)")?
                    .port();
                match (&cli.options.tls_cert, id) {
                    (None, _) => (
                        format!("http://127.0.0.1:{port}/readyz"),
                        ServerCheck::Hostname,
                    ),
                    (Some(_), Some(id)) => (
                        format!("https://127.0.0.1:{port}/readyz"),
                        ServerCheck::Node(id),
                    ),
                    (Some(_), None) => {
                        return Err("probe over TLS needs --id (CHAINSTORE_ID)".into())
                    }
                }
            }
        };
        let roots_pem = match ca_file.or(cli.options.tls_client_ca.as_ref()) {
            Some(path) => Some(
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?,
            ),
            None => None,
        };
        let timeout = Duration::from_secs(2);
        let options = TransportOptions {
            connect_timeout: timeout,
            response_bytes_max: 1 << 20,
            tls: TlsClientOptions {
                roots_pem,
                identity: None,
            },
            server_check: check,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let transport = ReqwestTransport::new(&options).map_err(|e| e.to_string())?;
            let request = http::Request::get(url)
                .body(bytes::Bytes::new())
                .map_err(|e| e.to_string())?;
            let response = transport
                .send(request, timeout)
                .await
                .map_err(|e| e.to_string())?;
            Ok(response.status() == http::StatusCode::OK)
        })
    })();
    match outcome {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(message) => {
            eprintln!("chainstore-node probe: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Probe { url, ca_file }) = &cli.command {
        return probe(&cli, url.as_deref(), ca_file.as_ref());
    }
    let settings = match settings(cli) {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("chainstore-node: {message}");
            return std::process::ExitCode::from(2);
        }
    };
    init_logging(&settings.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("chainstore-node: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(settings)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            eprintln!("chainstore-node: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_node_id, Cli, Options};
    use clap::Parser;

    fn file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn flags_override_the_file_option_by_option() {
        let (_dir, path) = file(
            "id = 3\nlisten = \"127.0.0.1:7003\"\ninsecure_no_tls = true\nheartbeat_ms = 70\n",
        );
        let cli = Cli::try_parse_from([
            "chainstore-node",
            "--listen",
            "127.0.0.1:9000",
            "--election-min-ms",
            "400",
        ])
        .unwrap();
        let o: Options = cli.options.layered_over_file(Some(&path)).unwrap();
        assert_eq!(o.id.as_deref(), Some("3"));
        assert_eq!(o.listen, Some("127.0.0.1:9000".parse().unwrap()));
        assert!(o.insecure_no_tls, "a flag left unset keeps the file's true");
        assert_eq!((o.heartbeat_ms, o.election_min_ms), (Some(70), Some(400)));
        let (_dir, path) = file("id = \"chainstore-2\"\n");
        let o = Options::default().layered_over_file(Some(&path)).unwrap();
        assert_eq!(o.id.as_deref().map(parse_node_id), Some(Ok(3)));
    }

    #[test]
    fn an_unknown_key_in_the_file_is_refused_by_name() {
        let (_dir, path) = file("id = 1\nheartbeat = 70\n");
        let err = Options::default()
            .layered_over_file(Some(&path))
            .unwrap_err();
        assert!(err.contains("heartbeat"), "{err}");
    }

    #[test]
    fn node_ids_are_numbers_or_pod_ordinals() {
        assert_eq!(parse_node_id("3"), Ok(3));
        assert_eq!(parse_node_id("chainstore-0"), Ok(1));
        assert_eq!(parse_node_id("my-db-12"), Ok(13));
        for bad in ["0", "", "chainstore", "chainstore-x", "-1"] {
            assert!(parse_node_id(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
