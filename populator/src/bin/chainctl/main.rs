//! `chainctl`: the command-line interface to a chainstore cluster.
//!
//! Output is a table or plain lines for people, JSON with `--json` for scripts. An error is one
//! line in words on stderr, or, with `--json`, one JSON error body on stdout: the API's own
//! (`{"error": "not_head", "message": ..., "expected": ..., "got": ...}`) when the cluster
//! answered with one, else `{"error": "usage" | "refused" | "unavailable", "message": ...}`.
//! Exit codes: 0 done; 1 the cluster refused the request (`not_head`,
//! `event_conflict`, `forked`, `invalid_input`, `not_found`, `unauthorized`, `forbidden`,
//! `too_large`, or a populate that diverged or was refused); 2 bad arguments or input; 3 the
//! cluster is unreachable or unavailable; 4 a guarded read that cannot answer.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod bench;
mod output;

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use chainstore_client::{
    Client, ClientError, LogError, LogSource, PageRequest, ReadOptions, ReconcileError, Reconciler,
    SavedBackup, Verdict,
};
use chainstore_model::{
    api::{ClusterStatus, Consistency},
    AppendRequest, EventId, ExecutionId, FromLog, Guarded, LogEvent,
};
use chainstore_populator::postgres::{PgLog, PgTable, PgTlsArgs, TableNames};
use chainstore_populator::ConnectArgs;
use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use output::{print_table, Failure};

#[derive(Debug, Parser)]
#[command(name = "chainctl", version, about = "Talks to a chainstore cluster.")]
struct Cli {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Cluster membership and health.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Appends events at the head of an execution. Several ids are one append, linked in the
    /// order given (each names the one before it), stored all together or not at all.
    Append {
        execution: String,
        /// The event ids, in chain order.
        #[arg(required = true, num_args = 1..)]
        event_ids: Vec<String>,
        /// The current head's event id (omit for the first event).
        #[arg(long)]
        prev: Option<String>,
        /// The payload of every event, as JSON.
        #[arg(long, default_value = "{}")]
        payload: String,
        /// The parent execution.
        #[arg(long)]
        parent: Option<String>,
        /// Declare the cluster the system of record of a new execution.
        #[arg(long)]
        genesis: bool,
    },
    /// The guarded read of an execution's chain.
    Chain {
        execution: String,
        /// Read this node's state instead of a linearizable read.
        #[arg(long)]
        local: bool,
        /// Wait until the node applied this index.
        #[arg(long)]
        min_index: Option<u64>,
        /// The raw stored events, unguarded (diagnosis only).
        #[arg(long)]
        raw: bool,
    },
    /// An execution's records: authority, coverage, head, completeness.
    State {
        execution: String,
        #[arg(long)]
        local: bool,
        #[arg(long)]
        min_index: Option<u64>,
    },
    /// One event.
    Event {
        execution: String,
        event_id: String,
        #[arg(long)]
        local: bool,
    },
    /// Populates executions from a JSON-lines log (one event per line, with `execution_id`),
    /// or one execution from a PostgreSQL event table (`--from-postgres DSN --execution ID`,
    /// through the reconciler: a store that runs ahead of the log is re-read before it is
    /// called a second writer).
    Populate {
        #[arg(
            long,
            required_unless_present = "from_postgres",
            conflicts_with = "from_postgres"
        )]
        file: Option<PathBuf>,
        /// Executions populated at once.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// A PostgreSQL connection string: read the log from its table.
        #[arg(long, requires = "execution")]
        from_postgres: Option<String>,
        /// The execution to populate from PostgreSQL.
        #[arg(long)]
        execution: Option<String>,
        #[command(flatten)]
        pg_tls: PgTlsArgs,
        #[command(flatten)]
        table: TableNames,
    },
    /// Rebuilds a diverged execution from its PostgreSQL log (admin): the stored partition moves
    /// into a quarantine record, kept and readable with `chainctl quarantine ID`, and the log's
    /// chain takes its place. Refused, changing nothing, when the stored chain agrees with the
    /// log (populate it instead) or the log is not one chain.
    Repair {
        /// The execution.
        execution: String,
        /// A PostgreSQL connection string: the log is read from its table.
        #[arg(long, env = "CHAINCTL_POSTGRES_DSN", hide_env_values = true)]
        from_postgres: String,
        /// Why (kept in the quarantine record).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        pg_tls: PgTlsArgs,
        #[command(flatten)]
        table: TableNames,
    },
    /// An execution's quarantine records (what rebuilds moved aside), or one record with its
    /// events.
    Quarantine {
        /// The execution.
        execution: String,
        /// A record's number: show it with its events.
        number: Option<u64>,
        /// The first event's sequence.
        #[arg(long, default_value_t = 1)]
        from_seq: u64,
        /// Most events shown.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// The commit-ordered change feed (of one shard, in a cluster of several).
    Changes {
        /// The shard whose feed to read: required when the cluster has several shards, each
        /// with a feed and commit indexes of its own.
        #[arg(long)]
        shard: Option<u32>,
        #[arg(long, default_value_t = 0)]
        after: u64,
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Keep polling for new changes.
        #[arg(long)]
        follow: bool,
        /// Poll interval with --follow, in milliseconds.
        #[arg(long, default_value_t = 500)]
        interval_ms: u64,
    },
    /// A load generator: appends with the head check from concurrent writers.
    Bench(bench::BenchArgs),
    /// Backups of the cluster's state.
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCommand,
    },
}

