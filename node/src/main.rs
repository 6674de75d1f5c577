//! `chainstore-node`: runs one cluster member.
//!
//! Configuration comes from flags, then environment variables (`CHAINSTORE_*`), then an optional
//! TOML file (`--config`), in that order of precedence.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use chainstore_node::bootstrap::{bootstrap, parse_voters, Bootstrapped};
use chainstore_node::{app, Node, NodeConfig, ReqwestTransport};
use clap::{Parser, Subcommand};
use raft_store::raft::{restore_backup, BackupError, NodeId};
use raft_store::{Engine, RocksEngine, RocksOptions};
use serde::Deserialize;

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
    /// This node's id: a positive integer unique in the cluster, or a StatefulSet pod name
    /// ending in `-<ordinal>` (id = ordinal + 1).
    #[arg(long, env = "CHAINSTORE_ID")]
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
    /// Shared secret of the cluster's Raft RPCs.
    #[arg(long, env = "CHAINSTORE_CLUSTER_SECRET", hide_env_values = true)]
    cluster_secret: Option<String>,
    /// Comma-separated bearer tokens accepted on the client API (none: no client auth).
    #[arg(
        long,
        env = "CHAINSTORE_CLIENT_TOKENS",
        hide_env_values = true,
        value_delimiter = ','
    )]
    client_tokens: Option<Vec<String>>,
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
    /// The initial voters, `1=host:port,2=host:port,...`, the same on every node: the node with
    /// the lowest id initializes the cluster once, when every listed voter is reachable and none
    /// belongs to a cluster yet.
    #[arg(long, env = "CHAINSTORE_BOOTSTRAP_VOTERS")]
    bootstrap_voters: Option<String>,
    /// A backup file (`chainctl snapshot save`) to seed this node's store from, when the store
    /// is empty; the new cluster's voters are `--bootstrap-voters`. Ignored on a store with data.
    #[arg(long, env = "CHAINSTORE_RESTORE_FROM")]
    restore_from: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Exits 0 when `url` answers 200 (for container health checks: the image has no shell).
    Probe {
        /// For example http://127.0.0.1:7001/readyz
        url: String,
    },
}

/// The TOML file: the same options, all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    id: Option<u64>,
    listen: Option<SocketAddr>,
    advertise: Option<String>,
    data_dir: Option<PathBuf>,
    cluster_secret: Option<String>,
    client_tokens: Option<Vec<String>>,
    log_format: Option<String>,
    heartbeat_ms: Option<u64>,
    election_min_ms: Option<u64>,
    election_max_ms: Option<u64>,
    snapshot_after_entries: Option<u64>,
    log_entries_kept: Option<u64>,
    purge_batch_entries: Option<u64>,
    bootstrap_voters: Option<String>,
    restore_from: Option<PathBuf>,
}

struct Settings {
    node: NodeConfig,
    listen: SocketAddr,
    data_dir: PathBuf,
    log_format: String,
    bootstrap_voters: Option<BTreeMap<NodeId, String>>,
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
    let file: FileConfig = match &cli.config {
        None => FileConfig::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            toml::from_str(&text).map_err(|e| format!("bad config file {}: {e}", path.display()))?
        }
    };
    let id = match (cli.id, file.id) {
        (Some(text), _) => parse_node_id(&text)?,
        (None, Some(id)) if id > 0 => id,
        (None, Some(_)) => return Err("id must be a positive integer".into()),
        (None, None) => return Err("--id is required".into()),
    };
    let bootstrap_voters = cli
        .bootstrap_voters
        .or(file.bootstrap_voters)
        .map(|text| parse_voters(&text).map_err(|e| format!("--bootstrap-voters: {e}")))
        .transpose()?;
    if let Some(voters) = &bootstrap_voters {
        if !voters.contains_key(&id) {
            return Err(format!("--bootstrap-voters does not list this node ({id})"));
        }
    }
    let restore_from = cli.restore_from.or(file.restore_from);
    if restore_from.is_some() && bootstrap_voters.is_none() {
        return Err("--restore-from needs --bootstrap-voters (the new cluster's voters)".into());
    }
    let listen = cli.listen.or(file.listen).ok_or("--listen is required")?;
    let advertise = cli
        .advertise
        .or(file.advertise)
        .unwrap_or_else(|| listen.to_string());
    let data_dir = cli
        .data_dir
        .or(file.data_dir)
        .ok_or("--data-dir is required")?;
    let secret = cli
        .cluster_secret
        .or(file.cluster_secret)
        .ok_or("--cluster-secret is required")?;
    if secret.len() < 8 {
        return Err("the cluster secret must be at least 8 characters".into());
    }
    let mut node = NodeConfig::new(id, advertise, secret);
    node.client_tokens = cli.client_tokens.or(file.client_tokens).unwrap_or_default();
    node.client_tokens.retain(|t| !t.is_empty());
    let timings = &mut node.raft;
    if let Some(ms) = cli.heartbeat_ms.or(file.heartbeat_ms) {
        timings.heartbeat = Duration::from_millis(ms);
    }
    if let Some(ms) = cli.election_min_ms.or(file.election_min_ms) {
        timings.election_min = Duration::from_millis(ms);
    }
    if let Some(ms) = cli.election_max_ms.or(file.election_max_ms) {
        timings.election_max = Duration::from_millis(ms);
    }
    if let Some(n) = cli.snapshot_after_entries.or(file.snapshot_after_entries) {
        timings.snapshot_after_entries = n;
    }
    if let Some(n) = cli.log_entries_kept.or(file.log_entries_kept) {
        timings.log_entries_kept = n;
    }
    if let Some(n) = cli.purge_batch_entries.or(file.purge_batch_entries) {
        timings.purge_batch_entries = n;
    }
    let log_format = cli
        .log_format
        .or(file.log_format)
        .unwrap_or_else(|| "text".into());
    Ok(Settings {
        node,
        listen,
        data_dir,
        log_format,
        bootstrap_voters,
        restore_from,
    })
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

