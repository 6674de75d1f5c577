//! `chainctl bench`: W writers, each appending with the head check to its own execution, for a
//! duration or a count; prints throughput and latency percentiles.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chainstore_client::Client;
use chainstore_model::{AppendRequest, Appended, EventId, ExecutionId};
use serde_json::json;

use crate::output::{print_table, Failure};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Concurrent writers, each on its own execution.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds to run (ignored with --count).
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Total appends to make instead of running for a duration.
    #[arg(long)]
    count: Option<u64>,
    /// Approximate payload size in bytes.
    #[arg(long, default_value_t = 200)]
    event_size: usize,
    /// Prefix of the executions written (a run id is appended).
    #[arg(long, default_value = "bench")]
    prefix: String,
    /// Writes every acknowledged append to FILE, one JSON object per line (`execution`,
    /// `event_id`, `prev_event_id`, `exec_seq`, `commit_index`), to check them afterwards.
    #[arg(long)]
    record: Option<std::path::PathBuf>,
    /// Declare each execution's first event `genesis`, so its chain is authoritative and the
    /// guarded read serves it.
    #[arg(long)]
    genesis: bool,
}

struct WriterReport {
    exec: ExecutionId,
    /// `(event_id, prev_event_id, acknowledgement)` of every acknowledged append.
    acked: Vec<(EventId, Option<EventId>, Appended)>,
    latencies: Vec<Duration>,
    errors: u64,
    last_error: Option<String>,
}

async fn writer(
    client: Arc<Client>,
    exec: ExecutionId,
    quota: Option<u64>,
    stop: Instant,
    filler: Arc<String>,
    genesis: bool,
) -> WriterReport {
    let mut report = WriterReport {
        exec: exec.clone(),
        acked: Vec::new(),
        latencies: Vec::new(),
        errors: 0,
        last_error: None,
    };
    let mut n: u64 = 1;
    loop {
        match quota {
            Some(q) if n > q => break,
            None if Instant::now() >= stop => break,
            _ => {}
        }
        let id = |k: u64| EventId::new(format!("e{k}")).ok();
        let request = AppendRequest {
            event_id: match id(n) {
                Some(id) => id,
                None => break,
            },
            prev_event_id: if n > 1 { id(n - 1) } else { None },
            parent_execution_id: None,
            payload: json!({ "type": "bench", "n": n, "fill": filler.as_str() }),
            genesis: genesis && n == 1,
        };
        let started = Instant::now();
        match client.append(&exec, &request).await {
            Ok(appended) => {
                report.latencies.push(started.elapsed());
                report
                    .acked
                    .push((request.event_id, request.prev_event_id, appended));
                n += 1;
            }
            Err(err) => {
                report.errors += 1;
                report.last_error = Some(err.to_string());
                if report.errors > 100 && report.latencies.is_empty() {
                    break;
                }
            }
        }
    }
    report
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub async fn run(client: Arc<Client>, args: BenchArgs, json_out: bool) -> Result<(), Failure> {
    if args.concurrency == 0 {
        return Err(Failure::usage("--concurrency must be at least 1"));
    }
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    // The payload's other fields take about 40 bytes.
    let filler = Arc::new("x".repeat(args.event_size.saturating_sub(40)));
    let quota = args.count.map(|c| c.div_ceil(args.concurrency as u64));
    let started = Instant::now();
    let stop = started + Duration::from_secs(args.duration);
    let mut tasks = Vec::with_capacity(args.concurrency);
    for w in 0..args.concurrency {
        let exec = ExecutionId::new(format!("{}-{run_id}-{w}", args.prefix))
            .map_err(|e| Failure::usage(format!("bad --prefix: {e}")))?;
        tasks.push(tokio::spawn(writer(
            Arc::clone(&client),
            exec,
            quota,
            stop,
            Arc::clone(&filler),
            args.genesis,
        )));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut last_error = None;
    let mut record = String::new();
    for task in tasks {
        let report = task
            .await
            .map_err(|e| Failure::unavailable(format!("a writer failed: {e}")))?;
        for (event_id, prev, appended) in &report.acked {
            let line = json!({
                "execution": report.exec.as_str(),
                "event_id": event_id.as_str(),
                "prev_event_id": prev.as_ref().map(EventId::as_str),
                "exec_seq": appended.exec_seq,
                "commit_index": appended.commit_index,
            });
            record.push_str(&line.to_string());
            record.push('\n');
        }
        latencies.extend(report.latencies);
        errors += report.errors;
        last_error = report.last_error.or(last_error);
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(path) = &args.record {
        std::fs::write(path, record)
            .map_err(|e| Failure::refused(format!("cannot write {}: {e}", path.display())))?;
    }
    latencies.sort();
    let rate = latencies.len() as f64 / elapsed;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    if json_out {
        let value = json!({
            "writers": args.concurrency,
            "appends": latencies.len(),
            "errors": errors,
            "seconds": elapsed,
            "appends_per_second": rate,
            "p50_ms": ms(percentile(&latencies, 0.50)),
            "p90_ms": ms(percentile(&latencies, 0.90)),
            "p99_ms": ms(percentile(&latencies, 0.99)),
            "max_ms": ms(latencies.last().copied().unwrap_or_default()),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
    } else {
        let row = vec![
            args.concurrency.to_string(),
            latencies.len().to_string(),
            format!("{elapsed:.1}"),
            format!("{rate:.0}"),
            format!("{:.2}", ms(percentile(&latencies, 0.50))),
            format!("{:.2}", ms(percentile(&latencies, 0.90))),
            format!("{:.2}", ms(percentile(&latencies, 0.99))),
            format!("{:.2}", ms(latencies.last().copied().unwrap_or_default())),
            errors.to_string(),
        ];
        print_table(
            &[
                "writers",
                "appends",
                "seconds",
                "appends/s",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "max ms",
                "errors",
            ],
            &[row],
        );
    }
    if latencies.is_empty() {
        return Err(Failure::unavailable(
            last_error.unwrap_or_else(|| "no append succeeded".into()),
        ));
    }
    if errors > 0 {
        if let Some(e) = last_error {
            eprintln!("chainctl: {errors} appends failed; last: {e}");
        }
    }
    Ok(())
}