#[derive(Debug, Subcommand)]
enum SnapshotCommand {
    /// Saves a consistent backup to FILE, taken on the leader (written whole or not at all).
    /// A cluster of several shards is saved as a backup set: FILE is then a new (or empty)
    /// directory that gets one file per shard, each taken on its shard's leader, and
    /// `manifest.json`, written last. Seed a new cluster from either with
    /// `chainstore-node --restore-from FILE`.
    Save { file: PathBuf },
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Every node's view: state, leader, term, indexes, readiness.
    Status,
}

fn execution(raw: &str) -> Result<ExecutionId, Failure> {
    ExecutionId::new(raw).map_err(|e| Failure::usage(format!("bad execution id {raw:?}: {e}")))
}

fn event_id(raw: &str) -> Result<EventId, Failure> {
    EventId::new(raw).map_err(|e| Failure::usage(format!("bad event id {raw:?}: {e}")))
}

fn read_options(local: bool, min_index: Option<u64>) -> ReadOptions {
    ReadOptions {
        consistency: if local {
            Consistency::Local
        } else {
            Consistency::Linearizable
        },
        min_index,
    }
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let client = Arc::new(
        cli.connect
            .client()
            .map_err(|e| Failure::usage(e.to_string()))?,
    );
    let json = cli.json;
    match cli.command {
        Command::Cluster {
            command: ClusterCommand::Status,
        } => cluster_status(&client, json).await,
        Command::Append {
            execution: exec,
            event_ids,
            prev,
            payload,
            parent,
            genesis,
        } => {
            let payload: Value = serde_json::from_str(&payload)
                .map_err(|e| Failure::usage(format!("--payload is not JSON: {e}")))?;
            let parent = parent.as_deref().map(execution).transpose()?;
            let mut prev = prev.as_deref().map(event_id).transpose()?;
            let mut requests = Vec::with_capacity(event_ids.len());
            for (i, id) in event_ids.iter().enumerate() {
                let id = event_id(id)?;
                requests.push(AppendRequest {
                    event_id: id.clone(),
                    prev_event_id: prev.replace(id),
                    parent_execution_id: parent.clone(),
                    payload: payload.clone(),
                    genesis: genesis && i == 0,
                });
            }
            let exec = execution(&exec)?;
            let answers = if let [request] = requests.as_slice() {
                vec![client.append(&exec, request).await?]
            } else {
                client.append_batch(&exec, &requests).await?
            };
            let rows: Vec<Value> = requests
                .iter()
                .zip(&answers)
                .map(|(request, appended)| {
                    json!({ "execution_id": exec, "event_id": request.event_id, "exec_seq": appended.exec_seq, "commit_index": appended.commit_index, "duplicate": appended.duplicate })
                })
                .collect();
            if json {
                match rows.as_slice() {
                    [row] => print_json(row),
                    _ => print_json(&json!({ "execution_id": exec, "events": rows })),
                }
            } else {
                for (request, appended) in requests.iter().zip(&answers) {
                    let note = if appended.duplicate {
                        " (duplicate: already stored)"
                    } else {
                        ""
                    };
                    println!(
                        "appended {} to {exec} at seq {}, commit index {}{note}",
                        request.event_id, appended.exec_seq, appended.commit_index
                    );
                }
            }
            Ok(())
        }
        Command::Chain {
            execution: exec,
            local,
            min_index,
            raw,
        } => {
            let exec = execution(&exec)?;
            let options = read_options(local, min_index);
            if raw {
                let events = client.chain_raw(&exec, options).await?;
                if json {
                    print_json(&json!({ "events": events }));
                } else {
                    print_events(&events);
                }
                return Ok(());
            }
            let read = client.chain(&exec, options).await?;
            match read.answer {
                Guarded::Authoritative(events) => {
                    if json {
                        print_json(
                            &json!({ "execution_id": exec, "answer": "authoritative", "events": events, "applied_index": read.applied_index }),
                        );
                    } else {
                        println!(
                            "{exec}: authoritative, {} events (applied index {})",
                            events.len(),
                            read.applied_index
                        );
                        print_events(&events);
                    }
                    Ok(())
                }
                Guarded::CannotAnswer(reason) => {
                    if json {
                        print_json(
                            &json!({ "execution_id": exec, "answer": "cannot_answer", "reason": reason.as_str(), "applied_index": read.applied_index }),
                        );
                    } else {
                        println!("{exec}: cannot answer ({}); ask the authoritative log (applied index {})", reason.as_str(), read.applied_index);
                    }
                    Err(Failure::silent(output::CANNOT_ANSWER))
                }
            }
        }
        Command::State {
            execution: exec,
            local,
            min_index,
        } => {
            let exec = execution(&exec)?;
            let state = client.state(&exec, read_options(local, min_index)).await?;
            if json {
                print_json(&serde_json::to_value(&state).unwrap_or_default());
            } else {
                let value = serde_json::to_value(&state).unwrap_or_default();
                let rows: Vec<Vec<String>> = [
                    "authority",
                    "coverage",
                    "head",
                    "complete",
                    "gap_at",
                    "applied_index",
                ]
                .iter()
                .map(|k| vec![k.to_string(), value[*k].to_string()])
                .collect();
                print_table(&["record", "value"], &rows);
            }
            Ok(())
        }
        Command::Event {
            execution: exec,
            event_id: id,
            local,
        } => {
            let exec = execution(&exec)?;
            let id = event_id(&id)?;
            match client.event(&exec, &id, read_options(local, None)).await? {
                Some(event) => {
                    if json {
                        print_json(&serde_json::to_value(&event).unwrap_or_default());
                    } else {
                        print_events(std::slice::from_ref(&event));
                    }
                    Ok(())
                }
                None => Err(Failure::refused(format!("{exec} has no event {id}"))),
            }
        }
        Command::Populate {
            file,
            concurrency,
            from_postgres,
            execution: exec,
            pg_tls,
            table,
        } => match (file, from_postgres, exec) {
            (_, Some(dsn), Some(exec)) => {
                let log = connect_log(&dsn, &pg_tls, &table).await?;
                populate_from_postgres(&client, &log, &execution(&exec)?, json).await
            }
            (Some(file), _, _) => populate(client, &file, concurrency.max(1), json).await,
            _ => Err(Failure::usage(
                "populate needs --file, or --from-postgres with --execution",
            )),
        },
        Command::Repair {
            execution: exec,
            from_postgres,
            reason,
            pg_tls,
            table,
        } => {
            let log = connect_log(&from_postgres, &pg_tls, &table).await?;
            repair(&client, &log, &execution(&exec)?, &reason, json).await
        }
        Command::Quarantine {
            execution: exec,
            number,
            from_seq,
            limit,
        } => {
            let exec = execution(&exec)?;
            let answer = match number {
                None => {
                    serde_json::to_value(client.quarantine(&exec, ReadOptions::default()).await?)
                }
                Some(number) => {
                    let request = PageRequest {
                        from_seq: from_seq.max(1),
                        to_seq: None,
                        limit: Some(limit.max(1)),
                    };
                    serde_json::to_value(
                        client
                            .quarantined(&exec, number, request, ReadOptions::default())
                            .await?,
                    )
                }
            };
            print_json(&answer.map_err(|e| Failure::unavailable(e.to_string()))?);
            Ok(())
        }
        Command::Changes {
            shard,
            after,
            limit,
            follow,
            interval_ms,
        } => {
            let mut after = after;
            loop {
                let page = match shard {
                    None => client.changes(after, limit, ReadOptions::default()).await?,
                    Some(shard) => {
                        client
                            .shard_changes(shard, after, limit, ReadOptions::default())
                            .await?
                    }
                };
                for change in &page.changes {
                    if json {
                        println!("{}", serde_json::to_string(change).unwrap_or_default());
                    } else {
                        println!(
                            "{:>10}  {}  seq {}  {}",
                            change.commit_index,
                            change.execution_id,
                            change.exec_seq,
                            change.event_id
                        );
                    }
                }
                let _ = std::io::stdout().flush();
                let empty = page.changes.is_empty();
                after = page.next;
                if !follow {
                    return Ok(());
                }
                if empty {
                    tokio::time::sleep(Duration::from_millis(interval_ms)).await;
                }
            }
        }
        Command::Bench(args) => bench::run(client, args, json).await,
        Command::Snapshot {
            command: SnapshotCommand::Save { file },
        } => snapshot_save(&client, &file, json).await,
    }
}