async fn run(settings: Settings) -> Result<(), String> {
    let engine = RocksEngine::open(&RocksOptions::new(&settings.data_dir)).map_err(|e| {
        format!(
            "cannot open the database at {}: {e}",
            settings.data_dir.display()
        )
    })?;
    let engine: Arc<dyn Engine> = Arc::new(engine);
    if let (Some(path), Some(voters)) = (&settings.restore_from, &settings.bootstrap_voters) {
        let data = std::fs::read(path)
            .map_err(|e| format!("cannot read the backup {}: {e}", path.display()))?;
        match restore_backup(Arc::clone(&engine), settings.node.id, voters, data).await {
            Ok(log_id) => tracing::info!(
                backup = %path.display(),
                last_log_index = log_id.index,
                "restored the store from a backup"
            ),
            Err(BackupError::NotEmpty) => tracing::info!(
                backup = %path.display(),
                "the store already holds data; not restoring"
            ),
            Err(err) => return Err(format!("cannot restore {}: {err}", path.display())),
        }
    }
    let transport = ReqwestTransport::new(settings.node.limits.rpc_connect_timeout)
        .map_err(|e| e.to_string())?;
    let node = Node::start(settings.node, engine, Arc::new(transport))
        .await
        .map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
    tracing::info!(node_id = node.id(), listen = %settings.listen, "chainstore-node serving");
    if let Some(voters) = settings.bootstrap_voters.clone() {
        let node = Arc::clone(&node);
        tokio::spawn(async move {
            match bootstrap(node, voters, Duration::from_secs(1)).await {
                Bootstrapped::Initialized => tracing::info!("bootstrap: initialized the cluster"),
                Bootstrapped::AlreadyMember => tracing::info!("bootstrap: already a member"),
                Bootstrapped::PeerHasCluster(peer) => tracing::warn!(
                    peer,
                    "bootstrap: node {peer} already belongs to a cluster; not initializing"
                ),
                Bootstrapped::NotBootstrapper => {}
            }
        });
    }
    let served = axum::serve(listener, app(Arc::clone(&node)))
        .with_graceful_shutdown(shutdown_signal())
        .await;
    tracing::info!("shutting down");
    // In-flight requests have finished; stop Raft so the log and state machine close cleanly.
    let _ = tokio::time::timeout(Duration::from_secs(5), node.shutdown()).await;
    served.map_err(|e| format!("server error: {e}"))
}

/// `probe URL`: a plain HTTP/1.0 GET over a socket, 0 when the answer is 200.
fn probe(url: &str) -> std::process::ExitCode {
    use std::io::{Read, Write};
    let outcome = (|| -> Result<bool, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or("only http:// URLs are probed")?;
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
            .map_err(|e| e.to_string())?
            .next()
            .ok_or("the host has no address")?;
        let timeout = Duration::from_secs(2);
        let mut stream =
            std::net::TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n")
            .map_err(|e| e.to_string())?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).map_err(|e| e.to_string())?;
        Ok(head.starts_with(b"HTTP/1.") && &head[9..12] == b"200")
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
    if let Some(Command::Probe { url }) = &cli.command {
        return probe(url);
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
    use super::parse_node_id;

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
