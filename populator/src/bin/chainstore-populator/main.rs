//! `chainstore-populator`: keeps a chainstore cluster in step with an authoritative PostgreSQL
//! event log (see the library's `populator` module for how), and serves its metrics.
//!
//! Endpoints on `--listen`: `GET /metrics` (Prometheus text), `GET /healthz` (200 while polls
//! succeed, 503 once none has for ten poll intervals), `GET /problems` (the executions that need
//! attention, with why, as JSON). Logs are JSON lines on stderr with `--log-json`.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use chainstore_populator::postgres::{PgLog, PgTable, PgTls, PgTlsArgs, TableNames};
use chainstore_populator::ConnectArgs;
use chainstore_populator::{Checkpoint, Options, Populator, Shared};
use clap::Parser;
use futures_util::StreamExt;

#[derive(Debug, Parser)]
#[command(
    name = "chainstore-populator",
    version,
    about = "Follows a PostgreSQL event table and populates a chainstore cluster from it."
)]
struct Cli {
    #[command(flatten)]
    connect: ConnectArgs,
    /// PostgreSQL connection string (key=value or postgres:// URL). Read from the environment
    /// or `--dsn-file` so a password never shows in `ps`.
    #[arg(long, env = "CHAINSTORE_POPULATOR_DSN", hide_env_values = true)]
    dsn: Option<String>,
    /// A file holding the connection string.
    #[arg(long, env = "CHAINSTORE_POPULATOR_DSN_FILE", conflicts_with = "dsn")]
    dsn_file: Option<PathBuf>,
    #[command(flatten)]
    pg_tls: PgTlsArgs,
    #[command(flatten)]
    table: TableNames,
    /// Where the durable checkpoint lives (one small JSON file, replaced atomically).
    #[arg(long, env = "CHAINSTORE_POPULATOR_CHECKPOINT")]
    checkpoint: PathBuf,
    /// Address of the metrics, health and problems endpoints.
    #[arg(
        long,
        env = "CHAINSTORE_POPULATOR_LISTEN",
        default_value = "127.0.0.1:9464"
    )]
    listen: SocketAddr,
    /// A channel to LISTEN on: a NOTIFY on it (the shipped trigger sends one per insert) starts
    /// the next poll at once.
    #[arg(long, env = "CHAINSTORE_POPULATOR_NOTIFY_CHANNEL")]
    notify_channel: Option<String>,
    /// Executions populated at once.
    #[arg(long, default_value_t = 16)]
    parallelism: usize,
    /// Rows read per poll.
    #[arg(long, default_value_t = 5_000)]
    batch_rows: i64,
    /// Pause between polls once caught up, in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    poll_interval_ms: u64,
    /// Pause between comparator runs, in seconds (0: no comparator).
    #[arg(long, default_value_t = 30)]
    compare_every_s: u64,
    /// Executions sampled per comparator run.
    #[arg(long, default_value_t = 50)]
    compare_sample: usize,
    /// Rebuild an execution found diverged (a second writer, a content divergence) from the
    /// log, keeping what the store held in a quarantine record. Needs an admin credential.
    /// Without it the populator only proposes the repair (in `GET /problems`).
    #[arg(long)]
    repair: bool,
    /// Connections to PostgreSQL.
    #[arg(long, default_value_t = 4)]
    pg_connections: usize,
    /// JSON log lines.
    #[arg(long)]
    log_json: bool,
}

struct Http {
    shared: Arc<Shared>,
    stale_after: Duration,
}

async fn metrics(State(http): State<Arc<Http>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        http.shared.metrics.encode(),
    )
}

async fn healthz(State(http): State<Arc<Http>>) -> impl IntoResponse {
    match http.shared.since_last_poll() {
        Some(since) if since <= http.stale_after => (StatusCode::OK, "ok\n".to_string()),
        Some(since) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no successful poll for {} ms\n", since.as_millis()),
        ),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no successful poll yet\n".to_string(),
        ),
    }
}

async fn problems(State(http): State<Arc<Http>>) -> impl IntoResponse {
    Json(http.shared.problems())
}

/// LISTENs on `channel` and wakes the poll loop on every notification; reconnects after a
/// lost connection.
async fn listen(dsn: String, tls: PgTls, channel: String, wake: Arc<tokio::sync::Notify>) {
    let quoted = format!("\"{}\"", channel.replace('"', "\"\""));
    loop {
        match chainstore_populator::postgres::connect(&dsn, &tls).await {
            Ok((client, mut connection)) => {
                let mut messages =
                    futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                let sql = format!("LISTEN {quoted}");
                let listening = client.batch_execute(&sql);
                tokio::pin!(listening);
                // The LISTEN completes only while the connection is driven.
                let ok = loop {
                    tokio::select! {
                        done = &mut listening => break done.is_ok(),
                        m = messages.next() => if m.is_none() { break false },
                    }
                };
                if ok {
                    tracing::info!(channel = %channel, "listening for notifications");
                    while let Some(m) = messages.next().await {
                        match m {
                            Ok(tokio_postgres::AsyncMessage::Notification(_)) => wake.notify_one(),
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "notification connection failed");
                                break;
                            }
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot connect to LISTEN"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn dsn(cli: &Cli) -> Result<String, String> {
    match (&cli.dsn, &cli.dsn_file) {
        (Some(dsn), None) => Ok(dsn.clone()),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("cannot read {}: {e}", path.display())),
        _ => Err(
            "the connection string comes from --dsn (CHAINSTORE_POPULATOR_DSN) or --dsn-file"
                .into(),
        ),
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let dsn = dsn(&cli)?;
    let client = cli.connect.client().map_err(|e| e.to_string())?;
    let table = PgTable::new(cli.table.clone())?;
    let tls = cli.pg_tls.tls()?;
    let log = PgLog::connect(&dsn, tls.clone(), table, cli.pg_connections)
        .await
        .map_err(|e| e.to_string())?;
    let options = Options {
        parallelism: cli.parallelism.max(1),
        batch_rows: cli.batch_rows.max(1),
        poll_interval: Duration::from_millis(cli.poll_interval_ms),
        compare_every: (cli.compare_every_s > 0).then(|| Duration::from_secs(cli.compare_every_s)),
        compare_sample: cli.compare_sample,
        repair: cli.repair,
        ..Options::default()
    };
    let poll_interval = options.poll_interval;
    let checkpoint = Checkpoint::new(&cli.checkpoint, &cli.table.table);
    let populator = Arc::new(Populator::new(client, log, checkpoint, options));

    let http = Arc::new(Http {
        shared: populator.shared(),
        stale_after: (poll_interval * 10).max(Duration::from_secs(30)),
    });
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/problems", get(problems))
        .with_state(http);
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", cli.listen))?;
    tracing::info!(listen = %cli.listen, table = %cli.table.table, "populator started");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    if let Some(channel) = cli.notify_channel.clone() {
        tokio::spawn(listen(dsn.clone(), tls, channel, populator.waker()));
    }
    let comparing = {
        let p = Arc::clone(&populator);
        tokio::spawn(async move { p.compare(shutdown_signal()).await })
    };
    let outcome = populator.run(shutdown_signal()).await;
    comparing.abort();
    tracing::info!("populator stopped");
    outcome
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if cli.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "populator failed");
            eprintln!("chainstore-populator: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