async fn snapshot_save(client: &Client, path: &std::path::Path, json: bool) -> Result<(), Failure> {
    let saved = client.save_backup(path).await;
    match saved.map_err(Failure::from)? {
        SavedBackup::File {
            bytes,
            last_log_index,
        } => {
            if json {
                print_json(&json!({
                    "file": path.display().to_string(),
                    "bytes": bytes,
                    "last_log_index": last_log_index,
                }));
            } else {
                println!(
                    "saved {bytes} bytes to {} (up to log index {last_log_index})",
                    path.display(),
                );
            }
        }
        SavedBackup::Set(manifest) => {
            if json {
                print_json(
                    &json!({ "directory": path.display().to_string(), "manifest": manifest }),
                );
            } else {
                let rows: Vec<Vec<String>> = manifest
                    .files
                    .iter()
                    .map(|f| {
                        vec![
                            f.shard.to_string(),
                            f.file.clone(),
                            f.bytes.to_string(),
                            f.last_log_index.to_string(),
                        ]
                    })
                    .collect();
                print_table(&["shard", "file", "bytes", "last log index"], &rows);
                println!(
                    "saved a backup set of {} shards to {} ({})",
                    manifest.shards.get(),
                    path.display(),
                    chainstore_model::MANIFEST_FILE
                );
            }
        }
    }
    Ok(())
}

