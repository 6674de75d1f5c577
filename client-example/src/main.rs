//! `append-and-read`: appends one event to an execution of a running cluster and reads the
//! execution back, with nothing but the client library and the data model.
//!
//! ```sh
//! append-and-read http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103 order-42
//! ```
//!
//! It appends after the head it reads (so it may run again on the same execution), then prints
//! the chain a linearizable guarded read returns, or why the store cannot answer.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::process::ExitCode;

use chainstore_client::{Client, ReadOptions};
use chainstore_model::{AppendRequest, EventId, ExecutionId, Guarded};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(nodes), Some(exec)) = (args.next(), args.next()) else {
        eprintln!("usage: append-and-read NODE_URL[,NODE_URL...] EXECUTION_ID");
        return ExitCode::from(2);
    };
    match run(&nodes, &exec).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("append-and-read: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(nodes: &str, exec: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder(nodes.split(',')).build()?;
    let exec = ExecutionId::new(exec)?;
    let state = client.state(&exec, ReadOptions::default()).await?;
    // The first event of a new execution declares this store its system of record.
    let (prev, step) = match state.head {
        Some(head) => (Some(head.event_id), head.exec_seq + 1),
        None => (None, 0),
    };
    let request = AppendRequest {
        event_id: EventId::new(format!("{exec}-event-{step}"))?,
        genesis: prev.is_none(),
        prev_event_id: prev,
        parent_execution_id: None,
        payload: serde_json::json!({ "step": step }),
    };
    let appended = client.append(&exec, &request).await?;
    println!(
        "appended at seq {} (log index {})",
        appended.exec_seq, appended.commit_index
    );
    let read = client.chain(&exec, ReadOptions::default()).await?;
    match read.answer {
        Guarded::Authoritative(events) => {
            for event in events {
                println!(
                    "{:>4}  {}  {}",
                    event.exec_seq, event.event_id, event.payload
                );
            }
        }
        Guarded::CannotAnswer(reason) => println!("cannot answer: {}", reason.as_str()),
    }
    Ok(())
}