fn print_events(events: &[chainstore_model::ChainEvent]) {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.exec_seq.to_string(),
                e.event_id.to_string(),
                e.prev_event_id
                    .as_ref()
                    .map_or("-".into(), |p| p.to_string()),
                e.commit_index.to_string(),
                e.payload.to_string(),
            ]
        })
        .collect();
    print_table(&["seq", "event", "prev", "commit", "payload"], &rows);
}

async fn cluster_status(client: &Client, json: bool) -> Result<(), Failure> {
    let views = client.node_views().await;
    if json {
        let nodes: Vec<Value> = views
            .iter()
            .map(|(url, view, ready)| match view {
                Ok(v) => json!({ "url": url, "ready": ready, "view": v }),
                Err(e) => json!({ "url": url, "ready": false, "error": e }),
            })
            .collect();
        print_json(&json!({ "nodes": nodes }));
    } else {
        let rows: Vec<Vec<String>> = views
            .iter()
            .map(|(url, view, ready)| match view {
                Ok(v) => vec![
                    v.node_id.to_string(),
                    url.clone(),
                    v.state.to_string(),
                    v.leader_id.map_or("-".into(), |l| l.to_string()),
                    v.term.to_string(),
                    v.last_log_index.to_string(),
                    v.last_applied.to_string(),
                    if *ready {
                        "ready".into()
                    } else {
                        "not ready".into()
                    },
                ],
                Err(e) => vec![
                    "?".into(),
                    url.clone(),
                    "unreachable".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    e.chars().take(60).collect(),
                ],
            })
            .collect();
        print_table(
            &[
                "id", "url", "state", "leader", "term", "last log", "applied", "health",
            ],
            &rows,
        );
        print_shards(&views);
    }
    if views.iter().all(|(_, view, _)| view.is_err()) {
        return Err(Failure::unavailable("no node answered"));
    }
    Ok(())
}

/// A cluster of several shards: its shard count, then each node's view of each shard it holds
/// (the table above shows each node's first shard).
fn print_shards(views: &[(String, Result<ClusterStatus, String>, bool)]) {
    let Some(shards) = views
        .iter()
        .filter_map(|(_, view, _)| view.as_ref().ok())
        .map(|v| v.shards)
        .max()
        .filter(|shards| *shards > 1)
    else {
        return;
    };
    println!();
    println!("shards: {shards}");
    let rows: Vec<Vec<String>> = views
        .iter()
        .filter_map(|(_, view, _)| view.as_ref().ok())
        .flat_map(|v| {
            v.groups.iter().map(|g| {
                vec![
                    g.shard.to_string(),
                    v.node_id.to_string(),
                    g.state.to_string(),
                    g.leader_id.map_or("-".into(), |l| l.to_string()),
                    g.preferred_leader.map_or("-".into(), |l| l.to_string()),
                    g.term.to_string(),
                    g.last_log_index.to_string(),
                    g.last_applied.to_string(),
                ]
            })
        })
        .collect();
    let mut rows = rows;
    rows.sort_by_key(|row| (row[0].parse::<u32>().ok(), row[1].parse::<u64>().ok()));
    print_table(
        &[
            "shard",
            "node",
            "state",
            "leader",
            "preferred",
            "term",
            "last log",
            "applied",
        ],
        &rows,
    );
}

/// One line of a populate file.
#[derive(serde::Deserialize)]
struct LogLine {
    execution_id: ExecutionId,
    #[serde(flatten)]
    event: LogEvent,
}

async fn populate(
    client: Arc<Client>,
    file: &std::path::Path,
    concurrency: usize,
    json: bool,
) -> Result<(), Failure> {
    let reader = std::fs::File::open(file)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", file.display())))?;
    let mut logs: BTreeMap<ExecutionId, Vec<LogEvent>> = BTreeMap::new();
    for (n, line) in std::io::BufReader::new(reader).lines().enumerate() {
        let line = line.map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: LogLine = serde_json::from_str(&line)
            .map_err(|e| Failure::usage(format!("{}:{}: {e}", file.display(), n + 1)))?;
        logs.entry(parsed.execution_id)
            .or_default()
            .push(parsed.event);
    }
    let total = logs.len();
    let show_progress = !json && std::io::stderr().is_terminal();
    let work = Arc::new(tokio::sync::Mutex::new(logs.into_iter()));
    let (tx, mut rx) =
        tokio::sync::mpsc::channel::<(ExecutionId, Result<FromLog, ClientError>)>(64);
    for _ in 0..concurrency {
        let (work, tx, client) = (Arc::clone(&work), tx.clone(), Arc::clone(&client));
        tokio::spawn(async move {
            loop {
                let next = work.lock().await.next();
                let Some((exec, events)) = next else { break };
                let outcome = client.populate(&exec, &events).await;
                if tx.send((exec, outcome)).await.is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut results = Vec::new();
    let mut unavailable = None;
    let mut done = 0;
    while let Some((exec, outcome)) = rx.recv().await {
        done += 1;
        let label = match &outcome {
            Ok(o) => o.label().to_string(),
            Err(e) => {
                if e.is_retryable() {
                    unavailable = Some(e.to_string());
                }
                "error".to_string()
            }
        };
        *counts.entry(label.clone()).or_default() += 1;
        if json {
            results.push(match &outcome {
                Ok(o) => json!({ "execution_id": exec, "outcome": serde_json::to_value(o).unwrap_or_default(), "label": label }),
                Err(e) => json!({ "execution_id": exec, "error": e.to_string() }),
            });
        } else if let Err(e) = &outcome {
            eprintln!("{exec}: {e}");
        } else if let Ok(o) = &outcome {
            if !o.is_healthy() {
                eprintln!("{exec}: {}", serde_json::to_string(o).unwrap_or_default());
            }
        }
        if show_progress {
            let width = 30;
            let filled = width * done / total.max(1);
            eprint!(
                "\r[{}{}] {done}/{total} executions",
                "#".repeat(filled),
                ".".repeat(width - filled)
            );
        }
    }
    if show_progress {
        eprintln!();
    }
    if json {
        print_json(&json!({ "executions": total, "outcomes": counts, "results": results }));
    } else {
        let rows: Vec<Vec<String>> = counts
            .iter()
            .map(|(k, v)| vec![k.clone(), v.to_string()])
            .collect();
        print_table(&["outcome", "executions"], &rows);
    }
    if let Some(message) = unavailable {
        return Err(Failure::unavailable(message));
    }
    let unhealthy = ["diverged", "refused", "error"]
        .iter()
        .any(|k| counts.contains_key(*k));
    if unhealthy {
        Err(Failure::silent(output::REFUSED))
    } else {
        Ok(())
    }
}

/// One connection to the PostgreSQL table named by `table`.
async fn connect_log(dsn: &str, tls: &PgTlsArgs, table: &TableNames) -> Result<PgLog, Failure> {
    let table = PgTable::new(table.clone()).map_err(Failure::usage)?;
    let tls = tls.tls().map_err(Failure::usage)?;
    PgLog::connect(dsn, tls, table, 1)
        .await
        .map_err(|e| match e {
            LogError::Unavailable(m) => Failure::unavailable(m),
            LogError::Invalid(m) => Failure::usage(m),
        })
}

/// Populates one execution from a PostgreSQL table through the reconciler.
async fn populate_from_postgres(
    client: &Client,
    log: &PgLog,
    exec: &ExecutionId,
    json: bool,
) -> Result<(), Failure> {
    let verdict = Reconciler::new(client, log)
        .reconcile(exec)
        .await
        .map_err(|e| match e {
            ReconcileError::Client(e) => Failure::from(e),
            ReconcileError::Log(LogError::Unavailable(m)) => Failure::unavailable(m),
            ReconcileError::Log(LogError::Invalid(m)) => Failure::refused(m),
        })?;
    let answer = match &verdict {
        Verdict::InSync { outcome } => json!({ "verdict": "in_sync", "outcome": outcome }),
        Verdict::Staleness { outcome, rereads } => {
            json!({ "verdict": "staleness", "outcome": outcome, "rereads": rereads })
        }
        Verdict::SecondWriter {
            stored_len,
            log_len,
        } => json!({ "verdict": "second_writer", "stored_len": stored_len, "log_len": log_len }),
        Verdict::Diverged { outcome } => json!({ "verdict": "diverged", "outcome": outcome }),
        Verdict::Refused { outcome } => json!({ "verdict": "refused", "outcome": outcome }),
    };
    if json {
        print_json(&answer);
    } else {
        println!("{exec}: {answer}");
    }
    if verdict.is_divergence() {
        Err(Failure::silent(output::REFUSED))
    } else {
        Ok(())
    }
}

/// Reads the execution's log from PostgreSQL and asks the cluster to rebuild it from that log.
async fn repair(
    client: &Client,
    log: &PgLog,
    exec: &ExecutionId,
    reason: &str,
    json: bool,
) -> Result<(), Failure> {
    let events = log.read_log(exec).await.map_err(|e| match e {
        LogError::Unavailable(m) => Failure::unavailable(m),
        LogError::Invalid(m) => Failure::refused(m),
    })?;
    let answer = client.rebuild(exec, &events, reason).await?;
    if json {
        print_json(&serde_json::to_value(&answer).unwrap_or_default());
    } else {
        let record = &answer.quarantine;
        println!(
            "{exec}: rebuilt from the log ({} events); the {} events stored before are kept in \
             quarantine record {} ({})",
            answer.total, record.events, record.number, record.diagnosis
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("chainctl: cannot start: {e}");
            return ExitCode::from(3);
        }
    };
    let json = cli.json;
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            match (json, failure.json(), &failure.message) {
                (true, Some(body), _) => print_json(&body),
                (_, _, Some(message)) => eprintln!("chainctl: {message}"),
                _ => {}
            }
            ExitCode::from(failure.code)
        }
    }
}
